"""The rewrite of a graph the native scanner read, at the byte level: the
output's nodes are the input's node fields that stay, copied as bytes, with
each fused region's replacement (rewrite.emit_nodes, single_op.emit,
single_op.legacy_nodes) where its last node was; the graph's node list is
then replaced in one parse.
"""
from __future__ import annotations

import numpy as np

from .emit import emit_nodes, remove_indices
from ...onnxio.format import len_field
from ..report import record
from ..match import single_op


def rewrite_graph(g, names, res, dead: set, tidy: bool = True) -> None:
    """Replace every selected region of ``g`` (a GraphPlan) and record the
    fusions in ``res`` in candidate order; the constants the regions read
    go to ``dead``. ``tidy``: also drop this graph's dead constants and
    stale value_info (a model without subgraphs; with them, names cross
    scopes and plan.rewrite drops them over every graph at the end)."""
    edits, read, written = _emit_all(g, names, dead)
    _splice(g, edits, read, written, dead if tidy else set(), tidy)
    _record(g, res)


def _emit_all(g, names, dead: set) -> list:
    """(anchor position, node bytes, removed node indices) per replacement,
    and the string ids of the names the replacements read and write that
    the model already had (new names have none)."""
    idx = g.index
    t = idx.arrays
    edits = []
    read, written = [], []
    for s in g.selected:
        mt, c = s.match, s.candidate
        if c.legacy:
            nodes = single_op.legacy_nodes(mt, c.legacy_bias, s.emission, s.compute_type, names, idx.graph)
            removed = list(mt.nodes)
        else:
            emit = single_op.emit if mt.single_op is not None else emit_nodes
            nodes = emit(mt, s.emission, s.compute_type, s.use_bias, names)
            removed = list(mt.nodes) + ([mt.bias_node] if s.use_bias and mt.bias_node is not None else [])
            dead.update(mt.consts)
        edits.append((max(mt.nodes), b"".join(len_field(n.SerializeToString()) for n in nodes), removed))
        read.append(t.scan.find_many([x for n in nodes for x in n.input if x]))
        written.append(t.scan.find_many([x for n in nodes for x in n.output if x]))
    ids = [np.concatenate(x).astype(np.int64) if x else np.zeros(0, np.int64) for x in (read, written)]
    return edits, ids[0][ids[0] >= 0], ids[1][ids[1] >= 0]


def _splice(g, edits: list, read: np.ndarray, written: np.ndarray, dead: set, tidy: bool) -> None:
    """The graph's node list from the kept node fields and the replacements
    (a node holding subgraphs as it is now: its bodies may have been
    rewritten, inner graphs first); then the dead constants and (``tidy``)
    the value_info no node defines any more."""
    idx = g.index
    t = idx.arrays
    s = t.scan
    graph = idx.graph
    n = t.n
    keep = np.ones(n, bool)
    at: dict[int, bytes] = {}
    for pos, body, removed in edits:
        keep[removed] = False
        at[pos] = body
    drop_init, drop_node = _dead(t, keep, read, dead)
    keep[drop_node] = False
    # runs of kept nodes whose fields lie next to each other in the file,
    # copied as one slice each; the replacements in between, by position
    kept = np.flatnonzero(keep)
    start, end = s.node_start, s.node_end
    nested = set(t.with_subgraphs)  # each such node a run of its own, as it is now (its bodies may have changed)
    if len(kept):
        brk = (np.diff(kept) != 1) | (start[kept[1:]] != end[kept[:-1]])
        if nested:
            own = np.isin(kept, t.with_subgraphs)
            brk |= own[1:] | own[:-1]
        brk = np.flatnonzero(brk) + 1
        firsts, lasts = kept[np.r_[0, brk]], kept[np.r_[brk - 1, len(kept) - 1]]
    else:
        firsts = lasts = kept
    data = s.data
    items = [(f, 1, len_field(graph.node[f].SerializeToString()) if f in nested else data[start[f]:end[la]])
             for f, la in zip(firsts.tolist(), lasts.tolist())]
    items += [(p, 0, body) for p, body in at.items()]
    items.sort(key=lambda it: (it[0], it[1]))
    chunks = [body for _, _, body in items]
    del graph.node[:]
    graph.MergeFromString(b"".join(chunks))
    remove_indices(graph.initializer, set(drop_init))
    if tidy and len(s.vi_name):
        defined = np.zeros(len(t.names), bool)
        defined[s.out_ids[np.repeat(keep, t.out_count)]] = True
        defined[written] = True
        defined[s.input_name] = True
        alive = np.ones(len(s.init_name), bool)
        alive[drop_init] = False
        defined[s.init_name[alive]] = True
        if len(graph.sparse_initializer):
            sparse = s.find_many([x.values.name for x in graph.sparse_initializer])
            defined[sparse[sparse >= 0]] = True
        defined[0] = False
        kept = np.flatnonzero(defined[s.vi_name])
        assert len(graph.value_info) == len(s.vi_name)  # as scanned: nothing before this edits them
        if len(kept) < len(s.vi_name):
            # the kept declarations' fields as written (a dynamo export
            # declares every tensor: thousands of messages not copied one by one)
            data = s.data
            del graph.value_info[:]
            graph.MergeFromString(b"".join(data[a:b] for a, b in zip(s.vi_start[kept].tolist(),
                                                                        s.vi_end[kept].tolist())))


def _dead(t, keep: np.ndarray, emitted_ins: np.ndarray, dead: set) -> tuple[list[int], list[int]]:
    """rewrite.drop_dead_constants on the arrays: of ``dead`` (constants the
    fused regions read), the initializers and single-output producers
    nothing reads any more, then whatever only those read."""
    s = t.scan
    nstr = len(t.names)
    reads = np.repeat(keep, t.in_count)
    readers = np.bincount(s.in_ids[reads], minlength=nstr)
    # every read of an emitted node's input counts once per occurrence
    readers += np.bincount(emitted_ins, minlength=nstr)  # (a name read once is enough to keep it)
    readers[s.output_name] += 1
    gin = np.zeros(nstr, bool)
    gin[s.input_name] = True
    work = t.scan.find_many(sorted(dead)).astype(np.int64)
    work = work[work >= 0]
    seen = np.zeros(nstr, bool)
    drop_init: list[int] = []
    drop_node: list[int] = []
    single = t.out_count == 1
    while len(work):
        work = np.unique(work)
        work = work[(readers[work] == 0) & ~seen[work]]
        if not len(work):
            break
        seen[work] = True
        k = t.init_of[work]
        drop_init.extend(k[(k >= 0) & ~gin[work]].tolist())
        p = t.producer[work]
        p = p[(p >= 0)]
        p = p[keep[p] & single[p]]
        drop_node.extend(p.tolist())
        keep = keep.copy()
        keep[p] = False
        if not len(p):
            break
        mask = np.zeros(t.n, bool)
        mask[p] = True
        ins = s.in_ids[np.repeat(mask, t.in_count)]
        ins = ins[ins != 0]
        np.subtract.at(readers, ins, 1)
        work = ins.astype(np.int64)
    return drop_init, drop_node


def _record(g, res) -> None:
    """The fusions of ``g`` in candidate order."""
    idx = g.index
    for s in sorted(g.selected, key=lambda s: s.candidate.order):
        res.fusions.append(record(idx, s.match, s.emission.qualified, s.use_bias, s.compute_type))
