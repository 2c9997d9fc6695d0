"""The input's check model: what onnx.checker's full check of the input sees,
with repeated GELU regions left out (docs/safety.md, "The check model").

A fused region with its x, constants and types like one seen before (the
same class) is replaced by a stand-in that infers exactly what the region
infers and fails exactly when x's type differs from the class's:

    Add(x, 0) -> root                     (0: a zero of the type the region's
    Add(x, 0) -> t; Cast(t, to) -> root    constants force on x, of their
                                           highest rank: [], [1], [1, 1] ...)

The first region of each class is kept whole, with two assertions: Add(x, 0)
(x has the class's type) and Add(root, 0') (the region infers the class's
root type). Everything else (every other node, initializer, value_info, the
bias Adds) is the input's own. So onnx.checker's strict inference over this
model meets every fault the input's check would: outside the regions the
types and shapes are the input's; each class is checked once on a real x;
and a region of a class differs from the checked one only in names and in
x, whose type the stand-in asserts and whose shape cannot change an
inference over one-element constants (all-ones shapes: broadcasting with
them widens x to their highest rank and does nothing else). Regions that declare types or shapes of
their inner tensors, or whose inner tensors something else reads, are kept
whole. A check model that fails is not trusted: the caller checks the input
file itself for the message.

It is assembled from the bytes the native scanner read: every node the
check model keeps is its node field as written, copied. A main graph holding subgraphs has no check model (their bodies
read outer names): the input is checked.
"""
from __future__ import annotations

import numpy as np
from onnx import ModelProto, helper

from .emit import new_node
from .graph import node_fields
from ..match.numeric import region_key, region_types
from ...onnxio.format import len_field
from ..plan import MIN_SAVED_SHARE


def check_model(model: ModelProto, plan) -> bytes | None:
    """The serialized check model of ``model`` (the input, before the
    rewrite) for the regions ``plan`` selected, or None when it would
    barely differ from the input (then check the input itself)."""
    if len(model.functions):
        return None  # their calls would lose their bodies here: check the input itself
    g = next(g for g in plan.graphs if g.index.parent is None)
    if g.index.nested:
        return None  # subgraphs read outer names: check the input itself
    idx = g.index
    t = idx.arrays
    s = t.scan
    # each class's first region (in candidate order) is kept whole, the
    # later ones stood in for
    singles = []
    for sel in g.selected:
        mt = sel.match
        if sel.candidate.legacy or mt.single_op is not None or not self_contained(idx, mt):
            continue
        singles.append((sel.candidate.order[1], class_key(idx, mt), mt))
    first: dict = {}  # key -> (order, Match)
    for order, key, mt in singles:
        if key not in first or order < first[key][0]:
            first[key] = (order, mt)
    classes: dict = {}   # key -> (x type, root type, zero rank)
    firsts: list = []    # (last node, x, root, key) of each class's first region
    for key, (_, mt) in first.items():
        types = region_types(idx, mt.nodes, mt.leaf, mt.consts)
        rank = max((len(c[2]) for node in key[0][0] for c in node[2] if isinstance(c, tuple)), default=0)
        classes[key] = (types.get(mt.leaf), types.get(mt.root), rank)
        if None not in classes[key][:2]:
            firsts.append((max(mt.nodes), mt.leaf, mt.root, key))
    members: dict = {}   # key -> the Matches stood in for
    for order, key, mt in singles:
        if None not in classes[key][:2] and first[key][1] is not mt:
            members.setdefault(key, []).append(mt)
    if not members:
        return None
    fresh = _Fresh(t)
    zeros: dict = {}

    def zero(et: int, rank: int) -> str:
        if (et, rank) not in zeros:
            zeros[(et, rank)] = fresh(f"gelu_onnx_check_zero_{et}_{rank}")
        return zeros[(et, rank)]

    gone = np.zeros(t.n, bool)
    inserts: list = []  # (node position, 0: in its place / 2: after it, bytes)
    for key, whats in members.items():
        tx, troot, rank = classes[key]
        for w in whats:
            gone[list(w.nodes)] = True
            inserts.append((max(w.nodes), 0, _single(w, tx, troot, zero(tx, rank), fresh)))
    for last, x, root, key in firsts:
        tx, troot, rank = classes[key]
        body = b"".join(_field("Add", [n, zero(et, rank)], [fresh(f"{n}_check")])
                        for n, et in ((x, tx), (root, troot)))
        inserts.append((last, 2, body))
    if gone.sum() < MIN_SAVED_SHARE * t.n:
        return None
    nodes = node_fields(s, ~gone, inserts)
    inits = b"".join(len_field(helper.make_tensor(n, et, [1] * rank, [0]).SerializeToString(), 5)
                     for (et, rank), n in zeros.items())
    gstart, gval, gend = (int(v) for v in s.model_info)
    graph = nodes + _other_fields(s, gval, gend) + inits
    head = ModelProto(ir_version=model.ir_version, opset_import=model.opset_import).SerializeToString()
    return head + len_field(graph, 7)


def _single(mt, tx, troot, zero: str, fresh) -> bytes:
    if tx == troot:
        return _field("Add", [mt.leaf, zero], [mt.root])
    tmp = fresh(f"{mt.root}_check")
    return _field("Add", [mt.leaf, zero], [tmp]) + _field("Cast", [tmp], [mt.root], to=troot)


def _field(op: str, ins: list[str], outs: list[str], **ints) -> bytes:
    """A default-domain node with INT attributes as a graph's node field."""
    return len_field(new_node(op, ins, outs, None, **ints).SerializeToString())


def _other_fields(s, gval: int, gend: int) -> bytes:
    """The graph's fields other than its nodes, as written."""
    data = s.data
    if not len(s.node_start):
        return data[gval:gend]
    cuts = [gval, *np.ravel(np.stack([s.node_start, s.node_end], axis=1)).tolist(), gend]
    return b"".join(data[cuts[k]:cuts[k + 1]] for k in range(0, len(cuts), 2) if cuts[k + 1] > cuts[k])


class _Fresh:
    """Names none of the model's strings is, each once."""

    def __init__(self, t):
        self.t, self.used = t, set()

    def __call__(self, base: str) -> str:
        name, k = base, 0
        while name in self.used or self.t.id_of(name) >= 0:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def self_contained(idx, mt) -> bool:
    """Nothing outside the region reads or declares its inner tensors."""
    region = set(mt.nodes)
    inner = [o for i in mt.nodes for o in idx.outs[i] if o != mt.root]
    if len(idx.graph.value_info) and any(o in idx.value_types for o in inner):
        return False
    return all(c in region for o in inner for c in idx.consumers[o])


def class_key(idx, mt) -> tuple:
    """What the region's check depends on besides x: the numeric check's key
    (ops, Cast targets, wiring, constants' types, shapes and bytes, x's
    declared type), every node's attributes and its domain ("" and "ai.onnx"
    match alike, but the checker wants an opset import for the one written)."""
    key = mt.key if mt.key is not None else region_key(idx, mt.anchor, mt.nodes, mt.leaf, mt.root, mt.consts)
    attrs = tuple((k, b"".join(a.SerializeToString() for a in idx.nodes[i].attribute))
                  for k, i in enumerate(mt.nodes) if idx.has_attributes(i))
    return key, attrs, tuple(idx.domains[i] for i in mt.nodes)
