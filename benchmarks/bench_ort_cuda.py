"""Our ops against ONNX Runtime's own inside its CUDA execution provider, and a
BERT-base end to end through every target: side by side in one process, IO
binding (inputs and outputs stay on the device), medians of interleaved rounds.

    python benchmarks/bench_ort_cuda.py --lib PATH/libgelu_onnx_ort.so [--json OUT] [--quick]

Single ops (65 536 x 3072, bias row 3072): ai.gelu_onnx BiasGeluErf /
BiasGeluTanh / GeluErf / GeluSigmoid against com.microsoft BiasGelu /
FastGelu (with bias) / Gelu / QuickGelu (alpha 1.702), fp32 and fp16.
BERT-base (12 layers, hidden 768, 12 heads, FFN 3072, batch 8 x 128, random
non-zero weights, the exporter's erf chain): the original at ORT level ALL
against the `custom`, `ort` and `standard` targets fused by gelu-onnx, fp32
and fp16. Needs onnxruntime-gpu, onnx, numpy and the gelu_onnx sources on
PYTHONPATH (not installed: scripts/gpu_check.py runs it from the checkout).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper

REPO = Path(__file__).resolve().parents[1]
OPS = [  # (name, ours, theirs, bias, attrs of ours / theirs)
    ("bias+erf", "BiasGeluErf", "BiasGelu", True),
    ("bias+tanh", "BiasGeluTanh", "FastGelu", True),
    ("erf", "GeluErf", "Gelu", False),
    ("sigmoid", "GeluSigmoid", "QuickGelu", False),
]


def single_op(op: str, domain: str, dtype: int, rows: int, cols: int, bias: bool) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", dtype, [rows, cols])]
    names = ["x"]
    inits = []
    if bias:
        b = np.random.default_rng(1).standard_normal(cols).astype(np.float16 if dtype == T.FLOAT16 else np.float32)
        inits.append(numpy_helper.from_array(b, "b"))
        names.append("b")
    attrs = {"alpha": 1.702} if op in ("QuickGelu", "GeluSigmoid") else {}
    node = helper.make_node(op, names, ["y"], domain=domain, **attrs)
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", dtype, [rows, cols])], inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
    return helper.make_model(g, opset_imports=opsets, ir_version=8)


def session(model, lib: str | None, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.log_severity_level = 3
    if lib:
        so.register_custom_ops_library(lib)
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    s = ort.InferenceSession(data, so, providers=[("CUDAExecutionProvider", {"use_tf32": 0}), "CPUExecutionProvider"])
    if s.get_providers()[0] != "CUDAExecutionProvider":
        raise RuntimeError("CUDAExecutionProvider is not available")
    return s


def bound_runner(sess, feeds: dict):
    """A callable that runs sess once with IO binding (inputs/outputs on the device)."""
    io = sess.io_binding()
    for name, arr in feeds.items():
        io.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(arr, "cuda", 0))
    for o in sess.get_outputs():
        io.bind_output(o.name, "cuda")
    sess.run_with_iobinding(io)  # warm up, allocate outputs

    def run():
        sess.run_with_iobinding(io)
        io.synchronize_outputs()
    return run


def median_ms(runners: dict, rounds: int, reps: int) -> dict:
    times = {k: [] for k in runners}
    for r in range(rounds):
        for k in (list(runners) if r % 2 == 0 else list(runners)[::-1]):
            t0 = time.perf_counter()
            for _ in range(reps):
                runners[k]()
            times[k].append((time.perf_counter() - t0) / reps * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_ops(lib: str, rounds: int, rows: int) -> list[dict]:
    out = []
    cols = 3072
    for dname, dtype, npdt in (("fp32", T.FLOAT, np.float32), ("fp16", T.FLOAT16, np.float16)):
        x = (np.random.default_rng(0).standard_normal((rows, cols)) * 3).astype(npdt)
        for name, ours, theirs, bias in OPS:
            runners = {"ours": bound_runner(session(single_op(ours, "ai.gelu_onnx", dtype, rows, cols, bias), lib), {"x": x}),
                       "ort": bound_runner(session(single_op(theirs, "com.microsoft", dtype, rows, cols, bias), None),
                                           {"x": x})}
            ms = median_ms(runners, rounds, 20)
            out.append({"dtype": dname, "op": name, "ours": ours, "theirs": theirs, "ours_ms": ms["ours"],
                        "ort_ms": ms["ort"], "speedup": ms["ort"] / ms["ours"]})
    return out


def bert_base(path: Path, fp16: bool, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072,
              batch: int = 8, seq: int = 128) -> None:
    """A BERT-base encoder as an exporter writes it (erf GELU chain, LayerNormalization), random weights."""
    rng = np.random.default_rng(7)
    npdt, dt = (np.float16, T.FLOAT16) if fp16 else (np.float32, T.FLOAT)
    nodes, inits = [], []

    def w(name, *shape, scale=0.02, mean=0.0):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale + mean).astype(npdt), name))
        return name

    def c(name, value):
        inits.append(numpy_helper.from_array(np.array(value, npdt), name))
        return name

    def n(op, ins, out, **kw):
        nodes.append(helper.make_node(op, ins, [out], **kw))
        return out

    inits.append(numpy_helper.from_array(np.array([batch, seq, heads, hidden // heads], np.int64), "qshape"))
    inits.append(numpy_helper.from_array(np.array([batch, seq, hidden], np.int64), "oshape"))
    c("sqrt2", 1.4142135), c("one", 1.0), c("half", 0.5), c("scale", 1 / np.sqrt(hidden // heads))
    h = "input"
    for i in range(layers):
        p = f"l{i}_"
        qkv = []
        for part in "qkv":
            y = n("Add", [n("MatMul", [h, w(p + part + "_w", hidden, hidden)], p + part + "_mm"),
                          w(p + part + "_b", hidden, scale=0.1)], p + part)
            qkv.append(n("Transpose", [n("Reshape", [y, "qshape"], p + part + "_r")], p + part + "_t",
                         perm=[0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]))
        att = n("Softmax", [n("Mul", [n("MatMul", qkv[:2], p + "qk"), "scale"], p + "qks")], p + "sm", axis=-1)
        ctx = n("Reshape", [n("Transpose", [n("MatMul", [att, qkv[2]], p + "ctx")], p + "ctxt", perm=[0, 2, 1, 3]),
                            "oshape"], p + "ctxr")
        ao = n("Add", [n("MatMul", [ctx, w(p + "o_w", hidden, hidden)], p + "omm"), w(p + "o_b", hidden, scale=0.1)],
               p + "o")
        h1 = n("LayerNormalization", [n("Add", [ao, h], p + "res1"), w(p + "ln1_g", hidden, scale=0.1, mean=1.0),
                                      w(p + "ln1_b", hidden, scale=0.1)], p + "ln1", axis=-1)
        f = n("Add", [n("MatMul", [h1, w(p + "f1_w", hidden, ffn)], p + "f1mm"), w(p + "f1_b", ffn, scale=0.1)], p + "f1")
        erf = n("Add", [n("Erf", [n("Div", [f, "sqrt2"], p + "gdiv")], p + "gerf"), "one"], p + "gadd")
        g = n("Mul", [n("Mul", [f, erf], p + "gmul"), "half"], p + "gelu")
        f2 = n("Add", [n("MatMul", [g, w(p + "f2_w", ffn, hidden)], p + "f2mm"), w(p + "f2_b", hidden, scale=0.1)],
               p + "f2")
        h = n("LayerNormalization", [n("Add", [f2, h1], p + "res2"), w(p + "ln2_g", hidden, scale=0.1, mean=1.0),
                                     w(p + "ln2_b", hidden, scale=0.1)], p + "out", axis=-1)
    graph = helper.make_graph(nodes, "bert_base", [helper.make_tensor_value_info("input", dt, [batch, seq, hidden])],
                              [helper.make_tensor_value_info(h, dt, [batch, seq, hidden])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


def fuse(src: Path, target: str) -> Path:
    out = src.with_name(f"{src.stem}.{target}.onnx")
    subprocess.run([sys.executable, "-m", "gelu_onnx", "fuse", str(src), "-o", str(out), "--target", target],
                   check=True, capture_output=True, text=True, cwd=REPO)
    return out


def bench_bert(lib: str, rounds: int, workdir: Path) -> list[dict]:
    out = []
    for fp16 in (False, True):
        src = workdir / f"bert_base_{'fp16' if fp16 else 'fp32'}.onnx"
        bert_base(src, fp16)
        x = np.random.default_rng(3).standard_normal((8, 128, 768)).astype(np.float16 if fp16 else np.float32)
        runners = {"original (ALL)": bound_runner(session(src, None), {"input": x})}
        for target in ("custom", "ort", "standard"):
            runners[target] = bound_runner(session(fuse(src, target), lib), {"input": x})
        ms = median_ms(runners, rounds, 5)
        out.append({"dtype": "fp16" if fp16 else "fp32", **{k: round(v, 3) for k, v in ms.items()},
                    "custom_vs_original": ms["original (ALL)"] / ms["custom"]})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="libgelu_onnx_ort.so built with CUDA")
    ap.add_argument("--json", default=None)
    ap.add_argument("--quick", action="store_true", help="fewer rounds and rows (the gpu-check budget)")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    rounds, rows = (5, 16384) if a.quick else (15, 65536)
    with tempfile.TemporaryDirectory(prefix="gelu-ort-cuda-", dir=a.workdir) as d:
        doc = {"onnxruntime": ort.__version__, "ops": bench_ops(a.lib, rounds, rows),
               "bert_base": bench_bert(a.lib, rounds, Path(d))}
    text = json.dumps(doc, indent=1)
    if a.json:
        Path(a.json).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
