"""A retyped copy of a model without a copy of its weights (issue 32:
Polygraphy's cost): ``check`` reads a big model as onnxio.splice's skeleton
(its large weights referenced in place in its own file), and the precise
reference (gelu_onnx.verify.reference) is that skeleton retyped.

``split(model, types)`` takes the large initializers out;
``cast_in(model, weights, to)``: what a retyped copy of the model needs from
those weights, without writing them again in the wider type: each one stays
as it is (in its file) and a Cast node ONNX Runtime runs right before its
first consumer widens it to ``to``: the same values retyping would store
(widening a float is exact), and the session holds the narrow bytes once.
"""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ..onnxio.format import tensor_nbytes

# an initializer this large (bytes) is widened by a Cast, not retyped
MIN_BYTES = 4096
CAST_SUFFIX = "__gelu_onnx_narrow"


def _copy_without(msg, field: str):
    """A copy of ``msg`` without ``field`` (never copying that field's contents)."""
    new = type(msg)()
    for fd, value in msg.ListFields():
        if fd.name == field:
            continue
        if hasattr(getattr(new, fd.name), "extend"):  # repeated
            getattr(new, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(new, fd.name).CopyFrom(value)
        else:
            setattr(new, fd.name, value)
    return new


def split(model: onnx.ModelProto, types) -> tuple[onnx.ModelProto, list[TensorProto]]:
    """(a copy of ``model`` without them, the main graph's large initializers
    of these element types that are not graph inputs)."""
    g = model.graph
    inputs = {i.name for i in g.input}
    big = [t for t in g.initializer if t.data_type in types and t.name not in inputs
           and (tensor_nbytes(t) or 0) >= MIN_BYTES]
    if not big:
        return model, []
    names = {t.name for t in big}
    m = _copy_without(model, "graph")
    m.graph.CopyFrom(_copy_without(g, "initializer"))
    m.graph.initializer.extend(t for t in g.initializer if t.name not in names)
    return m, big


def cast_in(model: onnx.ModelProto, weights: list[TensorProto], to: int) -> None:
    """Add ``weights`` to ``model``'s main graph under new names, each widened
    to ``to`` by a Cast placed before its first consumer (in place)."""
    if not weights:
        return
    g = model.graph
    pending = {t.name: t for t in weights}
    nodes = []

    def cast(name: str) -> None:
        t = TensorProto()
        t.CopyFrom(pending.pop(name))
        t.name = name + CAST_SUFFIX
        g.initializer.append(t)
        nodes.append(helper.make_node("Cast", [t.name], [name], to=to, name=t.name))

    for n in g.node:
        for x in n.input:
            if x in pending:
                cast(x)
        nodes.append(n)
    front = []
    for name in list(pending):  # used only inside subgraphs (or as an output): before everything
        cast(name)
        front.append(nodes.pop())
    del g.node[:]
    g.node.extend(front + nodes)
