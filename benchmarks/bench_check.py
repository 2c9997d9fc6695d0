"""What `gelu-onnx check` costs against Polygraphy's two-step comparison (issue 32).

    python benchmarks/bench_check.py                      # BERT-base fp32, batch 1x128, 3 rounds
    python benchmarks/bench_check.py --model bert-large --rounds 1

The model: transformers' BertModel from its default config (BERT-base: hidden
768, 12 layers; bert-large: 1024, 24 layers) with random weights and random
non-zero biases and norm parameters (models/params.randomize_params; nothing
is downloaded), exported by torch's TorchScript exporter (opset 17, dynamic
batch and sequence) and fused by `gelu-onnx fuse` (default target). Both
files are cached under build/bench_check/ (not committed).

The contenders, each its own process (interpreter start and imports
included), timed wall-clock with its own peak RSS (os.wait4):

  gelu-onnx   gelu-onnx check ORIG FUSED -q --input-shapes input_ids:[1,128] ...
              (the default verdict: original, fused and the precise reference)
  polygraphy  polygraphy run ORIG --onnxrt --save-inputs i.json --save-outputs o.json,
              then polygraphy run FUSED --onnxrt --load-inputs i.json --load-outputs o.json
              (time: the sum of both; peak RSS: the larger)

The contenders alternate (the first one rotates each round); the table gives
medians and gelu-onnx / polygraphy ratios. Writes
benchmarks/results/check_cost_<model>.md and .json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_fuse import measure, warm_cache  # noqa: E402 (the same process measurement as bench_fuse)

CONFIGS = {"bert-base": {}, "bert-large": {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                                           "intermediate_size": 4096}}
NAMES = ("input_ids", "attention_mask", "token_type_ids")
SEED = 0


def export(model_name: str, path: Path) -> None:
    import torch
    import transformers as T
    from models.export_models import Positional
    from models.params import randomize_params

    torch.manual_seed(SEED)
    model = T.BertModel(T.BertConfig(attn_implementation="eager", **CONFIGS[model_name]), add_pooling_layer=False)
    randomize_params(model.eval(), SEED)
    ids = torch.randint(0, 30522, (1, 16))
    args = (ids, torch.ones_like(ids), torch.zeros_like(ids))

    with torch.no_grad():  # one output: last_hidden_state (no pooler)
        torch.onnx.export(Positional(model, NAMES).eval(), args, str(path), dynamo=False, opset_version=17,
                          input_names=list(NAMES), output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in NAMES})


def models(model_name: str) -> tuple[Path, Path]:
    folder = REPO / "build" / "bench_check"
    folder.mkdir(parents=True, exist_ok=True)
    orig, fused = folder / f"{model_name}.onnx", folder / f"{model_name}.fused.onnx"
    if not orig.exists():  # in a child: this process's peak RSS is inherited by the ones it measures
        tmp = orig.with_suffix(".tmp.onnx")
        subprocess.run([sys.executable, __file__, "--export", model_name, str(tmp)], check=True, cwd=REPO)
        tmp.rename(orig)
    if not fused.exists():
        subprocess.run([sys.executable, "-m", "gelu_onnx", "fuse", str(orig), "-o", str(fused)], check=True,
                       cwd=REPO)
    return orig, fused


def polygraphy() -> list[str]:
    exe = Path(sys.executable).with_name("polygraphy")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "polygraphy"]


def shapes(batch: int, seq: int) -> list[str]:
    return [f"{n}:[{batch},{seq}]" for n in NAMES]


def run_polygraphy(orig: Path, fused: Path, work: Path, batch: int, seq: int, timeout: float) -> dict:
    i, o = work / "i.json", work / "o.json"
    a = measure(polygraphy() + ["run", str(orig), "--onnxrt", "--input-shapes", *shapes(batch, seq),
                                "--save-inputs", str(i), "--save-outputs", str(o)], timeout)
    if "error" in a:
        return {"error": f"step 1: {a['error']}"}
    b = measure(polygraphy() + ["run", str(fused), "--onnxrt", "--load-inputs", str(i), "--load-outputs", str(o)],
                timeout)
    # step 2 exits 1 when its fixed 1e-5 bound fails: a verdict, not a failed run
    passed = "error" not in b
    if not passed and "FAILED" not in (b.get("stdout", "") + b["error"]) and "exit 1" not in b["error"]:
        return {"error": f"step 2: {b['error']}"}
    return {"seconds": a["seconds"] + b["seconds"], "peak_rss": max(a["peak_rss"], b["peak_rss"]),
            "steps": [round(a["seconds"], 2), round(b["seconds"], 2)], "verdict": "pass" if passed else "fail"}


def run_check(orig: Path, fused: Path, batch: int, seq: int, timeout: float, extra: list[str]) -> dict:
    r = measure([sys.executable, "-m", "gelu_onnx", "check", str(orig), str(fused), "-q", "--input-shapes",
                 *shapes(batch, seq), *extra], timeout)
    if "error" in r and "parity check failed" not in r["error"]:
        return {"error": r["error"]}
    return {"seconds": r["seconds"], "peak_rss": r["peak_rss"], "verdict": "fail" if "error" in r else "pass"}


def machine() -> dict:
    from bench_fuse import machine as m

    return m()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--export"]:
        export(argv[1], Path(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(CONFIGS), default="bert-base")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--check-args", default="", help="extra `check` flags, e.g. --localize")
    ap.add_argument("--only", choices=("gelu-onnx", "polygraphy"), help="run one contender (no ratio)")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"), help="folder of the result files")
    args = ap.parse_args(argv)
    orig, fused = models(args.model)
    contenders = [c for c in ("gelu-onnx", "polygraphy") if args.only in (None, c)]
    runs: dict[str, list[dict]] = {c: [] for c in contenders}
    with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
        for k in range(args.rounds):
            order = contenders[k % len(contenders):] + contenders[:k % len(contenders)]
            for c in order:
                warm_cache([str(orig), str(fused)])
                os.sync()
                r = (run_polygraphy(orig, fused, Path(tmp), args.batch, args.seq, args.timeout) if c == "polygraphy"
                     else run_check(orig, fused, args.batch, args.seq, args.timeout, args.check_args.split()))
                runs[c].append(r)
                print(f"round {k + 1} {c}: " + (r["error"] if "error" in r else
                      f"{r['seconds']:.2f} s, {r['peak_rss'] / 2**20:.0f} MiB, {r['verdict']}"), flush=True)
    summary = {}
    for c, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if ok:
            summary[c] = {"seconds": statistics.median(r["seconds"] for r in ok),
                          "peak_rss": statistics.median(r["peak_rss"] for r in ok), "verdict": ok[-1]["verdict"],
                          "runs": len(ok)}
        else:
            summary[c] = {"error": rs[-1]["error"] if rs else "not run"}
    doc = {"command": "python " + " ".join(["benchmarks/bench_check.py"] + argv),
           "model": args.model, "file_bytes": orig.stat().st_size, "batch": args.batch, "seq": args.seq,
           "machine": machine(), "summary": summary, "runs": runs,
           "loadavg": " / ".join(f"{x:.1f}" for x in os.getloadavg())}
    g, p = summary.get("gelu-onnx", {}), summary.get("polygraphy", {})
    if "seconds" in g and "seconds" in p:
        doc["time_ratio"] = g["seconds"] / p["seconds"]
        doc["memory_ratio"] = g["peak_rss"] / p["peak_rss"]
    out = Path(args.out)
    (out / f"check_cost_{args.model}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / f"check_cost_{args.model}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [f"# `gelu-onnx check` vs Polygraphy's two steps: {doc['model']} fp32, batch {doc['batch']}x{doc['seq']}", "",
             f"`{doc['command']}` (gelu-onnx {m.get('gelu_onnx_commit', '?')}) on {m.get('cpu', '?')} ({m.get('usable_cpus', '?')} usable CPUs), "
             f"{platform.system()}, Python {platform.python_version()}; model file "
             f"{doc['file_bytes'] / 2**20:.0f} MiB. Each contender its own process (imports included), "
             "medians of the rounds; peak RSS from wait4 (the parent stays small: a child inherits its peak).", "",
             f"Machine load while it ran (other jobs on the same cores): load average "
             f"{doc.get('loadavg', '?')}; the ratios come from rounds that alternate, not from the seconds alone.", "",
             "| contender | seconds | peak RSS | verdict | x polygraphy (time / memory) |", "|---|---|---|---|---|"]
    p = doc["summary"].get("polygraphy", {})
    for c, s in doc["summary"].items():
        if "error" in s:
            lines.append(f"| {c} | error: {s['error']} | | | |")
            continue
        ratio = (f"{s['seconds'] / p['seconds']:.2f} / {s['peak_rss'] / p['peak_rss']:.2f}"
                 if "seconds" in p and c != "polygraphy" else "–")
        lines.append(f"| {c} | {s['seconds']:.2f} | {s['peak_rss'] / 2**20:.0f} MiB | {s['verdict']} | {ratio} |")
    lines += ["", "gelu-onnx: `check ORIG FUSED` with the default verdict (the original, the fused model and the "
              "precise reference run); polygraphy: `run ORIG --onnxrt --save-inputs --save-outputs`, then "
              "`run FUSED --onnxrt --load-inputs --load-outputs` (seconds summed, peak RSS the larger).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
