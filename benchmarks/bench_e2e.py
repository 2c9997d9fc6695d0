"""End to end: BERT-base (seq 128) — the fused graph with our kernels vs the
original, at ORT_ENABLE_BASIC and ORT_ENABLE_ALL, side by side in one process.

At ORT_ENABLE_ALL the *original* already gets ONNX Runtime's own GELU
fusions (com.microsoft Gelu/BiasGelu), so "fused/original at all" is us
against ORT's fusions; at BASIC it is us against the decomposed graph.
The `ort` target (ORT's contrib ops written into the file) is timed too.

    python benchmarks/bench_e2e.py [--out benchmarks/results/e2e_bert_base] [--repeats 30]

Weights are random (transformers BertConfig() defaults, seeded): speed does
not depend on their values. The export goes to a temp folder (~440 MB).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import onnx

import gelu_onnx
from gelu_onnx import bench, ortlib


def export_bert_base(path: Path, seq: int) -> None:
    import torch
    from transformers import BertConfig, BertModel

    class Wrapper(torch.nn.Module):  # keyword call: transformers' positional order changes
        def __init__(self):
            super().__init__()
            self.bert = BertModel(BertConfig()).eval()

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(0)
    model = Wrapper().eval()
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
    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as d:
        orig = Path(d) / "bert_base.onnx"
        export_bert_base(orig, args.seq)
        for target in ("custom", "ort"):
            res = gelu_onnx.fuse_with_report(str(orig), target)
            fused = Path(d) / f"bert_base.{target}.onnx"
            onnx.save(res.model, str(fused))
            rep = bench.bench(str(orig), str(fused), threads=args.threads, repeats=args.repeats,
                              warmup=5, use_library=(target == "custom"),
                              dims={"batch": 1, "sequence": args.seq})
            for t in rep.results:
                rows.append({"target": target, "fused_gelus": len(res.fusions), "opt_level": t.opt_level,
                             "original_ms": round(t.original_ms, 2), "fused_ms": round(t.fused_ms, 2),
                             "ratio_fused_over_original": round(t.ratio, 3), "parity_ok": t.parity_ok})
            machine, versions = rep.machine, rep.versions
    out = {"model": f"BERT-base (BertConfig defaults, random weights), batch 1, seq {args.seq}, "
                    "TorchScript exporter opset 17",
           "threads": args.threads, "repeats": args.repeats, "machine": machine, "versions": versions,
           "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".json").write_text(json.dumps(out, indent=2) + "\n")
    md = ["| target | opt level | original ms | fused ms | fused/original | parity |", "|---|---|---|---|---|---|"]
    md += [f"| {r['target']} | {r['opt_level']} | {r['original_ms']} | {r['fused_ms']} | "
           f"{r['ratio_fused_over_original']} | {'ok' if r['parity_ok'] else 'FAIL'} |" for r in rows]
    text = (f"# End to end: {out['model']}\n\n{args.threads} threads, median of {args.repeats}, "
            f"alternating order, one process. Machine: {machine.get('cpu')}.\n\n" + "\n".join(md) + "\n")
    Path(args.out + ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
