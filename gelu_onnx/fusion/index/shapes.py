"""Shapes carried through elementwise nodes (GraphIndex.shape asks these
before onnx's shape inference): ONNX's broadcast of the input shapes, back
to declared shapes and constants. A matched GELU region is elementwise over
its x and constants, so its root's shape is their broadcast, taken in one
step (GraphIndex.region_inputs) rather than node by node.

carry_shapes: the same for many names of an array-backed main graph at
once (see its doc).
"""
from __future__ import annotations

import numpy as np

from ..ops import ELEMENTWISE
from ...onnxio.arraytable import unique


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


_CLOSURE_ROUNDS = 8  # rounds of taking in the arguments' arguments
_SOLVE_ROUNDS = 6    # rounds of refining the guess


class Shapes:
    """Shape tuples (None: unknown) by id, and per string id the id of its
    shape: -2 = not known here."""

    def __init__(self, n: int):
        self.table: list = []
        self._ids: dict = {}
        self.of = np.full(n, -2, np.int64)
        self.given = np.zeros(n, bool)  # declared or an initializer: GraphIndex.value_shapes has it

    def id(self, shape) -> int:
        k = None if shape is None else tuple(shape)
        i = self._ids.get(k)
        if i is None:
            i = self._ids[k] = len(self.table)
            self.table.append(k)
        return i

    def ids(self, strings: np.ndarray) -> np.ndarray:
        """For string ids, the id of what GraphIndex.shape answers, -2 where
        that is not known here (not solved, or a carried shape whose last dim
        is unknown: shape() then asks onnx's inference)."""
        k = self.of[strings].copy()
        open_end = np.array([v is None or (len(v) > 0 and v[-1] is None) for v in self.table] or [False], bool)
        k[(k >= 0) & ~self.given[strings] & open_end[np.maximum(k, 0)]] = -2
        return k

    def get(self, i: int):
        """The shape of string id i as elementwise_shape returns it, or ... when not known."""
        k = int(self.of[i])
        if k < 0:
            return ...
        v = self.table[k]
        return None if v is None else list(v)


def carry_shapes(idx, wanted: np.ndarray) -> None:
    """Solve the shapes of ``wanted`` (string ids) and of what they are
    carried from into idx.carried (a Shapes)."""
    t = idx.arrays
    s = t.scan
    if idx.carried is None:
        idx.carried = Shapes(len(t.names))
    out = idx.carried
    given = _given(idx, t, s, out)
    known = given != -2
    out.of[known], out.given[known] = given[known], True
    ew = np.isin(s.node_op, [t.kind_ids[o] for o in ELEMENTWISE if o in t.kind_ids])
    ew &= np.isin(s.node_dom, [t.kind_ids[d] for d in ("", "ai.onnx") if d in t.kind_ids]) & (t.out_count == 1)
    is_root, r_start, r_count, r_args = _root_arguments(idx, t)
    in_count = np.diff(s.node_in_off)
    owners, args = [], []
    seen = np.zeros(len(t.names), bool)
    frontier = unique(np.asarray(wanted, np.int64))
    for _ in range(_CLOSURE_ROUNDS):
        frontier = frontier[frontier > 0]
        frontier = frontier[~seen[frontier]]
        if not len(frontier):
            break
        seen[frontier] = True
        todo = frontier[given[frontier] == -2]
        roots = todo[is_root[todo]]
        rest = todo[~is_root[todo]]
        p = t.producer[rest].astype(np.int64)
        by_node = (p >= 0) & ew[np.maximum(p, 0)]
        for i in rest[~by_node].tolist():  # elementwise_shape: None, or a Constant's shape
            given[i] = _not_elementwise(idx, t, i, out)
        made, pm = rest[by_node], p[by_node]
        new = []
        for who, start, count, flat in ((roots, r_start[roots], r_count[roots], r_args),
                                        (made, s.node_in_off[pm].astype(np.int64), in_count[pm], s.in_ids)):
            if not len(who):
                continue
            a = flat[_gather(start, count)].astype(np.int64)
            o = np.repeat(who, count)
            keep = a != 0
            owners.append(o[keep])
            args.append(a[keep])
            new.append(a[keep])
            owners.append(who)  # a name with no argument left still has an equation
            args.append(np.full(len(who), -1, np.int64))
        frontier = unique(np.concatenate(new)) if new else np.zeros(0, np.int64)
    else:
        return
    if not owners:
        return
    o, a = np.concatenate(owners), np.concatenate(args)
    _solve(out, given, o[a >= 0] if (a >= 0).any() else o[:0], a[a >= 0], unique(o))


