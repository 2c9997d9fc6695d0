"""The model without its big initializers (issue 32: Polygraphy's cost): what
the precise reference (gelu_onnx.verify.reference) needs from a model's
weights, without a copy of them.

``split`` takes them out; ``skeleton`` declares them as graph inputs instead
(ONNX Runtime then infers types and builds probes without the weights:
BERT-base in float64, 0.2 s, not 13 s; onnx's shape inference too);
``cast_in`` puts them back into a retyped copy unchanged, each widened by a
Cast node ONNX Runtime runs before its first consumer: the same values
retyping would store (widening a float is exact), the narrow bytes held once.
"""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ..onnxio.format import tensor_nbytes

# an initializer this large (bytes) is big: left out, or widened by a Cast
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
        elif not isinstance(value, bytes):  # a string protobuf hands back as bytes is not UTF-8: a name ORT needs not
            setattr(new, fd.name, value)
    return new


def split(model: onnx.ModelProto, types=None) -> tuple[onnx.ModelProto, list[TensorProto]]:
    """(a copy of ``model`` without them, the main graph's big initializers
    (of these element types; None: any) that are not graph inputs)."""
    g = model.graph
    inputs = {i.name for i in g.input}
    big = [t for t in g.initializer if (types is None or t.data_type in types) and t.name not in inputs
           and (tensor_nbytes(t) or 0) >= MIN_BYTES]
    if not big:
        return model, []
    names = {t.name for t in big}
    m = _copy_without(model, "graph")
    m.graph.CopyFrom(_copy_without(g, "initializer"))
    m.graph.initializer.extend(t for t in g.initializer if t.name not in names)
    return m, big


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its big initializers declared as graph inputs of the same type and shape."""
    m, big = split(model)
    m.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in big)
    return m


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
