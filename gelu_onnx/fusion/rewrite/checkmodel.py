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
check model keeps is its node field as written, copied; stand-ins are
written for all members of a set at once (fusion/rewrite/emit.py). A repeat
whose bias Add is found (x = Add(h, b) read by the region alone, x not
declared, the Add without attributes and with one output, b an initializer
of at least the rank of the region's constants) collapses with its region
into one node, Add(h, b) -> root (Add + Cast where the root's type
differs): the Add's own inputs, so the same checks of h and b; x's type,
the class's, is the bias's (the bias search requires it); and x's shape,
broadcast with one-element constants of no higher rank than b, is the
root's. A main graph holding subgraphs has no check model (their bodies
read outer names): the input is checked.
"""
from __future__ import annotations

import numpy as np
from onnx import ModelProto, helper

from .emit import MARK, fill, join, node_bytes, pieces, table_strings
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
    declared = np.zeros(len(t.names), bool)
    declared[np.fromiter(idx.value_types.by_id, np.int64, len(idx.value_types.by_id))] = True
    # the regions: single matches one by one, a set's members as one block
    # (one class key for all); each class's first region (in candidate
    # order) is kept whole, the later ones stood in for
    singles, blocks = [], []
    for sel in g.selected:
        mt = sel.match
        if sel.candidate.legacy or mt.single_op is not None or not self_contained(idx, mt):
            continue
        singles.append((sel.candidate.order[1], class_key(idx, mt), mt))
    for ss in g.selected_sets:
        ms = ss.set
        if ms.match.shared:
            continue
        inner = [ms.ids(o) for o in _inner_outputs(idx, ms.match)]
        ok = ~np.any([declared[c] for c in inner], axis=0) if inner and len(idx.graph.value_info) else \
            np.ones(len(ms), bool)
        if ok.any():
            blocks.append((class_key(idx, ms.match), ss, np.flatnonzero(ok)))
    first: dict = {}  # key -> (order, Match)
    for order, key, mt in singles:
        if key not in first or order < first[key][0]:
            first[key] = (order, mt)
    for key, ss, rows in blocks:
        a = int(ss.set.anchors[rows[0]])
        if key not in first or a < first[key][0]:
            first[key] = (a, ss.set.member(int(rows[0])))
    classes: dict = {}   # key -> (x type, root type, zero rank)
    firsts: list = []    # (last node, x, root, key) of each class's first region
    for key, (_, mt) in first.items():
        types = region_types(idx, mt.nodes, mt.leaf, mt.consts)
        rank = max((len(c[2]) for node in key[0][0] for c in node[2] if isinstance(c, tuple)), default=0)
        classes[key] = (types.get(mt.leaf), types.get(mt.root), rank)
        if None not in classes[key][:2]:
            firsts.append((max(mt.nodes), mt.leaf, mt.root, key))
    members: dict = {}   # key -> Matches and (SelectedSet, rows) stood in for
    for order, key, mt in singles:
        if None not in classes[key][:2] and first[key][1] is not mt:
            members.setdefault(key, []).append(mt)
    for key, ss, rows in blocks:
        if None in classes[key][:2]:
            continue
        if first[key][0] == int(ss.set.anchors[rows[0]]):
            rows = rows[1:]  # this block holds the class's first region
        if len(rows):
            members.setdefault(key, []).append((ss, rows))
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
            if not isinstance(w, tuple):
                gone[w.nodes] = True
                inserts.append((max(w.nodes), 0, _single(w, tx, troot, zero(tx, rank), fresh)))
                continue
            got = _set_standins(idx, w[0], w[1], tx, troot, rank, zero, declared, gone, fresh)
            if got is None:
                return None
            inserts.extend(got)
    for last, x, root, key in firsts:
        tx, troot, rank = classes[key]
        body = b"".join(len_field(node_bytes("Add", [n, zero(et, rank)], [fresh(f"{n}_check")]))
                        for n, et in ((x, tx), (root, troot)))
        inserts.append((last, 2, body))
    if gone.sum() < MIN_SAVED_SHARE * t.n:
        return None
    nodes = _nodes(s, ~gone, inserts)
    inits = b"".join(len_field(helper.make_tensor(n, et, [1] * rank, [0]).SerializeToString(), 5)
                     for (et, rank), n in zeros.items())
    gstart, gval, gend = (int(v) for v in s.model_info)
    graph = nodes + _other_fields(s, gval, gend) + inits
    head = ModelProto(ir_version=model.ir_version, opset_import=model.opset_import).SerializeToString()
    return head + len_field(graph, 7)


def _inner_outputs(idx, mt) -> list[str]:
    return [o for i in mt.nodes for o in idx.outs[i] if o != mt.root]


def _set_standins(idx, ss, rows, tx, troot, rank, zero, declared, gone, fresh):
    """The stand-ins of a set's members ``rows``: (position, 0, bytes) each; None on a name clash."""
    t = idx.arrays
    s = t.scan
    ms = ss.set
    nodes = ms.nodes()[rows]
    gone[nodes.reshape(-1)] = True
    leaf, root = ms.ids(ms.match.leaf)[rows], ms.ids(ms.match.root)[rows]
    last = nodes.max(axis=1)
    b = ms.bias
    collapse = np.zeros(len(rows), bool)
    if b is not None and b.found:
        bnode = ms.anchors[rows] + (b.probe.bias_node - b.probe.anchor)
        bias = b.ids(b.probe.bias)[rows]
        k = t.init_of[bias].astype(np.int64)
        brank = np.where(k >= 0, np.diff(s.init_dims_off)[np.maximum(k, 0)], -1)
        collapse = ((np.diff(s.node_attr_off)[bnode] == 0) & (s.node_dom[bnode] == 0) & ~declared[leaf]
                    & (k >= 0) & (brank >= rank) & (t.in_count[bnode] == 2) & (t.out_count[bnode] == 1))
        gone[bnode[collapse]] = True
    out = []
    st = table_strings(t)
    for mask, collapsed in ((collapse, True), (~collapse, False)):
        if not mask.any():
            continue
        vals = {"R": root[mask]}
        if collapsed:
            lo = s.node_in_off[bnode[mask]]
            vals.update(I=s.in_ids[lo], J=s.in_ids[lo + 1])
            ins = [f"{MARK}I{MARK}", f"{MARK}J{MARK}"]
        else:
            vals["L"] = leaf[mask]
            ins = [f"{MARK}L{MARK}", zero(tx, rank)]
        if tx == troot:
            tpl = [node_bytes("Add", ins, [f"{MARK}R{MARK}"])]
        else:  # a fresh name for the Add's output: the root's name + "_check", none of the model's
            blob, off = join([f"{MARK}R", "_check"], vals, st, int(mask.sum()))
            if (s.find_blob(blob, off) >= 0).any() or not s.distinct_blob(blob, off):
                return None
            fresh.used.update(blob[off[k]:off[k + 1]].decode("utf-8") for k in range(len(off) - 1))
            tpl = [node_bytes("Add", ins, [f"{MARK}R{MARK}_check"]),
                   node_bytes("Cast", [f"{MARK}R{MARK}_check"], [f"{MARK}R{MARK}"], to=troot)]
        buf, off = fill([pieces(n) for n in tpl], vals, st)
        body = buf.tobytes()
        off = off.tolist()
        out.extend((int(p), 0, body[off[j]:off[j + 1]]) for j, p in enumerate(last[mask].tolist()))
    return out


