"""check's default verdict on a 12-layer BERT exported with TorchScript
(dynamo: test_verdict_dynamo.py; tests/helpers/deep_models.py: random non-zero
weights, biases and LayerNorm parameters): correct fusions pass for every
target, fp32 and fp16; a fault planted in one middle GELU
(tests/helpers/parity_faults.py) fails with the same defaults, and --localize names
that GELU. Issue 23: the fixed 2e-3 bound failed a correct TorchScript fp16
BERT-base on the CPU (25 of 12 288 elements)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import deep_models as D  # noqa: E402

from gelu_onnx import verify  # noqa: E402

pytestmark = pytest.mark.slow


def _fused(deep_folder, exporter, dtype, target, act="gelu"):
    return D.fused("bert", exporter, dtype, target, deep_folder, act)


def _check(orig, fused, **kw):
    return verify.check(orig, fused, iterations=2, **kw)  # fault checks: D.assert_caught, one iteration


@pytest.mark.parametrize("exporter,dtype", [("torchscript", "fp32"), ("torchscript", "fp16")])
def test_correct_fusions_pass(deep_folder, exporter, dtype):
    D.assert_correct_passes("bert", exporter, dtype, deep_folder)


FAULTS_FP32 = [("custom", k) for k in ("wrong_input", "drop_bias", "double_bias", "erf_as_tanh")] + [
    ("standard", "drop_bias"), ("ort", "double_bias"), ("ort", "erf_as_tanh")]


@pytest.mark.parametrize("target,kind", D.opt_in(FAULTS_FP32, keep=[("custom", "drop_bias")]),
                         ids=[f"{t}-{k}" for t, k in FAULTS_FP32])
def test_planted_fault_fails_fp32(deep_folder, target, kind):
    orig, fused = _fused(deep_folder, "torchscript", "fp32", target)
    D.assert_caught(orig, fused, kind)


@pytest.mark.parametrize("kind", D.opt_in(["wrong_input", "drop_bias", "double_bias"], keep=["drop_bias"]))
def test_planted_fault_fails_fp16(deep_folder, kind):
    orig, fused = _fused(deep_folder, "torchscript", "fp16", "custom")
    D.assert_caught(orig, fused, kind)


@pytest.mark.parametrize("dtype", D.opt_in(["fp32", "fp16"], keep=["fp32"]))
def test_quickgelu_alpha_one_fails(deep_folder, dtype):
    orig, fused = _fused(deep_folder, "torchscript", dtype, "custom", act="quick_gelu")
    assert _check(orig, fused).ok
    D.assert_caught(orig, fused, "quick_alpha_one")
