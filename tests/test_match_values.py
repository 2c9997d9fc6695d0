"""The match data model: a Match is a frozen value with no pointer back to
the graph index (find_bias returns a new one), the matcher answers with one
MatchResult, and a fuse leaves no reference cycle of ours behind, so the
cycle collector stays on (gelu_onnx.files no longer switches it off)."""
from __future__ import annotations

import ctypes
import dataclasses
import gc
import os
import types
import weakref

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gelu_onnx
from gelu_onnx.fusion.index.graph import GraphIndex
from gelu_onnx.fusion.match import matcher
from gelu_onnx.fusion.match.bias import find_bias
from gelu_onnx.fusion.plan import plan
from gelu_onnx.fusion.report import Match, MatchResult

MODELS = os.path.join(os.path.dirname(__file__), "..", "models")
BERT = os.path.join(MODELS, "bert_torchscript_op17.onnx")  # erf GELUs with a bias Add in front


def _if_model(path: str) -> str:
    """An If whose two branches each hold an erf GELU of the outer x (outer constants)."""
    def branch(name, x):
        nodes = [helper.make_node("Div", [x, "sqrt2"], [f"{name}_d"]), helper.make_node("Erf", [f"{name}_d"], [f"{name}_e"]),
                 helper.make_node("Add", [f"{name}_e", "one"], [f"{name}_a"]),
                 helper.make_node("Mul", [x, f"{name}_a"], [f"{name}_m"]),
                 helper.make_node("Mul", [f"{name}_m", "half"], [f"{name}_y"])]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)])

    consts = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (("sqrt2", 2 ** 0.5), ("one", 1.0),
                                                                                ("half", 0.5))]
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch("t", "x"),
                                            else_branch=branch("e", "x"), name="if0")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], consts)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_match_is_a_frozen_value_without_the_index():
    names = {f.name for f in dataclasses.fields(Match)}
    assert "index" not in names and "shared" not in names
    g = plan(onnx.load(BERT)).graphs[-1]
    m = g.candidates[0].match
    assert m.bias is not None and m.bias_node is not None  # find_bias found the FFN's bias Add
    assert not any(isinstance(getattr(m, n), GraphIndex) for n in names)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.bias = None  # type: ignore[misc]
    bare = dataclasses.replace(m, bias=None, bias_input=None, bias_node=None)
    again = find_bias(g.index, bare)
    assert again == m and again is not bare and bare.bias is None  # a new Match; the old one unchanged


def test_one_result_type_for_matches_and_near_misses():
    idx = plan(onnx.load(BERT)).graphs[-1].index
    results = [matcher.match_anchor(idx, i) for i, op in enumerate(idx.ops) if op in ("Erf", "Tanh")]
    assert all(isinstance(r, MatchResult) for r in results)
    hits = [r for r in results if r]
    misses = [r for r in results if not r]
    assert hits and all(r.match is not None and r.miss is None for r in hits)
    # the pooler's lone Tanh: no GELU, said with a code and a reason
    assert misses and all(r.match is None and r.miss.code and r.miss.reason for r in misses)


def _ours(o) -> bool:
    """An object of a class or a function the package defines. ctypes
    pointers are left out: numpy's ndarray.ctypes.data_as casts with
    ctypes.cast, which ties each pointer to itself (a CPython cycle, not one
    of the package's objects)."""
    if isinstance(o, (ctypes._Pointer, ctypes._SimpleCData)):
        return False
    module = o.__module__ if isinstance(o, types.FunctionType) else type(o).__module__
    return (module or "").startswith("gelu_onnx")


@pytest.mark.parametrize("which", ["bert", "if"])
def test_a_fuse_leaves_no_reference_cycle_of_ours(which, tmp_path):
    """Every index dies with its last reference (no cycle to wait for), and
    the collector finds nothing of the package's after a fuse_file."""
    made: list[weakref.ref] = []
    init = GraphIndex.__init__

    def tracked(self, *a, **k):
        init(self, *a, **k)
        made.append(weakref.ref(self))

    path = BERT if which == "bert" else _if_model(str(tmp_path / "if.onnx"))
    was = gc.isenabled()
    gc.disable()
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    GraphIndex.__init__ = tracked
    try:
        res = gelu_onnx.fuse_file(path, str(tmp_path / "out.onnx"))
        assert res.result.fusions and made
        alive = [r() for r in made if r() is not None]
        gc.collect()
        ours = [o for o in gc.garbage if _ours(o)]
    finally:
        GraphIndex.__init__ = init
        gc.set_debug(0)
        gc.garbage.clear()
        if was:
            gc.enable()
    assert not alive, f"{len(alive)} GraphIndex objects outlive the fuse without a collection"
    assert not ours, f"reference cycles of ours: {sorted({type(o).__name__ for o in ours})}"
