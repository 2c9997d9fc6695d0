"""No false certificate (issue 32, point 1): `check` passes an output only
when its verdict rests on enough compared elements (docs/verdict.md, "What a
PASS rests on"). The wrong model computes Relu where the GELU was: every way
of feeding it nothing comparable (--scale nan / inf / 0, --inputs holding
only NaN, --dim-default 0) used to print PASS and exit 0."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from gelu_onnx import contract, verify
from gelu_onnx.verify import verdict


def _ffn(act: str, two_inputs: bool = False) -> onnx.ModelProto:
    """x @ W + b -> act (an exporter's erf GELU chain, or Relu) -> y; with
    ``two_inputs`` also z -> the same act -> y2 (dims 'a' and 'b')."""
    rng = np.random.default_rng(0)
    w = nh.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W")
    b = nh.from_array(rng.standard_normal(8).astype(np.float32), "b")
    consts = [nh.from_array(np.array(v, np.float32), n) for n, v in (("r2", math.sqrt(2)), ("one", 1.0), ("half", 0.5))]

    def act_nodes(src, out):
        if act == "relu":
            return [h.make_node("Relu", [src], [out])]
        return [h.make_node("Div", [src, "r2"], [src + "_d"]), h.make_node("Erf", [src + "_d"], [src + "_e"]),
                h.make_node("Add", [src + "_e", "one"], [src + "_p"]), h.make_node("Mul", [src, src + "_p"], [src + "_m"]),
                h.make_node("Mul", [src + "_m", "half"], [out])]

    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Add", ["mm", "b"], ["pre"])] + act_nodes("pre", "y")
    ins = [h.make_tensor_value_info("x", T.FLOAT, ["a", 8])]
    outs = [h.make_tensor_value_info("y", T.FLOAT, ["a", 8])]
    if two_inputs:
        nodes += act_nodes("z", "y2")
        ins.append(h.make_tensor_value_info("z", T.FLOAT, ["b", 8]))
        outs.append(h.make_tensor_value_info("y2", T.FLOAT, ["b", 8]))
    g = h.make_graph(nodes, "ffn", ins, outs, [w, b] + consts)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("cert")
    paths = {}
    for name, act in (("orig", "gelu"), ("relu", "relu")):
        paths[name] = str(d / f"{name}.onnx")
        onnx.save(_ffn(act), paths[name])
    for name, act in (("orig2", "gelu"), ("relu2", "relu")):
        paths[name] = str(d / f"{name}.onnx")
        onnx.save(_ffn(act, two_inputs=True), paths[name])
    paths["dir"] = d
    return paths


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gelu_onnx", "check", *map(str, args)], capture_output=True, text=True)


def test_relu_for_gelu_fails_by_default(pair):
    """The wrong model is caught when something is compared (so the cases
    below test what is fed, not a check that cannot fail)."""
    r = _cli(pair["orig"], pair["relu"], "--json")
    assert r.returncode == 1, r.stderr
    (row,) = json.loads(r.stdout)["outputs"]
    assert not row["pass" if "pass" in row else "passed"] and row["compared"] == row["elements"] == 32


@pytest.mark.parametrize("scale", ["nan", "inf", "-inf", "0"])
def test_scale_that_feeds_nothing_comparable_is_bad_input(pair, scale):
    r = _cli(pair["orig"], pair["relu"], f"--scale={scale}")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(r.stderr.splitlines()) == 1 and "--scale" in r.stderr and "finite" in r.stderr, r.stderr
    assert "PASS" not in r.stdout


@pytest.mark.parametrize("fill", [np.nan, np.inf])
def test_inputs_with_no_finite_value_are_bad_input(pair, fill):
    f = pair["dir"] / f"bad_{fill}.npz"
    np.savez(f, x=np.full((4, 8), fill, np.float32))
    r = _cli(pair["orig"], pair["relu"], "--inputs", f)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "input 'x' holds no finite value" in r.stderr and "PASS" not in r.stdout


def test_every_input_empty_is_bad_input(pair):
    r = _cli(pair["orig"], pair["relu"], "--dim-default", "0")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r.stderr
    assert "every input is empty" in r.stderr and "x [0, 8]" in r.stderr


def test_an_empty_output_is_not_a_pass(pair):
    """One input empty beside a non-empty one (a first-step KV cache is
    empty): the empty output rests on nothing, exit 1, named."""
    for fused in (pair["orig2"], pair["relu2"]):
        r = _cli(pair["orig2"], fused, "--dim", "a=0", "--dim", "b=4", "--json")
        assert r.returncode == 1, r.stderr
        rows = {row["name"]: row for row in json.loads(r.stdout)["outputs"]}
        assert rows["y"]["compared"] == 0 and "nothing compared: the output is empty" in rows["y"]["message"]
        assert rows["y2"]["compared"] == 32
    r = _cli(pair["orig2"], pair["orig2"], "--dim", "a=0", "--dim", "b=4")
    assert r.returncode == 1 and "y: nothing compared: the output is empty (shape [0, 8])" in r.stderr, r.stderr
    assert "FAIL" in r.stdout and "PASS:" not in r.stdout


def test_mostly_nan_inputs_are_too_little_compared(pair):
    """A correct pair on inputs mostly NaN: the few finite rows do not make a
    certificate (fewer than MIN_COMPARED_FRACTION of the elements)."""
    x = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
    x[:5, 0] = np.nan  # MatMul spreads a NaN over its row: 5 of 8 rows NaN
    f = pair["dir"] / "mostly_nan.npz"
    np.savez(f, x=x)
    r = _cli(pair["orig"], pair["orig"], "--inputs", f, "--json")
    assert r.returncode == 1, r.stderr
    d = json.loads(r.stdout)
    (row,) = d["outputs"]
    assert row["compared"] == 24 and row["elements"] == 64 and "too little compared" in row["message"]
    assert any("5 of 64 values are NaN or inf" in n for n in d["notes"])
    x[:5, 0] = 0.0
    x[:2, 0] = np.nan  # 2 of 8 rows: the rest is a certificate
    np.savez(f, x=x)
    r = _cli(pair["orig"], pair["orig"], "--inputs", f, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["outputs"][0]["compared"] == 48, r.stdout


def test_every_row_says_what_it_rests_on(pair):
    """Reference-judged, fixed-bound and --localize rows, over iterations."""
    rep = verify.check(pair["orig"], pair["orig"], iterations=3, localize_gelus=True)
    assert rep.ok and rep.outputs[0].verdict == "reference" and rep.outputs[0].compared == 3 * 32
    fixed = verify.check(pair["orig"], pair["orig"], iterations=2, tolerances={"float32": {"rtol": 1e-5, "atol": 1e-5}})
    assert fixed.outputs[0].verdict == "fixed" and fixed.outputs[0].compared == 2 * 32
    d = rep.to_dict()
    assert d["outputs"][0]["compared"] == 96 and d["outputs"][0]["same_infinity"] == 0


def test_certify_rule():
    """The reference verdict's tally: nothing finite is not a pass; agreed
    infinities (a -inf mask) count towards the fraction, never alone."""
    ref = np.array([1.0, 2.0, -np.inf, -np.inf, -np.inf])
    t = verdict.Tally()
    t.add(ref, ref, ref)
    assert t.n == 2 and t.same_inf == 3 and verdict.judge(t, "float32").passed
    t = verdict.Tally()
    t.add(np.full(4, np.nan), np.full(4, np.nan), np.full(4, np.nan))
    assert t.n == 0 and not verdict.judge(t, "float32").passed
    row = verify.compare_one("y", np.array([-np.inf, -np.inf, 1.0], np.float32), np.array([-np.inf, -np.inf, 1.0],
                                                                                         np.float32))
    assert row.passed and row.compared == 1 and row.same_infinity == 2
    assert verdict.certify(row).passed
    row = verify.compare_one("y", np.full(3, -np.inf, np.float32), np.full(3, -np.inf, np.float32))
    assert row.passed and not verdict.certify(row).passed and "nothing compared" in row.message
    assert contract.MIN_COMPARED_FRACTION == 0.5
