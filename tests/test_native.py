"""GELUs already written as one op (ONNX Gelu-20, com.microsoft Gelu/BiasGelu/
FastGelu/QuickGelu, our own ops) move between targets, absorbing a bias Add
in front when it is a constant over the last dimension; never otherwise.

Every output: onnx.checker, ORT parity against the original graph (run by
ORT itself, the independent reference), with and without our library for
custom, and a second pass that changes nothing.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gelu_onnx
from gelu_onnx import contract as C
from gelu_onnx import ortlib
from gelu_onnx.fusion import targets
from gelu_onnx.fusion.targets import make_function

H = 8
MS = C.MS_DOMAIN
NP = {T.FLOAT: np.float32, T.FLOAT16: np.float16}
TOL = {T.FLOAT: 1e-5, T.FLOAT16: 2e-3}
TARGET_OPS = {
    "custom": {(C.DOMAIN, op) for op in C.OP_TYPES.values()},
    "standard": {("", "Gelu")},
    "ort": {(MS, "Gelu"), (MS, "BiasGelu"), (MS, "FastGelu"), (MS, "QuickGelu")},
}
GELU_OPS = set().union(*TARGET_OPS.values())


def gelu_node(kind: str, x: str, y: str, bias: str | None = None):
    """kind: gelu20 | gelu20tanh | ms_gelu | ms_biasgelu | ms_fastgelu | ms_quick | ours_<OpType>."""
    if kind == "gelu20":
        return h.make_node("Gelu", [x], [y])
    if kind == "gelu20tanh":
        return h.make_node("Gelu", [x], [y], approximate="tanh")
    if kind == "ms_gelu":
        return h.make_node("Gelu", [x], [y], domain=MS)
    if kind == "ms_biasgelu":
        return h.make_node("BiasGelu", [x, bias], [y], domain=MS)
    if kind == "ms_fastgelu":
        return h.make_node("FastGelu", [x, bias] if bias else [x], [y], domain=MS)
    if kind == "ms_quick":
        return h.make_node("QuickGelu", [x], [y], domain=MS, alpha=1.702)
    op = kind[len("ours_"):]
    attrs = {C.ATTR_ALPHA: 1.702} if "Sigmoid" in op else {}
    return h.make_node(op, [x, bias] if bias else [x], [y], domain=C.DOMAIN, **attrs)


def ffn(kind: str, dt=T.FLOAT, arrangement: str = "none", rank: int = 2, infer: bool = True) -> onnx.ModelProto:
    """x @ W [+ bias as `arrangement`] -> GELU `kind` -> y; infer=False: no
    value_info (as hand-built models and some exporters write them)."""
    rng = np.random.default_rng(7)
    shape = ["b", H] if rank == 2 else ["b", "s", H]
    inits = [nh.from_array(rng.standard_normal((H, H)).astype(NP[dt]), "W"),
             nh.from_array(rng.standard_normal((H,)).astype(NP[dt]), "B")]
    inputs = [h.make_tensor_value_info("x", dt, shape)]
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"])]
    outputs = [h.make_tensor_value_info("y", dt, shape)]
    src, bias = "mm", None
    if arrangement == "add":  # Add(mm, B)
        nodes.append(h.make_node("Add", ["mm", "B"], ["a"]))
        src = "a"
    elif arrangement == "add_swapped":  # Add(B, mm)
        nodes.append(h.make_node("Add", ["B", "mm"], ["a"]))
        src = "a"
    elif arrangement == "add_113":  # a [1, 1, H] bias on a rank-3 activation
        inits.append(nh.from_array(rng.standard_normal((1, 1, H)).astype(NP[dt]), "B3"))
        nodes.append(h.make_node("Add", ["mm", "B3"], ["a"]))
        src = "a"
    elif arrangement == "reshape":  # MatMul -> Reshape -> Add -> GELU
        inits.append(nh.from_array(np.array([-1, H], np.int64), "shp"))
        nodes += [h.make_node("Reshape", ["mm", "shp"], ["r"]), h.make_node("Add", ["r", "B"], ["a"])]
        src = "a"
    elif arrangement == "dq_input":  # int8 input -> DequantizeLinear -> Add(B) -> GELU (no MatMul)
        inputs[0] = h.make_tensor_value_info("x", T.INT8, shape)
        inits += [nh.from_array(np.array(0.05, NP[dt]), "sc"), nh.from_array(np.int8(2), "zp")]
        nodes = [h.make_node("DequantizeLinear", ["x", "sc", "zp"], ["dq"]), h.make_node("Add", ["dq", "B"], ["a"])]
        src = "a"
    elif arrangement == "bias_dq":  # the bias is DequantizeLinear(int8 constant), as QDQ models write it
        inits += [nh.from_array(rng.integers(-90, 90, H).astype(np.int8), "Bq"), nh.from_array(np.array(0.02, NP[dt]), "bsc")]
        nodes += [h.make_node("DequantizeLinear", ["Bq", "bsc"], ["Bd"]), h.make_node("Add", ["mm", "Bd"], ["a"])]
        src = "a"
    elif arrangement in ("bias_reshape", "bias_unsqueeze"):  # a 1-D bias reshaped to [1, H]
        if arrangement == "bias_reshape":
            inits.append(nh.from_array(np.array([1, H], np.int64), "bshp"))
            nodes.append(h.make_node("Reshape", ["B", "bshp"], ["Br"]))
        else:
            inits.append(nh.from_array(np.array([0], np.int64), "bax"))
            nodes.append(h.make_node("Unsqueeze", ["B", "bax"], ["Br"]))
        nodes.append(h.make_node("Add", ["Br", "mm"], ["a"]))
        src = "a"
    elif arrangement == "len1":  # a length-1 bias broadcasts over H: not the op's bias
        inits.append(nh.from_array(np.array([0.5], NP[dt]), "B1"))
        nodes.append(h.make_node("Add", ["mm", "B1"], ["a"]))
        src = "a"
    elif arrangement == "inside":  # BiasGelu / FastGelu(X, B) / our Bias ops
        bias = "B"
    elif arrangement == "input_bias":  # the bias is a graph input: not a constant, never absorbed
        inputs.append(h.make_tensor_value_info("bias_in", dt, [H]))
        nodes.append(h.make_node("Add", ["mm", "bias_in"], ["a"]))
        src = "a"
    elif arrangement == "shared_add":  # the Add's output is also read elsewhere
        nodes.append(h.make_node("Add", ["mm", "B"], ["a"]))
        outputs.append(h.make_tensor_value_info("a", dt, shape))
        src = "a"
    elif arrangement == "full_bias":  # [N, H] bias: not over the last dim only
        inits.append(nh.from_array(rng.standard_normal((4, H)).astype(NP[dt]), "BN"))
        nodes.append(h.make_node("Add", ["mm", "BN"], ["a"]))
        src = "a"
    nodes.append(gelu_node(kind, src, "y", bias))
    g = h.make_graph(nodes, "ffn", inputs, outputs, inits)
    opsets = [h.make_opsetid("", 20), h.make_opsetid(MS, 1), h.make_opsetid(C.DOMAIN, C.OPSET_VERSION)]
    m = h.make_model(g, opset_imports=opsets, ir_version=10)
    if kind.startswith("ours_"):  # a model fused earlier for custom carries the op's function
        m.functions.append(make_function(kind[len("ours_"):], 20, None))
    return onnx.shape_inference.infer_shapes(m) if infer else m


def feeds(m: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(11)
    out = {}
    for i in m.graph.input:
        dims = [d.dim_value or 4 for d in i.type.tensor_type.shape.dim]
        et = i.type.tensor_type.elem_type
        out[i.name] = (rng.integers(-100, 100, dims).astype(np.int8) if et == T.INT8
                       else (rng.standard_normal(dims) * 3).astype(NP[et]))
    return out


def run(m: onnx.ModelProto, library: bool) -> list[np.ndarray]:
    so = gelu_onnx.session_options() if library else ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds(m))


def ops(m: onnx.ModelProto) -> list[tuple[str, str]]:
    return [(n.domain, n.op_type) for n in m.graph.node]


def check(orig: onnx.ModelProto, target: str, dt=T.FLOAT):
    res = gelu_onnx.fuse_with_report(orig, target)
    onnx.checker.check_model(res.model, full_check=True)
    ref = run(orig, False)
    libs = [False] + ([True] if target == "custom" and ortlib.available() else [])
    for lib in libs:
        for a, b in zip(run(res.model, lib), ref):
            err = np.abs(a.astype(np.float64) - b.astype(np.float64))
            assert np.all(err <= TOL[dt] * (1 + np.abs(b.astype(np.float64)))), (target, lib, float(err.max()))
    again = gelu_onnx.fuse_with_report(res.model, target)
    assert not again.fusions and again.model.SerializeToString() == res.model.SerializeToString()
    return res


KINDS = ["gelu20", "gelu20tanh", "ms_gelu", "ms_fastgelu", "ms_quick", "ours_GeluErf", "ours_GeluTanh",
         "ours_GeluSigmoid"]


@pytest.mark.parametrize("dt", [T.FLOAT, T.FLOAT16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("arrangement", ["none", "add", "add_swapped", "add_113", "reshape"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_single_op_gelu_becomes_the_targets_op(target, kind, arrangement, dt):
    m = ffn(kind, dt, arrangement, rank=3 if arrangement == "add_113" else 2)
    res = check(m, target, dt)
    gelus = [o for o in ops(res.model) if o in GELU_OPS]
    assert len(gelus) == 1
    if kind.endswith("quick") or kind.endswith("Sigmoid"):
        if target == "standard":  # no standard op: left as it was, reported
            assert gelus == [o for o in ops(m) if o in GELU_OPS]
            assert [n.code for n in res.near_misses] == ["no-standard-op"]
            return
    assert gelus[0] in TARGET_OPS[target]
    form = "sigmoid" if kind.endswith(("quick", "Sigmoid")) else "tanh" if "anh" in kind else "erf"
    absorbable = arrangement != "none" and targets.get(target).takes_bias(form)
    assert ("", "Add") not in ops(res.model) if absorbable else True
    if absorbable:  # the bias went into the op
        assert res.fusions and res.fusions[0].bias
    if arrangement != "none" and not absorbable:
        assert ("", "Add") in ops(res.model)  # Gelu-20 / QuickGelu take no bias
    assert len(res.fusions) + len(res.already) == 1


@pytest.mark.parametrize("kind", ["ms_biasgelu", "ms_fastgelu", "ours_BiasGeluErf", "ours_BiasGeluTanh",
                                  "ours_BiasGeluSigmoid"])
@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_bias_inside_the_op_is_kept(target, kind):
    m = ffn(kind, T.FLOAT, "inside")
    res = check(m, target)
    gelus = [o for o in ops(res.model) if o in GELU_OPS]
    assert len(gelus) == 1
    if target == "standard" and "Sigmoid" in kind:
        return
    assert gelus[0] in TARGET_OPS[target]
    if target == "standard":  # the bias becomes an Add in front of Gelu-20
        assert ops(res.model).count(("", "Add")) == 1


@pytest.mark.parametrize("arrangement", ["input_bias", "shared_add", "full_bias"])
@pytest.mark.parametrize("target", ["custom", "ort"])
def test_bias_that_is_not_absorbable_stays(target, arrangement):
    m = ffn("gelu20", T.FLOAT, arrangement)
    res = check(m, target)
    assert ("", "Add") in ops(res.model)
    assert len(res.fusions) == 1 and not res.fusions[0].bias


@pytest.mark.parametrize("arrangement", ["add", "add_swapped", "reshape", "dq_input", "bias_dq", "bias_reshape",
                                         "bias_unsqueeze", "len1", "input_bias", "shared_add", "full_bias"])
@pytest.mark.parametrize("kind", ["gelu20", "gelu20tanh", "ms_fastgelu"])
@pytest.mark.parametrize("target", ["custom", "ort"])
def test_bias_without_declared_shapes(target, kind, arrangement):
    """No value_info (hand-built models, jax2onnx): the activation's last dim
    comes from shape inference, a bias may be DequantizeLinear(int8 constant)
    or a Reshape/Unsqueeze of a 1-D constant; found by the held-out corpus,
    where a Reshape or a DequantizeLinear in front left the bias an Add."""
    m = ffn(kind, T.FLOAT, arrangement, infer=False)
    assert not m.graph.value_info
    res = check(m, target)
    absorbable = arrangement not in ("len1", "input_bias", "shared_add", "full_bias")
    assert len(res.fusions) + len(res.already) == 1
    assert bool(res.fusions and res.fusions[0].bias) == absorbable, res.fusions
    assert (("", "Add") in ops(res.model)) != absorbable


def test_native_gelu_inside_if_branches():
    then_g = h.make_graph([h.make_node("Gelu", ["x"], ["t"])], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, ["b", H])])
    else_g = h.make_graph([h.make_node("BiasGelu", ["x", "B"], ["e"], domain=MS)], "else", [],
                          [h.make_tensor_value_info("e", T.FLOAT, ["b", H])])
    g = h.make_graph(
        [h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
        [h.make_tensor_value_info("x", T.FLOAT, ["b", H]), h.make_tensor_value_info("c", T.BOOL, [])],
        [h.make_tensor_value_info("y", T.FLOAT, ["b", H])],
        [nh.from_array(np.linspace(-1, 1, H).astype(np.float32), "B")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20), h.make_opsetid(MS, 1)], ir_version=10)
    for target in ("custom", "ort"):
        res = gelu_onnx.fuse_with_report(m, target)
        onnx.checker.check_model(res.model, full_check=True)
        branches = {a.name: [(n.domain, n.op_type) for n in a.g.node] for a in res.model.graph.node[0].attribute}
        assert all(any(o in TARGET_OPS[target] for o in v) for v in branches.values()), branches
        for cond in (True, False):
            x = np.linspace(-6, 6, 4 * H, dtype=np.float32).reshape(4, H)
            f = {"x": x, "c": np.array(cond)}
            a = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
            b = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
            np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-5)


def test_moving_between_targets_round_trip():
    """dynamo-style Gelu-20 with a bias Add -> custom -> ort -> standard -> custom:
    each step in the target's ops, our functions gone once nothing calls them."""
    m = ffn("gelu20", T.FLOAT, "add")
    ref = run(m, False)
    for target in ("custom", "ort", "standard", "custom"):
        m = gelu_onnx.fuse(m, target)
        onnx.checker.check_model(m, full_check=True)
        assert any(o in TARGET_OPS[target] for o in ops(m))
        assert bool(m.functions) == (target == "custom")
        np.testing.assert_allclose(run(m, False)[0], ref[0], rtol=1e-5, atol=1e-5)


