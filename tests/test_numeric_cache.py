"""The numeric check is cached per region structure (fusion.match.numeric.checked_region): a chain
of N identical GELUs is checked once, and the cache never lets a region
through on another region's result — its key holds every constant's dtype and
stored bytes, the ops, their wiring and x's type.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper as h, numpy_helper as nh

import gelu_onnx
from gelu_onnx.fusion.match import numeric

SQRT2 = float(np.sqrt(2.0))


def _chain(consts: list[tuple[float, float, float]], dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """x -> GELU_0 -> GELU_1 ...: GELU i is 0.5*x*(1+erf(x/s)) with its own
    initializers (s, one, half) = consts[i], all in ``dtype``."""
    npdt = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    nodes, inits, x = [], [], "x"
    for i, (s, one, half) in enumerate(consts):
        names = [f"s{i}", f"one{i}", f"half{i}"]
        inits += [nh.from_array(np.array(v, npdt), n) for n, v in zip(names, (s, one, half))]
        nodes += [h.make_node("Div", [x, names[0]], [f"a{i}"], name=f"div{i}"),
                  h.make_node("Erf", [f"a{i}"], [f"b{i}"], name=f"erf{i}"),
                  h.make_node("Add", [f"b{i}", names[1]], [f"c{i}"], name=f"add{i}"),
                  h.make_node("Mul", [x, f"c{i}"], [f"d{i}"], name=f"mul{i}"),
                  h.make_node("Mul", [f"d{i}", names[2]], [f"g{i}"], name=f"half{i}")]
        x = f"g{i}"
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", dtype, [3, 4])],
                     [h.make_tensor_value_info(x, dtype, [3, 4])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def checks(monkeypatch):
    calls = []
    real = numeric.check_function

    def counting(*a, **k):
        calls.append(a[2])
        return real(*a, **k)

    monkeypatch.setattr(numeric, "check_function", counting)
    return calls


def test_identical_regions_are_checked_once(checks):
    res = gelu_onnx.fuse_with_report(_chain([(SQRT2, 1.0, 0.5)] * 60))
    assert len(res.fusions) == 60
    assert len(checks) == 2  # x declared (the graph input) for the first, inferred for the other 59


@pytest.mark.parametrize("bad", [(1.41, 1.0, 0.5), (SQRT2, 1.001, 0.5), (SQRT2, 1.0, 0.4999)])
def test_a_wrong_constant_is_never_fused_on_a_cached_result(checks, bad):
    good = (SQRT2, 1.0, 0.5)
    consts = [bad if i % 7 == 3 else good for i in range(40)]
    m = _chain(consts)
    res = gelu_onnx.fuse_with_report(m)
    fused = sorted(int(f.root[1:]) for f in res.fusions)
    assert fused == [i for i in range(40) if i % 7 != 3]
    assert len(checks) == 3  # the first (declared x), the good and the bad structure
    assert all(n.code == "tolerance" for n in res.near_misses) and len(res.near_misses) == 6
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32) * 3

    def run(model):
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]

    np.testing.assert_allclose(run(res.model), run(m), rtol=1e-5, atol=1e-5)


def test_dtype_is_part_of_the_key(checks):
    """The same spelling in fp32 and fp16 (fp16-rounded sqrt(2) is outside the
    fp32 tolerance, inside fp16's): two checks, two verdicts."""
    s16 = float(np.float16(SQRT2))
    assert len(gelu_onnx.fuse_with_report(_chain([(s16, 1.0, 0.5)] * 5, TensorProto.FLOAT16)).fusions) == 5
    assert len(gelu_onnx.fuse_with_report(_chain([(s16, 1.0, 0.5)] * 5, TensorProto.FLOAT)).fusions) == 0
    assert len(checks) == 4  # per model: first GELU (declared x) and the rest
