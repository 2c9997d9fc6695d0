"""The rewrite of a graph the native scanner read, at the byte level: the
output's nodes are the input's node fields that stay, copied as bytes, with
each fused region's replacement (rewrite.emit_nodes, single_op.legacy_nodes)
where its last node was; the graph's node list is then replaced in one parse.
"""
from __future__ import annotations

from operator import itemgetter

import numpy as np

from .emit import dead_constants, emit_nodes, remove_indices
from ...onnxio.format import len_field
from ..match import single_op


def rewrite_graph(g, names, dead: set, tidy: bool = True) -> None:
    """Replace every selected region of ``g`` (a GraphPlan); the constants
    the regions read go to ``dead``. ``tidy``: also drop this graph's dead constants and
    stale value_info (a model without subgraphs; with them, names cross
    scopes and plan.rewrite drops them over every graph at the end)."""
    edits, read, written = _emit_all(g, names, dead)
    _splice(g, edits, read, written, dead if tidy else set(), tidy)


def _emit_all(g, names, dead: set) -> list:
    """(anchor position, node bytes, removed node indices) per replacement,
    and the string ids of the names the replacements read and write that
    the model already had (new names have none)."""
    idx = g.index
    t = idx.arrays
    edits = []
    read, written = [], []
    for s in g.selected:
        mt = s.match
        if s.legacy:
            nodes = single_op.legacy_nodes(mt, s.legacy_bias, s.emission, s.compute_type, names, idx.graph)
        else:
            nodes = emit_nodes(idx, mt, s.emission, s.compute_type, s.use_bias, names, dead)
            dead.update(mt.consts)
        edits.append((max(mt.nodes), b"".join(n.data for n in nodes), s.removed))
        for n in nodes:
            read.extend(n.inputs)
            written.extend(n.outputs)
    ids = [t.scan.find_many(x).astype(np.int64) for x in (read, written)]  # one call each: ~1 µs a name
    return edits, ids[0][ids[0] > 0], ids[1][ids[1] > 0]  # 0: the empty name


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
    keep[[i for _, _, removed in edits for i in removed]] = False
    readers = np.bincount(s.in_ids[np.repeat(keep, t.in_count)], minlength=len(t.names))
    readers += np.bincount(read, minlength=len(t.names))  # a name read once is enough to keep it
    readers[s.output_name] += 1
    out1 = np.full(n, -1, np.int32)
    one = np.flatnonzero(keep & (t.out_count == 1))
    out1[one] = s.out_ids[s.node_out_off[one]]
    work = s.find_many(sorted(dead)).astype(np.int64)
    droppable = ~np.isin(s.init_name, s.input_name)
    gone_init, gone_node = dead_constants(readers, work[work >= 0], s.init_name, droppable, out1,
                                          s.in_ids, t.in_count)
    keep &= ~gone_node
    # a node holding subgraphs as it is now (its bodies may have changed)
    alone = {i: len_field(graph.node[i].SerializeToString()) for i in t.with_subgraphs if keep[i]}
    chunks = node_fields(s, keep, [(p, 0, body) for p, body, _ in edits], alone)
    del graph.node[:]
    graph.MergeFromString(chunks)
    remove_indices(graph.initializer, set(np.flatnonzero(gone_init).tolist()))
    if tidy and len(s.vi_name):
        defined = np.zeros(len(t.names), bool)
        defined[s.out_ids[np.repeat(keep, t.out_count)]] = True
        defined[written] = True
        defined[s.input_name] = True
        defined[s.init_name[~gone_init]] = True
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


def node_fields(s, keep: np.ndarray, inserts: list, alone: dict | None = None) -> bytes:
    """The node fields of scan ``s``: the ``keep`` ones as written (a run of
    adjacent fields as one slice; a node in ``alone``: its bytes there, a
    run of its own) and ``inserts`` (position, 0: in that node's place / 2:
    right after it, bytes), in node order."""
    alone = alone or {}
    kept = np.flatnonzero(keep)
    start, end = s.node_start, s.node_end
    cut = np.zeros(len(keep) + 1, bool)  # a run ends after such a node
    cut[[p for p, where, _ in inserts if where == 2] + list(alone)] = True
    if len(kept):
        brk = (np.diff(kept) != 1) | (start[kept[1:]] != end[kept[:-1]]) | cut[kept[:-1]]
        if alone:
            brk |= np.isin(kept[1:], list(alone))
        brk = np.flatnonzero(brk) + 1
        firsts, lasts = kept[np.r_[0, brk]], kept[np.r_[brk - 1, len(kept) - 1]]
    else:
        firsts = lasts = kept
    data = s.data
    items = [(f, 1, alone[f] if f in alone else data[start[f]:end[la]])
             for f, la in zip(firsts.tolist(), lasts.tolist())] + inserts
    items.sort(key=itemgetter(0, 1))
    return b"".join(body for _, _, body in items)
