"""A precise reference for today's exports (issue 32, point 2): the
reference is the original retyped to float64 (float32 for fp16), and the
nodes ONNX Runtime's CPU EP cannot run so are islands in float32, decided by
asking ONNX Runtime (gelu_onnx/verify/kernel_coverage.py), never the
original itself. 12-layer BERTs (tests/helpers/deep_models.py: random
non-zero parameters): torch's dynamo exporter at its default opset (ONNX
Gelu-20, which ONNX Runtime expands into an Erf), fp32 and fp16; the
TorchScript export after onnxruntime.transformers.optimizer (com.microsoft
BiasGelu, SkipLayerNormalization); the same quantized by
onnxruntime.quantization.quantize_static (QDQ). Correct fusions pass; a
planted fault fails."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import deep_models as D  # noqa: E402
from helpers import parity_faults as PF  # noqa: E402

import gelu_onnx  # noqa: E402
from gelu_onnx import verify  # noqa: E402
from gelu_onnx.verify import kernel_coverage, reference, runners  # noqa: E402

pytestmark = pytest.mark.slow


def _label(dtype: str, islands: str = "") -> str:
    isl = f" ({islands} in float32)" if islands else ""
    return f"the original in {dtype}{isl} (CPU, optimizations off)"


def _judged(orig, fused, want_label):
    """The fused model passes against the precise reference, and the
    original's own deviation from it is not zero (it is not the original)."""
    rep = verify.check(str(orig), str(fused))
    assert rep.ok, [(r.name, r.message) for r in rep.outputs]
    assert rep.precise_reference == want_label and not rep.warnings, (rep.precise_reference, rep.notes)
    for r in rep.outputs:
        assert r.verdict == "reference" and r.original_mean_dev > 0 and r.compared == r.elements, r
    return rep


def _fault_fails(orig, fused, kind="drop_bias"):
    bad = PF.plant(onnx.load(str(fused)), kind)
    rep = verify.check(str(orig), bad.model)
    assert not rep.ok and not any(r.passed for r in rep.outputs if r.verdict == "reference"), kind


@pytest.mark.parametrize("dtype,want", D.opt_in([("fp32", _label("float64", "Gelu")), ("fp16", _label("float32"))],
                                                keep=[("fp32", _label("float64", "Gelu"))]))
def test_dynamo_default_opset_writes_gelu20(deep_folder, dtype, want):
    orig, fused = D.fused("bert", "dynamo-default", dtype, "custom", deep_folder)
    assert any(n.op_type == "Gelu" and n.domain == "" for n in onnx.load(str(orig)).graph.node)
    _judged(orig, fused, want)
    _fault_fails(orig, fused)


@pytest.fixture(scope="module")
def ort_optimized(deep_folder):
    """The TorchScript fp32 export through ONNX Runtime's transformer optimizer."""
    from onnxruntime.transformers import optimizer

    src, _ = D.export("bert", "torchscript", "fp32", deep_folder)
    out = deep_folder / "bert_ortopt_fp32.onnx"
    if not out.exists():
        optimizer.optimize_model(str(src), model_type="bert", num_heads=D.HEADS,
                                 hidden_size=D.HIDDEN).save_model_to_file(str(out))
    return out


def test_ort_optimizer_output(ort_optimized, deep_folder):
    ops = {(n.domain, n.op_type) for n in onnx.load(str(ort_optimized)).graph.node}
    assert {("com.microsoft", "BiasGelu"), ("com.microsoft", "SkipLayerNormalization")} <= ops, ops
    fused = deep_folder / "bert_ortopt_fp32.custom.onnx"
    gelu_onnx.fuse_file(str(ort_optimized), str(fused), target="custom")
    _judged(ort_optimized, fused, _label("float64", "com.microsoft.BiasGelu, com.microsoft.SkipLayerNormalization"))
    _fault_fails(ort_optimized, fused, "double_bias")


def test_qdq_quantize_static(deep_folder):
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.it = iter([{"input_ids": rng.integers(0, D.VOCAB, (2, D.SEQ)).astype(np.int64)} for _ in range(2)])

        def get_next(self):
            return next(self.it, None)

    src, _ = D.export("bert", "torchscript", "fp32", deep_folder)
    q = deep_folder / "bert_qdq.onnx"
    quantize_static(str(src), str(q), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    fused = deep_folder / "bert_qdq.custom.onnx"
    gelu_onnx.fuse_file(str(q), str(fused), target="custom")
    _judged(q, fused, _label("float64", "DequantizeLinear, Erf, QuantizeLinear"))


def test_islands_are_what_onnxruntime_runs(ort_optimized):
    """The plan against the installed ONNX Runtime: every island op really
    has no float64 kernel there (a float64 copy with that one op kept in
    float64 does not build), and the copy with the islands runs."""
    lo = runners.load(str(ort_optimized))

    def make(m):
        return runners.runner(m, "cpu", False, "disable", label="reference")

    sk = reference.skeleton(lo.model)
    sk32 = reference.retyped(sk, T.FLOAT)
    plan = kernel_coverage.plan(reference.retyped(sk, T.DOUBLE), sk32, T.DOUBLE, (T.FLOAT,), make)
    assert set(plan.labels(lo.model)) == {"com.microsoft.BiasGelu", "com.microsoft.SkipLayerNormalization"}
    runners.runner(reference.retyped(sk, T.DOUBLE, plan=plan), "cpu", False, "disable")  # builds
    for k in list(plan.nodes)[:2]:
        fewer = kernel_coverage.Plan({i: v for i, v in plan.nodes.items() if i != k})
        with pytest.raises(Exception):
            runners.runner(reference.retyped(sk, T.DOUBLE, plan=fewer), "cpu", False, "disable")
