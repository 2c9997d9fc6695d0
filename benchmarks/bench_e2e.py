"""End to end: BERT-base (seq 128) — the fused graph with our kernels vs the
original, at ORT_ENABLE_BASIC and ORT_ENABLE_ALL, side by side in one process.

At ORT_ENABLE_ALL the *original* already gets ONNX Runtime's own GELU
fusions (com.microsoft Gelu/BiasGelu), so "fused/original at all" is us
against ORT's fusions; at BASIC it is us against the decomposed graph.
The `ort` target (ORT's contrib ops written into the file) is timed too.

    python benchmarks/bench_e2e.py [--out benchmarks/results/e2e_bert_base] [--repeats 30]

Weights are random (transformers BertConfig() defaults, seeded; biases and norms
made non-zero by models/params.py, as for every parity export): speed does
not depend on their values. The export goes to a temp folder (~440 MB).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort

import gelu_onnx
from gelu_onnx import contract, ortlib, verify
from gelu_onnx.fusion import targets
from gelu_onnx.verify import bench

# Single-op GELUs whose kernel time the profiler pass sums: ORT's own fusions'
# and ours.
GELU_OPS = {"Gelu", "BiasGelu", "FastGelu", "QuickGelu", *contract.FORM_OF_OP_TYPE}


def export_bert_base(path: Path, seq: int) -> None:
    import torch
    from transformers import BertConfig, BertModel

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from models.params import randomize_params

    class Wrapper(torch.nn.Module):  # keyword call: transformers' positional order changes
        def __init__(self):
            super().__init__()
            self.bert = BertModel(BertConfig()).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(0)
    model = randomize_params(Wrapper().eval(), 0)  # non-zero biases / norms, as a trained model has
    ids = torch.randint(0, 30522, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.long)
    tt = torch.zeros(1, seq, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    torch.onnx.export(model, (ids, mask, tt), str(path), dynamo=False, opset_version=17,
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state", "pooler_output"],
                      dynamic_axes={n: axes for n in ("input_ids", "attention_mask", "token_type_ids")})
    m = onnx.load(str(path))
    m.ir_version = min(m.ir_version, 10)
    onnx.save(m, str(path))


def gelu_kernel_ms(path: Path, level: str, library: bool, threads: int, seq: int,
                   warmup: int = 5, runs: int = 20):
    """ORT's profiler: per-run kernel time (ms) of the single-op GELUs and of all
    nodes, over the runs after the warmup. Far less noisy than wall time, and it
    isolates the GELU kernels. Returns (gelu_ms, all_nodes_ms, gelu op types)."""
    import numpy as np

    so = verify.make_session_options(library, level, threads)  # what bench.bench times with
    so.enable_profiling = True
    so.profile_file_prefix = str(path.with_suffix(f".{level}.profile"))
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 30522, (1, seq)).astype(np.int64),
             "attention_mask": np.ones((1, seq), np.int64), "token_type_ids": np.zeros((1, seq), np.int64)}
    for _ in range(warmup + runs):
        sess.run(None, feeds)
    prof = Path(sess.end_profiling())
    events = json.loads(prof.read_text())
    prof.unlink()
    starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e["name"] == "model_run")
    t0 = starts[warmup]
    nodes = [e for e in events if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] >= t0]
    gelu = [e for e in nodes if e["args"]["op_name"] in GELU_OPS]
    return (sum(e["dur"] for e in gelu) / runs / 1e3, sum(e["dur"] for e in nodes) / runs / 1e3,
            sorted({e["args"]["op_name"] for e in gelu}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/e2e_bert_base")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default=None, help="folder for the ~440 MB exports (default: system temp)")
    args = ap.parse_args()
    if not ortlib.available():
        print("the custom-op library is not built: pip install -e . first", file=sys.stderr)
        return 2
    rows, prof = [], []
    with tempfile.TemporaryDirectory(dir=args.workdir) as d:
        orig = Path(d) / "bert_base.onnx"
        export_bert_base(orig, args.seq)
        g, total, ops = gelu_kernel_ms(orig, "all", False, args.threads, args.seq)
        prof.append({"model": "original (ORT's own fusions)", "gelu_ops": ops, "gelu_ms": round(g, 3),
                     "all_nodes_ms": round(total, 2)})
        for target in ("custom", "ort"):
            res = gelu_onnx.fuse_with_report(str(orig), target)
            fused = Path(d) / f"bert_base.{target}.onnx"
            onnx.save(res.model, str(fused))
            rep = bench.bench(str(orig), str(fused), threads=args.threads, repeats=args.repeats,
                              warmup=5, use_library=targets.get(target).uses_library,
                              dims={"batch": 1, "sequence": args.seq})
            for t in rep.results:
                rows.append({"target": target, "fused_gelus": len(res.fusions), "opt_level": t.opt_level,
                             "original_ms": round(t.original_ms, 2), "fused_ms": round(t.fused_ms, 2),
                             "ratio_fused_over_original": round(t.ratio, 3), "parity_ok": t.parity_ok})
            machine, versions = rep.machine, rep.versions
            g, total, ops = gelu_kernel_ms(fused, "all", targets.get(target).uses_library, args.threads, args.seq)
            prof.append({"model": f"fused, target {target}", "gelu_ops": ops, "gelu_ms": round(g, 3),
                         "all_nodes_ms": round(total, 2)})
    out = {"model": f"BERT-base (BertConfig defaults, random weights), batch 1, seq {args.seq}, "
                    "TorchScript exporter opset 17",
           "threads": args.threads, "repeats": args.repeats, "machine": machine, "versions": versions,
           "rows": rows, "profile_all": prof}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(out, indent=2) + "\n")
    md = ["| target | opt level | original ms | fused ms | fused/original | parity |", "|---|---|---|---|---|---|"]
    md += [f"| {r['target']} | {r['opt_level']} | {r['original_ms']} | {r['fused_ms']} | "
           f"{r['ratio_fused_over_original']} | {'ok' if r['parity_ok'] else 'FAIL'} |" for r in rows]
    pmd = ["| model (ORT_ENABLE_ALL) | GELU ops | GELU kernels ms/run | all nodes ms/run |", "|---|---|---|---|"]
    pmd += [f"| {r['model']} | {', '.join(r['gelu_ops'])} | {r['gelu_ms']} | {r['all_nodes_ms']} |" for r in prof]
    text = (f"# End to end: {out['model']}\n\n{args.threads} threads, median of {args.repeats} timed runs per "
            f"session in interleaved blocks (gelu_onnx.verify.bench), one process. Machine: {machine.get('cpu')}.\n\n"
            + "\n".join(md) + "\n\nKernel time from ONNX Runtime's profiler (20 runs after 5 warmup), "
            "same model and threads:\n\n" + "\n".join(pmd) + "\n")
    Path(args.out + ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
