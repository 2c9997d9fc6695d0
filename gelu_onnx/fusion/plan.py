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

from . import native
from .bias import InferredShapes, find_bias
from .findings import Match, NearMiss
from .graph import GraphIndex
from .legacy import find_legacy, legacy_nodes
from .match import find_matches
from .replay import replay_bias, replay_matches
from .report import FuseResult, record
from .rewrite import (Emission, NameGen, default_opset, drop_dead_constants, drop_stale_value_info, emit_nodes,
                      replace_regions, wider)
from .targets import Target
from ..onnxio.walk import subgraphs


@dataclass
class Candidate:
    """A GELU found in a graph; legacy: a CustomGeluPluginDynamic node, whose
    bias is an array (``legacy_bias``), not a tensor of the graph."""

    match: Match
    legacy: bool = False
    legacy_bias: np.ndarray | None = None

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
class GraphPlan:
    index: GraphIndex
    candidates: list[Candidate]
    misses: list[NearMiss]
    selected: list[Selected] = field(default_factory=list)


@dataclass
class Plan:
    """Every graph of a model matched (inner graphs first), and the model's
    default-domain opset when it was planned."""

    graphs: list[GraphPlan]
    opset: int

    def selected(self) -> list[Selected]:
        return [s for g in self.graphs for s in g.selected]


def plan(model: ModelProto, base_dir: str | None = None, table=None) -> Plan:
    """Match every graph without changing anything; indexes stay valid for
    the rewrite that follows (inner graphs first). ``table``: the main
    graph's onnxio.NodeTable, if validation read it (GraphIndex checks it
    belongs to the graph)."""
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
        # neighbourhood, its answers carried to the rest (fusion/replay.py)
        replayed = replay_matches(idx)
        matches, misses = replayed if replayed is not None else find_matches(idx)
        ones, one_misses = native.find_native(idx)
        matches += ones
        misses += one_misses
        for m in matches:
            if m.single_op is None:
                idx.region_inputs[m.root] = [m.leaf, *sorted(m.consts)]
        if replayed is not None:
            replay_bias(idx, matches)
        for m in matches:
            if not m.bias_inside and (replayed is None or m.single_op is not None):
                find_bias(m)
        legacy, legacy_misses = find_legacy(idx)
        cands = [Candidate(m) for m in matches] + [Candidate(m, True, b) for m, b in legacy]
        out.append(GraphPlan(idx, cands, misses + legacy_misses))

    visit(model.graph, None, "")
    return Plan(out, default_opset(model))


def expressible(plan: Plan, target: Target) -> bool:
    """Whether the target can express any GELU found (before its opset is raised)."""
    return any(target.unsupported(c.match.form, wider(c.match.leaf_type, c.match.root_type)) is None
               for g in plan.graphs for c in g.candidates)


def select(plan: Plan, target: Target, res: FuseResult) -> dict[str, int | None]:
    """Fill each graph's ``selected``; near-misses and GELUs already in the
    target's op go to ``res``. Returns the dtypes of the model-local function
    bodies the target writes (see _function_dtypes)."""
    for g in plan.graphs:
        idx = g.index
        for c in g.candidates:
            mt = c.match
            ct = wider(mt.leaf_type, mt.root_type)
            why = target.unsupported(mt.form, ct)
            if why:
                a = idx.node(mt.anchor)
                res.near_misses.append(NearMiss(idx.path, a.name or f"{a.op_type}#{mt.anchor}", why.code, why.reason,
                                                mt.form))
                continue
            use_bias = c.has_bias and target.takes_bias(mt.form) and ct == mt.leaf_type
            em = target.emission(mt.form, use_bias, mt.alpha)
            if native.already_target(mt, em, use_bias):
                res.already.append(record(idx, mt, em, use_bias, ct))
                continue
            g.selected.append(Selected(c, ct, em))
        res.near_misses.extend(g.misses)
    return _function_dtypes(plan, target)


def report(plan: Plan, target: Target, res: FuseResult) -> None:
    """What rewrite() would record, without changing anything (inspect)."""
    select(plan, target, res)
    for g in plan.graphs:
        for s in g.selected:
            res.fusions.append(record(g.index, s.match, s.emission, s.use_bias, s.compute_type))


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
        if not g.selected:
            continue
        idx, regions = g.index, []
        for s in g.selected:
            mt, c = s.match, s.candidate
            if c.legacy:
                new = legacy_nodes(mt, c.legacy_bias, s.emission, s.compute_type, names, idx.graph)
                regions.append((mt, new, False))
            else:
                emit = native.emit if mt.single_op is not None else emit_nodes
                regions.append((mt, emit(mt, s.emission, s.compute_type, s.use_bias, names), s.use_bias))
                dead.update(mt.consts)
            res.fusions.append(record(idx, mt, s.emission, s.use_bias, s.compute_type))
        replace_regions(idx.graph, regions)
    if not res.fusions:
        return
    graphs = [g.index.graph for g in plan.graphs]  # every graph of m (plan visited them all)
    drop_dead_constants(m, dead, graphs)
    native.drop_unused_functions(m)
    drop_stale_value_info(m, graphs)
    target.finish(m, plan.opset, fn_dtype)
