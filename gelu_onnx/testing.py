"""Parity as a test assertion, for a CI's pytest suite:

    from gelu_onnx.testing import assert_parity

    def test_fused_model_keeps_parity():
        assert_parity("bert.onnx", "bert.fused.onnx", input_shapes={"input_ids": [1, 128]})

``assert_parity`` runs ``gelu_onnx.check`` with the given options; it raises
AssertionError with the report `gelu-onnx check` prints (outputs, problems,
notes, the verdict line), or returns the CheckReport.
"""
from __future__ import annotations

from .verify.checktext import report_text
from .verify.parity_check import CheckReport, check

__all__ = ["assert_parity"]


def assert_parity(original, fused, **check_options) -> CheckReport:
    """Bad input raises as check does (gelu_onnx.errors: ValueError / NotImplementedError subclasses)."""
    rep = check(original, fused, **check_options)
    if not rep.ok:
        raise AssertionError("parity check failed\n" + report_text(rep))
    return rep
