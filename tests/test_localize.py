"""Localizing a diverged GELU, error statistics, and pair checks, on real ORT runs."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.inliner
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from gelu_onnx import fuse, verify

from gelu_onnx.verify import comparator, localize, pairing


def _erf_gelu(x, y, p):
    return [helper.make_node("Div", [x, p + "sq"], [p + "d"]), helper.make_node("Erf", [p + "d"], [p + "e"]),
            helper.make_node("Add", [p + "e", p + "one"], [p + "a"]), helper.make_node("Mul", [x, p + "a"], [p + "m"]),
            helper.make_node("Mul", [p + "m", p + "half"], [y])]


def two_gelu_model() -> onnx.ModelProto:
    """x -> GELU -> h1 -> MatMul -> GELU -> h2 (two erf GELUs, TorchScript spelling)."""
    inits = []
    for p in ("g1_", "g2_"):
        inits += [numpy_helper.from_array(np.array(np.sqrt(2), np.float32), p + "sq"),
                  numpy_helper.from_array(np.array(1, np.float32), p + "one"),
                  numpy_helper.from_array(np.array(0.5, np.float32), p + "half")]
    inits.append(numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "W"))
    nodes = _erf_gelu("x", "h1", "g1_") + [helper.make_node("MatMul", ["h1", "W"], ["mm"])] + _erf_gelu("mm", "h2", "g2_")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["b", 8])],
                          [helper.make_tensor_value_info("h2", T.FLOAT, ["b", 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def broken(fused: onnx.ModelProto, tensor: str, op: str = "Relu") -> onnx.ModelProto:
    """The fused model with the GELU that writes ``tensor`` replaced by another function."""
    b = onnx.ModelProto()
    b.CopyFrom(fused)
    for n in b.graph.node:
        if n.output[0] == tensor:
            n.op_type, n.domain = op, ""
            del n.attribute[:]
    return b


def _localized(orig, fused):
    lo, lf = verify.load(orig), verify.load(fused)
    ex = localize.expose(lo, lf)
    feeds = verify.make_inputs(lo.model, dim_default=5)
    a = verify.run(verify.load(ex.original), feeds, use_library=False)
    b = verify.run(verify.load(ex.fused), feeds, use_library=False)
    _, ga = localize.split(a, ex.sites, ["h2"])
    _, gb = localize.split(b, ex.sites, ["h2"])
    rows = {r.name: r for r in verify.compare(ga, gb)}
    return ex, {s.tensor: localize.fusion_record(s, rows.get(s.tensor) if s.in_fused else None) for s in ex.sites}


def test_localize_names_the_replaced_gelu():
    m = two_gelu_model()
    f = fuse(m, target="custom")
    ex, recs = _localized(m, broken(f, "h1"))
    assert [s.tensor for s in ex.sites] == ["h1", "h2"]  # original's order
    assert recs["h1"]["pass"] is False and recs["h1"]["max_abs"] > 0.1
    assert recs["h1"]["description"]["form"] == "erf" and "erf GELU" in recs["h1"]["summary"]
    _, good = _localized(m, f)
    assert all(r["pass"] for r in good.values())
    assert good["h1"]["max_abs"] <= 1e-5


def test_localize_missing_tensor_fails():
    m = two_gelu_model()
    f = fuse(m, target="standard")
    for n in f.graph.node:
        if n.output[0] == "h1":
            n.output[0] = "renamed"
        n.input[:] = ["renamed" if i == "h1" else i for i in n.input]
    ex, recs = _localized(m, f)
    assert recs["h1"]["pass"] is False and "no tensor of this name" in recs["h1"]["message"]
    assert recs["h2"]["pass"] is True


def test_stats_and_merge_against_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    rows = []
    diffs = []
    for i in range(3):
        b = a + rng.normal(0, 1e-6 * (i + 1), a.shape).astype(np.float32)
        row = verify.compare_one("y", a, b)
        d = np.abs(a.astype(np.float64) - b.astype(np.float64)).ravel()
        comparator.keep(row, d)
        assert row.median_abs == np.median(d) and np.isclose(row.p99_abs, np.percentile(d, 99))
        rows.append(row)
        diffs.append(d)
    m = comparator.merge(rows)
    alld = np.concatenate(diffs)
    assert m.elements == 3 * a.size and m.max_abs == max(r.max_abs for r in rows)
    assert np.isclose(m.mean_abs, alld.mean(), rtol=1e-6) and np.isclose(m.p99_abs, np.percentile(alld, 99), rtol=1e-6)
    assert m.passed == all(r.passed for r in rows)


def test_pair_differences_and_inlined_custom_ops():
    m = two_gelu_model()
    f = fuse(m, target="custom")
    assert pairing.interface_differences(m, f) == []
    assert pairing.custom_ops_gone(f) is None and pairing.custom_ops_gone(m) is None
    inlined = onnx.inliner.inline_local_functions(f)
    assert "inlined" in pairing.custom_ops_gone(inlined)
    other = onnx.ModelProto()
    other.CopyFrom(m)
    other.graph.input[0].name = "z"
    other.graph.node[0].input[0] = "z"
    other.graph.node[3].input[0] = "z"
    diffs = pairing.interface_differences(m, other)
    assert any("needs input(s) the original does not have: z" in d for d in diffs)
    assert any("no longer takes input(s) x" in d for d in diffs)
