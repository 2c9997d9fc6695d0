"""Shapes carried through elementwise nodes (GraphIndex.shape asks these
before onnx's shape inference): ONNX's broadcast of the input shapes, back to
declared shapes and constants; a matched GELU root's is that of its x and
constants, in one step (GraphIndex.region_inputs). Shapes are tuples of ints
and None: the cycle collector stops tracking them."""
from __future__ import annotations

from itertools import zip_longest


def elementwise_shape(idx, name: str) -> tuple | None:
    """The broadcast of the input shapes of the elementwise nodes that
    make ``name``, back to declared shapes and constants; None when one
    is unknown or they do not broadcast."""
    memo, regions = idx.shape_memo, idx.region_inputs  # the memo: seeded with the declared shapes
    stack, visiting = [name], set()
    while stack:
        n = stack[-1]
        if n in memo:
            stack.pop()
            continue
        args = regions.get(n)  # a matched GELU's root: from its x and constants at once
        if args is None:
            i = idx.producer.get(n)
            if i is None or not idx.region_node_class[i]:  # not an elementwise op (of ops.OPS)
                c = idx.constant(n) if i is not None and idx.ops[i] == "Constant" else None
                memo[n] = c.value.shape if c is not None else None
                stack.pop()
                continue
            args = idx.ins[i]
        if n not in visiting:
            todo = [x for x in args if x not in memo]
            if todo:
                visiting.add(n)
                stack.extend(todo)
                continue
        # inputs known, or still not: back on a cycle, which reads as unknown
        memo[n] = broadcast(list(map(memo.get, args)))
        stack.pop()
    return memo.get(name)


def broadcast(shapes: list) -> tuple | None:
    """ONNX's multidirectional broadcast of known shapes (tuples, None dims
    unknown); None when a shape is unknown or two dims clash."""
    if not shapes or None in shapes:
        return None
    full = max(shapes, key=len)
    for s in shapes:  # the usual: each a suffix of the widest (x with a bias, with scalars)
        if full[len(full) - len(s):] != s:
            break
    else:
        return full
    out: list = []
    for dims in zip_longest(*map(reversed, shapes), fillvalue=1):  # from the last dim, missing ones 1
        big = set(dims) - {1}
        if None in big:
            out.append(None)
        elif len(big) > 1:
            return None
        else:
            out.append(big.pop() if big else 1)
    return tuple(reversed(out))
