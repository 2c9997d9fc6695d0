"""Fusion cases a fuzz run found (minimised), and chains with one member
made different in each way a region can differ from its neighbours: the
report, the output bytes (the ModelProto API and a loaded file agree),
onnx.checker and ONNX Runtime parity on the output."""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import gelu_onnx
from gelu_onnx import ortlib
from gelu_onnx.errors import InputError
from gelu_onnx.fusion.plan import plan
from gelu_onnx.fusion.targets import TARGETS
from gelu_onnx.onnxio import load_model_proto
from gelu_onnx.onnxio.arraytable import ArrayTable
from helpers import graph_build as GB


def _report(res) -> dict:
    d = res.as_dict()
    return {**{k: d[k] for k in ("fusions", "near_misses", "notes", "already_target_ops")},
            "counts": (d["fused"], list(d["by_form"].items()))}


def _fused(model: onnx.ModelProto, target: str):
    """(report, output bytes), through the API and through a loaded file (the scanner's arrays): the same."""
    api = gelu_onnx.fuse_with_report(model, target)
    loaded = load_model_proto(model.SerializeToString())
    assert isinstance(loaded.table, ArrayTable), "the scanner did not read the file"
    got = gelu_onnx.fuse_with_report(loaded, target, inplace=True)
    assert _report(got) == _report(api) and got.model.SerializeToString() == api.model.SerializeToString()
    assert _report(gelu_onnx.inspect(model, target))["fusions"] == _report(api)["fusions"]
    return _report(api), api.model.SerializeToString()


def _checks(model) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
        return True
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return False


def _fuse_file(model, target, tmp_path):
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(model.SerializeToString())
    return gelu_onnx.fuse_file(src, dst, target)


def _ort_parity(data: bytes, out: bytes, depth: int) -> None:
    """The fused model computes what the input does in ONNX Runtime (fp32;
    a few ulps per chained GELU, docs/kernels.md)."""
    rng = np.random.default_rng(0)
    plain = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    feeds = {i.name: (rng.standard_normal([d if isinstance(d, int) else 3 for d in i.shape]) * 2).astype(np.float32)
             for i in plain.get_inputs()}
    want = plain.run(None, feeds)
    got = ort.InferenceSession(out, ortlib.session_options(), providers=["CPUExecutionProvider"]).run(None, feeds)
    tol = 1e-5 * max(1.0, depth / 4)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)


def _chain5(n: int) -> onnx.ModelProto:
    """x -> [Add(bias) -> GELU] * n in five spellings cycling (so every spelling repeats)."""
    b = GB.Builder()
    h = b.input("x", GB.F32, ["batch", GB.H])
    fams = ("ts_erf", "dynamo_tanh", "quick_gelu", "megatron", "jax_erf")
    for i in range(n):
        h = b.node("Add", [h, b.weight("bias", [GB.H], scale=0.1)])
        h = GB.gelu(b, fams[i % len(fams)], h, style="init")
    b.output(h, GB.F32, ["batch", GB.H])
    return b.model()


