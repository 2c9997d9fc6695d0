"""Does `gelu-onnx check` pass correct fusions and fail wrong ones, with its
default settings, on full-size 12-layer models? (issue 23)

For each model (BERT-base, ViT-base: transformers' default configs, hidden
768, 12 layers; BERT-base with QuickGELU for the alpha fault), dtype (fp32,
fp16) and exporter (torch's TorchScript exporter at opset 17, the dynamo
exporter at opset 18): the model is built from its config with random
weights and random NON-ZERO biases and norm parameters
(models/params.randomize_params; nothing is downloaded), exported, fused for
every target with the CLI (`gelu-onnx fuse --target T`), and checked with
the CLI (`gelu-onnx check ORIGINAL FUSED --localize --json`) on the correct
fusion and on each fault of tests/helpers/parity_faults.py planted in the middle
GELU (6 of 12). One row per check: the verdict, whether it is the right one
(pass for the correct fusion, fail for a fault), whether --localize named
the planted GELU first, max_abs of the worst output, the deviations the
check reports beside it (fused_/original_ mean and max deviation from the
precise reference, docs/verdict.md), and the wall
time of the check command.

    python benchmarks/parity_gate.py --quick                 # BERT-base fp32+fp16, TorchScript (CPU: minutes)
    python benchmarks/parity_gate.py                         # everything on the CPU
    python benchmarks/parity_gate.py --provider cuda         # on a GPU (onnxruntime-gpu)
    python benchmarks/parity_gate.py --check-args "--tf32"   # extra `check` flags, passed through

Writes benchmarks/results/parity_gate_<provider>.md (one small table).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

MODELS = ("bert", "vit", "bert_quick")
DTYPES = ("fp32", "fp16")
EXPORTERS = ("torchscript", "dynamo")
TARGETS = ("custom", "standard", "ort")
OPSET = {"torchscript": 17, "dynamo": 18}
SEED = 0


def build(name: str, dtype: str):
    """(torch model, example inputs, input names, dynamic axes)."""
    import torch
    import transformers as T
    from models.params import randomize_params

    torch.manual_seed(SEED)
    if name == "vit":
        model = T.ViTModel(T.ViTConfig(attn_implementation="eager"), add_pooling_layer=False)
        args = {"pixel_values": torch.randn(2, 3, 224, 224)}
        axes = {"pixel_values": {0: "batch"}}
    else:
        act = "quick_gelu" if name == "bert_quick" else "gelu"
        model = T.BertModel(T.BertConfig(hidden_act=act, attn_implementation="eager"), add_pooling_layer=False)
        ids = torch.randint(0, 30522, (2, 16))
        args = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
        axes = {k: {0: "batch", 1: "sequence"} for k in args}
    randomize_params(model.eval(), SEED)
    if dtype == "fp16":
        model = model.half()
        args = {k: v.half() if v.is_floating_point() else v for k, v in args.items()}
    return model, args, axes


def export(name: str, dtype: str, exporter: str, path: Path) -> None:
    import torch
    from models.export_models import Positional

    model, args, axes = build(name, dtype)
    names = list(args)
    wrapper = Positional(model, names).eval()  # one output: last_hidden_state (no pooler)
    with torch.no_grad():
        if exporter == "torchscript":
            torch.onnx.export(wrapper, tuple(args.values()), str(path), dynamo=False, opset_version=OPSET[exporter],
                              input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes)
        else:
            dims = {}
            shapes = tuple({k: dims.setdefault(v, torch.export.Dim(v)) for k, v in axes[n].items()} for n in names)
            prog = torch.onnx.export(wrapper, tuple(args.values()), dynamo=True, opset_version=OPSET[exporter],
                                     input_names=names, output_names=["last_hidden_state"], dynamic_shapes=(shapes,),
                                     optimize=True)
            prog.save(str(path))


def cli(*args: str) -> tuple[int, str, float]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True)
    return p.returncode, p.stdout if p.returncode in (0, 1) else p.stderr.strip()[-300:], time.perf_counter() - t


def check_row(orig: Path, fused: Path, provider: str, extra: list[str], planted_tensor: str | None) -> dict:
    rc, out, secs = cli("check", orig, fused, "--localize", "--json", "--provider", provider, *extra)
    row = {"rc": rc, "time_s": round(secs, 1)}
    if rc not in (0, 1):
        return {**row, "verdict": f"error (exit {rc})", "detail": out.splitlines()[-1] if out else ""}
    rep = json.loads(out)
    outs = [o for run in rep.get("runs", [rep]) for o in run.get("outputs", [])] or rep.get("outputs", [])
    row["verdict"] = "pass" if rep.get("ok") else "FAIL"
    row["max_abs"] = max((o.get("max_abs") or 0.0 for o in outs), default=None)
    devs = {}
    for o in outs:  # the reference-relative verdict's deviations from the precise run (docs/verdict.md)
        for k, v in o.items():
            if k.endswith("_dev") and isinstance(v, (int, float)):
                devs[k] = max(devs.get(k, 0.0), float(v))
    row["deviations"] = devs
    first = rep.get("first_failure") or next((r.get("first_failure") for r in rep.get("runs", [])
                                              if r.get("first_failure")), None)
    first_tensor = first.get("tensor") if isinstance(first, dict) else first
    row["localized"] = None if planted_tensor is None else (first_tensor == planted_tensor)
    row["first_failure"] = first_tensor
    return row


def run_case(name, dtype, exporter, targets, faults, provider, extra, work: Path, log) -> list[dict]:
    import onnx
    from helpers.parity_faults import plant

    orig = work / f"{name}_{dtype}_{exporter}.onnx"
    t = time.perf_counter()
    try:
        export(name, dtype, exporter, orig)
    except Exception as e:  # noqa: BLE001 - an exporter failure is a row, the other cases still run
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:200] if str(e).strip() else ''}"
        log(f"{orig.name}: export failed ({msg})")
        return [{"model": name, "dtype": dtype, "exporter": exporter, "target": "–", "case": "export",
                 "verdict": "export error", "detail": msg, "right": False}]
    log(f"{orig.name}: exported in {time.perf_counter() - t:.0f} s")
    rows = []
    for target in targets:
        fused = work / f"{orig.stem}.{target}.onnx"
        rc, out, secs = cli("fuse", orig, "-o", fused, "--target", target)
        base = {"model": name, "dtype": dtype, "exporter": exporter, "target": target}
        if rc != 0:
            rows.append({**base, "case": "correct", "verdict": f"fuse error (exit {rc})", "detail": out,
                         "right": False})
            continue
        cases = [("correct", fused, None)]
        fm = onnx.load(str(fused))
        for kind in faults:
            if kind == "erf_as_tanh" and dtype != "fp32":
                continue  # tanh vs erf is below fp16's own rounding: issue 23 plants it in fp32 only
            try:
                p = plant(fm, kind)
            except ValueError as e:  # the fault does not apply to this model's GELUs
                log(f"  {target} {kind}: not applicable ({e})")
                continue
            bad = work / f"{orig.stem}.{target}.{kind}.onnx"
            onnx.save(p.model, str(bad))
            cases.append((f"{kind} @ GELU {p.index}", bad, p.tensor))
        del fm
        for case, path, tensor in cases:
            r = check_row(orig, path, provider, extra, tensor)
            r.update(base, case=case, expected="pass" if case == "correct" else "FAIL")
            r["right"] = r["verdict"] == r["expected"]
            rows.append(r)
            log(f"  {target:8s} {case:24s} {r['verdict']:6s} right={r['right']} localized={r.get('localized')} "
                f"max_abs={r.get('max_abs')} {r.get('deviations') or ''} {r['time_s']} s")
            if path != fused:
                path.unlink()
        fused.unlink()
    orig.unlink()
    return rows


def _fmt(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def table(rows: list[dict], args, elapsed: float) -> str:
    import onnxruntime
    import torch
    import transformers

    right = sum(1 for r in rows if r.get("right"))
    head = [f"# Parity gate on 12-layer models ({args.provider})", "",
            f"`python benchmarks/parity_gate.py {' '.join(args.argv)}` — {right} of {len(rows)} verdicts right; "
            f"{elapsed / 60:.1f} min on {platform.machine()} {os.cpu_count()} CPUs; onnxruntime "
            f"{onnxruntime.__version__}, torch {torch.__version__}, transformers {transformers.__version__}.", "",
            "Random weights, random non-zero biases / norm parameters (models/params.py); BertModel / ViTModel "
            "default configs (hidden 768, 12 layers), no pooler; `check` with its defaults plus `--localize`"
            f"{(' `' + ' '.join(args.extra) + '`') if args.extra else ''}. A fault is planted in GELU 6 of 12 "
            "(tests/helpers/parity_faults.py). *localized*: --localize's first failing GELU is the planted one.", "",
            "| model | dtype | exporter | target | case | verdict | right | localized | max_abs | deviations | s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        devs = ", ".join(f"{k} {v:.3g}" for k, v in (r.get("deviations") or {}).items()) or "–"
        head.append(f"| {r['model']} | {r['dtype']} | {r['exporter']} | {r['target']} | {r['case']} | {r['verdict']} "
                    f"| {_fmt(r.get('right'))} | {_fmt(r.get('localized'))} | {_fmt(r.get('max_abs'))} | {devs} "
                    f"| {_fmt(r.get('time_s'))} |")
    return "\n".join(head) + "\n"


def main(argv=None) -> int:
    from helpers.parity_faults import KINDS

    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="BERT-base only, fp32 and fp16, TorchScript")
    ap.add_argument("--models", default=None, help=f"comma list of {', '.join(MODELS)}")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--exporters", default=None, help=f"comma list of {', '.join(EXPORTERS)}")
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--faults", default=",".join(KINDS))
    ap.add_argument("--provider", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--check-args", default="", help="extra flags for every `gelu-onnx check` (e.g. --tf32)")
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/results/parity_gate_<provider>.md")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args(argv)
    args.argv, args.extra = argv, shlex.split(args.check_args)
    models = (args.models or ("bert" if args.quick else ",".join(MODELS))).split(",")
    exporters = (args.exporters or ("torchscript" if args.quick else ",".join(EXPORTERS))).split(",")
    out = args.out or REPO / "benchmarks" / "results" / f"parity_gate_{args.provider}.md"
    t0 = time.perf_counter()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(dir=args.work) as td:
        for name in models:
            faults = [k for k in args.faults.split(",") if (k == "quick_alpha_one") == (name == "bert_quick")]
            for dtype in args.dtypes.split(","):
                for exporter in exporters:
                    rows += run_case(name, dtype, exporter, args.targets.split(","), faults, args.provider, args.extra,
                                     Path(td), lambda s: print(s, flush=True))
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(table(rows, args, time.perf_counter() - t0))  # after each case: a partial run
                    # still leaves its rows
    print(f"wrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out}: "
          f"{sum(1 for r in rows if r.get('right'))} of {len(rows)} verdicts right")
    return 0 if all(r.get("right") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
