"""The one walker of the package: every graph of a model (main graph,
If/Loop/Scan bodies at any depth, model-local function bodies), every
TensorProto in it, and how many nodes it holds once its model-local
functions are expanded at every call (what onnx.checker's shape inference
and ONNX Runtime's inliner walk). A function that calls another twice, forty
levels deep, is a few hundred bytes and 2^40 nodes: such a call bomb is
refused before any tool walks it (validate.py)."""
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
    return (g for _, g in _with_paths(graph, ""))


def iter_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """Every graph with its path ('' = main, 'If_0/then_branch' ...), functions' subgraphs included."""
    yield from _with_paths(model.graph, "")
    for f in model.functions:
        for i, n in enumerate(f.node):
            for attr, sg in subgraphs(n):
                yield from _with_paths(sg, f"{f.domain}.{f.name}/{n.name or f'#{i}'}/{attr}")


def _with_paths(g, path):
    # module level, not a closure: a recursive closure is a reference cycle
    yield path, g
    for i, n in enumerate(g.node):
        if not n.attribute:  # most nodes have none: skip the generator
            continue
        for attr, sg in subgraphs(n):
            yield from _with_paths(sg, f"{path}/{n.name or f'#{i}'}/{attr}".lstrip("/"))


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


# Far above real exports (a BERT-large exported with its modules as
# functions expands to ~10^4 nodes); onnx.checker needs ~5 s per million.
MAX_EXPANDED_NODES = 2_000_000


def norm_domain(d) -> str:
    return "" if d in ("", "ai.onnx") else d


def _key(domain: str, name: str, overload: str = "") -> tuple:
    return (norm_domain(domain), name, overload)


def _nodes(nodes):
    """Every node of a node list and of the subgraphs under it."""
    for n in nodes:
        yield n
        if n.attribute:
            for _, g in subgraphs(n):
                for sub in walk_graphs(g):
                    yield from sub.node


def expanded_nodes(model: onnx.ModelProto, limit: int = MAX_EXPANDED_NODES) -> int:
    """Node count with every local-function call expanded, capped just
    above ``limit`` (a recursive call counts once: onnx.checker refuses it)."""
    funcs = {_key(f.domain, f.name, f.overload): f for f in model.functions}
    if not funcs:
        return 0
    calls: dict = {}
    for key, f in funcs.items():
        calls[key] = [k for n in _nodes(f.node) if (k := _key(n.domain, n.op_type, n.overload)) in funcs]
    size: dict = {}
    # iterative post-order over the call graph (chains thousands deep)
    for root in funcs:
        stack = [(root, 0)]
        on_path = {root}
        while stack:
            key, i = stack[-1]
            if key in size:
                stack.pop()
                on_path.discard(key)
                continue
            callees = calls[key]
            if i < len(callees):
                stack[-1] = (key, i + 1)
                c = callees[i]
                if c not in size and c not in on_path:
                    stack.append((c, 0))
                    on_path.add(c)
                continue
            total = sum(1 for _ in _nodes(funcs[key].node))
            for c in callees:
                total += size.get(c, 0)
                if total > limit:
                    break
            size[key] = min(total, limit + 1)
            stack.pop()
            on_path.discard(key)
    total = 0
    for n in _nodes(model.graph.node):
        total += 1 + size.get(_key(n.domain, n.op_type, n.overload), 0)
        if total > limit:
            return limit + 1
    return total
