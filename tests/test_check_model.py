"""The input's check model (gelu_onnx/fusion/rewrite/checkmodel.py): fuse checks a chain of
repeated GELUs on a model where repeats are stood in for. It must refuse
every input that onnx.checker's full check of the input itself refuses.

Each case puts one fault into one GELU of a chain (the first, one in the
middle, the last) and asks three things: the input fails onnx.checker
(full_check) — the reference; the check model built by the fuse pass fails
too; and ``fuse_file`` refuses the file (exit 2) with the checker's words.
The valid chain passes, on a check model much smaller than the input."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

import gelu_onnx
from gelu_onnx import onnxio
from gelu_onnx.errors import InputError

N = 12
W = 8


def _chain(bias: bool = True):
    """x -> [Add(bias_i) ->] erf GELU_i, N times; constants shared."""
    inits = [h.make_tensor(n, T.FLOAT, [], [v]) for n, v in (("r2", 2**0.5), ("one", 1.0), ("half", 0.5))]
    nodes, x = [], "x"
    for i in range(N):
        if bias:
            inits.append(nh.from_array(np.full(W, 0.01 * i, np.float32), f"b{i}"))
            nodes.append(h.make_node("Add", [x, f"b{i}"], [f"x{i}"], name=f"bias{i}"))
            x = f"x{i}"
        nodes += [h.make_node("Div", [x, "r2"], [f"d{i}"]), h.make_node("Erf", [f"d{i}"], [f"e{i}"]),
                  h.make_node("Add", [f"e{i}", "one"], [f"q{i}"]), h.make_node("Mul", [x, f"q{i}"], [f"m{i}"]),
                  h.make_node("Mul", [f"m{i}", "half"], [f"y{i}"])]
        x = f"y{i}"
    g = h.make_graph(nodes, "chain", [h.make_tensor_value_info("x", T.FLOAT, [2, W])],
                     [h.make_tensor_value_info(x, T.FLOAT, [2, W])], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def _inner_dtype_lie(m, k):
    m.graph.value_info.append(h.make_tensor_value_info(f"d{k}", T.INT64, [2, W]))


def _inner_shape_lie(m, k):
    m.graph.value_info.append(h.make_tensor_value_info(f"e{k}", T.FLOAT, [3, 3, 3]))


def _root_dtype_lie(m, k):
    _declare(m, h.make_tensor_value_info(f"y{k}", T.INT32, [2, W]))


def _root_shape_lie(m, k):
    _declare(m, h.make_tensor_value_info(f"y{k}", T.FLOAT, [5, W]))


def _declare(m, vi):
    """As value_info, or as the graph output when it is that."""
    for o in m.graph.output:
        if o.name == vi.name:
            o.CopyFrom(vi)
            return
    m.graph.value_info.append(vi)


def _x_dtype_lie(m, k):
    m.graph.value_info.append(h.make_tensor_value_info(f"x{k}", T.DOUBLE, [2, W]))


def _x_of_another_type(m, k):
    """GELU k's x is cast to double: its float constants no longer fit."""
    nodes = list(m.graph.node)
    at = next(i for i, n in enumerate(nodes) if n.name == f"bias{k}")
    add = nodes[at]
    add.output[0] = f"x{k}_f"
    cast = h.make_node("Cast", [f"x{k}_f"], [f"x{k}"], to=T.DOUBLE)
    del m.graph.node[:]
    m.graph.node.extend(nodes[:at + 1] + [cast] + nodes[at + 1:])


def _own_constant_with_wrong_attribute_type(m, k):
    c = h.make_node("Constant", [], [f"r2_{k}"], value_float=2**0.5)
    c.attribute[0].type = onnx.AttributeProto.INT
    _use_own_sqrt2(m, k, c)


def _own_constant_short_raw_data(m, k):
    t = nh.from_array(np.array([2**0.5] * 4, np.float32), f"r2_{k}")
    t.raw_data = t.raw_data[:4]
    m.graph.initializer.append(t)
    _use_own_sqrt2(m, k, None)


