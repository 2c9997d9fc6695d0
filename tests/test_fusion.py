"""Core behaviours of the fusion pass that the corpus tests don't single out:
subgraphs, typed functions for old opsets, mixed
dtypes, the input never being mutated, inspect agreeing with fuse."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gelu_onnx
from gelu_onnx import contract as C

ROOT = Path(__file__).resolve().parent.parent


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def erf_gelu_nodes(x: str, out: str, pre: str, sqrt2="sqrt2", one="one", half="half"):
    return [
        h.make_node("Div", [x, sqrt2], [pre + "d"], name=pre + "div"),
        h.make_node("Erf", [pre + "d"], [pre + "e"], name=pre + "erf"),
        h.make_node("Add", [pre + "e", one], [pre + "a"], name=pre + "add"),
        h.make_node("Mul", [x, pre + "a"], [pre + "m"], name=pre + "mul"),
        h.make_node("Mul", [pre + "m", half], [out], name=pre + "half"),
    ]


def consts(dtype=np.float32, suffix=""):
    return [nh.from_array(np.array(v, dtype=dtype), n + suffix)
            for n, v in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]


def if_loop_model():
    then_g = h.make_graph(erf_gelu_nodes("x", "ty", "t_"), "then", [], [h.make_tensor_value_info("ty", T.FLOAT, None)])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["nx"], name="neg")] + erf_gelu_nodes("nx", "ey", "e_"),
                          "else", [], [h.make_tensor_value_info("ey", T.FLOAT, None)])
    body = h.make_graph(
        [h.make_node("Identity", ["cond"], ["cond_out"], name="id")] + erf_gelu_nodes("v", "v_out", "l_"), "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
         h.make_tensor_value_info("v", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, None)])
    nodes = [h.make_node("If", ["c"], ["iy"], then_branch=then_g, else_branch=else_g, name="if0"),
             h.make_node("Loop", ["trip", "", "iy"], ["ly"], body=body, name="loop0")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4]), h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("ly", T.FLOAT, [4])],
                     consts() + [nh.from_array(np.array(2, dtype=np.int64), "trip")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_gelus_in_if_and_loop_bodies_use_outer_constants(target):
    m = if_loop_model()
    res = gelu_onnx.fuse_with_report(m, target)
    assert sorted(f.graph for f in res.fusions) == ["if0/else_branch", "if0/then_branch", "loop0/body"]
    onnx.checker.check_model(res.model, full_check=True)
    # the outer-scope constants were only used by the GELUs: they are gone
    assert [t.name for t in res.model.graph.initializer] == ["trip"]
    x = np.random.default_rng(0).standard_normal(4).astype(np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        np.testing.assert_allclose(run(res.model, feeds)[0], run(m, feeds)[0], rtol=1e-5, atol=1e-6)


def test_input_model_is_not_mutated_and_inspect_agrees():
    m = if_loop_model()
    before = m.SerializeToString()
    rep = gelu_onnx.inspect(m)
    res = gelu_onnx.fuse_with_report(m)
    assert m.SerializeToString() == before
    assert [(f.graph, f.root, f.form) for f in rep.fusions] == [(f.graph, f.root, f.form) for f in res.fusions]


def test_everything_outside_the_gelu_is_untouched():
    w = nh.from_array(np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32), "W")
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             h.make_node("Relu", ["mm"], ["r"], name="relu")] + erf_gelu_nodes("r", "g", "") + \
            [h.make_node("Softmax", ["g"], ["y"], name="sm", axis=-1)]
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2, 4])], consts() + [w]),
                     opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    out = gelu_onnx.fuse(m)
    kept = {n.name: n for n in out.graph.node}
    for n in m.graph.node:
        if n.name in ("mm", "relu", "sm"):
            assert kept[n.name] == n
    assert [n.op_type for n in out.graph.node] == ["MatMul", "Relu", "GeluErf", "Softmax"]
    assert [t.name for t in out.graph.initializer] == ["W"]
    again = gelu_onnx.fuse_with_report(out)
    assert not again.fusions and again.model.SerializeToString() == out.SerializeToString()


def test_opset14_mixed_dtypes_get_typed_functions_and_run_without_library():
    """No CastLike before opset 15: the function body is typed; an op type
    used in two dtypes computes in float32 with Casts around the fp16 site."""
    nodes = erf_gelu_nodes("x", "y", "a_") + \
        erf_gelu_nodes("x16", "y16", "b_", "sqrt2h", "oneh", "halfh")
    g = h.make_graph(nodes, "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [8]), h.make_tensor_value_info("x16", T.FLOAT16, [8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [8]), h.make_tensor_value_info("y16", T.FLOAT16, [8])],
                     consts() + consts(np.float16, "h"))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 14)], ir_version=7)
    res = gelu_onnx.fuse_with_report(m)
    assert len(res.fusions) == 2 and {f.dtype for f in res.fusions} == {"float32"}
    out = res.model
    assert out.ir_version == C.MIN_IR_FOR_FUNCTIONS  # functions need IR 8
    (fn,) = out.functions
    assert fn.name == "GeluErf" and all(n.op_type != "CastLike" for n in fn.node)
    onnx.checker.check_model(out, full_check=True)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal(8).astype(np.float32) * 3,
             "x16": (rng.standard_normal(8) * 3).astype(np.float16)}
    ref, got = run(m, feeds), run(out, feeds)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1].astype(np.float32), ref[1].astype(np.float32), rtol=2e-3, atol=2e-3)


def test_opset14_mixed_dtypes_with_bias_every_op_gets_its_function():
    """A biased op type in two dtypes: the fp16 site computes in float32 and
    its fp16 bias can no longer be the op's input, so it becomes the unbiased
    op: that op needs its own (typed) function, or the model does not run
    without our library; inspect reports what fuse did."""
    nodes = [h.make_node("Add", ["x", "b"], ["xb"], name="a_bias")] + erf_gelu_nodes("xb", "y", "a_") + \
        [h.make_node("Add", ["x16", "bh"], ["xb16"], name="b_bias")] + \
        erf_gelu_nodes("xb16", "y16", "b_", "sqrt2h", "oneh", "halfh")
    bias = np.linspace(-1, 1, 8)
    g = h.make_graph(nodes, "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 8]),
                      h.make_tensor_value_info("x16", T.FLOAT16, [2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 8]),
                      h.make_tensor_value_info("y16", T.FLOAT16, [2, 8])],
                     consts() + consts(np.float16, "h") + [nh.from_array(bias.astype(np.float32), "b"),
                                                           nh.from_array(bias.astype(np.float16), "bh")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 14)], ir_version=7)
    res = gelu_onnx.fuse_with_report(m)
    assert [(f.op, f.bias, f.dtype) for f in res.fusions] == [
        ("ai.gelu_onnx.BiasGeluErf", True, "float32"), ("ai.gelu_onnx.GeluErf", False, "float32")]
    assert gelu_onnx.inspect(m).fusions == res.fusions
    out = res.model
    assert sorted(f.name for f in out.functions) == ["BiasGeluErf", "GeluErf"]
    onnx.checker.check_model(out, full_check=True)
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32) * 3,
             "x16": (rng.standard_normal((2, 8)) * 3).astype(np.float16)}
    ref, got = run(m, feeds), run(out, feeds)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1].astype(np.float32), ref[1].astype(np.float32), rtol=2e-3, atol=2e-3)


def test_fp64_gelu_is_reported_not_fused_for_kernel_targets():
    nodes = erf_gelu_nodes("x", "y", "")
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.DOUBLE, [3])],
                                  [h.make_tensor_value_info("y", T.DOUBLE, [3])], consts(np.float64)),
                     opset_imports=[h.make_opsetid("", 20)], ir_version=10)
    for target in ("custom", "ort"):
        res = gelu_onnx.fuse_with_report(m, target)
        assert not res.fusions and [n.code for n in res.near_misses] == ["unsupported-dtype"]
    res = gelu_onnx.fuse_with_report(m, "standard")
    assert [f.op for f in res.fusions] == ["Gelu"] and res.fusions[0].dtype == "float64"
    # ORT 1.31 has no float64 Erf kernel (neither graph runs there): use
    # onnx's reference evaluator on the fused graph and scipy as the reference.
    from onnx.reference import ReferenceEvaluator
    from scipy.special import erf

    x = np.linspace(-5, 5, 7)
    got = ReferenceEvaluator(res.model).run(None, {"x": x})[0]
    # (the evaluator computes erf at about float32 accuracy)
    np.testing.assert_allclose(got, 0.5 * x * (1 + erf(x / np.sqrt(2))), rtol=1e-6, atol=1e-7)


def legacy_model(dt, type_id, bias_values=None, bias_dtype=None, n_out=16):
    npdt = onnx.helper.tensor_dtype_to_np_dtype(dt)
    w = nh.from_array(np.random.default_rng(0).standard_normal((8, n_out)).astype(npdt), "W")
    attrs = {"type_id": type_id}
    if bias_values is not None:
        attrs["bias"] = nh.from_array(bias_values.astype(bias_dtype or npdt), "bias")
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             h.make_node("CustomGeluPluginDynamic", ["mm"], ["y"], name="legacy", **attrs)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", dt, ["b", 8])],
                     [h.make_tensor_value_info("y", dt, ["b", n_out])], [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
@pytest.mark.parametrize("dt,type_id,tol", [(T.FLOAT, 0, 1e-5), (T.FLOAT16, 1, 2e-3)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_tensorrt_legacy_gelu_plugin_nodes_are_migrated(target, dt, type_id, tol, with_bias):
    bias = np.random.default_rng(1).standard_normal((1, 1, 16)) if with_bias else None
    m = legacy_model(dt, type_id, bias)
    res = gelu_onnx.fuse_with_report(m, target)
    assert [f.form for f in res.fusions] == ["tanh"]
    assert all(n.op_type != "CustomGeluPluginDynamic" for n in res.model.graph.node)
    onnx.checker.check_model(res.model, full_check=True)
    npdt = onnx.helper.tensor_dtype_to_np_dtype(dt)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(npdt)
    # The removed plugin's formula, in float64 on the same (rounded) inputs.
    v = x.astype(np.float64) @ nh.to_array(m.graph.initializer[0]).astype(np.float64)
    if with_bias:
        v = v + bias.astype(npdt).reshape(-1).astype(np.float64)
    want = v * (0.5 + 0.5 * np.tanh(0.79788456 * v * (1 + 0.044715 * v * v)))
    got = run(res.model, {"x": x})[0].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_tensorrt_legacy_plugin_refusals_are_reported():
    bad_len = legacy_model(T.FLOAT, 0, np.ones((1, 1, 8)))          # 8 values, last dim 16
    bad_type = legacy_model(T.FLOAT16, 1, np.ones((1, 1, 16)), np.float32)  # read as fp16 by the plugin
    bad_id = legacy_model(T.FLOAT, 2)
    for m in (bad_len, bad_type, bad_id):
        res = gelu_onnx.fuse_with_report(m)
        assert not res.fusions and [n.code for n in res.near_misses] == ["legacy-plugin"]
        assert res.model.graph.node[1].op_type == "CustomGeluPluginDynamic"


def test_opset14_legacy_plugin_nodes_in_two_dtypes_share_a_float32_function():
    """Two legacy plugin nodes with a bias (float32, float16) before opset 15:
    their op's typed function body is float32, so the float16 node computes
    in float32 between Casts, its float16 bias added in front (else the model
    fails onnx's type inference)."""
    bias = np.random.default_rng(4).standard_normal(8)
    nodes = [h.make_node("CustomGeluPluginDynamic", ["x"], ["y"], name="l32", type_id=0,
                         bias=nh.from_array(bias.astype(np.float32), "bias")),
             h.make_node("CustomGeluPluginDynamic", ["x16"], ["y16"], name="l16", type_id=1,
                         bias=nh.from_array(bias.astype(np.float16), "bias"))]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 8]),
                                  h.make_tensor_value_info("x16", T.FLOAT16, [2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 8]),
                      h.make_tensor_value_info("y16", T.FLOAT16, [2, 8])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 14)], ir_version=7)
    res = gelu_onnx.fuse_with_report(m)
    assert [(f.op, f.bias, f.dtype) for f in res.fusions] == [
        ("ai.gelu_onnx.BiasGeluTanh", True, "float32"), ("ai.gelu_onnx.GeluTanh", False, "float32")]
    assert sorted(f.name for f in res.model.functions) == ["BiasGeluTanh", "GeluTanh"]
    onnx.checker.check_model(res.model, full_check=True)
    x = np.random.default_rng(5).standard_normal((2, 8)) * 3
    got = run(res.model, {"x": x.astype(np.float32), "x16": x.astype(np.float16)})
    # the removed plugin's formula in float64 on the same (rounded) inputs
    for out, v, tol in ((got[0], x.astype(np.float32).astype(np.float64)
                         + bias.astype(np.float32).astype(np.float64), 1e-5),
                        (got[1], x.astype(np.float16).astype(np.float64)
                         + bias.astype(np.float16).astype(np.float64), 2e-3)):
        want = v * (0.5 + 0.5 * np.tanh(0.79788456 * v * (1 + 0.044715 * v * v)))
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol)


