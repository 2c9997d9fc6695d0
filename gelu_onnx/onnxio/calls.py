"""How many nodes a model holds once its model-local functions are expanded
at every call (what onnx.checker's shape inference and ONNX Runtime's
inliner walk). A function that calls another twice, forty levels deep, is a
few hundred bytes and 2^40 nodes: such a call bomb is refused before any
tool walks it (validate.py)."""
from __future__ import annotations

import onnx

from .walk import subgraphs, walk_graphs

# Far above real exports (a BERT-large exported with its modules as
# functions expands to ~10^4 nodes); onnx.checker needs ~5 s per million.
MAX_EXPANDED_NODES = 2_000_000


def _key(domain: str, name: str, overload: str = "") -> tuple:
    return ("" if domain in ("", "ai.onnx") else domain, name, overload)


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
