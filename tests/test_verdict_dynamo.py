"""check's default verdict on 12-layer BERT (fp16) and ViT (fp32) exported
by torch's dynamo exporter (tests/deep_models.py: random non-zero weights,
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
import deep_models as D  # noqa: E402

from gelu_onnx import verify  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("deep_dynamo")


@pytest.mark.parametrize("arch,dtype", [("bert", "fp16"), ("vit", "fp32")])
def test_correct_fusions_pass(folder, arch, dtype):
    for target in ("custom", "standard", "ort"):
        orig, fused = D.fused(arch, "dynamo", dtype, target, folder)
        rep = verify.check(orig, fused, iterations=2)
        assert rep.ok, (target, [(r.name, r.message) for r in rep.outputs])
        # fp16: a float32 reference; ViT's Conv has no float64 kernel: float32 inside the float64 one
        want = "float32" if dtype == "fp16" else "float64 (Conv, Erf in float32)"
        assert rep.precise_reference == f"the original in {want} (CPU, optimizations off)"
        for r in rep.outputs:
            assert r.verdict == "reference" and r.fused_mean_dev <= 1.5 * r.original_mean_dev, (target, r)


FAULTS = [("vit", "fp32", "custom", "wrong_input"), ("vit", "fp32", "custom", "erf_as_tanh"),
          ("vit", "fp32", "standard", "double_bias"), ("vit", "fp32", "ort", "drop_bias"),
          ("bert", "fp16", "custom", "drop_bias")]


@pytest.mark.parametrize("arch,dtype,target,kind", FAULTS, ids=["-".join(f) for f in FAULTS])
def test_planted_fault_fails(folder, arch, dtype, target, kind):
    orig, fused = D.fused(arch, "dynamo", dtype, target, folder)
    D.assert_caught(orig, fused, kind)
