"""The fuse pass in three steps over typed objects:

plan    every graph (main graph, If/Loop/Scan bodies) matched, nothing changed:
        a Plan of one GraphPlan per graph (its index, candidates incl. legacy
        plugin nodes, near-misses);
select  per candidate, whether the target can express it, in which compute
        type and as which op, bias Add folded in or not; the rest
        become near-misses, and GELUs already in the target's op are reported
        only. inspect reports exactly these decisions;
rewrite each graph's selected regions replaced by the target's op, then the
        target finishes the model (opset imports, model-local functions).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
from onnx import ModelProto, TensorProto

from .match import single_op
from .match.bias import InferredShapes, find_bias
from .index.graph import GraphIndex
from .match.matcher import find_matches
from .match.numeric import wider
from .report import FuseResult, Match, NearMiss, record
from .rewrite.graph import rewrite_graph
from .rewrite.emit import NameGen, drop_dead_constants, drop_stale_value_info, drop_unused_functions
from .targets import Emission, Target, default_opset
from ..errors import InputError, UnsupportedError
from ..onnxio.arraytable import ArrayTable, outer_references, scanned_table, subgraph_table
from ..onnxio.walk import subgraphs


@dataclass(slots=True)
class Candidate:
    """A GELU found in a graph; legacy: a CustomGeluPluginDynamic node, whose
    bias is an array (``legacy_bias``), not a tensor of the graph. select()
    takes its decisions: the type it computes in and the op it becomes
    (``emission.inputs_bias``: the bias Add is folded into that op)."""

    match: Match
    legacy: bool = False
    legacy_bias: np.ndarray | None = None
    # its place among the graph's candidates (and so in the report):
    # regions by anchor, then single-op GELUs, then legacy plugin nodes
    order: tuple = (0, 0)
    compute_type: int = 0
    emission: Emission | None = None

    @property
    def use_bias(self) -> bool:
        return self.emission.inputs_bias

    @property
    def removed(self) -> tuple[int, ...]:
        """The nodes the rewrite replaces: the region's, and the bias Add folded in."""
        mt = self.match
        return (*mt.nodes, mt.bias_node) if self.use_bias and mt.bias_node is not None else mt.nodes


@dataclass
class GraphPlan:
    index: GraphIndex
    candidates: list[Candidate]
    misses: list[NearMiss]
    selected: list[Candidate] = field(default_factory=list)  # select()'s


@dataclass
class Plan:
    """Every graph of a model matched (inner graphs first), and the model's
    default-domain opset when it was planned."""

    graphs: list[GraphPlan]
    opset: int


def plan(model: ModelProto, base_dir: str | None = None, table=None, may_sort: bool = True) -> Plan:
    """Match every graph without changing anything; indexes stay valid for
    the rewrite that follows (inner graphs first). ``table``: the main
    graph's onnxio.ArrayTable, if validation read it. Every graph is read
    by the native scanner: the main graph as its file's bytes or its own
    serialization, an If/Loop/Scan body as its own
    (onnxio.arraytable.scanned_table / subgraph_table). An in-memory graph
    whose nodes are out of topological order is sorted first (the checker
    refuses such a file; ONNX Runtime sorts it); with ``may_sort`` False
    (inspect: the caller's model) that happens on a copy."""
    if may_sort is False:
        try:
            return plan(model, base_dir, table, may_sort=None)
        except _Unsorted:
            copy = ModelProto()
            copy.CopyFrom(model)
            return plan(copy, base_dir)
    if not isinstance(table, ArrayTable) or table.graph is not model.graph:
        table = _table(model.graph, scanned_table, model, may_sort)
    out: list[GraphPlan] = []
    # one bias.InferredShapes per model: runs only when an undeclared shape is asked for
    _plan_graph(model.graph, table, None, "", base_dir, InferredShapes(model), may_sort, out)
    return Plan(out, default_opset(model))


