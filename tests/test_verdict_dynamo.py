"""check's default verdict on 12-layer BERT (fp16) and ViT (fp32) exported
by torch's dynamo exporter (tests/helpers/deep_models.py: random non-zero weights,
biases and LayerNorm parameters): correct fusions pass for every target; a
fault planted in one middle GELU fails with the same defaults and --localize
names it. The dynamo fp16 export computes its GELU chain in fp16 ops: the
fused graph (one rounding) is closer to the reference than the original."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import deep_models as D  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("arch,dtype", D.opt_in([("bert", "fp16"), ("vit", "fp32")], keep=[("bert", "fp16")]))
def test_correct_fusions_pass(deep_folder, arch, dtype):
    D.assert_correct_passes(arch, "dynamo", dtype, deep_folder)


FAULTS = [("vit", "fp32", "custom", "wrong_input"), ("vit", "fp32", "custom", "erf_as_tanh"),
          ("vit", "fp32", "standard", "double_bias"), ("vit", "fp32", "ort", "drop_bias"),
          ("bert", "fp16", "custom", "drop_bias")]


@pytest.mark.parametrize("arch,dtype,target,kind", D.opt_in(FAULTS, keep=[("bert", "fp16", "custom", "drop_bias")]),
                         ids=["-".join(f) for f in FAULTS])
def test_planted_fault_fails(deep_folder, arch, dtype, target, kind):
    orig, fused = D.fused(arch, "dynamo", dtype, target, deep_folder)
    D.assert_caught(orig, fused, kind)
