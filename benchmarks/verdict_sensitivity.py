"""The smallest per-GELU error `gelu-onnx check` detects end to end, per dtype.

A fused 12-layer model (tests/helpers/deep_models.py: BERT-like / ViT-like, random
non-zero parameters, and the bf16 MLP stack, --target custom) gets one GELU's output scaled by
(1 + eps) (computed in float32, rounded to the model's dtype, as a kernel
with that relative error would write it), in GELU 6 of 12 (or --gelu). The
smallest eps that fails `check`'s default verdict is found by bisection in
log space, once on the model outputs alone and once with --localize (the
GELU's own tensor judged too). Run:

    .venv/bin/python benchmarks/verdict_sensitivity.py [--out benchmarks/results/verdict_sensitivity]

Writes OUT.md (the table) and OUT.json.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from helpers import deep_models as D  # noqa: E402

from gelu_onnx import contract, verify  # noqa: E402

CASES = [("bert", "torchscript", "fp32"), ("bert", "torchscript", "fp16"), ("vit", "dynamo", "fp32"),
         ("vit", "torchscript", "fp16"), ("mlp", "onnx", "bf16")]


def scaled(fused: onnx.ModelProto, index: int, eps: float) -> onnx.ModelProto:
    """A copy whose GELU ``index`` (ai.gelu_onnx op, graph order) writes y * (1 + eps)."""
    m = onnx.ModelProto()
    m.CopyFrom(fused)
    gelus = [n for n in m.graph.node if n.domain == contract.DOMAIN]
    node = gelus[index]
    y = node.output[0]
    dt = next((vi.type.tensor_type.elem_type for vi in list(m.graph.value_info) + list(m.graph.output)
               if vi.name == y), None) or _input_type(m, node)
    node.output[0] = y + "_unscaled"
    c = numpy_helper.from_array(np.array(1.0 + eps, np.float32), y + "_scale")
    m.graph.initializer.append(c)
    extra = [helper.make_node("Cast", [node.output[0]], [y + "_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", [y + "_f", c.name], [y + "_fs"]),
             helper.make_node("Cast", [y + "_fs"], [y], to=dt)]
    nodes = list(m.graph.node)
    pos = nodes.index(node) + 1
    del m.graph.node[:]
    m.graph.node.extend(nodes[:pos] + extra + nodes[pos:])
    return m


def _input_type(m, node) -> int:
    dts = {t.name: t.data_type for t in m.graph.initializer}
    for i in node.input[1:]:
        if i in dts:
            return dts[i]
    return TensorProto.FLOAT


def fails(orig: Path, fused: onnx.ModelProto, index: int, eps: float, localize: bool) -> bool:
    rep = verify.check(str(orig), scaled(fused, index, eps), localize_gelus=localize)
    return not rep.ok


def smallest(orig, fused, index, localize, lo=1e-9, hi=1.0, steps=14) -> float:
    """Smallest eps in [lo, hi] that fails (bisection on log eps; assumes monotone)."""
    if not fails(orig, fused, index, hi, localize):
        return math.inf
    a, b = math.log(lo), math.log(hi)
    for _ in range(steps):
        mid = (a + b) / 2
        if fails(orig, fused, index, math.exp(mid), localize):
            b = mid
        else:
            a = mid
    return math.exp(b)


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "verdict_sensitivity"))
    ap.add_argument("--gelu", type=int, default=6, help="which GELU of 12 (0-based, default 6)")
    ap.add_argument("--only", choices=sorted({c[2] for c in CASES}), help="the cases of one dtype")
    args = ap.parse_args()
    import onnxruntime
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch, exporter, dt in [c for c in CASES if args.only in (None, c[2])]:
            t0 = time.perf_counter()
            orig, fused_path = D.fused(arch, exporter, dt, "custom", Path(tmp))
            fused = onnx.load(str(fused_path))
            assert verify.check(str(orig), fused).ok, (arch, exporter, dt)
            out = smallest(orig, fused, args.gelu, False)
            loc = smallest(orig, fused, args.gelu, True)
            rows.append({"model": f"{arch} {exporter} {dt}", "dtype": dt, "outputs_eps": out, "localize_eps": loc,
                         "seconds": round(time.perf_counter() - t0, 1)})
            print(rows[-1], flush=True)
    meta = {"command": "benchmarks/verdict_sensitivity.py" + (f" --gelu {args.gelu}" if args.gelu != 6 else ""),
            "gelu": args.gelu, "layers": D.LAYERS, "hidden": D.HIDDEN, "machine": _cpu(),
            "onnxruntime": onnxruntime.__version__, "torch": torch.__version__, "verdict": contract.REFERENCE_VERDICT}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [f"# Smallest per-GELU error `check` detects (GELU {args.gelu} of {D.LAYERS} scaled by 1 + eps)", "",
             f"`{meta['command']}` · {meta['machine']}, onnxruntime {meta['onnxruntime']}, torch {meta['torch']}, CPU EP, "
             f"hidden {D.HIDDEN}, check's default inputs (seed 0, named dims 4), verdict {meta['verdict']}", "",
             "| model | smallest eps that fails (outputs) | with --localize |", "|---|---|---|"]
    lines += [f"| {r['model']} | {r['outputs_eps']:.2g} | {r['localize_eps']:.2g} |" for r in rows]
    Path(args.out + ".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