def _plan_graph(graph, tbl, parent, path, base_dir, inferred, may_sort, out: list) -> None:
    """One graph's GraphPlan appended to ``out``, after its If/Loop/Scan bodies'."""
    idx = GraphIndex(graph, tbl, parent, path, base_dir)
    idx.inferred = inferred
    for i in idx.nested:
        node = idx.nodes[i]
        for attr, sub in subgraphs(node):
            label = node.name or f"{node.op_type}#{i}"
            _plan_graph(sub, _table(sub, subgraph_table, sub, may_sort), idx,
                        f"{path}/{label}/{attr}" if path else f"{label}/{attr}", base_dir, inferred, may_sort, out)
    matches, misses = find_matches(idx)
    # GELUs that are one node (match/single_op), searched for only in a graph
    # with an op type holding "Gelu" (each of theirs does: tests/test_native.py)
    one_node = any("Gelu" in k for k in idx.arrays.kind_ids)
    ones, one_misses = single_op.find_native(idx) if one_node else ([], [])
    misses += one_misses
    for m in matches:
        idx.region_inputs[m.root] = (m.leaf, *m.consts)
    matches = [find_bias(idx, m) for m in matches]
    ones = [m if m.bias_inside else find_bias(idx, m) for m in ones]
    legacy, legacy_misses = single_op.find_legacy(idx) if one_node else ([], [])
    cands = ([Candidate(m, order=(0, m.anchor)) for m in matches]
             + [Candidate(m, order=(1, k)) for k, m in enumerate(ones)]
             + [Candidate(m, True, b, order=(2, k)) for k, (m, b) in enumerate(legacy)])
    out.append(GraphPlan(idx, cands, misses + legacy_misses))


class _Unsorted(Exception):
    """A graph must be sorted and the model is the caller's (inspect)."""


def _table(graph, read, arg, may_sort):
    """``read(arg)`` (the graph's ArrayTable); a graph out of topological
    order sorted in place and read again; InputError for a name written
    twice or a cycle (the checker refuses such files too)."""
    t = read(arg)
    if t is not None:
        return t
    if not may_sort:
        raise _Unsorted
    if not _sort(graph) or (t := read(arg)) is None:
        raise InputError(f"graph {graph.name!r}: a tensor name is written twice, or the nodes form a cycle")
    return t


def _sort(graph) -> bool:
    """Put ``graph``'s nodes in topological order (stable: each node as
    early as what it reads allows, ties by position); False when a name is
    written twice or the nodes form a cycle."""
    nodes = list(graph.node)
    writer: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                if o in writer:
                    return False
                writer[o] = i
    after: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for i, n in enumerate(nodes):
        reads = {x for x in n.input if x}
        for _, g in subgraphs(n):
            reads |= outer_references(g)
        for p in {writer[x] for x in reads if x in writer}:
            if p != i:
                after[p].append(i)
                waiting[i] += 1
    ready = [i for i, w in enumerate(waiting) if not w]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in after[i]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, j)
    if len(order) != len(nodes):
        return False
    copies = [type(nodes[i])() for i in order]  # detached: graph.node is cleared below
    for c, i in zip(copies, order):
        c.CopyFrom(nodes[i])
    del graph.node[:]
    graph.node.extend(copies)
    return True


# below this share of the main graph's nodes left out by stand-ins, the input
# itself is checked, not a check model (fusion/rewrite/checkmodel.py)
MIN_SAVED_SHARE = 0.25


def standins_may_pay(plan: Plan) -> bool:
    """Whether the main graph's selected regions hold MIN_SAVED_SHARE of
    its nodes: the most a check model can leave out (below it, check_model
    returns None)."""
    g = next(g for g in plan.graphs if g.index.parent is None)
    most = sum(len(s.match.nodes) for s in g.selected)
    return most >= MIN_SAVED_SHARE * g.index.arrays.n


def expressible(plan: Plan, target: Target) -> bool:
    """Whether the target can express any GELU found (before its opset is raised)."""
    found = [c.match for g in plan.graphs for c in g.candidates]
    return any(target.unsupported(m.form, wider(m.leaf_type, m.root_type)) is None for m in found)


def replaced(plan: Plan, target: Target) -> frozenset[str]:
    """The outputs of every node the target's rewrite of ``plan`` replaces
    (select on a scratch report, then undone)."""
    select(plan, target, FuseResult(ModelProto(), target.name))
    out: set[str] = set()
    for g in plan.graphs:
        for s in g.selected:
            out.update(o for i in s.removed for o in g.index.node(i).output)
        g.selected = []
    return frozenset(out)


def refuse_unfused(plan: Plan, target: Target, left: dict[str, str]) -> None:
    """UnsupportedError when a node the opset upgrade left unproven, for the
    fusion to replace, is not replaced by ``plan`` after all."""
    kept = sorted(set(left) - replaced(plan, target))
    if kept:
        raise UnsupportedError(left[kept[0]])


