"""The input's check model: what onnx.checker's full check of the input sees,
with repeated GELU regions left out (docs/safety.md, "The check model", says
why it meets every fault the input's own check would).

A fused region with its x, constants and types like one seen before (the
same class) is replaced by a stand-in that infers exactly what the region
infers and fails exactly when x's type differs from the class's:

    Add(x, 0) -> root                     (0: a zero of the type the region's
    Add(x, 0) -> t; Cast(t, to) -> root    constants force on x, of their
                                           highest rank: [], [1], [1, 1] ...)

The first region of each class is kept whole, with Add(x, 0) and Add(root, 0')
asserting its x and root types; everything else is the input's own: the node
fields the native scanner read, copied. Regions whose inner tensors something
else declares or reads are kept whole. A check model that fails is not trusted
(the caller checks the input itself); a main graph holding subgraphs has none
(their bodies read outer names).
"""
from __future__ import annotations

from itertools import compress

import numpy as np
from onnx import ModelProto, helper

from .emit import NameGen, node_field
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
    regions = [sel for sel in g.selected if not sel.legacy and sel.match.single_op is None]
    regions = list(compress(regions, self_contained(idx, [sel.match for sel in regions])))
    singles = [sel.match for sel in regions]
    number: dict = {}  # class key -> its class, numbered in order of appearance (one hash per region)
    cls = [number.setdefault(class_key(idx, mt), len(number)) for mt in singles]
    first: list = [None] * len(number)  # per class: (order, Match) of its first region
    for sel, c in zip(regions, cls):
        if first[c] is None or sel.order[1] < first[c][0]:
            first[c] = (sel.order[1], sel.match)
    classes: list = []  # per class: (x type, root type, zero rank)
    firsts: list = []   # (last node, x, root, class) of each class's first region
    for key, (_, mt) in zip(number, first):
        types = region_types(idx, mt.nodes, mt.leaf, mt.consts)
        rank = max((len(c[2]) for node in key[0][0] for c in node[2] if isinstance(c, tuple)), default=0)
        classes.append((types.get(mt.leaf), types.get(mt.root), rank))
        if None not in classes[-1][:2]:
            firsts.append((max(mt.nodes), mt.leaf, mt.root, len(classes) - 1))
    members: dict = {}  # class -> the Matches stood in for
    for mt, c in zip(singles, cls):
        if None not in classes[c][:2] and first[c][1] is not mt:
            members.setdefault(c, []).append(mt)
    if not members:
        return None
    fresh = NameGen([idx])
    zeros: dict = {}

    def zero(et: int, rank: int) -> str:
        if (et, rank) not in zeros:
            zeros[(et, rank)] = fresh(f"gelu_onnx_check_zero_{et}_{rank}")
        return zeros[(et, rank)]

    gone = np.zeros(t.n, bool)
    gone[[i for whats in members.values() for w in whats for i in w.nodes]] = True
    inserts: list = []  # (node position, 0: in its place / 2: after it, bytes)
    for c, whats in members.items():
        tx, troot, rank = classes[c]
        z = zero(tx, rank)
        inserts.extend((max(w.nodes), 0, _single(w, tx, troot, z, fresh)) for w in whats)
    for last, x, root, c in firsts:
        tx, troot, rank = classes[c]
        body = b"".join(node_field("Add", [n, zero(et, rank)], [fresh(f"{n}_check")], None).data
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
        return node_field("Add", [mt.leaf, zero], [mt.root], None).data
    tmp = fresh(f"{mt.root}_check")
    cast = node_field("Cast", [tmp], [mt.root], None, to=troot)
    return node_field("Add", [mt.leaf, zero], [tmp], None).data + cast.data


def _other_fields(s, gval: int, gend: int) -> bytes:
    """The graph's fields other than its nodes, as written: the gaps around the node fields."""
    starts, ends = np.r_[gval, s.node_end], np.r_[s.node_start, gend]
    gaps = np.flatnonzero(ends > starts)
    return b"".join(s.data[a:b] for a, b in zip(starts[gaps].tolist(), ends[gaps].tolist()))


def self_contained(idx, regions: list) -> np.ndarray:
    """Per region (a Match), whether nothing outside it reads or declares
    its inner tensors (every output of its nodes but the root), over the
    scanner's arrays: each inner name gets its region, and each reader of it
    (the consumer arrays) must be a node of that region."""
    t = idx.arrays
    s = t.scan
    rid = np.full(t.n, -1, np.int64)  # per node its region
    sizes = [len(mt.nodes) for mt in regions]
    rid[[i for mt in regions for i in mt.nodes]] = np.repeat(np.arange(len(regions)), sizes)
    roots = np.array([idx.name_ids[mt.root] for mt in regions] + [-1], np.int64)  # [-1]: a node of no region
    writer_region = rid[np.repeat(np.arange(t.n), t.out_count)]
    inner = (writer_region >= 0) & (s.out_ids != roots[writer_region])
    region_of = np.full(len(t.names), -1, np.int64)  # per inner name its region
    region_of[s.out_ids[inner]] = writer_region[inner]
    of_reader = region_of[np.repeat(np.arange(len(t.names)), np.diff(t.cons_off))]
    bad = of_reader[(of_reader >= 0) & (rid[t.cons_nodes] != of_reader)]
    if len(idx.graph.value_info):  # declared inner types: such a region is kept whole
        declared = np.zeros(len(t.names), bool)
        declared[[idx.name_ids[n] for n in idx.value_types]] = True
        bad = np.concatenate([bad, writer_region[inner & declared[s.out_ids]]])
    ok = np.ones(len(regions), bool)
    ok[bad] = False
    return ok


def class_key(idx, mt) -> tuple:
    """What the region's check depends on besides x: the numeric check's key
    (ops, Cast targets, wiring, constants' types, shapes and bytes, x's
    declared type), every node's attributes and its domain ("" and "ai.onnx"
    match alike, but the checker wants an opset import for the one written)."""
    key = mt.key if mt.key is not None else region_key(idx, mt.anchor, mt.nodes, mt.leaf, mt.root, mt.consts)
    attrs = tuple((k, b"".join(a.SerializeToString() for a in idx.nodes[i].attribute))
                  for k, i in enumerate(mt.nodes) if i in idx.attributed)
    return key, attrs, tuple(idx.domains[i] for i in mt.nodes)