def chain(n: int, width: int = 16) -> onnx.ModelProto:
    """x -> [Add(bias_i) -> GELU_i] * n, five spellings cycling (benchmarks/
    make_models.py's synth models), shared scalar constants, named nodes."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (
        ("sqrt2", math.sqrt(2)), ("inv_sqrt2", 1 / math.sqrt(2)), ("one", 1.0), ("half", 0.5), ("three", 3.0),
        ("k", 0.044715), ("s2pi", math.sqrt(2 / math.pi)), ("alpha", 1.702))]
    nodes, k = [], [0]

    def node(op, ins):
        k[0] += 1
        nodes.append(helper.make_node(op, ins, [f"t{k[0]}"], name=f"n{k[0]}"))
        return f"t{k[0]}"

    rng = np.random.default_rng(0)
    x = "x"
    for i in range(n):
        b = numpy_helper.from_array((rng.standard_normal(width) * 0.1).astype(np.float32), f"bias{i}")
        consts.append(b)
        x = node("Add", [x, b.name])
        kind = i % 5
        if kind == 0:
            x = node("Mul", [node("Mul", [x, node("Add", [node("Erf", [node("Div", [x, "sqrt2"])]), "one"])]), "half"])
        elif kind == 1:
            e = node("Erf", [node("Mul", [x, "inv_sqrt2"])])
            x = node("Mul", [node("Mul", ["half", x]), node("Add", ["one", e])])
        elif kind == 2:
            inner = node("Add", [x, node("Mul", ["k", node("Pow", [x, "three"])])])
            t = node("Tanh", [node("Mul", ["s2pi", inner])])
            x = node("Mul", [node("Mul", ["half", x]), node("Add", ["one", t])])
        elif kind == 3:
            inner = node("Mul", [x, node("Add", ["one", node("Mul", ["k", node("Mul", [x, x])])])])
            t = node("Tanh", [node("Mul", [inner, "s2pi"])])
            x = node("Mul", [x, node("Mul", ["half", node("Add", [t, "one"])])])
        else:
            x = node("Mul", [x, node("Sigmoid", [node("Mul", ["alpha", x])])])
    nodes.append(helper.make_node("Identity", [x], ["y"], name="out"))
    vi = [helper.make_tensor_value_info(n_, TensorProto.FLOAT, ["batch", width]) for n_ in ("x", "y")]
    m = helper.make_model(helper.make_graph(nodes, "chain", vi[:1], vi[1:], consts),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def _perturbed(kind: str) -> tuple[onnx.ModelProto, int]:
    """A chain of 40 GELUs with one member made different in one way, and
    how many of its 40 GELUs the custom target fuses."""
    m = chain(40)
    g = m.graph
    fused = 40
    if kind == "name-clash":  # a node already has the name a replacement would get
        g.node.append(helper.make_node("Identity", ["y"], ["y2"], name="t47_BiasGeluErf"))
        g.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", 16]))
    elif kind == "graph-output":  # an intermediate of the 23rd GELU is a graph output
        g.output.append(helper.make_tensor_value_info(g.node[23 * 7 + 3].output[0], TensorProto.FLOAT,
                                                      ["batch", 16]))
        fused = 39
    elif kind == "second-reader":  # ... or read by another node
        g.node.append(helper.make_node("Neg", [g.node[15 * 7 + 2].output[0]], ["extra"], name="extra"))
        g.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["batch", 16]))
        fused = 39
    elif kind == "wide-bias":  # the 31st bias is [1, 16]: absorbed only with h's rank known
        next(t for t in g.initializer if t.name == "bias31").dims[:] = [1, 16]
    elif kind == "other-constant":  # the 11th GELU reads a sqrt(2) of its own, 1 ulp off
        g.initializer.append(numpy_helper.from_array(np.nextafter(np.float32(math.sqrt(2)), np.float32(2)), "r2b"))
        [n for n in g.node if n.op_type == "Div"][2].input[1] = "r2b"
    elif kind == "declared-intermediate":  # value_info on one GELU's inner tensor
        g.value_info.append(helper.make_tensor_value_info(g.node[8 * 7 + 2].output[0], TensorProto.FLOAT,
                                                          ["batch", 16]))
    elif kind == "shared-x":  # two GELUs on one x
        add = next(n for n in g.node if n.name == "n1")
        g.node.extend([helper.make_node("Div", [add.output[0], "sqrt2"], ["dx"], name="dx"),
                       helper.make_node("Erf", ["dx"], ["ex"], name="ex"),
                       helper.make_node("Add", ["ex", "one"], ["px"], name="px"),
                       helper.make_node("Mul", [add.output[0], "px"], ["mx"], name="mx"),
                       helper.make_node("Mul", ["mx", "half"], ["gx"], name="gx")])
        g.output.append(helper.make_tensor_value_info("gx", TensorProto.FLOAT, ["batch", 16]))
        fused = 41
    return m, fused


@pytest.mark.parametrize("kind", ["name-clash", "graph-output", "second-reader", "wide-bias", "other-constant",
                                  "declared-intermediate", "shared-x"])
def test_a_member_that_differs(kind):
    m, fused = _perturbed(kind)
    assert _checks(m)
    for target in TARGETS:
        rep, out = _fused(m, target)
        if target == "custom":
            assert rep["counts"][0] == fused, kind
            assert _checks(onnx.load_from_string(out))
            _ort_parity(m.SerializeToString(), out, 41)
    if kind == "name-clash":  # the generated name steps aside
        names = [n.name for n in onnx.load_from_string(out).graph.node]
        assert len(names) == len(set(names))


def test_a_fusions_dict_is_its_dataclass_dict():
    from dataclasses import asdict

    res = gelu_onnx.fuse_with_report(chain(5), "custom")
    # Fusion.nodes is a tuple; the dict, like the CLI's JSON, a list
    assert [f.as_dict() for f in res.fusions] == [{**asdict(f), "nodes": list(f.nodes)} for f in res.fusions]


def test_a_repeat_in_domain_ai_onnx_is_checked(tmp_path):
    """A repeated region with one node in domain "ai.onnx" (matched as the
    default domain) in a model importing only "": onnx.checker refuses the
    input (no opset import for "ai.onnx"), so fuse_file must too (the check
    model's class key holds the domains)."""
    model = _chain5(10)
    [n for n in model.graph.node if n.op_type == "Sigmoid"][-1].domain = "ai.onnx"
    assert not _checks(model)
    with pytest.raises(InputError, match="ai.onnx"):
        _fuse_file(model, "custom", tmp_path)


def test_a_declared_name_is_never_generated():
    """value_info declaring a name no node makes is valid; a rewrite that
    gave a new tensor that name gave it the declared type too, and the
    output failed the checker."""
    b = GB.Builder(GB.F16)
    h = b.input("x", GB.F16, ["batch", GB.H])
    for _ in range(6):
        h = b.node("Cast", [GB.gelu(b, "ts_erf", b.node("Cast", [h], to=GB.F32), dtype=GB.F32)], to=GB.F16)
    b.output(h, GB.F16, ["batch", GB.H])
    model = b.model()
    for target in TARGETS:
        first = gelu_onnx.fuse(model, target)
        made = {o for n in first.graph.node for o in n.output} - {o for n in model.graph.node for o in n.output}
        assert made, target  # the rewrite names tensors of its own here
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.graph.value_info.extend(helper.make_tensor_value_info(t, GB.F16, ["batch", 1]) for t in sorted(made))
        assert _checks(m)
        _, out = _fused(m, target)
        out = onnx.load_from_string(out)
        assert _checks(out) and not made & {o for n in out.graph.node for o in n.output}


def test_nodes_out_of_topological_order():
    """The API takes a ModelProto whose nodes are not in topological order
    (the checker refuses such a file; ONNX Runtime sorts it): the numeric
    check once evaluated a region in file order and read a value not yet made."""
    model = _chain5(10)
    data = model.SerializeToString()
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    for target in TARGETS:
        res = gelu_onnx.fuse_with_report(model, target)
        assert len(res.fusions) == (10 if target != "standard" else 8)
    _ort_parity(data, gelu_onnx.fuse(model, "custom").SerializeToString(), 20)


def test_an_omitted_operand_is_not_a_region_node(tmp_path):
    """An Erf/Tanh/... whose operand is written as an omitted input ("",
    then x) is no region node (the numeric check read "" as a constant);
    the checker refuses the file, and fuse_file with it."""
    model = _chain5(10)
    [n for n in model.graph.node if n.op_type == "Tanh"][-1].input.insert(0, "")
    for target in TARGETS:
        rep, _ = _fused(model, target)
        assert rep["counts"][0] == (9 if target != "standard" else 7)
    with pytest.raises(InputError, match="input size 2"):
        _fuse_file(model, "custom", tmp_path)


def test_a_contrib_bias_of_one_element_is_not_folded():
    """com.microsoft FastGelu(X, B) with B of shape [1] over X [N, 8] (the
    bias an initializer, or read through an Identity) is not the 1-D bias
    over X's last dimension our BiasGeluTanh takes: a near-miss, left as it
    is (ONNX Runtime 1.32 refuses to run it; older ones read B cyclically)."""
    b = GB.Builder()
    h = b.input("x", GB.F32, ["batch", 8])
    for i in range(6):
        bias = b.weight("bias", [1] if i in (3, 4) else [8], scale=0.1)
        if i == 4:
            bias = b.node("Identity", [bias])
        h = b.node("FastGelu", [h, bias], domain="com.microsoft")
    b.output(h, GB.F32, ["batch", 8])
    model = b.model()
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for target in TARGETS:
        rep, out = _fused(model, target)
        assert [n["code"] for n in rep["near_misses"]] == ["native-arity"] * 2
        kept = [n for n in onnx.load_from_string(out).graph.node if n.op_type == "FastGelu"]
        assert len(kept) == (2 if target != "ort" else 6), target  # ort: the others already are its FastGelu


def test_a_bias_add_with_a_spare_output_is_checked(tmp_path):
    """A bias Add written with a second output (the checker: "output size 2
    not in range"): fuse_file refuses the input."""
    model = _chain5(10)
    [n for n in model.graph.node if n.op_type == "Add" and n.input[1].startswith("bias")][7].output.append("")
    assert not _checks(model)
    for target in TARGETS:
        with pytest.raises(InputError, match="output size 2"):
            _fuse_file(model, target, tmp_path)


def test_every_main_graph_is_read_by_the_scanner():
    """The API's in-memory model and bytes the scanner declines (the graph
    field twice, which protobuf merges) are read by the scanner too; so are
    If/Loop/Scan bodies (each its own bytes), and a node holding them reads
    every outer name they use."""
    m = chain(5)
    assert plan(m).graphs[-1].index.arrays is not None
    twice = m.SerializeToString() + bytes([0x3A, 3, 0x52, 1, 0x67])  # graph (field 7) again: doc_string "g"
    loaded = load_model_proto(twice)
    assert loaded.model.graph.doc_string == "g" and isinstance(loaded.table, ArrayTable)
    assert plan(loaded.model, table=loaded.table).graphs[-1].index.arrays is loaded.table  # read once
    assert len(gelu_onnx.fuse_with_report(loaded, "custom", inplace=True).fusions) == 5
    sub = onnx.ModelProto()
    sub.CopyFrom(m)
    body = helper.make_graph([helper.make_node("Identity", ["y"], ["z"])], "then", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    sub.graph.node.append(helper.make_node("If", ["c"], ["w"], then_branch=body, else_branch=body))
    sub.graph.input.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    graphs = plan(sub).graphs
    assert len(graphs) == 3 and all(g.index.arrays is not None for g in graphs)
    main = graphs[-1].index
    assert main.nested == [len(sub.graph.node) - 1] and main.consumers["y"] == (len(sub.graph.node) - 1,)
    assert [g.index.parent for g in graphs[:2]] == [main, main]
    assert len(gelu_onnx.fuse_with_report(sub, "custom").fusions) == 5


def test_a_body_out_of_order_is_sorted_and_odd_names_are_one_line():
    """An in-memory If body whose nodes are out of topological order is
    sorted (as the main graph is) and its GELUs fuse, with ONNX Runtime
    parity; inspect sorts a copy (the caller's model is unchanged). A
    tensor name written twice, or one holding a NUL byte (the native
    scanner reads UTF-8 names only), is an InputError (one line, exit 2)."""
    m = chain(5)
    body = onnx.GraphProto()
    body.CopyFrom(m.graph)
    body.name = "then"
    del body.input[:]
    nodes = list(body.node)[::-1]
    del body.node[:]
    body.node.extend(nodes)
    body.output[0].name = "w_then"
    body.node[0].output[0] = "w_then"  # the last node (reversed: first) writes the body's output
    for n in body.node[1:]:
        for k, x in enumerate(n.input):
            if x == m.graph.output[0].name:
                n.input[k] = "w_then"
    top = onnx.ModelProto()
    top.CopyFrom(m)
    del top.graph.node[:]
    top.graph.node.append(helper.make_node("If", ["c"], [m.graph.output[0].name], then_branch=body, else_branch=body))
    top.graph.input.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    before = top.SerializeToString()
    assert len(gelu_onnx.inspect(top, "custom").fusions) == 10
    assert top.SerializeToString() == before
    res = gelu_onnx.fuse_with_report(top, "ort")
    assert len(res.fusions) == 10 and top.SerializeToString() == before
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    feeds = {"x": x, "c": np.array(True)}
    # ONNX Runtime refuses an If body out of order: the chain itself is the reference
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(res.model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    twice = onnx.ModelProto()
    twice.CopyFrom(m)
    twice.graph.node[3].output[0] = twice.graph.node[1].output[0]
    with pytest.raises(InputError, match="written twice"):
        gelu_onnx.fuse(twice, "custom")
    nul = onnx.ModelProto()
    nul.CopyFrom(m)
    nul.graph.node[2].output[0] = nul.graph.node[3].input[0] = "a\0b"
    with pytest.raises(InputError, match="NUL"):
        gelu_onnx.fuse(nul, "custom")
