"""Finding candidate GELU regions by structure: from a transcendental anchor
forward to candidate roots, back along the elementwise cone to the leaf x
(the dominator of every non-constant path). See match.py for the whole story."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..index.graph import GraphIndex
from ..ops import ANCHOR_OPS, BINARY_OPS, DEFAULT_DOMAINS, ELEMENTWISE, OPS


# How far we look: a GELU spelling has at most ~12 elementwise nodes; the
# forward walk from the transcendental to the root is at most 4 deep.
MAX_REGION_NODES = 24
MAX_ROOT_DEPTH = 5
MAX_LEAF_DEPTH = 6


@dataclass
class Cone:
    nodes: set[int] = field(default_factory=set)
    sources: list[str] = field(default_factory=list)
    consts: set[str] = field(default_factory=set)
    overridable: list[str] = field(default_factory=list)
    truncated: bool = False


def region_node_ok(idx: GraphIndex, i: int) -> bool:
    op = idx.ops[i]
    return (
        op in ELEMENTWISE
        and idx.domains[i] in DEFAULT_DOMAINS
        and len(idx.outs[i]) == 1
        and len(idx.raw_ins[i]) == OPS[op].arity
        and all(idx.raw_ins[i])  # none omitted ("" has no value to compute with)
    )


def is_scalar(value: np.ndarray) -> bool:
    return value.size == 1 and value.ndim <= 1


def scalar_const(idx: GraphIndex, name: str):
    """A constant a GELU spelling may contain: rank 0 or shape [1], or a
    [1, ..., 1] one that cannot widen what it is combined with (_rank_neutral).
    Any other constant (a bias vector, a weight) is just a tensor to the
    matcher: it can be the x of a GELU, never one of its constants."""
    memo = idx.scalar_consts
    if name in memo:
        return memo[name]
    t = idx.initializers.get(name)
    if t is not None and math.prod(t.dims) != 1:
        memo[name] = None  # more than one element: decided from the dims, the values unread
        return None
    c = idx.constant(name)
    if c is not None and not is_scalar(c.value) and not (c.value.size == 1 and _rank_neutral(idx, name, c.value.ndim)):
        c = None
    memo[name] = c
    return c


def _rank_neutral(idx: GraphIndex, name: str, rank: int) -> bool:
    """Every reader of a one-element constant is a binary elementwise node
    whose other operand already has at least its rank, so the constant acts
    as a scalar there (tf2onnx folds Keras' scalars into [1, 1, 1, 1] on NHWC
    tensors). Ranks unknown: not a scalar (a [1, 1] could widen a vector)."""
    readers = idx.consumers.get(name, [])
    for i in readers:
        ins = idx.raw_ins[i]
        if idx.ops[i] not in BINARY_OPS or idx.domains[i] not in DEFAULT_DOMAINS or len(ins) != 2:
            return False
        other = ins[1] if ins[0] == name else ins[0]
        shape = idx.shape(other) if other != name else None
        if shape is None or len(shape) < rank:
            return False
    return bool(readers)


def _node_class(idx: GraphIndex, i: int) -> int:
    """Cached per node: 1 = may be inside a GELU region, 0 = not."""
    cache = idx.region_node_class
    k = cache[i]
    if k < 0:
        k = cache[i] = int(region_node_ok(idx, i))
    return k


def cone(idx: GraphIndex, root: str, stop: frozenset[str] = frozenset(), anchor: int | None = None,
          fail_fast: bool = False) -> Cone:
    """Backward elementwise cone of ``root``; ``stop`` tensors count as sources.

    Transcendentals other than ``anchor`` are boundaries too: a GELU has
    exactly one. With ``fail_fast`` the walk ends at the first source that is
    not in ``stop`` (the caller only wants to know whether ``stop`` dominates),
    which keeps the cost per GELU constant even where GELUs are chained."""
    cone = Cone()
    seen: set[str] = set()
    todo = [root]
    scalar = idx.scalar_consts
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in stop and t != root:
            cone.sources.append(t)
            continue
        c = scalar[t] if t in scalar else scalar_const(idx, t)
        if c is not None:
            cone.consts.add(t)
            continue
        p = idx.producer.get(t)
        k = 0 if p is None else _node_class(idx, p)
        if k == 0 or (anchor is not None and p != anchor and idx.ops[p] in ANCHOR_OPS):
            if idx.is_overridable(t):
                cone.overridable.append(t)
            cone.sources.append(t)
            if fail_fast:
                return cone
            continue
        if len(cone.nodes) >= MAX_REGION_NODES:
            cone.truncated = True
            cone.sources.append(t)
            if fail_fast:
                return cone
            continue
        cone.nodes.add(p)
        todo.extend(idx.ins[p])
    return cone


def root_candidates(idx: GraphIndex, anchor: int, leaves: frozenset[str] | None = None) -> list[str]:
    """Tensors reachable forward from the anchor through elementwise nodes,
    farthest first (the largest region that checks out wins).

    With ``leaves`` (the anchor's leaf candidates) the walk stops at a node
    with an input that no region can hold: not one of ``leaves``, not a
    scalar constant, and not made by an elementwise node (or made by another
    anchor). Every cone through that node has such a source, so no tensor
    past it can be a root; the others keep their order."""
    out = idx.outs[anchor][0]
    found: list[tuple[int, str]] = []
    frontier = [(out, 0)]
    seen = {out}
    ops, consumers = idx.ops, idx.consumers
    while frontier:
        t, d = frontier.pop()
        if d >= MAX_ROOT_DEPTH:
            continue
        for c in consumers.get(t, ()):
            if not _node_class(idx, c) or ops[c] in ANCHOR_OPS:
                continue
            o = idx.outs[c][0]
            if o in seen:
                continue
            seen.add(o)
            if leaves is not None and any(bad_source(idx, x, anchor, leaves) for x in idx.ins[c]):
                continue
            found.append((d + 1, o))
            frontier.append((o, d + 1))
    found.sort(key=lambda p: -p[0])
    return [t for _, t in found]


def bad_source(idx: GraphIndex, t: str, anchor: int, leaves: frozenset[str] = frozenset()) -> bool:
    """A tensor where every cone that reaches it (and does not stop there)
    ends with a source: no scalar constant, not in ``leaves``, and not made
    by an elementwise node (or made by another anchor)."""
    if t in leaves:
        return False
    if (idx.scalar_consts[t] if t in idx.scalar_consts else scalar_const(idx, t)) is not None:
        return False
    p = idx.producer.get(t)
    return p is None or not _node_class(idx, p) or (p != anchor and idx.ops[p] in ANCHOR_OPS)


def leaf_candidates(idx: GraphIndex, anchor: int) -> list[str]:
    """Non-constant tensors upstream of the anchor, nearest first. x sits at
    most a few elementwise hops above the transcendental in every spelling."""
    out: list[str] = []
    scalar, producer, ops, ins, cls = idx.scalar_consts, idx.producer, idx.ops, idx.ins, idx.region_node_class
    level = list(dict.fromkeys(ins[anchor]))
    seen = set(level)
    for d in range(MAX_LEAF_DEPTH + 1):  # breadth first, one level at a time
        nxt = []
        for t in level:
            if (scalar[t] if t in scalar else scalar_const(idx, t)) is not None:
                continue
            out.append(t)
            p = producer.get(t)
            if d >= MAX_LEAF_DEPTH or p is None or ops[p] in ANCHOR_OPS:
                continue
            k = cls[p]
            if k != 1 and (k == 0 or _node_class(idx, p) != 1):
                continue
            for n in ins[p]:
                if n not in seen:
                    seen.add(n)
                    nxt.append(n)
        level = nxt
    return out


def find_leaf(idx: GraphIndex, root: str, anchor: int, candidates: list[str]):
    """The nearest candidate that dominates the root's cone, with that cone."""
    for t in candidates:
        sub = cone(idx, root, frozenset([t]), anchor, fail_fast=True)
        if sub.sources == [t] and anchor in sub.nodes and not sub.truncated:
            return t, sub
    return None, None