def test_inspect_lists_single_op_gelus():
    m = ffn("ms_biasgelu", T.FLOAT, "inside")
    rep = gelu_onnx.inspect(m, "custom")
    assert [(f.form, f.bias, f.op) for f in rep.fusions] == [("erf", True, f"{C.DOMAIN}.BiasGeluErf")]
    rep = gelu_onnx.inspect(m, "ort")
    assert not rep.fusions and [(f.form, f.bias, f.op) for f in rep.already] == [("erf", True, f"{MS}.BiasGelu")]


def test_unreadable_native_attribute_is_a_near_miss():
    m = ffn("gelu20", T.FLOAT)
    m.graph.node[-1].attribute.append(h.make_attribute("approximate", "cubic"))
    res = gelu_onnx.fuse_with_report(m, "custom")
    assert not res.fusions and [n.code for n in res.near_misses] == ["native-attribute"]


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_native_gelu_after_an_op_that_declares_no_type(target):
    """Conv -> Gelu with no value_info (the TorchScript exporter with
    export_modules_as_functions writes Whisper's conv stem so): the input's
    type comes from shape inference. Found by the held-out corpus, where both
    conv-stem GELUs were left as near-misses ("type not declared")."""
    rng = np.random.default_rng(3)
    w = nh.from_array(rng.standard_normal((4, 2, 3)).astype(np.float32), "W")
    w2 = nh.from_array(rng.standard_normal((4, 4, 3)).astype(np.float32), "W2")
    g = h.make_graph([h.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1]), h.make_node("Gelu", ["c"], ["g"]),
                      h.make_node("Conv", ["g", "W2"], ["y"], pads=[1, 1])], "conv",
                     [h.make_tensor_value_info("x", T.FLOAT, ["b", 2, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["b", 4, 8])], [w, w2])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)], ir_version=10)
    res = check(m, target)
    assert not res.near_misses
    assert len(res.fusions) + len(res.already) == 1
    assert [o for o in ops(res.model) if o in GELU_OPS][0] in TARGET_OPS[target]