def select(plan: Plan, target: Target, res: FuseResult) -> dict[str, int | None]:
    """Fill each graph's ``selected``; near-misses and GELUs already in the
    target's op go to ``res``. Returns the dtypes of the model-local function
    bodies the target writes (see _function_dtypes)."""
    for g in plan.graphs:
        others = []  # (order, kind, what) of the rest (few): no tuple per GELU selected
        for c in g.candidates:
            kind, what = _decide(g.index, c, target)
            if kind == "selected":
                g.selected.append(what)
            else:
                others.append((c.order, kind, what))
        others.sort(key=lambda d: d[0])  # the report lists them in candidate order
        res.near_misses.extend(what for _, kind, what in others if kind == "miss")
        res.already.extend(what for _, kind, what in others if kind == "already")
        res.near_misses.extend(g.misses)
    return _function_dtypes(plan, target)


def _decide(idx, c: Candidate, target: Target):
    """("miss", NearMiss) when the target cannot express it, ("already",
    Fusion) when it already is the target's op, else ("selected", c) with
    its decisions taken."""
    mt = c.match
    ct = wider(mt.leaf_type, mt.root_type)
    why = target.unsupported(mt.form, ct)
    if why:
        return "miss", NearMiss(idx.path, idx.label(mt.anchor), why.code, why.reason, mt.form)
    has_bias = c.legacy_bias is not None if c.legacy else bool(mt.bias)
    use_bias = has_bias and target.takes_bias(mt.form) and ct == mt.leaf_type
    em = target.emission(mt.form, use_bias, mt.alpha)
    if mt.single_op is not None and single_op.already_target(mt, em, use_bias):
        return "already", record(idx, mt, em.qualified, use_bias, ct)
    c.compute_type, c.emission = ct, em
    return "selected", c


def report(plan: Plan, target: Target, res: FuseResult) -> None:
    """What rewrite() would record, without changing anything (inspect)."""
    select(plan, target, res)
    for g in plan.graphs:
        _record(g, res)


def _record(g: GraphPlan, res: FuseResult) -> None:
    """The fusions of ``g`` in candidate order."""
    for s in sorted(g.selected, key=lambda s: s.order):
        res.fusions.append(record(g.index, s.match, s.emission.qualified, s.use_bias, s.compute_type))


def _function_dtypes(plan: Plan, target: Target) -> dict[str, int | None]:
    """Op type -> the dtype of its model-local function body (None: polymorphic
    via CastLike), for each op of the target's own domain it emits. Older
    opsets have no CastLike: the bodies are then typed, one dtype per op type,
    and call sites of other dtypes compute in float32 (their bias, of their
    own dtype, is then added in front)."""
    if not target.writes_functions:
        return {}
    chosen = [s for g in plan.graphs for s in g.selected]
    if not target.typed_functions(plan.opset):
        return {op: None for s in chosen for op in _own_ops(s.emission)}
    while True:
        # a site moved to float32 may lose its bias and so change op type:
        # repeat until every op type emitted has its body (sites only ever
        # move to float32, so this ends)
        types: dict[str, set[int]] = {}
        for s in chosen:
            for op in _own_ops(s.emission):
                types.setdefault(op, set()).add(s.compute_type)
        fn_dtype = {op: next(iter(ts)) if len(ts) == 1 else TensorProto.FLOAT for op, ts in types.items()}
        moved = False
        for s in chosen:
            if all(fn_dtype[op] == s.compute_type for op in _own_ops(s.emission)):
                continue
            mt, moved = s.match, True
            s.compute_type = TensorProto.FLOAT  # the body of an op type in two dtypes
            s.emission = target.emission(mt.form, s.use_bias and s.compute_type == mt.leaf_type, mt.alpha)
        if not moved:
            return fn_dtype


def _own_ops(em: Emission) -> list[str]:
    """The op types of an emission outside the default domain (those a target
    writing functions writes them for)."""
    return [n.op_type for n in em.nodes if n.domain]


def rewrite(m: ModelProto, plan: Plan, target: Target, res: FuseResult, before_edit=None) -> None:
    """Select, then replace every selected region (in place) and finish the
    model. ``before_edit(plan)`` runs between the two (the model unchanged)."""
    names = NameGen([g.index for g in plan.graphs])
    fn_dtype = select(plan, target, res)
    if before_edit is not None:
        before_edit(plan)
    dead: set[str] = set()
    nested = len(plan.graphs) > 1 or bool(plan.graphs[0].index.nested)
    for g in plan.graphs:  # inner graphs first: a parent then writes its nodes' new bodies
        if g.selected:
            rewrite_graph(g, names, dead, tidy=not nested)
            _record(g, res)
    if not res.fusions:
        return
    if nested:  # names cross scopes: dead constants and stale value_info over every graph
        graphs = [g.index.graph for g in plan.graphs]
        drop_dead_constants(dead, graphs)
        drop_stale_value_info(graphs)
    drop_unused_functions(m)
    target.finish(m, plan.opset, fn_dtype)
