"""The fuse pass in three steps over typed objects:

plan    every graph (main graph, If/Loop/Scan bodies) matched, nothing changed:
        a Plan of one GraphPlan per graph (its index, candidates incl. legacy
        plugin nodes, near-misses);
select  per candidate, whether the target can express it, in which compute
        type and as which op, bias Add folded in or not (Selected); the rest
        become near-misses, and GELUs already in the target's op are reported
        only. inspect reports exactly these decisions;
rewrite each graph's selected regions replaced by the target's op, then the
        target finishes the model (opset imports, model-local functions).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from onnx import ModelProto, TensorProto

from .match import single_op
from .match.bias import InferredShapes, find_bias
from .match.findings import Match, NearMiss
from .index.graph import GraphIndex
from .match.single_op import find_legacy, legacy_nodes
from .match.matcher import find_matches
from .replay.matches import MatchSet, RegionInputs
from .replay.matches import replay_bias, replay_matches
from .report import FuseResult, record
from .rewrite.setrewrite import rewrite_graph, set_records
from .rewrite.emit import (Emission, NameGen, default_opset, drop_dead_constants, drop_stale_value_info, emit_nodes,
                           replace_regions, wider)
from .targets import Target
from ..onnxio.arraycheck import scanned_table
from ..onnxio.walk import subgraphs


@dataclass
class Candidate:
    """A GELU found in a graph; legacy: a CustomGeluPluginDynamic node, whose
    bias is an array (``legacy_bias``), not a tensor of the graph."""

    match: Match
    legacy: bool = False
    legacy_bias: np.ndarray | None = None
    # its place among the graph's candidates (and so in the report):
    # regions by anchor, then single-op GELUs, then legacy plugin nodes
    order: tuple = (0, 0)

    @property
    def has_bias(self) -> bool:
        return self.legacy_bias is not None if self.legacy else bool(self.match.bias)


@dataclass
class Selected:
    """A candidate the target will rewrite, with every decision taken: the
    type it computes in and the op it becomes (``emission.inputs_bias``: the
    bias Add is folded into that op)."""

    candidate: Candidate
    compute_type: int
    emission: Emission

    @property
    def match(self) -> Match:
        return self.candidate.match

    @property
    def use_bias(self) -> bool:
        return self.emission.inputs_bias


@dataclass
class SelectedSet:
    """A MatchSet (fusion/replay/matches.py) the target rewrites, every member
    alike: the decisions select took on its representative."""

    set: MatchSet
    compute_type: int
    emission: Emission

    @property
    def match(self) -> Match:
        return self.set.match

    @property
    def use_bias(self) -> bool:
        return self.emission.inputs_bias

    def members(self) -> list[Selected]:
        """Each member as its own Selected (the one-by-one way)."""
        return [Selected(Candidate(self.set.member(j), order=(0, int(a))), self.compute_type, self.emission)
                for j, a in enumerate(self.set.anchors.tolist())]


@dataclass
class GraphPlan:
    index: GraphIndex
    candidates: list[Candidate]
    misses: list[NearMiss]
    selected: list[Selected] = field(default_factory=list)
    # region GELUs carried from one representative each (scanned main graphs)
    sets: list[MatchSet] = field(default_factory=list)
    selected_sets: list[SelectedSet] = field(default_factory=list)


@dataclass
class Plan:
    """Every graph of a model matched (inner graphs first), and the model's
    default-domain opset when it was planned."""

    graphs: list[GraphPlan]
    opset: int

    def selected(self) -> list:
        """Every Selected and SelectedSet (they share what _function_dtypes reads)."""
        return [s for g in self.graphs for s in [*g.selected, *g.selected_sets]]


def plan(model: ModelProto, base_dir: str | None = None, table=None) -> Plan:
    """Match every graph without changing anything; indexes stay valid for
    the rewrite that follows (inner graphs first). ``table``: the main
    graph's onnxio table, if validation read it (GraphIndex checks it
    belongs to the graph). A main graph is read by the native scanner
    (its file's bytes, else its own serialization); only what the arrays
    do not cover is indexed over the protos (onnxio.arraycheck.scanned_table)."""
    if not getattr(table, "lazy", False) or table.graph is not model.graph:
        table = scanned_table(model) or table
    out: list[GraphPlan] = []
    inferred = InferredShapes(model)  # runs only when an undeclared shape is asked for

    def visit(graph, parent, path):
        idx = GraphIndex(graph, parent, path, base_dir, table if parent is None else None)
        idx.inferred = inferred
        for i in idx.nested:
            node = idx.nodes[i]
            for attr, sub in subgraphs(node):
                label = node.name or f"{node.op_type}#{i}"
                visit(sub, idx, f"{path}/{label}/{attr}" if path else f"{label}/{attr}")
        # a main graph the native scanner read: the matcher once per distinct
        # neighbourhood, its answers carried to the rest (fusion/replay/matches.py)
        replayed = replay_matches(idx)
        sets: list[MatchSet] = []
        if replayed is None:
            matches, misses = find_matches(idx)
        else:
            sets, matches, misses = replayed.sets, replayed.singles, replayed.misses
            idx.region_inputs = RegionInputs(idx, sets)
        ones, one_misses = single_op.find_native(idx)
        misses += one_misses
        for m in matches:
            idx.region_inputs[m.root] = [m.leaf, *sorted(m.consts)]
        searched: set[int] = set()  # members the bias replay searched one by one
        if sets:
            sets, more = replay_bias(idx, sets)
            searched = {id(m) for m in more}
            matches = sorted(matches + more, key=lambda m: m.anchor)
        for m in matches + ones:
            if not m.bias_inside and id(m) not in searched:
                find_bias(m)
        legacy, legacy_misses = find_legacy(idx)
        cands = ([Candidate(m, order=(0, m.anchor)) for m in matches]
                 + [Candidate(m, order=(1, k)) for k, m in enumerate(ones)]
                 + [Candidate(m, True, b, order=(2, k)) for k, (m, b) in enumerate(legacy)])
        out.append(GraphPlan(idx, cands, misses + legacy_misses, sets=sets))

    visit(model.graph, None, "")
    return Plan(out, default_opset(model))


def expressible(plan: Plan, target: Target) -> bool:
    """Whether the target can express any GELU found (before its opset is raised)."""
    found = [c.match for g in plan.graphs for c in g.candidates] + [ms.match for g in plan.graphs for ms in g.sets]
    return any(target.unsupported(m.form, wider(m.leaf_type, m.root_type)) is None for m in found)


def select(plan: Plan, target: Target, res: FuseResult) -> dict[str, int | None]:
    """Fill each graph's ``selected``; near-misses and GELUs already in the
    target's op go to ``res``. Returns the dtypes of the model-local function
    bodies the target writes (see _function_dtypes)."""
    for g in plan.graphs:
        idx = g.index
        misses: list[tuple] = []  # (order, NearMiss): in candidate order, as the report lists them
        already: list[tuple] = []
        for c in g.candidates:
            kind, what = _decide(idx, c, target)
            if kind == "miss":
                misses.append((c.order, what))
            elif kind == "already":
                already.append((c.order, what))
            else:
                g.selected.append(what)
        for ms in g.sets:
            kind, what = _decide(idx, Candidate(ms.member(0)), target)
            if kind == "miss":
                misses.extend(((0, a), NearMiss(idx.path, idx.label(a), what.code, what.reason, what.form))
                              for a in ms.anchors.tolist())
            else:  # a region GELU: never already the target's op
                g.selected_sets.append(SelectedSet(ms, what.compute_type, what.emission))
        misses.sort(key=lambda kv: kv[0])
        already.sort(key=lambda kv: kv[0])
        res.near_misses.extend(v for _, v in misses)
        res.already.extend(v for _, v in already)
        res.near_misses.extend(g.misses)
    return _function_dtypes(plan, target)


def _decide(idx, c: Candidate, target: Target):
    """("miss", NearMiss) when the target cannot express it, ("already",
    Fusion) when it already is the target's op, else ("selected", Selected)."""
    mt = c.match
    ct = wider(mt.leaf_type, mt.root_type)
    why = target.unsupported(mt.form, ct)
    if why:
        return "miss", NearMiss(idx.path, idx.label(mt.anchor), why.code, why.reason, mt.form)
    use_bias = c.has_bias and target.takes_bias(mt.form) and ct == mt.leaf_type
    em = target.emission(mt.form, use_bias, mt.alpha)
    if single_op.already_target(mt, em, use_bias):
        return "already", record(idx, mt, em, use_bias, ct)
    return "selected", Selected(c, ct, em)


def report(plan: Plan, target: Target, res: FuseResult) -> None:
    """What rewrite() would record, without changing anything (inspect)."""
    select(plan, target, res)
    for g in plan.graphs:
        keyed = [(s.candidate.order, record(g.index, s.match, s.emission, s.use_bias, s.compute_type))
                 for s in g.selected]
        for ss in g.selected_sets:
            keyed.extend(zip([(0, a) for a in ss.set.anchors.tolist()], set_records(g.index, ss)))
        keyed.sort(key=lambda kv: kv[0])
        res.fusions.extend(f for _, f in keyed)


def _function_dtypes(plan: Plan, target: Target) -> dict[str, int | None]:
    """Op type -> the dtype of its model-local function body (None: polymorphic
    via CastLike). Older opsets have no CastLike: the bodies are then typed,
    one dtype per op type, and call sites of other dtypes compute in float32
    (their bias, of their own dtype, is then added in front)."""
    if not target.writes_functions:
        return {}
    chosen = plan.selected()
    if not target.typed_functions(plan.opset):
        return {s.emission.op_type: None for s in chosen}
    while True:
        # a site moved to float32 may lose its bias and so change op type:
        # repeat until every op type emitted has its body (sites only ever
        # move to float32, so this ends)
        types: dict[str, set[int]] = {}
        for s in chosen:
            types.setdefault(s.emission.op_type, set()).add(s.compute_type)
        fn_dtype = {op: next(iter(ts)) if len(ts) == 1 else TensorProto.FLOAT for op, ts in types.items()}
        moved = False
        for s in chosen:
            forced = fn_dtype[s.emission.op_type]
            if forced == s.compute_type:
                continue
            mt, moved = s.match, True
            s.compute_type = forced
            s.emission = target.emission(mt.form, s.use_bias and forced == mt.leaf_type, mt.alpha)
        if not moved:
            return fn_dtype


def rewrite(m: ModelProto, plan: Plan, target: Target, res: FuseResult, before_edit=None) -> None:
    """Select, then replace every selected region (in place) and finish the
    model. ``before_edit(plan)`` runs between the two (the model unchanged)."""
    names = NameGen(m, [g.index for g in plan.graphs])
    fn_dtype = select(plan, target, res)
    if before_edit is not None:
        before_edit(plan)
    dead: set[str] = set()
    for g in plan.graphs:
        if g.index.arrays is not None:  # a scanned main graph: at the byte level
            if g.selected or g.selected_sets:
                rewrite_graph(g, names, res, dead)
            continue
        if not g.selected:
            continue
        idx, regions = g.index, []
        for s in g.selected:
            mt, c = s.match, s.candidate
            if c.legacy:
                new = legacy_nodes(mt, c.legacy_bias, s.emission, s.compute_type, names, idx.graph)
                regions.append((mt, new, False))
            else:
                emit = single_op.emit if mt.single_op is not None else emit_nodes
                regions.append((mt, emit(mt, s.emission, s.compute_type, s.use_bias, names), s.use_bias))
                dead.update(mt.consts)
            res.fusions.append(record(idx, mt, s.emission, s.use_bias, s.compute_type))
        replace_regions(idx.graph, regions)
    if not res.fusions:
        return
    # every graph of m (plan visited them all); a scanned graph's dead
    # constants and stale value_info went with its rewrite (setrewrite)
    graphs = [g.index.graph for g in plan.graphs if g.index.arrays is None]
    drop_dead_constants(m, dead, graphs)
    single_op.drop_unused_functions(m)
    drop_stale_value_info(m, graphs)
    target.finish(m, plan.opset, fn_dtype)
