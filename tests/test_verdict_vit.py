"""check's default verdict on a 12-layer ViT exported with TorchScript
(dynamo: test_verdict_dynamo.py; tests/helpers/deep_models.py: random non-zero
weights, biases and LayerNorm parameters; a Conv patch embedding, which ONNX
Runtime's CPU EP has no float64 kernel for): correct fusions pass for every
target, fp32 and fp16; a fault planted in one middle GELU fails with the
same defaults and --localize names it."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import deep_models as D  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("dtype", D.opt_in(["fp32", "fp16"], keep=["fp32"]))
def test_correct_fusions_pass(deep_folder, dtype):
    D.assert_correct_passes("vit", "torchscript", dtype, deep_folder)


FAULTS = [("fp32", "ort", "erf_as_tanh"), ("fp32", "custom", "double_bias"), ("fp16", "custom", "drop_bias"),
          ("fp16", "ort", "double_bias"), ("fp16", "standard", "wrong_input")]


@pytest.mark.parametrize("dtype,target,kind", D.opt_in(FAULTS, keep=[("fp32", "custom", "double_bias")]),
                         ids=["-".join(f) for f in FAULTS])
def test_planted_fault_fails(deep_folder, dtype, target, kind):
    orig, fused = D.fused("vit", "torchscript", dtype, target, deep_folder)
    D.assert_caught(orig, fused, kind)
