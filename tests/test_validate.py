"""onnxio.validate: one pass over every graph, from the native scanner's
arrays, that words the first fault a reader meets. A model with several
faults gets the line of the first: node by node its names, op, attribute
tensors, reads and subgraphs, in that order; names written twice before
cycles. Each expected line is what main at b277e52 (three validation passes)
printed for the same model."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import ValueInfoProto, numpy_helper
from onnx import helper as h

from gelu_onnx import onnxio
from gelu_onnx.errors import InputError
from gelu_onnx.onnxio import validate


def _vi(name):
    return h.make_tensor_value_info(name, T.FLOAT, [2])


def _model(nodes, inits=(), outputs=("y",), inputs=("x",)):
    g = h.make_graph(nodes, "g", [_vi(i) for i in inputs], [_vi(o) for o in outputs], list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _if(then_nodes, then_out):
    return h.make_node("If", ["cond"], ["t"], then_branch=h.make_graph(then_nodes, "b", [], [_vi(then_out)]),
                       else_branch=h.make_graph([h.make_node("Relu", ["x"], ["e"])], "e", [], [_vi("e")]))


def _ifs(*bodies):
    """An If per (then nodes, then output) pair, each reading cond and writing t0, t1, ... (else: Relu of x)."""
    return [h.make_node("If", ["cond"], [f"t{k}"], then_branch=h.make_graph(nodes, f"b{k}", [], [_vi(out)]),
                        else_branch=h.make_graph([h.make_node("Relu", ["x"], ["e"])], "e", [], [_vi("e")]))
            for k, (nodes, out) in enumerate(bodies)]


def _long_constant():
    t = h.make_tensor("c", T.FLOAT, [1], [1.0])
    t.float_data.append(2.0)
    return h.make_node("Constant", [], ["k"], value=t)


UNDEFINED = "which is never defined (no graph input, initializer or node output has that name)"
CASES = {
    "a subgraph's fault before a later node's unknown op": (
        _model([h.make_node("Identity", ["x"], ["c0"]), _if([h.make_node("Relu", ["nowhere"], ["a"])], "a"),
                h.make_node("Foo", ["t"], ["y"])], inputs=("x", "cond")),
        f"node '#0' (Relu) in graph '#1/then_branch' reads 'nowhere', {UNDEFINED}"),
    "a read before a later Constant's long data": (
        _model([h.make_node("Relu", ["nowhere"], ["a"]), _long_constant(), h.make_node("Add", ["a", "k"], ["y"])]),
        f"node '#0' (Relu) in the main graph reads 'nowhere', {UNDEFINED}"),
    "a Constant's long data before a later read": (
        _model([_long_constant(), h.make_node("Add", ["x", "nowhere"], ["y"])]),
        "tensor 'c': float_data holds 2 values, its dims need 1"),
    "the op before the reads of one node": (
        _model([h.make_node("Bar", ["nowhere"], ["y"])]),
        "node '#0' (Bar) in the main graph: unknown op 'Bar' in domain 'ai.onnx'"),
    "a name written twice before a cycle": (
        _model([h.make_node("Relu", ["b"], ["a"]), h.make_node("Relu", ["a"], ["b"]),
                h.make_node("Relu", ["x"], ["a"]), h.make_node("Identity", ["x"], ["y"])]),
        "tensor 'a' in the main graph is produced twice (by node '#0' (Relu) and node '#2' (Relu)); "
        "an ONNX graph must assign each name once"),
    "a cycle through a subgraph's outer read": (
        _model([_if([h.make_node("Relu", ["u"], ["a"])], "a"), h.make_node("Relu", ["t"], ["u"]),
                h.make_node("Identity", ["u"], ["y"])], inputs=("x", "cond")),
        "the main graph contains a cycle (through node '#0' (If))"),
    "a domain not imported before an undefined graph output": (
        _model([h.make_node("Relu", ["x"], ["a"], domain="nowhere.org")], outputs=("a", "zz")),
        "node '#0' (Relu) in the main graph uses domain 'nowhere.org', which the model does not import "
        "(no opset_import entry)"),
    "an initializer twice before a node overwriting an input": (
        _model([h.make_node("Relu", ["w"], ["x"]), h.make_node("Identity", ["w"], ["y"])],
               inits=[h.make_tensor("w", T.FLOAT, [1], [1.0]), h.make_tensor("w", T.FLOAT, [1], [2.0])]),
        "the main graph has two initializers named 'w'"),
    # bodies are checked together, then one by one: the first body's fault, a node's tensors before its bodies
    "an earlier body's fault before a later body's": (
        _model([*_ifs(([h.make_node("Relu", ["x"], ["a"])], "a"), ([h.make_node("Relu", ["nowhere"], ["a"])], "a"),
                      ([h.make_node("Foo", ["x"], ["a"])], "a")), h.make_node("Identity", ["x"], ["y"])],
               inputs=("x", "cond")),
        f"node '#0' (Relu) in graph '#1/then_branch' reads 'nowhere', {UNDEFINED}"),
    "a nested body's fault before a later body's": (
        _model([*_ifs((_ifs(([h.make_node("Relu", ["x"], ["a"])], "a"), ([h.make_node("Bar", ["x"], ["a"])], "a")),
                       "t1"), ([h.make_node("Relu", ["nowhere"], ["a"])], "a")),
                h.make_node("Identity", ["x"], ["y"])], inputs=("x", "cond")),
        "node '#0' (Bar) in graph '#0/then_branch/#1/then_branch': unknown op 'Bar' in domain 'ai.onnx'"),
    "a body's fault before a later Constant's long data": (
        _model([*_ifs(([h.make_node("Relu", ["x"], ["a"])], "a"), ([h.make_node("Relu", ["nowhere"], ["a"])], "a")),
                _long_constant(), h.make_node("Identity", ["x"], ["y"])], inputs=("x", "cond")),
        f"node '#0' (Relu) in graph '#1/then_branch' reads 'nowhere', {UNDEFINED}"),
    "a Constant's long data before a later body's fault": (
        _model([_long_constant(), *_ifs(([h.make_node("Relu", ["x"], ["a"])], "a"),
                                        ([h.make_node("Relu", ["nowhere"], ["a"])], "a")),
                h.make_node("Identity", ["x"], ["y"])], inputs=("x", "cond")),
        "tensor 'c': float_data holds 2 values, its dims need 1"),
    "a body's read of a name written after its node": (
        _model([*_ifs(([h.make_node("Relu", ["x"], ["a"])], "a"), ([h.make_node("Relu", ["u"], ["a"])], "a")),
                h.make_node("Relu", ["t1"], ["u"]), h.make_node("Identity", ["u"], ["y"])], inputs=("x", "cond")),
        "the main graph contains a cycle (through node '#1' (If))"),
    "a name left out in a later body is that body's, not an earlier one's": (  # each graph its own ""
        _model([h.make_node("If", ["cond"], ["t"], then_branch=h.make_graph(
                    [h.make_node("Relu", ["x"], ["a"])], "t", [], [_vi("a")], [numpy_helper.from_array(np.ones(2))]),
                    else_branch=h.make_graph([h.make_node("Relu", ["x"], ["e"])], "e", [], [_vi("e"), ValueInfoProto()])),
                h.make_node("Identity", ["x"], ["y"])], inputs=("x", "cond")),
        "graph output '' of graph '#0/else_branch' is never defined "
        "(no input, initializer or node output has that name)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_first_of_several_faults_is_worded(case):
    model, line = CASES[case]
    with pytest.raises(InputError) as e:
        onnxio.load_model_proto(model.SerializeToString())
    assert str(e.value) == "model bytes: " + line


def test_bodies_are_scanned_together(monkeypatch):
    """A graph's If/Loop/Scan bodies are scanned in one native call and
    checked as one graph (a model of thousands of Ifs paid a scan, ~14 array
    copies and ~100 numpy calls per body: 3 s for 3,000 Ifs against 0.3 s)."""
    calls = []
    scan_graphs = validate.scan_graphs
    monkeypatch.setattr(validate, "scan_graphs", lambda gs: calls.append(len(gs)) or scan_graphs(gs))
    bodies = [([h.make_node("Add", ["x", f"c{k}"], ["a"])], "a") for k in range(200)]
    nodes = [*_ifs(*bodies), h.make_node("Identity", ["x"], ["y"])]
    inits = [h.make_tensor(f"c{k}", T.FLOAT, [2], [k + 1.0, -k - 2.0]) for k in range(200)]
    onnxio.load_model_proto(_model(nodes, inits, inputs=("x", "cond")).SerializeToString())
    assert calls == [400]
