"""Shapes carried through elementwise nodes (GraphIndex.shape asks these
before onnx's shape inference): ONNX's broadcast of the input shapes, back
to declared shapes and constants. A matched GELU region is elementwise over
its x and constants, so its root's shape is their broadcast, taken in one
step (GraphIndex.region_inputs) rather than node by node.
"""
from __future__ import annotations

from ..ops import ELEMENTWISE


def elementwise_shape(idx, name: str) -> list | None:
    """The broadcast of the input shapes of the elementwise nodes that
    make ``name``, back to declared shapes and constants; None when one
    is unknown or they do not broadcast."""
    memo = idx.shape_memo
    stack, visiting = [name], set()
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        if n in idx.value_shapes:
            memo[n] = idx.value_shapes[n]
            stack.pop()
            continue
        args = idx.region_inputs.get(n)  # a matched GELU's root: from its x and constants at once
        if args is None:
            i = idx.producer.get(n)
            if i is None or idx.ops[i] not in ELEMENTWISE or idx.domains[i] not in ("", "ai.onnx") \
                    or len(idx.outs[i]) != 1:
                c = idx.constant(n) if i is not None and idx.ops[i] == "Constant" else None
                memo[n] = list(c.value.shape) if c is not None else None
                stack.pop()
                continue
            args = idx.ins[i]
        todo = [x for x in args if x not in memo]
        if todo and n not in visiting:
            visiting.add(n)
            stack.extend(todo)
            continue
        # inputs known, or still not: back on a cycle, which reads as unknown
        memo[n] = None if todo else broadcast([memo[x] for x in args])
        stack.pop()
    return memo.get(name)


def broadcast(shapes: list) -> list | None:
    """ONNX's multidirectional broadcast of known shapes (None dims unknown);
    None when a shape is unknown or two dims clash."""
    if not shapes or None in shapes:
        return None
    wide = [s for s in shapes if s]
    if not wide:
        return []
    if all(s == wide[0] for s in wide):  # the usual: x with scalar constants
        return wide[0]
    rank = max(len(s) for s in shapes)
    out: list = []
    for k in range(rank):
        dims = [s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0]
        if None in dims:
            out.append(None)
            continue
        big = set(dims) - {1}
        if len(big) > 1:
            return None
        out.append(big.pop() if big else 1)
    return out
