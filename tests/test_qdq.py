"""QDQ-quantized models: a GELU chain with no QuantizeLinear/DequantizeLinear
inside is fused (the DQ in front and the Q behind stay), a chain with Q/DQ
inside is never fused; a native Gelu after a DQ -> Add bias absorbs the bias."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gelu_onnx

H = 8


def qdq_model(impure: bool, native: bool = False) -> onnx.ModelProto:
    """xq (uint8) -> DQ -> MatMul W -> [Add B] -> GELU -> Q -> DQ -> y.
    impure: a Q -> DQ pair sits between x/sqrt(2) and Erf (what a quantizer
    that quantizes every tensor writes)."""
    rng = np.random.default_rng(3)
    inits = [nh.from_array(rng.standard_normal((H, H)).astype(np.float32), "W"),
             nh.from_array(rng.standard_normal((H,)).astype(np.float32), "B"),
             nh.from_array(np.array(0.05, np.float32), "s"), nh.from_array(np.array(128, np.uint8), "z"),
             nh.from_array(np.array(2**0.5, np.float32), "r2"), nh.from_array(np.array(1.0, np.float32), "one"),
             nh.from_array(np.array(0.5, np.float32), "half")]
    nodes = [h.make_node("DequantizeLinear", ["xq", "s", "z"], ["x"]), h.make_node("MatMul", ["x", "W"], ["m"]),
             h.make_node("Add", ["m", "B"], ["a"])]
    if native:
        nodes.append(h.make_node("Gelu", ["a"], ["g"]))
    else:
        d = "d"
        nodes.append(h.make_node("Div", ["a", "r2"], ["d"]))
        if impure:
            nodes += [h.make_node("QuantizeLinear", ["d", "s", "z"], ["dq8"]),
                      h.make_node("DequantizeLinear", ["dq8", "s", "z"], ["d2"])]
            d = "d2"
        nodes += [h.make_node("Erf", [d], ["e"]), h.make_node("Add", ["e", "one"], ["p"]),
                  h.make_node("Mul", ["a", "p"], ["q"]), h.make_node("Mul", ["q", "half"], ["g"])]
    nodes += [h.make_node("QuantizeLinear", ["g", "s", "z"], ["gq"]),
              h.make_node("DequantizeLinear", ["gq", "s", "z"], ["y"])]
    g = h.make_graph(nodes, "qdq", [h.make_tensor_value_info("xq", T.UINT8, ["n", H])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n", H])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 20 if native else 17)], ir_version=10)


def run(m: onnx.ModelProto, library: bool = False) -> np.ndarray:
    so = gelu_onnx.session_options() if library else ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no ORT QDQ fusions either way
    x = np.arange(4 * H, dtype=np.uint8).reshape(4, H) * 7
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"xq": x})[0]


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_pure_chain_between_dq_and_q_is_fused(target, native):
    m = qdq_model(impure=False, native=native)
    res = gelu_onnx.fuse_with_report(m, target)
    onnx.checker.check_model(res.model, full_check=True)
    ops = [n.op_type for n in res.model.graph.node]
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 2  # the DQ/Q pair stays
    assert "Erf" not in ops
    if not (native and target == "standard"):
        assert len(res.fusions) == 1 and res.fusions[0].bias == (target != "standard")
    # parity at the quantized output: at most one quantization step apart
    assert np.max(np.abs(run(res.model) - run(m))) <= 0.05 + 1e-6


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_chain_with_qdq_inside_is_never_fused(target):
    m = qdq_model(impure=True)
    res = gelu_onnx.fuse_with_report(m, target)
    assert not res.fusions
    assert [n.op_type for n in res.model.graph.node] == [n.op_type for n in m.graph.node]
    assert res.near_misses  # reported, with its reason