def _gather(start: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Flat indices of the CSR rows [start, start + count)."""
    total = int(count.sum())
    first = np.repeat(start - np.cumsum(np.r_[0, count[:-1]]), count)
    return first + np.arange(total)


def _given(idx, t, s, out: Shapes) -> np.ndarray:
    """Per string id, the id of its given shape (declared, initializer dims), -2 otherwise."""
    given = np.full(len(t.names), -2, np.int64)
    m = len(s.init_name)
    if m:
        rank = np.diff(s.init_dims_off)
        width = int(rank.max()) if m else 0
        dims = np.full((m, width + 1), -1, np.int64)
        dims[:, 0] = rank
        for q in range(width):
            has = rank > q
            dims[has, q + 1] = s.init_dims[s.init_dims_off[:-1][has] + q]
        rows, inv = np.unique(dims, axis=0, return_inverse=True)
        sid = np.array([out.id(list(r[1:1 + r[0]])) for r in rows.tolist()], np.int64)
        given[s.init_name] = sid[inv.reshape(-1)]
    for i, shape in idx.value_shapes.by_id.items():
        given[i] = out.id(shape)
    return given


def _root_arguments(idx, t):
    """Matched roots (GraphIndex.region_inputs): (is a root, per string id
    the start and count of its arguments in the flat array of x and
    constants' string ids)."""
    n = len(t.names)
    is_root = np.zeros(n, bool)
    start = np.zeros(n, np.int64)
    count = np.zeros(n, np.int64)
    flat: list[np.ndarray] = []
    at = 0
    ri = idx.region_inputs
    for root, inputs in dict.items(ri):
        i = t.id_of(root)
        if i >= 0:
            is_root[i], start[i], count[i] = True, at, len(inputs)
            flat.append(np.asarray([t.id_of(x) for x in inputs], np.int64))
            at += len(inputs)
    for ms in getattr(ri, "sets", ()):
        cols = np.stack([ms.ids(ms.match.leaf)] + [ms.ids(c) for c in sorted(ms.match.consts)], axis=1)
        roots = ms.ids(ms.match.root)
        k = cols.shape[1]
        is_root[roots] = True
        start[roots] = at + k * np.arange(len(roots))
        count[roots] = k
        flat.append(cols.reshape(-1).astype(np.int64))
        at += cols.size
    return is_root, start, count, np.concatenate(flat) if flat else np.zeros(0, np.int64)


def _not_elementwise(idx, t, i: int, out: Shapes) -> int:
    p = int(t.producer[i])
    c = idx.constant(t.names[i]) if p >= 0 and idx.ops[p] == "Constant" else None
    return out.id(list(c.value.shape) if c is not None else None)


def _solve(out: Shapes, given: np.ndarray, pairs_n, pairs_a, solve) -> None:
    """Each name of ``solve`` is the broadcast of its arguments (pairs_a,
    by pairs_n): arguments given or solved here."""
    order = np.argsort(pairs_n, kind="stable")
    pairs_n, pairs_a = pairs_n[order], pairs_a[order]
    pos = np.full(len(given), -1, np.int64)
    pos[solve] = np.arange(len(solve))
    counts = np.bincount(pos[pairs_n], minlength=len(solve))
    width = max(int(counts.max()) if len(counts) else 0, 1)
    col = np.arange(len(pairs_n)) - np.repeat(np.cumsum(np.r_[0, counts[:-1]]), counts)
    ref = np.full((len(solve), width), -1, np.int64)
    fixed = np.full((len(solve), width), -3, np.int64)  # -3: no argument here
    r = pos[pairs_n]
    inner = pos[pairs_a] >= 0
    ref[r[inner], col[inner]] = pos[pairs_a[inner]]
    fixed[r[~inner], col[~inner]] = given[pairs_a[~inner]]
    if (fixed == -2).any():
        return  # an argument neither given nor solved here
    G = np.full(len(solve), -2, np.int64)
    memo: dict[tuple, int] = {}
    for rnd in range(_SOLVE_ROUNDS + 1):
        cur = np.where(ref >= 0, G[np.maximum(ref, 0)], fixed)
        F = np.full(len(solve), -2, np.int64)
        ready = ~(cur == -2).any(axis=1)
        if ready.any():
            rows, inv = _unique_rows(cur[ready])
            vals = []
            for row in rows.tolist():
                k = tuple(row)
                if k not in memo:
                    shapes = [None if out.table[x] is None else list(out.table[x]) for x in row if x != -3]
                    memo[k] = out.id(broadcast(shapes))
                vals.append(memo[k])
            F[ready] = np.asarray(vals, np.int64)[inv.reshape(-1)]
        if (F == G).all() and (G != -2).all():
            out.of[solve] = G
            return
        if rnd == 0 and (F != -2).any():  # the guess: the shape most names came out with
            F[F == -2] = np.bincount(F[F != -2]).argmax()
        G = F


def _unique_rows(a: np.ndarray):
    """np.unique(a, axis=0, return_inverse=True) for small ids (-3 and up):
    each row packed into one integer first (sorting rows is slow)."""
    base = int(a.max()) + 4
    if base ** a.shape[1] >= 2 ** 62:
        return np.unique(a, axis=0, return_inverse=True)
    key = np.zeros(len(a), np.int64)
    for q in range(a.shape[1]):
        key = key * base + (a[:, q] + 3)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    first = np.r_[True, ks[1:] != ks[:-1]]
    group = np.cumsum(first) - 1
    inv = np.empty(len(a), np.int64)
    inv[order] = group
    return a[order[first]], inv
