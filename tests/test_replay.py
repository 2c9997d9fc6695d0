"""Template replay (fusion/match/replay.py: the matcher run once per distinct
neighbourhood, its answer carried to the other anchors) against the
definition it stands for, the matcher run on every anchor on its own: the
same fusions, near-misses, notes and GELUs already in the target's ops, and
the same output model, byte for byte; the ModelProto API and a loaded file
agree too. Run on the hand-built GELU corpus, every bundled export, and
chains of GELUs like benchmarks/bench_chain.py's, with one member made
different in each way the carry must notice."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gelu_onnx
from gelu_onnx.fusion.targets import TARGETS
from gelu_onnx.fusion import plan as fusion_plan
from gelu_onnx.onnxio import load_model_proto
from gelu_onnx.onnxio.arraytable import ArrayTable

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted((ROOT / "models").glob("*.onnx"))

CARRY = fusion_plan.replay_matches


def one_by_one(monkeypatch, on: bool = True) -> None:
    """The fuse pass with replay off (``on``): every anchor matched on its own."""
    monkeypatch.setattr(fusion_plan, "replay_matches", (lambda idx: None) if on else CARRY)


def _report(res) -> dict:
    counts = res.summary()
    d = res.as_dict()
    assert counts == res.summary() and list(counts["by_form"]) == list(d["by_form"])
    return {**{k: d[k] for k in ("fusions", "near_misses", "notes", "already_target_ops")},
            "counts": (d["fused"], list(d["by_form"].items()))}


def _both(model: onnx.ModelProto, target: str, monkeypatch, scanned_expected: bool = True):
    """(one by one, carried) FuseResults of one model for one target, the
    first through the ModelProto API, the second through a loaded file; inspect too."""
    data = model.SerializeToString()
    one_by_one(monkeypatch)
    plain = gelu_onnx.fuse_with_report(model, target)
    inspected = _report(gelu_onnx.inspect(model, target))
    one_by_one(monkeypatch, False)
    loaded = load_model_proto(data)
    if scanned_expected:
        assert isinstance(loaded.table, ArrayTable), "the scanner did not read the file"
    scanned = gelu_onnx.fuse_with_report(loaded, target, inplace=True)
    assert _report(scanned) == _report(plain)
    assert scanned.model.SerializeToString() == plain.model.SerializeToString()
    again = load_model_proto(data)
    assert _report(gelu_onnx.inspect(again, target)) == inspected
    return plain, scanned


def _scannable(model) -> bool:
    """Files whose validation keeps the scanner's arrays (no subgraphs: onepass
    walks those; the fuse pass then scans every graph itself)."""
    return not any(a.HasField("g") or len(a.graphs) for n in model.graph.node for a in n.attribute)


def test_the_gelu_corpus_both_ways(monkeypatch):
    from helpers.gelu_corpus import all_cases

    for k, case in enumerate(all_cases()):
        targets = TARGETS if k % 4 == 0 else ("custom",)
        for target in targets:
            try:
                _both(case.model, target, monkeypatch, _scannable(case.model))
            except gelu_onnx.errors.GeluOnnxError as e:  # refused the same way both ways
                with pytest.raises(type(e)):
                    gelu_onnx.fuse_with_report(load_model_proto(case.model.SerializeToString()), target,
                                               inplace=True)


@pytest.mark.parametrize("target", TARGETS)
def test_bundled_exports_both_ways(target, monkeypatch):
    for path in MODELS[:: 1 if target == "custom" else 5]:
        model = onnx.load(str(path))
        try:
            _both(model, target, monkeypatch, _scannable(model))
        except gelu_onnx.errors.UnsupportedError:
            pass  # standard below opset 20 where an op cannot be proven (same both ways: test_bundled_models)


def chain(n: int, width: int = 16, fp16: bool = False) -> onnx.ModelProto:
    """x -> [Add(bias_i) -> GELU_i] * n, cycling through five spellings (as
    benchmarks/make_models.py's synth models), shared scalar constants."""
    dt, npdt = (TensorProto.FLOAT16, np.float16) if fp16 else (TensorProto.FLOAT, np.float32)
    consts = {n_: numpy_helper.from_array(np.array(v, npdt), n_) for n_, v in (
        ("sqrt2", math.sqrt(2)), ("inv_sqrt2", 1 / math.sqrt(2)), ("one", 1.0), ("half", 0.5), ("three", 3.0),
        ("k", 0.044715), ("s2pi", math.sqrt(2 / math.pi)), ("alpha", 1.702))}
    inits = list(consts.values())
    nodes, k = [], [0]

    def node(op, ins):
        k[0] += 1
        nodes.append(helper.make_node(op, ins, [f"t{k[0]}"], name=f"n{k[0]}"))
        return f"t{k[0]}"

    rng = np.random.default_rng(0)
    x = "x"
    for i in range(n):
        b = numpy_helper.from_array((rng.standard_normal(width) * 0.1).astype(npdt), f"bias{i}")
        inits.append(b)
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
    vi = [helper.make_tensor_value_info(n_, dt, ["batch", width]) for n_ in ("x", "y")]
    m = helper.make_model(helper.make_graph(nodes, "chain", vi[:1], vi[1:], inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fp16", [False, True])
def test_chains_both_ways(target, fp16, monkeypatch):
    plain, _ = _both(chain(60, fp16=fp16), target, monkeypatch)
    assert len(plain.fusions) == (60 if target != "standard" else 48)


def test_a_fusions_dict_is_its_dataclass_dict():
    from dataclasses import asdict

    res = gelu_onnx.fuse_with_report(chain(5), "custom")
    assert [f.as_dict() for f in res.fusions] == [asdict(f) for f in res.fusions]


def _perturbed(kind: str) -> onnx.ModelProto:
    """A chain of 40 GELUs with one member made different in one way: the
    carried matches must notice (that member matched on its own)."""
    m = chain(40)
    g = m.graph
    if kind == "name-clash":  # a node already has the name a replacement would get
        g.node.append(helper.make_node("Identity", ["y"], ["y2"], name="t47_BiasGeluErf"))
        g.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, ["batch", 16]))
    elif kind == "graph-output":  # an intermediate of the 23rd GELU is a graph output
        g.output.append(helper.make_tensor_value_info(g.node[23 * 7 + 3].output[0], TensorProto.FLOAT,
                                                      ["batch", 16]))
    elif kind == "second-reader":  # ... or read by another node
        g.node.append(helper.make_node("Neg", [g.node[15 * 7 + 2].output[0]], ["extra"], name="extra"))
        g.output.append(helper.make_tensor_value_info("extra", TensorProto.FLOAT, ["batch", 16]))
    elif kind == "wide-bias":  # the 31st bias is [1, 16]: absorbed only with h's rank known
        b = next(t for t in g.initializer if t.name == "bias31")
        b.dims[:] = [1, 16]
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
    return m


@pytest.mark.parametrize("kind", ["name-clash", "graph-output", "second-reader", "wide-bias", "other-constant",
                                  "declared-intermediate", "shared-x"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_member_that_differs(kind, target, monkeypatch):
    m = _perturbed(kind)
    onnx.checker.check_model(m, full_check=True)
    _both(m, target, monkeypatch)


if __name__ == "__main__":  # a chain file for benchmarks by hand
    onnx.save(chain(int(sys.argv[1])), sys.argv[2])


def test_every_main_graph_is_read_by_the_scanner():
    """The API's in-memory model and bytes the scanner declines (the graph
    field twice, which protobuf merges) are read by the scanner too: their
    own serialization; so are If/Loop/Scan bodies (each its own bytes), and
    a node holding them reads every outer name they use."""
    from gelu_onnx.fusion.plan import plan

    m = chain(5)
    assert plan(m).graphs[-1].index.arrays is not None
    data = m.SerializeToString()
    twice = data + bytes([0x3A, 3, 0x52, 1, 0x67])  # graph (field 7) again: doc_string (field 10) "g"
    loaded = load_model_proto(twice)
    assert loaded.model.graph.doc_string == "g" and isinstance(loaded.table, ArrayTable)
    res = gelu_onnx.fuse_with_report(loaded, "custom", inplace=True)
    assert len(res.fusions) == 5
    sub = onnx.ModelProto()
    sub.CopyFrom(m)
    body = helper.make_graph([helper.make_node("Identity", ["y"], ["z"])], "then", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    sub.graph.node.append(helper.make_node("If", ["c"], ["w"], then_branch=body, else_branch=body))
    sub.graph.input.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    graphs = plan(sub).graphs
    assert len(graphs) == 3 and all(g.index.arrays is not None for g in graphs)
    main = graphs[-1].index
    assert main.nested == [len(sub.graph.node) - 1] and main.consumers["y"] == [len(sub.graph.node) - 1]
    assert [g.index.parent for g in graphs[:2]] == [main, main]
    assert len(gelu_onnx.fuse_with_report(sub, "custom").fusions) == 5


def test_a_body_out_of_order_is_sorted_and_odd_names_are_one_line():
    """An in-memory If body whose nodes are out of topological order is
    sorted (as the main graph is) and its GELUs fuse, with ONNX Runtime
    parity; inspect sorts a copy (the caller's model is unchanged). A
    tensor name written twice, or one holding a NUL byte (the native
    scanner reads UTF-8 names only), is an InputError (one line, exit 2)."""
    import onnxruntime as ort

    from gelu_onnx.errors import InputError

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
