"""A target added from outside the package (docs/design.md, "Adding a
target"): two test-only targets, defined here and put in the one table of
targets with ``targets.register``, whose Emissions are several nodes and an
initializer. fuse, inspect, the report, the CLI, fuse_file with the input's
check model, model-local functions, typed function bodies (opset < 15) and
ONNX Runtime parity against the original graph all work without any other
change to the package."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gelu_onnx
from gelu_onnx import cli, onnxio
from gelu_onnx import contract as C
from gelu_onnx.errors import InputError
from gelu_onnx.fusion import targets
from gelu_onnx.fusion.report import Code
from helpers.corpus_checks import parity

W = 8  # hidden size


class Scaled(targets.Custom):
    """y = Mul(<the custom op>(x[, bias]), one), ``one`` an initializer."""

    name = "scaled"
    summary = "the custom op, times an initializer one (a test target)"

    def emission(self, form, bias, alpha):
        (op,) = super().emission(form, bias, alpha).nodes
        return targets.Emission((replace(op, output="g"), targets.Node("Mul", ("g", "one"))), {"one": 1.0})


class Quick(targets.Target):
    """QuickGELU written out in standard ops, alpha an initializer: x*Sigmoid(alpha*x)."""

    name = "quick"
    summary = "QuickGELU as Mul, Sigmoid, Mul (a test target)"

    def unsupported(self, form, elem_type):
        if form != "sigmoid":
            return targets.Unsupported(Code.NO_STANDARD_OP, "the quick target writes QuickGELU only")
        return super().unsupported(form, elem_type)

    def takes_bias(self, form):
        return False

    def emission(self, form, bias, alpha):
        n = targets.Node
        return targets.Emission((n("Mul", ("x", "alpha"), "ax"), n("Sigmoid", ("ax",), "s"), n("Mul", ("x", "s"))),
                                {"alpha": alpha})


@pytest.fixture
def registered():
    added = [Scaled(), Quick()]
    for t in added:
        targets.register(t)
    yield
    for t in added:
        targets.unregister(t.name)


def _gelu(form: str, x: str, y: str, k: int, sfx: str = "") -> list[onnx.NodeProto]:
    """One GELU spelled out, reading the shared constants named with ``sfx``."""
    def n(op, ins, out):
        return h.make_node(op, ins, [out], name=f"{out}_{op}")

    r2, one, half, kk, c, a = (f"{v}{sfx}" for v in ("r2", "one", "half", "k", "c", "a"))
    t = [f"t{k}_{i}" for i in range(8)]
    if form == "erf":  # HF gelu: x*(1+erf(x/sqrt2))*0.5
        return [n("Div", [x, r2], t[0]), n("Erf", [t[0]], t[1]), n("Add", [t[1], one], t[2]),
                n("Mul", [x, t[2]], t[3]), n("Mul", [t[3], half], y)]
    if form == "tanh":  # gelu_new, x*x*x
        return [n("Mul", [x, x], t[0]), n("Mul", [t[0], x], t[1]), n("Mul", [t[1], kk], t[2]),
                n("Add", [x, t[2]], t[3]), n("Mul", [t[3], c], t[4]), n("Tanh", [t[4]], t[5]),
                n("Add", [t[5], one], t[6]), n("Mul", [x, t[6]], t[7]), n("Mul", [t[7], half], y)]
    return [n("Mul", [x, a], t[0]), n("Sigmoid", [t[0]], t[1]), n("Mul", [x, t[1]], y)]  # QuickGELU


def _consts(dtype=T.FLOAT, sfx: str = "") -> list[onnx.TensorProto]:
    vals = {"r2": math.sqrt(2), "one": 1.0, "half": 0.5, "k": 0.044715, "c": math.sqrt(2 / math.pi), "a": 1.702}
    return [nh.from_array(np.array(v, C.np_dtype(dtype)), k + sfx) for k, v in vals.items()]


def _layers(forms, dtypes, opset=17, wrap=True) -> onnx.ModelProto:
    """x -> per form: MatMul -> Add(random bias) -> GELU, in that layer's
    dtype (Cast between layers of two dtypes); ``wrap``: an fp16 layer's GELU
    computes in float32 between Casts, as mixed-precision exports do."""
    rng = np.random.default_rng(7)
    dtypes = dtypes if isinstance(dtypes, list) else [dtypes] * len(forms)
    nodes, inits, x = [], _consts(), "x"
    if not wrap and T.FLOAT16 in dtypes:
        inits += _consts(T.FLOAT16, "_16")
    for i, (form, dt) in enumerate(zip(forms, dtypes)):
        npt = C.np_dtype(dt)
        if i and dt != dtypes[i - 1]:
            nodes.append(h.make_node("Cast", [x], [f"x{i}"], name=f"to{i}", to=dt))
            x = f"x{i}"
        inits += [nh.from_array((rng.standard_normal((W, W)) * 0.5).astype(npt), f"W{i}"),
                  nh.from_array((rng.standard_normal(W) * 0.3 + 0.1).astype(npt), f"b{i}")]
        nodes += [h.make_node("MatMul", [x, f"W{i}"], [f"m{i}"], name=f"mm{i}"),
                  h.make_node("Add", [f"m{i}", f"b{i}"], [f"h{i}"], name=f"bias{i}")]
        src, y, sfx = f"h{i}", f"y{i}", ""
        if dt != T.FLOAT and wrap:
            nodes.append(h.make_node("Cast", [src], [f"hf{i}"], name=f"in{i}", to=T.FLOAT))
            src, y = f"hf{i}", f"g{i}"
        elif dt != T.FLOAT:
            sfx = "_16"
        nodes += _gelu(form, src, y, i, sfx)
        if dt != T.FLOAT and wrap:
            nodes.append(h.make_node("Cast", [y], [f"y{i}"], name=f"out{i}", to=dt))
        x = f"y{i}"
    g = h.make_graph(nodes, "layers", [h.make_tensor_value_info("x", dtypes[0], [2, W])],
                     [h.make_tensor_value_info(x, dtypes[-1], [2, W])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=8)


def test_register_adds_a_target_everywhere_and_unregister_removes_it():
    with pytest.raises(InputError, match="unknown target 'scaled'"):
        targets.get("scaled")
    own, t = targets.TARGETS, Scaled()
    targets.register(t)
    try:
        assert targets.get("scaled") is t and targets.TARGETS[-1] == "scaled"
        assert cli.build_parser().parse_args(["fuse", "a.onnx", "-o", "b.onnx", "--target", "scaled"]).target == "scaled"
        with pytest.raises(ValueError, match="exists"):
            targets.register(Scaled())
    finally:
        targets.unregister("scaled")
    assert targets.TARGETS == own
    with pytest.raises(ValueError, match="own"):
        targets.unregister("custom")


def test_an_emission_refuses_a_name_it_does_not_define():
    with pytest.raises(ValueError, match="not defined"):
        targets.Emission((targets.Node("Mul", ("x", "two")),))
    with pytest.raises(ValueError, match="twice"):
        targets.Emission((targets.Node("Neg", ("x",), "y"), targets.Node("Neg", ("y",), "y")))


@pytest.mark.parametrize("dtype", [T.FLOAT, T.FLOAT16], ids=["fp32", "fp16"])
def test_scaled_fuse_file_inspect_report_cli_and_parity(tmp_path, capsys, registered, dtype):
    forms = ["erf", "tanh", "sigmoid"] * 4
    model = _layers(forms, dtype)
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    # the input is checked on its check model (repeats stood in for), as for every target
    check = gelu_onnx.fuse_with_report(onnxio.load_model(src), "scaled", inplace=True, input_check=True).input_check
    assert check is not None
    check = onnx.ModelProto.FromString(check)
    kinds = [n.op_type for n in check.graph.node]
    assert (kinds.count("Erf"), kinds.count("Tanh"), kinds.count("Sigmoid")) == (1, 1, 1)  # of 4 each
    onnx.checker.check_model(check, full_check=True)

    done = gelu_onnx.fuse_file(src, tmp_path / "out.onnx", "scaled")
    fused = onnx.load(tmp_path / "out.onnx")
    bias = dtype == T.FLOAT  # a bias of another type than the compute type stays an Add
    ops = {f: C.OP_TYPES[(f, bias)] for f in ("erf", "tanh", "sigmoid")}
    assert [f.op for f in done.result.fusions] == [f"{C.DOMAIN}.{ops[f]}+Mul" for f in forms]
    assert [f.bias for f in done.result.fusions] == [bias] * len(forms)
    assert gelu_onnx.inspect(model, "scaled").as_dict()["fusions"] == done.result.as_dict()["fusions"]
    # per GELU: [Cast] -> the op -> Mul(., one) -> [Cast]; one initializer each, of the compute type
    kinds = [n.op_type for n in fused.graph.node]
    assert kinds.count("Mul") == len(forms) and not {"Erf", "Tanh", "Sigmoid"} & set(kinds)
    assert kinds.count("Add") == (0 if bias else len(forms))
    ones = [t for t in fused.graph.initializer if t.name.endswith("_one")]
    assert len(ones) == len(forms) and {(t.data_type, float(nh.to_array(t))) for t in ones} == {(T.FLOAT, 1.0)}
    assert sorted(f.name for f in fused.functions) == sorted(set(ops.values()))
    onnx.checker.check_model(fused, full_check=True)
    assert parity(model, fused, 11, with_library=True) == []  # without and with our library

    again = tmp_path / "cli.onnx"
    assert cli.main(["fuse", str(src), "-o", str(again), "--target", "scaled"]) == 0
    assert again.read_bytes() == (tmp_path / "out.onnx").read_bytes()
    capsys.readouterr()
    assert cli.main(["inspect", str(src), "--target", "scaled"]) == 0
    assert f"{C.DOMAIN}.{ops['tanh']}+Mul" in capsys.readouterr().out


def test_quick_writes_three_standard_nodes_and_reports_the_rest(registered):
    forms = ["sigmoid", "erf", "sigmoid", "tanh"]
    model = _layers(forms, T.FLOAT16)
    res = gelu_onnx.fuse_with_report(model, "quick")
    assert [f.op for f in res.fusions] == ["Mul+Sigmoid+Mul"] * 2
    assert [(m.code, m.form) for m in res.near_misses] == [(Code.NO_STANDARD_OP, "erf"), (Code.NO_STANDARD_OP, "tanh")]
    out = res.model
    alphas = [t for t in out.graph.initializer if t.name.endswith("_alpha")]
    assert [float(nh.to_array(t)) for t in alphas] == [np.float32(1.702)] * 2
    assert all(t.data_type == T.FLOAT for t in alphas)
    onnx.checker.check_model(out, full_check=True)
    assert parity(model, out, 12, with_library=False) == []


def test_scaled_in_a_model_local_function_body(registered):
    """The body is fused in place: a function has no initializers, so the
    emission's constant becomes a Constant node of the body."""
    consts = [h.make_node("Constant", [], [t.name], value=t) for t in _consts() if t.name in ("r2", "one", "half")]
    body = h.make_function("local", "Act", ["X"], ["Y"], consts + _gelu("erf", "X", "Y", 0),
                           [h.make_opsetid("", 17)])
    rng = np.random.default_rng(3)
    g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Act", ["m"], ["y"], domain="local")],
                     "g", [h.make_tensor_value_info("x", T.FLOAT, [2, W])], [h.make_tensor_value_info("y", T.FLOAT, [2, W])],
                     [nh.from_array(rng.standard_normal((W, W)).astype(np.float32), "W")])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)], functions=[body])
    res = gelu_onnx.fuse_with_report(model, "scaled")
    assert [f.op for f in res.fusions] == [f"{C.DOMAIN}.GeluErf+Mul"]
    act = next(f for f in res.model.functions if f.name == "Act")
    assert [n.op_type for n in act.node] == ["Constant", "GeluErf", "Mul"]  # the region's constants dropped
    assert act.node[2].input[1] == act.node[0].output[0] == "Y_one"
    onnx.checker.check_model(res.model, full_check=True)
    assert parity(model, res.model, 13, with_library=True) == []


def test_scaled_at_opset14_types_its_function_bodies(registered):
    """No CastLike before opset 15: an op type in two dtypes gets a float32
    body, its fp16 site computes in float32 and, its bias being fp16, becomes
    the unbiased op (a body of its own); the model runs without our library."""
    model = _layers(["erf", "erf"], [T.FLOAT, T.FLOAT16], opset=14, wrap=False)
    res = gelu_onnx.fuse_with_report(model, "scaled")
    assert [(f.op, f.dtype) for f in res.fusions] == [(f"{C.DOMAIN}.BiasGeluErf+Mul", "float32"),
                                                       (f"{C.DOMAIN}.GeluErf+Mul", "float32")]
    assert sorted(f.name for f in res.model.functions) == ["BiasGeluErf", "GeluErf"]
    assert all(n.op_type != "CastLike" for f in res.model.functions for n in f.node)
    onnx.checker.check_model(res.model, full_check=True)
    assert parity(model, res.model, 14, with_library=False) == []
