"""A graph's nodes as the native scanner read them (onnxio.wire): numpy
arrays (ArrayTable). fusion.index.graph.GraphIndex slices them per access
(index.graph.Slices), and the fuse pass's vectorised steps use them as
they are.

Names are string ids of the scan's table (id 0 is "": an omitted optional
name). ``producer[s]`` is the node that writes string s (-1: none);
``cons_off`` / ``cons_nodes`` list the nodes that read it, each once, in
node order (a node reading a name twice counts once, as GraphIndex counts).
"""
from __future__ import annotations

import graphlib
from collections.abc import Sequence

import numpy as np

from ..errors import InputError, UnsupportedError
from .walk import subgraphs
from .wire import NF_SUBGRAPH, OK, declined, raw_scan, scan_graphs


def unique(x: np.ndarray) -> np.ndarray:
    """np.unique(x) by sorting (numpy 2's hash-based np.unique is ~15x slower
    on a million ints)."""
    s = np.sort(x, kind="stable")
    if len(s) < 2:
        return s
    keep = np.empty(len(s), bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def first_true(mask: np.ndarray, default: int = -1) -> int:
    """The index of the first True in ``mask``, else ``default``."""
    k = int(np.argmax(mask)) if len(mask) else 0
    return k if len(mask) and mask[k] else default


def first_repeat(ids: np.ndarray) -> int:
    """The first position whose value came before it, else -1."""
    if len(ids) < 2:
        return -1
    order = np.argsort(ids, kind="stable")
    same = ids[order[1:]] == ids[order[:-1]]
    return int(order[1:][same].min()) if same.any() else -1


def any_per_node(mask: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Per node i, whether any of ``mask[off[i]:off[i+1]]`` is True."""
    c = np.concatenate([[0], np.cumsum(mask)])
    return c[off[1:]] > c[off[:-1]]


def node_on_cycle(n: int, reader: np.ndarray, dep: np.ndarray, more: list) -> int | None:
    """None when each of the ``n`` nodes reads only names written before it
    (node ``reader[p]`` reads what node ``dep[p]`` writes, -1: none; ``more``:
    (reader, writer) pairs), else a node on a cycle, -1 when there is none."""
    if not (dep >= reader).any() and all(j < i for i, j in more):
        return None
    deps: list[set] = [set() for _ in range(n)]
    for i, j in [*zip(reader.tolist(), dep.tolist()), *more]:
        if j >= 0:
            deps[i].add(j)
    order = graphlib.TopologicalSorter(dict(enumerate(deps)))
    try:
        order.prepare()
        return -1
    except graphlib.CycleError:  # it still orders the nodes no cycle blocks
        left = set(range(n))
        while ready := order.get_ready():
            order.done(*ready)
            left.difference_update(ready)
    # Every node left has an unordered dependency: following those must
    # revisit a node, which lies on a cycle.
    i, seen = min(left), set()
    while i not in seen:
        seen.add(i)
        i = next(d for d in deps[i] if d in left)
    return i


class LazyList(Sequence):
    """``make(i)`` for each i, made once on access (node protos, labels)."""

    def __init__(self, n: int, make):
        self._items: dict = {}  # only those made (a list of n slots: a big graph's in every full collection)
        self._n, self._make = n, make

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        i = i if i >= 0 else i + self._n
        v = self._items.get(i)
        if v is None:
            v = self._items[i] = self._make(i)
        return v


def outer_references(graph) -> set[str]:
    """Names a (sub)graph reads that it does not define itself (recursively)."""
    defined = {i.name for i in graph.input}
    defined.update(t.name for t in graph.initializer)
    defined.update(t.values.name for t in graph.sparse_initializer)
    used: set[str] = set()
    for node in graph.node:
        used.update(n for n in node.input if n)
        for _, g in subgraphs(node):
            used |= outer_references(g)
        defined.update(node.output)
    used.update(o.name for o in graph.output)
    return used - defined


class ArrayTable:
    """One scanned graph (a main graph, or an If/Loop/Scan body scanned on
    its own: see the module doc). Valid while ``graph`` is the unchanged
    graph of the bytes scanned. A node holding subgraphs reads every outer
    name its bodies use (``with_subgraphs``: those nodes)."""

    def __init__(self, graph, scan):
        self.graph, self.scan, self.names = graph, scan, scan.names
        s = scan
        n = s.n_nodes
        self.n = n
        strings = np.empty(len(self.names), dtype=object)
        used = unique(np.concatenate([s.node_op, s.node_dom]))
        strings[used] = [self.names[int(i)] for i in used]
        # op types and domains -> their string ids
        self.kind_ids: dict[str, int] = {strings[i]: int(i) for i in used}
        # tuples: the cycle collector stops tracking them (a big graph's lists were
        # walked by every full collection of a fuse)
        self.ops: tuple[str, ...] = tuple(strings[s.node_op].tolist())
        self.domains: tuple[str, ...] = tuple(strings[s.node_dom].tolist())
        nodes = graph.node
        self.nodes = LazyList(n, nodes.__getitem__)
        self.with_subgraphs: list[int] = np.flatnonzero(s.node_flags & NF_SUBGRAPH).tolist()
        self.attributed: list[int] = np.flatnonzero(np.diff(s.node_attr_off) > 0).tolist()
        nstr = len(self.names)
        self.in_count = np.diff(s.node_in_off)
        self.out_count = np.diff(s.node_out_off)
        # who writes each string
        prod = np.full(nstr, -1, np.int32)
        writer = np.repeat(np.arange(n, dtype=np.int32), self.out_count)
        prod[s.out_ids] = writer
        prod[0] = -1
        self.producer = prod
        # who reads it: (name, node) pairs, each once, grouped by name in node order
        reader = np.repeat(np.arange(n, dtype=np.int64), self.in_count)
        read = s.in_ids.astype(np.int64)
        if self.with_subgraphs:
            outer_ids, outer_readers = [read], [reader]
            for i in self.with_subgraphs:
                refs = set()
                for _, g in subgraphs(graph.node[i]):
                    refs |= outer_references(g)
                ids = scan.find_many(sorted(refs)).astype(np.int64)
                outer_ids.append(ids[ids > 0])
                outer_readers.append(np.full(int((ids > 0).sum()), i, np.int64))
            read, reader = np.concatenate(outer_ids), np.concatenate(outer_readers)
        key = read * max(n, 1) + reader
        key = unique(key[read != 0])
        self.cons_nodes = (key % max(n, 1)).astype(np.int32)
        self.cons_off = np.zeros(nstr + 1, np.int64)
        np.cumsum(np.bincount((key // max(n, 1)).astype(np.int64), minlength=nstr), out=self.cons_off[1:])
        self.init_of = np.full(nstr, -1, np.int32)
        self.init_of[s.init_name] = np.arange(len(s.init_name), dtype=np.int32)
        self._ids: dict[str, int] = {}

    # -- names ---------------------------------------------------------------
    def id_of(self, name) -> int:
        """The string id of ``name``; -1 when the graph has no such string."""
        i = self.names.ids.get(name)
        if i is None:
            i = self._ids.get(name)
            if i is None:
                i = self._ids[name] = self.scan.find(name) if isinstance(name, str) else -1
        return i


def same_counts(g, s) -> bool:
    """Whether ``s`` lists as many of each thing as ``g`` (it always does
    for one parse of one buffer)."""
    return (s.n_nodes == len(g.node) and len(s.init_name) == len(g.initializer)
            and len(s.input_name) == len(g.input) and len(s.output_name) == len(g.output)
            and len(s.vi_name) == len(g.value_info))


def _written_once_in_order(s, more_given, outer: bool) -> bool:
    """Every name written once (the graph's inputs, initializers, the
    string ids ``more_given`` and node outputs), read after it is written;
    ``outer``: a subgraph, whose names written nowhere in it are the
    enclosing graphs'."""
    n = s.n_nodes
    inputs, inits = s.input_name, s.init_name
    if not (inputs.all() and inits.all()) or len(unique(inputs)) != len(inputs) \
            or len(unique(inits)) != len(inits):
        return False  # an empty or repeated input / initializer name
    outs = s.out_ids[s.out_ids != 0]
    given = unique(np.concatenate([inputs, inits, np.asarray(more_given, inputs.dtype)]))
    written = np.concatenate([given, outs])
    if len(unique(written)) != len(written):
        return False
    # every input read after it is written (so the nodes are in order, and acyclic)
    when = np.full(len(s.names), -1 if outer else n, np.int64)  # never written here: outer, or an error
    when[given] = -1
    when[outs] = np.repeat(np.arange(n), np.diff(s.node_out_off))[s.out_ids != 0]
    reader = np.repeat(np.arange(n), np.diff(s.node_in_off))
    read = s.in_ids != 0
    if (when[s.in_ids[read]] >= reader[read]).any():
        return False
    return bool(s.output_name.all()) and not (when[s.output_name] >= n).any()


def scanned_table(model) -> ArrayTable | None:
    """The main graph of ``model`` (a ModelProto, not validated here) as an
    ArrayTable of its own serialization; None as for graph_table."""
    return graph_table(model.graph, raw_scan(model.SerializeToString()), outer=False)


def subgraph_table(graph) -> ArrayTable | None:
    """An If/Loop/Scan body as an ArrayTable (onnxio.wire.scan_graphs); None as for graph_table."""
    return graph_table(graph, scan_graphs([graph]), outer=True)


def graph_table(g, s, outer: bool) -> ArrayTable | None:
    """``g`` as the ArrayTable of ``s`` (wire.raw_scan of its own
    serialization), or None when a name is written twice or read before it
    is written (a graph out of topological order: fusion/plan.py sorts
    one); when the scanner declined the bytes, one line with its reason
    (wire.declined). A sparse initializer is a name the graph writes, never a constant."""
    why = declined(s)
    if why is not None:
        names = s is not None and s.status == OK  # a whole scan: its names are what it declines
        raise (InputError if names else UnsupportedError)(f"graph {g.name!r}: {why}")
    if not same_counts(g, s):
        return None
    sparse = s.find_many([t.values.name for t in g.sparse_initializer]) if len(g.sparse_initializer) else []
    sparse = [i for i in np.asarray(sparse).tolist() if i > 0]
    return ArrayTable(g, s) if _written_once_in_order(s, sparse, outer) else None