def _bad(op: str, domain: str, n_in: int, n_out: int = 1, **attrs) -> onnx.ModelProto:
    """x @ W + B -> <op> with n_in inputs (x, B, B) and n_out outputs."""
    rng = np.random.default_rng(5)
    inits = [nh.from_array(rng.standard_normal((H, H)).astype(np.float32), "W"),
             nh.from_array((rng.standard_normal(H) + 0.5).astype(np.float32), "B")]
    outs = ["y", "y2"][:n_out]
    nodes = [h.make_node("MatMul", ["x", "W"], ["mm"]), h.make_node("Add", ["mm", "B"], ["a"]),
             h.make_node(op, ["a", "B", "B"][:n_in], outs, domain=domain, name="the_gelu", **attrs)]
    g = h.make_graph(nodes, "bad", [h.make_tensor_value_info("x", T.FLOAT, ["b", H])],
                     [h.make_tensor_value_info(o, T.FLOAT, ["b", H]) for o in outs], inits)
    opsets = [h.make_opsetid("", 20), h.make_opsetid(MS, 1), h.make_opsetid(C.DOMAIN, C.OPSET_VERSION)]
    m = h.make_model(g, opset_imports=opsets, ir_version=10)
    if domain == C.DOMAIN:
        m.functions.append(make_function(op, 20, None))
    return m


