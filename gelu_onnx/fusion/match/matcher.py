"""Finding GELUs: match (structure, here) and check (numbers, numeric.py), kept apart.

*Match.* Every Erf/Tanh/Sigmoid node is an anchor. From it we walk forward
through elementwise consumers to get candidate roots, and for each root we
take the backward elementwise cone (stopping at non-elementwise producers,
graph inputs and non-scalar constants). The leaf ``x`` is the nearest tensor
that every path from the root back to a non-constant source goes through
(its dominator). This is order-free: it does not care how the exporter
arranged Mul/Add operands, where the 0.5 sits, or whether x^3 is Pow or
x*x*x.

*Check.* The region's value in float64, constants as stored (numeric.py).
Structure then decides the never-fuse rules: no intermediate may be read outside
the region or be a graph output, no "constant" may be overridable at run time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ... import contract as C
from . import numeric
from .bias import find_initializer
from ..report import Code, Match, MatchResult, NearMiss
from ..index.graph import GraphIndex, is_scalar, scalar_const, tensor_value
from ..ops import ANCHOR_OPS, DEFAULT_DOMAINS, OPS
from .numeric import (PROBE, checked_region, classify, evaluate, intermediate_violation, region_key, region_precision,
                      region_types)


# --- candidate regions by structure -----------------------------------------------------

# How far we look: a GELU spelling has at most ~12 elementwise nodes; the
# forward walk from the transcendental to the root is at most 4 deep.
MAX_REGION_NODES = 24
MAX_ROOT_DEPTH = 5
MAX_LEAF_DEPTH = 6


@dataclass(slots=True)
class Cone:
    nodes: set[int] = field(default_factory=set)
    sources: list[str] = field(default_factory=list)
    consts: set[str] = field(default_factory=set)
    truncated: bool = False
    # lenient walks only: (kind, name) of each stand-in constant, in walk order, and their values
    odd: list[tuple[str, str]] = field(default_factory=list)
    values: dict[str, np.ndarray] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)


def cone(idx: GraphIndex, root: str, stop: frozenset[str] = frozenset(), anchor: int | None = None,
          fail_fast: bool = False, lenient: bool = False, past: Cone | None = None) -> Cone:
    """Backward elementwise cone of ``root``; ``stop`` tensors count as sources.

    Transcendentals other than ``anchor`` are boundaries too: a GELU has
    exactly one. With ``fail_fast`` the walk ends at the first source that is
    not in ``stop`` (the caller only wants to know whether ``stop`` dominates),
    which keeps the cost per GELU constant even where GELUs are chained.
    ``lenient`` (the near-miss diagnosis) also takes the constants a GELU
    may not hold as constants, recorded in ``odd`` (_stand_in). ``past``: a
    walk of ``root`` cut at more tensors, gone on with past its sources."""
    if past is None:
        cone, todo = Cone(), [root]
    else:
        todo = [t for t in past.sources if t not in stop]
        cone = Cone(set(past.nodes), [t for t in past.sources if t in stop], set(past.consts),
                    seen=past.seen.difference(todo))
    nodes, sources, consts, seen = cone.nodes, cone.sources, cone.consts, cone.seen
    maybe, cls, producer, ops, ins = idx.const_names, idx.region_node_class, idx.producer, idx.ops, idx.ins
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in stop and t != root:
            sources.append(t)
            continue
        if lenient:
            if _stand_in(idx, t, cone):
                continue
        elif t in maybe and scalar_const(idx, t) is not None:
            consts.add(t)
            continue
        p = producer.get(t)
        if p is None or not cls[p] or (anchor is not None and p != anchor and ops[p] in ANCHOR_OPS):
            sources.append(t)
            if fail_fast:
                return cone
            continue
        if len(nodes) >= MAX_REGION_NODES:
            cone.truncated = True
            sources.append(t)
            if fail_fast:
                return cone
            continue
        nodes.add(p)
        todo.extend(ins[p])
    return cone


def root_candidates(idx: GraphIndex, anchor: int, leaves: frozenset[str] | None = None) -> list[str]:
    """Tensors reachable forward from the anchor through elementwise nodes,
    farthest first (the largest region that checks out wins). With
    ``leaves`` (the anchor's leaf candidates) the walk stops at a node with
    an input no region can hold (_bad_source): no tensor past it can be a root."""
    out = idx.outs[anchor][0]
    found: list[tuple[int, str]] = []
    frontier = [(out, 0)]
    seen = {out}
    ops, consumers, cls, outs, ins = idx.ops, idx.consumers, idx.region_node_class, idx.outs, idx.ins
    while frontier:
        t, d = frontier.pop()
        if d >= MAX_ROOT_DEPTH:
            continue
        for c in consumers[t]:
            if not cls[c] or ops[c] in ANCHOR_OPS:
                continue
            o = outs[c][0]
            if o in seen:
                continue
            seen.add(o)
            if leaves is not None and any(x != t and _bad_source(idx, x, anchor, leaves) for x in ins[c]):
                continue
            found.append((d + 1, o))
            frontier.append((o, d + 1))
    found.sort(key=lambda p: -p[0])
    return [t for _, t in found]


def _bad_source(idx: GraphIndex, t: str, anchor: int, leaves: frozenset[str]) -> bool:
    """Not in ``leaves``, no scalar constant, and not made by an elementwise
    node (or made by another anchor): every cone through it ends there."""
    if t in leaves or (t in idx.const_names and scalar_const(idx, t) is not None):
        return False
    p = idx.producer.get(t)
    return p is None or not idx.region_node_class[p] or (p != anchor and idx.ops[p] in ANCHOR_OPS)


def leaf_candidates(idx: GraphIndex, anchor: int) -> list[str]:
    """Non-constant tensors upstream of the anchor, nearest first. x sits at
    most a few elementwise hops above the transcendental in every spelling."""
    out: list[str] = []
    maybe, producer, ops, ins, cls = idx.const_names, idx.producer, idx.ops, idx.ins, idx.region_node_class
    level = list(dict.fromkeys(ins[anchor]))
    seen = set(level)
    for d in range(MAX_LEAF_DEPTH + 1):  # breadth first, one level at a time
        nxt = []
        for t in level:
            if t in maybe and scalar_const(idx, t) is not None:
                continue
            out.append(t)
            p = producer.get(t)
            if d >= MAX_LEAF_DEPTH or p is None or ops[p] in ANCHOR_OPS or not cls[p]:
                continue
            for n in ins[p]:
                if n not in seen:
                    seen.add(n)
                    nxt.append(n)
        level = nxt
    return out


def find_leaf(idx: GraphIndex, root: str, anchor: int, candidates: list[str], pre: Cone):
    """The nearest candidate dominating the root's cone (``pre``: cut at every candidate), with that cone."""
    for t in candidates:
        sub = cone(idx, root, frozenset([t]), anchor, fail_fast=True, past=pre)
        if sub.sources == [t] and not sub.truncated:
            return t, sub
    return None, None


# --- the search: regions found, checked, explained ---------------------------------------

def match_anchor(idx: GraphIndex, anchor: int) -> MatchResult:
    """Every root candidate, farthest first, with its leaf and numeric check
    (cached by region structure): the first region that passes every rule
    is the match; else the reasons gathered on the way (and _diagnose's for
    roots with no single x), the most specific first."""
    reasons: list[tuple[int, Code, str, float | None]] = []  # (priority, code, reason, distance from a GELU)

    def miss(code, reason, error=None):
        reasons.append((code.priority, code, reason, error))

    candidates = leaf_candidates(idx, anchor)
    cand_set = frozenset(candidates)
    with_leaf: set[str] = set()
    rough: list = []  # regions that failed the 3-point pre-check
    for root in root_candidates(idx, anchor, cand_set):
        # a root whose cone reaches a source outside the anchor's upstream has no leaf
        pre = cone(idx, root, cand_set, anchor, fail_fast=True)
        leaf = sub = None
        if not pre.truncated and anchor in pre.nodes and set(pre.sources) <= cand_set:
            leaf, sub = find_leaf(idx, root, anchor, candidates, pre)
        if leaf is None:
            continue
        with_leaf.add(root)
        nodes = sorted(sub.nodes)
        if sum(idx.ops[i] in ANCHOR_OPS for i in nodes) != 1:
            continue
        key = region_key(idx, anchor, nodes, leaf, root, sub.consts)
        chk = checked_region(idx, anchor, nodes, leaf, root, sub.consts, key)
        if chk is None:
            rough.append((root, leaf, nodes, sub))
            continue
        if chk.error > chk.tolerance:
            if math.isfinite(chk.error):
                miss(Code.TOLERANCE, f"computes a function {chk.error:.3g} away from the {chk.form} GELU "
                                  f"(tolerance {chk.tolerance:g} for {chk.precision})", chk.error)
            continue
        if chk.note:
            miss(*chk.note)
            continue
        v = intermediate_violation(idx, nodes, root, sub.consts)
        if v:
            miss(*v)
            continue
        return MatchResult(Match(anchor=anchor, root=root, leaf=leaf, nodes=tuple(nodes),
                                 consts=tuple(sorted(sub.consts)), form=chk.form, alpha=chk.alpha,
                                 leaf_type=chk.leaf_type, root_type=chk.root_type, precision=chk.precision,
                                 error=chk.error, key=key))
    if not reasons and rough:
        # Say how far the closest candidate region is from a GELU.
        best = None
        for root, leaf, nodes, sub in rough:
            types = region_types(idx, nodes, leaf, sub.consts)
            precision = region_precision(types, sub.consts, fallback=types.get(leaf))
            form, _, err, tol, _ = numeric.check_function(idx, anchor, nodes, leaf, root, precision)
            if math.isfinite(err) and (best is None or err < best[0]):
                best = (err, form, tol, precision)
        if best is not None:
            err, form, tol, precision = best
            miss(Code.TOLERANCE, f"computes a function {err:.3g} away from the {form} GELU "
                              f"(tolerance {tol:g} for {precision})", err)
    # Would a root be a GELU if its other sources were x, or if its
    # overridable / [1,1]-shaped constants were plain scalars? Then that is
    # exactly why it was not fused. Only near-misses pay for this.
    for root in root_candidates(idx, anchor):  # the roots the search pruned too, in the walk's order
        if root in with_leaf:
            continue
        d = _diagnose(idx, anchor, root)
        if d:
            miss(*d)
    anode = idx.node(anchor)
    if not reasons:
        reasons.append((Code.NOT_GELU.priority, Code.NOT_GELU,
                        f"{anode.op_type} is not part of an elementwise x*f(x) GELU spelling", None))
    reasons.sort(key=lambda r: r[0])
    _, code, reason, error = reasons[0]
    aname = anode.name or f"{anode.op_type}#{anchor}"
    return MatchResult(miss=NearMiss(idx.path, aname, code, reason, OPS[anode.op_type].family, error))


def _stand_in(idx: GraphIndex, t: str, cone: Cone) -> bool:
    """Whether a lenient walk takes ``t`` as a constant: a scalar or
    one-element constant, an overridable initializer with one element, or
    an overridable scalar without a default; the odd ones are recorded."""
    c = idx.constant(t)
    if c is not None and (is_scalar(c.value) or c.value.size == 1):
        if not is_scalar(c.value):
            cone.odd.append(("nonscalar", t))
            cone.values[t] = np.asarray(c.value, dtype=np.float64).reshape(())
        return True
    if not idx.is_overridable(t):
        return False
    init = find_initializer(idx, t)
    value = tensor_value(init) if init is not None else None
    if value is not None and value.size == 1:
        cone.odd.append(("overridable", t))
        cone.values[t] = np.asarray(value, dtype=np.float64).reshape(())
        return True
    shape = idx.shape(t)
    if shape is not None and int(np.prod([d or 0 for d in shape])) == 1:
        cone.odd.append(("unknown", t))  # no default value
        return True
    return False


def _diagnose(idx: GraphIndex, anchor: int, root: str):
    """Why a root with no single x is no GELU, when it would be one with
    its other sources as x or its stand-in constants as plain scalars."""
    reg = cone(idx, root, anchor=anchor, lenient=True)
    nodes, sources, extra = reg.nodes, reg.sources, reg.values
    overridable, nonscalar, unknown = ([t for k, t in reg.odd if k == kind]
                                       for kind in ("overridable", "nonscalar", "unknown"))
    if anchor not in nodes or not sources:
        return None
    srcs = sorted(set(sources))
    if unknown:
        if len(srcs) == 1:
            return Code.OVERRIDABLE_CONSTANT, f"'{unknown[0]}' is a graph input (overridable at run time), not a constant"
        return None
    if len(srcs) == 1 and not overridable and not nonscalar:
        return None  # a plain single-x region: the numeric check already spoke
    x = PROBE
    order = sorted(nodes)
    vals = evaluate(idx, order, srcs[0], x, {**extra, **{s_: x for s_ in srcs[1:]}})
    form, alpha, err, _ = classify(idx.node(anchor).op_type, vals, vals[root], x, order, idx,
                                    C.MATCH_TOLERANCE["bfloat16"])
    if err > C.MATCH_TOLERANCE["bfloat16"]:
        return None
    if overridable:
        return Code.OVERRIDABLE_CONSTANT, f"'{overridable[0]}' is an initializer that is also a graph input (overridable at run time), not a constant"
    if nonscalar:
        shape = list(idx.constant(nonscalar[0]).value.shape)
        return Code.NON_SCALAR_CONSTANT, f"constant '{nonscalar[0]}' has shape {shape}; only scalars or shape-[1] constants are fused"
    return Code.MISMATCHED_X, f"reads two different tensors {srcs[0]!r} and {srcs[1]!r} where one x is required"


def find_matches(idx: GraphIndex):
    """All GELU matches and near-misses in one graph (not its subgraphs)."""
    matches: list[Match] = []
    misses: list[NearMiss] = []
    claimed = bytearray(len(idx.ops))  # not a set: the cycle collector walks a set of every node
    for i, op in enumerate(idx.ops):
        if op not in ANCHOR_OPS or idx.domains[i] not in DEFAULT_DOMAINS or claimed[i]:
            continue
        res = match_anchor(idx, i)
        m = res.match
        if m is None:
            misses.append(res.miss)
            continue
        if any(claimed[k] for k in m.nodes):
            continue
        for k in m.nodes:
            claimed[k] = 1
        matches.append(m)
    return matches, misses