def _use_own_sqrt2(m, k, node):
    nodes = list(m.graph.node)
    for n in nodes:
        if n.output[0] == f"d{k}":
            n.input[1] = f"r2_{k}"
    del m.graph.node[:]
    m.graph.node.extend(([node] if node is not None else []) + nodes)


def _bias_wider_than_x(m, k):
    t = next(t for t in m.graph.initializer if t.name == f"b{k}")
    t.CopyFrom(nh.from_array(np.zeros(W + 3, np.float32), t.name))


def _bias_add_with_an_attribute(m, k):
    """Add has no attributes (opset 17): the bias Add the check model would
    fold into a stand-in must be checked as it is."""
    add = next(n for n in m.graph.node if n.name == f"bias{k}")
    add.attribute.append(h.make_attribute("broadcast", 1))


FAULTS = {
    "inner value_info dtype lie": (_inner_dtype_lie, "ShapeInferenceError|InferenceError"),
    "inner value_info shape lie": (_inner_shape_lie, "InferenceError"),
    "root value_info dtype lie": (_root_dtype_lie, "InferenceError"),
    "root value_info shape lie": (_root_shape_lie, "InferenceError"),
    "x value_info dtype lie": (_x_dtype_lie, "InferenceError"),
    "x of another type than the constants": (_x_of_another_type, "InferenceError"),
    "a constant's attribute of the wrong type": (_own_constant_with_wrong_attribute_type,
                                                 "type field and data field mismatch"),
    "a constant's raw_data shorter than its dims": (_own_constant_short_raw_data, "raw_data size"),
    "a bias that does not broadcast": (_bias_wider_than_x, "InferenceError"),
    "a bias Add with an attribute": (_bias_add_with_an_attribute, "broadcast"),
}


def _check_model_of(path) -> bytes | None:
    return gelu_onnx.fuse_with_report(onnxio.load_model(path), inplace=True, input_check=True).input_check


def _fails(model_or_bytes) -> bool:
    try:
        onnx.checker.check_model(model_or_bytes, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError):
        return True
    return False


def test_the_valid_chain_is_checked_on_a_smaller_model(tmp_path):
    m = _chain()
    src = tmp_path / "m.onnx"
    src.write_bytes(m.SerializeToString())
    check = _check_model_of(src)
    assert check is not None and not _fails(check)
    c = onnx.ModelProto.FromString(check)
    # per repeated GELU one stand-in instead of its five nodes
    assert len(c.graph.node) < 0.5 * len(m.graph.node)
    assert {t.name for t in m.graph.initializer} <= {t.name for t in c.graph.initializer}
    done = gelu_onnx.fuse_file(src, tmp_path / "out.onnx")
    assert len(done.result.fusions) == N


@pytest.mark.parametrize("where", [0, N // 2, N - 1])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_in_any_gelu_is_refused(tmp_path, fault, where):
    inject, fragment = FAULTS[fault]
    m = _chain()
    inject(m, where)
    assert _fails(m)  # the reference: onnx.checker on the input itself
    src = tmp_path / "m.onnx"
    src.write_bytes(m.SerializeToString())
    check = _check_model_of(src)
    assert check is not None and _fails(check)
    with pytest.raises(InputError, match=fragment):
        gelu_onnx.fuse_file(src, tmp_path / "out.onnx")
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("bias", [True, False])
def test_every_repeat_but_the_first_is_stood_in_for(tmp_path, bias):
    m = _chain(bias)
    src = tmp_path / "m.onnx"
    src.write_bytes(m.SerializeToString())
    c = onnx.ModelProto.FromString(_check_model_of(src))
    # The first GELU of each class whole (with two assertion Adds), the others
    # one Add(x, 0) -> root each (a bias Add stays as it is). Without bias
    # Adds the first GELU reads the graph input, whose type is declared: a
    # class of its own.
    whole = 1 if bias else 2
    assert [n.op_type for n in c.graph.node].count("Erf") == whole
    assert len(c.graph.node) == len(m.graph.node) - (N - whole) * 4 + 2 * whole
