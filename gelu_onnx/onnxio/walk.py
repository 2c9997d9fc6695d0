"""The one walker of the package: every graph of a model (main graph,
If/Loop/Scan bodies at any depth, model-local function bodies) and every
TensorProto in it."""
from __future__ import annotations

from typing import Iterator

import onnx
from onnx import TensorProto


def subgraphs(node) -> Iterator[tuple[str, onnx.GraphProto]]:
    for a in node.attribute:
        if a.HasField("g"):
            yield a.name, a.g
        for k, g in enumerate(a.graphs):
            yield f"{a.name}[{k}]", g


def attr_tensors(attrs) -> Iterator[TensorProto]:
    for a in attrs:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        if a.HasField("sparse_tensor"):
            yield a.sparse_tensor.values
            yield a.sparse_tensor.indices
        for st in a.sparse_tensors:
            yield st.values
            yield st.indices


def walk_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and every graph nested in it (If/Loop/Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        if node.attribute:  # most nodes have none: skip the generator
            for _, g in subgraphs(node):
                yield from walk_graphs(g)


def iter_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """Every graph with its path ('' = main, 'If_0/then_branch' ...), functions' subgraphs included."""

    def walk(g, path):
        yield path, g
        for i, n in enumerate(g.node):
            if not n.attribute:  # most nodes have none: skip the generator
                continue
            for attr, sg in subgraphs(n):
                yield from walk(sg, f"{path}/{n.name or f'#{i}'}/{attr}".lstrip("/"))

    yield from walk(model.graph, "")
    for f in model.functions:
        for i, n in enumerate(f.node):
            for attr, sg in subgraphs(n):
                yield from walk(sg, f"{f.domain}.{f.name}/{n.name or f'#{i}'}/{attr}")


def iter_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every TensorProto in the model: initializers, sparse initializers,
    tensor attributes (Constant values) — in subgraphs and functions too."""
    for _, g in iter_graphs(model):
        yield from g.initializer
        for st in g.sparse_initializer:
            yield st.values
            yield st.indices
        for n in g.node:
            if n.attribute:
                yield from attr_tensors(n.attribute)
    for f in model.functions:
        for n in f.node:
            yield from attr_tensors(n.attribute)
        yield from attr_tensors(f.attribute_proto)
