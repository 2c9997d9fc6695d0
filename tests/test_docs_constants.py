"""Every number docs/ and the README quote from the code is read back from
the code: the constants of gelu_onnx.contract and the matcher's limits. A
change to one of them fails here until the text says the same."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from gelu_onnx import contract as C
from gelu_onnx.fusion.match import matcher, numeric

ROOT = Path(__file__).resolve().parent.parent
_SHORT = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _text(name: str) -> str:
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())  # one line: quotes may wrap


def _after(text: str, anchor: str, length: int = 200) -> str:
    at = text.find(anchor)
    assert at >= 0, f"{anchor!r} is no longer quoted: update this test with the text"
    return text[at:at + length]


def test_match_tolerance_in_design():
    quoted = _after(_text("docs/design.md"), "`contract.MATCH_TOLERANCE`:")
    got = {_SHORT[k]: float(v) for k, v in re.findall(r"\b(fp64|fp32|fp16|bf16) ([0-9.e-]+\d)", quoted)}
    assert got == C.MATCH_TOLERANCE


def test_parity_tolerance_in_cli_doc():
    quoted = _after(_text("docs/cli.md"), "`gelu_onnx.contract.PARITY_TOLERANCE`:")
    got = {k: {"rtol": float(r), "atol": float(a)} for k, r, a in
           re.findall(r"\b(float64|float32|float16|bfloat16) ([0-9.e-]+)/([0-9.e-]+\d)", quoted)}
    assert got == C.PARITY_TOLERANCE


@pytest.mark.parametrize("doc", ["docs/cli.md", "docs/verdict.md"])
def test_reference_verdict(doc):
    text = " ".join(_text(doc).split())
    v = C.REFERENCE_VERDICT
    fac = r"<=\s?max\((\d+)\s?·\s?{}\s?\|"
    assert float(re.search(fac.format("mean"), text).group(1)) == v["mean_factor"]
    assert float(re.search(fac.format("max"), text).group(1)) == v["max_factor"]
    f = v["floor_eps"]
    assert f["float32"] == f["float64"] and f["float16"] == f["bfloat16"]
    wide, half = f["float32"], f["float16"]
    pairs = re.findall(r"([0-9.]+), ([0-9.]+)\)? for float32(?: and |/)float64", text) or re.findall(
        r"float32 and float64 \(([0-9.]+), ([0-9.]+)\)", text)
    assert [(float(a), float(b)) for a, b in pairs][:1] == [(wide["mean"], wide["max"])]
    halfs = re.findall(r"float16 and bfloat16 \(([0-9.]+), ([0-9.]+)\)", text) or re.findall(
        r"([0-9.]+), ([0-9.]+) for float16/bfloat16", text)
    assert [(float(a), float(b)) for a, b in halfs][:1] == [(half["mean"], half["max"])]


def test_fp16_parity_goal_in_kernels_doc():
    quoted = _after(_text("docs/kernels.md"), "(`contract.py`: rtol")
    r, a = re.search(r"rtol ([0-9.e-]+) \+ atol ([0-9.e-]+\d) for fp16", quoted).groups()
    assert {"rtol": float(r), "atol": float(a)} == C.PARITY_TOLERANCE["float16"]


def test_alpha_range_and_quickgelu():
    lo, hi = C.SIGMOID_ALPHA_RANGE
    for doc in ("docs/design.md", "docs/targets.md"):
        assert f"α in [{lo}, {hi}]" in _text(doc), doc
    assert f"QuickGELU is {C.QUICK_GELU_ALPHA}" in _text("docs/targets.md")


def test_matcher_limits_and_probe_grid_in_design():
    text = _text("docs/design.md")
    assert (f"{matcher.MAX_REGION_NODES} nodes, {matcher.MAX_ROOT_DEPTH} deep to the root, "
            f"{matcher.MAX_LEAF_DEPTH} to x") in text
    assert f"≤ {matcher.MAX_ROOT_DEPTH} deep" in text
    n = int(re.search(r"probe grid \((\d+) points in \[-8, 8\]", text).group(1))
    grid = np.linspace(-8.0, 8.0, n)
    assert np.isin(grid[grid != 0], numeric.PROBE).all()  # the grid (less 0) is in the probe
    assert np.isin(numeric.PROBE, grid).sum() == n - 1 and numeric.PROBE.max() == 100 == -numeric.PROBE.min()
    assert f"Gelu-{C.STANDARD_GELU_OPSET} needs opset {C.STANDARD_GELU_OPSET}" in text
    assert f"IR ≥ {C.MIN_IR_FOR_FUNCTIONS}" in text


def test_reference_max_bytes_in_verdict_doc():
    assert f"`contract.REFERENCE_MAX_BYTES` ({C.REFERENCE_MAX_BYTES // 2**30} GiB)" in _text("docs/verdict.md")


def test_distances_design_quotes_are_the_checks():
    """design.md's two distances (error = max |f - g| / max(|x|, 1) over the
    probe grid): fp16-rounded sqrt(2) in an fp32 graph, and x/2 for x/sqrt(2)."""
    text = _text("docs/design.md")
    x = numeric.PROBE
    erf = np.vectorize(math.erf)
    exact = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    for quoted, divisor in ((r"\(1\.4140625\) is ([0-9.e-]+) away", 1.4140625), (r"x/√2 is ([0-9.e-]+) away", 2.0)):
        got = float(re.search(quoted, text).group(1))
        err = float(np.max(np.abs(0.5 * x * (1 + erf(x / divisor)) - exact) / np.maximum(np.abs(x), 1)))
        assert f"{err:.2g}" == f"{got:.2g}", (divisor, err, got)
        assert err > C.MATCH_TOLERANCE["float32"]  # both are refused in fp32, as the text says