def _ort_refuses(m: onnx.ModelProto, library: bool = False) -> bool:
    so = gelu_onnx.session_options() if library else ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal
        return True
    return False


INVALID_NATIVE = {
    "ms_gelu_2_inputs": ("Gelu", MS, 2, 1, {}),
    "ms_gelu_3_inputs": ("Gelu", MS, 3, 1, {}),
    "ms_gelu_approximate_attr": ("Gelu", MS, 1, 1, {"approximate": "tanh"}),
    "ms_gelu_2_outputs": ("Gelu", MS, 1, 2, {}),
    "biasgelu_1_input": ("BiasGelu", MS, 1, 1, {}),
    "biasgelu_3_inputs": ("BiasGelu", MS, 3, 1, {}),
    "fastgelu_3_inputs": ("FastGelu", MS, 3, 1, {}),
    "fastgelu_alpha_attr": ("FastGelu", MS, 2, 1, {"alpha": 1.0}),
    "quickgelu_2_inputs": ("QuickGelu", MS, 2, 1, {}),
    "quickgelu_int_alpha": ("QuickGelu", MS, 1, 1, {"alpha": 2}),
    "quickgelu_unknown_attr": ("QuickGelu", MS, 1, 1, {"beta": 1.0}),
    "ours_geluerf_2_inputs": ("GeluErf", C.DOMAIN, 2, 1, {}),
    "ours_biasgelu_3_inputs": ("BiasGeluErf", C.DOMAIN, 3, 1, {}),
}