def test_bias_behind_torchscript_identity_dedup_is_fused():
    """TorchScript dedups equal initializers as Identity(other); such a bias
    is still a constant 1-D vector over the last dim."""
    rng = np.random.default_rng(3)
    w = nh.from_array(rng.standard_normal((4, 8)).astype(np.float32), "W")
    b = nh.from_array(rng.standard_normal(8).astype(np.float32), "b0")
    nodes = [h.make_node("Identity", ["b0"], ["b1"], name="dedup"),
             h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             h.make_node("Add", ["b1", "mm"], ["hb"], name="badd")] + erf_gelu_nodes("hb", "y", "")
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2, 8])], consts() + [w, b]),
                     opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    res = gelu_onnx.fuse_with_report(m)
    assert [(f.op, f.bias) for f in res.fusions] == [("ai.gelu_onnx.BiasGeluErf", True)]
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(run(res.model, {"x": x})[0], run(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_bias_after_matmul_needs_no_shape_inference(monkeypatch):
    """h = MatMul(x, W) with a constant W: h's last dim is W's, so the bias is
    folded without running onnx's shape inference over the model (a deep
    export paid 0.25 s for it); the same fusion as when inference answers."""
    from gelu_onnx.fusion.match import bias

    rng = np.random.default_rng(5)
    w = nh.from_array(rng.standard_normal((4, 8)).astype(np.float32), "W")
    b = nh.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
             h.make_node("Add", ["mm", "b"], ["hb"], name="badd")] + erf_gelu_nodes("hb", "y", "")
    m = h.make_model(h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                                  [h.make_tensor_value_info("y", T.FLOAT, [2, 8])], consts() + [w, b]),
                     opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    calls = []
    real = bias._infer
    monkeypatch.setattr(bias, "_infer", lambda model: calls.append(1) or real(model))
    res = gelu_onnx.fuse_with_report(m)
    assert [(f.op, f.bias) for f in res.fusions] == [("ai.gelu_onnx.BiasGeluErf", True)]
    assert calls == []
    assert bias.last_dim(_index(m), "mm") == 8


def test_broadcast_is_numpys_and_keeps_unknown_dims():
    """index.shapes.broadcast (its suffix shortcut and its per-dim path)
    against numpy's broadcast_shapes on random known shapes; unknown (None)
    dims stay unknown; shapes are tuples (the cycle collector skips them)."""
    from gelu_onnx.fusion.index.shapes import broadcast

    rng = np.random.default_rng(7)
    for _ in range(400):
        shapes = [tuple(int(d) for d in rng.choice([1, 2, 3], size=rng.integers(0, 4)))
                  for _ in range(rng.integers(1, 4))]
        try:
            want = tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            want = None
        got = broadcast(shapes)
        assert got == want and (got is None or type(got) is tuple), shapes
    assert broadcast([(None, 16), (16,), ()]) == (None, 16)
    assert broadcast([(None, 3), (2, 1, 3)]) == (2, None, 3)
    assert broadcast([(None, 3), (2, 4)]) is None and broadcast([(2,), None]) is None


def _index(m):
    from gelu_onnx.fusion.index.graph import GraphIndex
    from gelu_onnx.onnxio.arraytable import scanned_table

    return GraphIndex(m.graph, scanned_table(m))


@pytest.mark.parametrize("name", ["bert_torchscript_op17", "gpt2_torchscript_op14", "clip_text_dynamo_op18",
                                  "vit_dynamo_op17", "bloom_torchscript_op18"])
@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_fused_models_are_clean_for_onnx_graphsurgeon(name, target):
    """An independent graph library finds nothing dead left behind."""
    gs = pytest.importorskip("onnx_graphsurgeon")
    out = gelu_onnx.fuse(str(ROOT / "models" / f"{name}.onnx"), target)
    g = gs.import_onnx(out)
    before = [n.name for n in g.nodes]
    g.cleanup(remove_unused_graph_inputs=False)
    assert [n.name for n in g.nodes] == before
    # and our node order is topological: every input defined before use
    defined = {i.name for i in out.graph.input} | {t.name for t in out.graph.initializer} | {""}
    for n in out.graph.node:
        assert set(n.input) <= defined, n.name
        defined.update(n.output)
    onnx.checker.check_model(gs.export_onnx(g), full_check=True)


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_a_narrowing_cast_pair_after_the_gelu_keeps_its_rounding(target):
    """A bf16 model computing each GELU in float32 between Casts (bf16 ->
    float32 -> GELU -> bfloat16 -> float32 -> the next layer): the Cast pair
    rounds the GELU's output to bf16. The fused region ends at the narrowing
    Cast (the op's output is cast to bf16), so the widening Cast stays and
    the next layer reads bf16 values, as in the original."""
    nodes = [h.make_node("Cast", ["x"], ["xb"], to=T.BFLOAT16, name="in"),
             h.make_node("Cast", ["xb"], ["x32"], to=T.FLOAT, name="up")]
    nodes += erf_gelu_nodes("x32", "g", "a_")
    nodes += [h.make_node("Cast", ["g"], ["g16"], to=T.BFLOAT16, name="down"),
              h.make_node("Cast", ["g16"], ["g32"], to=T.FLOAT, name="up2"),
              h.make_node("MatMul", ["g32", "w"], ["y"], name="next")]
    w = nh.from_array(np.random.default_rng(6).standard_normal((8, 3)).astype(np.float32), "w")
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4, 3]), h.make_tensor_value_info("g32", T.FLOAT, [4, 8])],
                     consts() + [w])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    res = gelu_onnx.fuse_with_report(m, target)
    assert [f.root for f in res.fusions] == ["g16"], [(f.root, f.nodes) for f in res.fusions]
    out = res.model
    onnx.checker.check_model(out, full_check=True)
    x = {"x": (np.random.default_rng(7).standard_normal((4, 8)) * 3).astype(np.float32)}
    (y0, g0), (y1, g1) = run(m, x), run(out, x)
    assert not np.any(g0.view(np.uint32) & 0xFFFF) and not np.any(g1.view(np.uint32) & 0xFFFF), "not bf16 values"
    np.testing.assert_allclose(g1, g0, rtol=2 ** -8, atol=1e-6)  # one bf16 step at most (the kernel's last bit)
    np.testing.assert_allclose(y1, y0, rtol=2e-2, atol=2e-2)