def _single(mt, tx, troot, zero: str, fresh) -> bytes:
    if tx == troot:
        return len_field(node_bytes("Add", [mt.leaf, zero], [mt.root]))
    tmp = fresh(f"{mt.root}_check")
    return (len_field(node_bytes("Add", [mt.leaf, zero], [tmp]))
            + len_field(node_bytes("Cast", [tmp], [mt.root], to=troot)))


def _nodes(s, keep: np.ndarray, inserts: list) -> bytes:
    """Kept node fields (runs of adjacent ones as one slice) and the inserted
    ones: in a node's place (0) or right after it (2)."""
    kept = np.flatnonzero(keep)
    start, end = s.node_start, s.node_end
    after = np.zeros(len(keep) + 1, bool)
    for p, where, _ in inserts:
        if where == 2:
            after[p] = True
    if len(kept):
        brk = np.flatnonzero((np.diff(kept) != 1) | (start[kept[1:]] != end[kept[:-1]]) | after[kept[:-1]]) + 1
        firsts, lasts = kept[np.r_[0, brk]], kept[np.r_[brk - 1, len(kept) - 1]]
    else:
        firsts = lasts = kept
    data = s.data
    items = [(int(f), 1, data[start[f]:end[la]]) for f, la in zip(firsts.tolist(), lasts.tolist())]
    items += inserts
    items.sort(key=lambda it: (it[0], it[1]))
    return b"".join(body for _, _, body in items)


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
    if mt.shared is not None:
        return not mt.shared
    return all(c in region for o in inner for c in idx.consumers.get(o, ()))


def class_key(idx, mt) -> tuple:
    """What the region's check depends on besides x: the numeric check's key
    (ops, Cast targets, wiring, constants' types, shapes and bytes, x's
    declared type), every node's attributes and its domain ("" and "ai.onnx"
    match alike, but the checker wants an opset import for the one written)."""
    key = mt.key if mt.key is not None else region_key(idx, mt.anchor, mt.nodes, mt.leaf, mt.root, mt.consts)
    attrs = tuple((k, b"".join(a.SerializeToString() for a in idx.nodes[i].attribute))
                  for k, i in enumerate(mt.nodes) if idx.has_attributes(i))
    return key, attrs, tuple(idx.domains[i] for i in mt.nodes)