@pytest.mark.parametrize("case", sorted(INVALID_NATIVE))
def test_a_gelu_op_onnxruntime_refuses_is_never_made_valid(case):
    """ONNX Runtime's own verdict first: it refuses the input. Every target
    then leaves the node as written (a near-miss naming it), so the output
    is refused just the same: the extra input or attribute is never dropped
    into a model that runs (docs/design.md, single-op GELUs)."""
    op, dom, n_in, n_out, attrs = INVALID_NATIVE[case]
    m = _bad(op, dom, n_in, n_out, **attrs)
    assert _ort_refuses(m), "ONNX Runtime loads it: not an invalid case"
    if dom == C.DOMAIN and ortlib.available():
        assert _ort_refuses(m, library=True)
    node = m.graph.node[-1].SerializeToString()
    for target in ("custom", "standard", "ort"):
        res = gelu_onnx.fuse_with_report(m, target)
        assert not res.fusions, (target, [f.as_dict() for f in res.fusions])
        code = "native-attribute" if case == "quickgelu_int_alpha" else "native-arity"  # an alpha not read
        assert [(n.code.value, n.anchor) for n in res.near_misses] == [(code, "the_gelu")], target
        assert node in [n.SerializeToString() for n in res.model.graph.node], target
        assert _ort_refuses(res.model), target


@pytest.mark.parametrize("op,n_in,attrs", [("Gelu", 1, {}), ("BiasGelu", 2, {}), ("FastGelu", 1, {}),
                                           ("FastGelu", 2, {}), ("QuickGelu", 1, {"alpha": 1.702}),
                                           ("QuickGelu", 1, {})])
def test_each_valid_contrib_arity_is_fused(op, n_in, attrs):
    """The other side of the schema check: what ONNX Runtime loads is fused."""
    m = _bad(op, MS, n_in, **attrs)
    assert not _ort_refuses(m)
    res = gelu_onnx.fuse_with_report(m, "custom")
    assert len(res.fusions) == 1 and not res.near_misses
    assert not _ort_refuses(res.model)


def test_every_single_op_name_holds_gelu():
    """fusion/plan.py imports match/single_op only for a graph with an op
    type holding "Gelu": a spelling without it would never be looked for."""
    from gelu_onnx.fusion.match import single_op

    assert all("Gelu" in op for op in (*single_op._SINGLE_OP_NAMES, single_op.OP_TYPE))
