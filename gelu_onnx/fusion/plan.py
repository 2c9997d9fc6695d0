"""The fuse pass in three steps over typed objects:

plan    every graph (main graph, If/Loop/Scan bodies) matched, nothing changed:
        one GraphPlan per graph (its index, matches, near-misses, legacy
        plugin nodes);
select  per match, whether the target can express it, in which compute type
        and whether its bias Add is folded in (Selected); the rest become
        near-misses, and GELUs already in the target's op are reported only;
rewrite each graph's selected regions replaced by the target's op, then the
        target finishes the model (opset imports, model-local functions).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import ModelProto

from .. import contract as C
from . import native
from .bias import find_bias
from .graph import GraphIndex
from .legacy import find_legacy, legacy_nodes
from .findings import Match
from .match import find_matches
from .findings import NearMiss
from .report import FuseResult, record
from .rewrite import (NameGen, default_opset, drop_dead_constants, drop_stale_value_info, emit_nodes,
                      replace_regions, wider)
from .targets import Target
from ..onnxio.walk import subgraphs


@dataclass
class Selected:
    """One match the target will rewrite."""

    match: Match
    compute_type: int
    use_bias: bool
    legacy: bool = False  # a CustomGeluPluginDynamic node: its bias is an array
    legacy_bias: np.ndarray | None = None


@dataclass
class GraphPlan:
    index: GraphIndex
    matches: list[Match]
    misses: list[NearMiss]
    legacy: list[tuple[Match, np.ndarray | None]]
    selected: list[Selected] = field(default_factory=list)

    def candidates(self) -> list[tuple[Match, bool, np.ndarray | None]]:
        """(match, legacy?, legacy bias) for every match of this graph."""
        return [(m, False, None) for m in self.matches] + [(m, True, b) for m, b in self.legacy]


def plan(model: ModelProto, base_dir: str | None = None) -> list[GraphPlan]:
    """Match every graph without changing anything; indexes stay valid for
    the rewrite that follows (inner graphs first)."""
    out: list[GraphPlan] = []

    def visit(graph, parent, path):
        idx = GraphIndex(graph, parent, path, base_dir)
        for i, node in enumerate(graph.node):
            for attr, sub in subgraphs(node):
                label = node.name or f"{node.op_type}#{i}"
                visit(sub, idx, f"{path}/{label}/{attr}" if path else f"{label}/{attr}")
        matches, misses = find_matches(idx)
        ones, one_misses = native.find_native(idx)
        matches += ones
        misses += one_misses
        for m in matches:
            if not m.bias_inside:
                find_bias(m)
        legacy, legacy_misses = find_legacy(idx)
        out.append(GraphPlan(idx, matches, misses + legacy_misses, legacy))

    visit(model.graph, None, "")
    return out


def expressible(plans: list[GraphPlan], target: Target) -> bool:
    """Whether the target can express any GELU found (before its opset is raised)."""
    return any(target.unsupported(m.form, wider(m.leaf_type, m.root_type)) is None
               for p in plans for m, _, _ in p.candidates())


def select(plans: list[GraphPlan], target: Target, res: FuseResult) -> None:
    """Fill each plan's ``selected``; near-misses and GELUs already in the
    target's op go to ``res``."""
    for p in plans:
        idx = p.index
        for mt, legacy, lbias in p.candidates():
            ct = wider(mt.leaf_type, mt.root_type)
            why = target.unsupported(mt.form, ct)
            if why:
                a = idx.node(mt.anchor)
                res.near_misses.append(NearMiss(idx.path, a.name or f"{a.op_type}#{mt.anchor}", why[0], why[1],
                                                mt.form))
                continue
            has_bias = lbias is not None if legacy else bool(mt.bias)
            use_bias = has_bias and target.takes_bias(mt.form) and ct == mt.leaf_type
            em = target.emission(mt.form, use_bias, mt.alpha)
            if native.already_target(mt, em, use_bias):
                res.already.append(record(idx, mt, em, use_bias, ct))
                continue
            p.selected.append(Selected(mt, ct, use_bias, legacy, lbias))
        res.near_misses.extend(p.misses)


def report(plans: list[GraphPlan], target: Target, res: FuseResult) -> None:
    """What rewrite() would record, without changing anything (inspect)."""
    select(plans, target, res)
    for p in plans:
        for s in p.selected:
            em = target.emission(s.match.form, s.use_bias, s.match.alpha)
            res.fusions.append(record(p.index, s.match, em, s.use_bias, s.compute_type))


def _function_dtypes(plans: list[GraphPlan], target: Target, opset: int) -> dict[str, int | None]:
    """Op type -> the dtype of its model-local function body (None: polymorphic
    via CastLike). Older opsets have no CastLike: the bodies are then typed,
    one dtype per op type; call sites of other dtypes compute in float32."""
    if not target.writes_functions:
        return {}
    types: dict[str, set[int]] = {}
    for p in plans:
        for s in p.selected:
            types.setdefault(C.OP_TYPES[(s.match.form, s.use_bias)], set()).add(s.compute_type)
    typed = target.typed_functions(opset)
    return {op: ((next(iter(ts)) if len(ts) == 1 else onnx.TensorProto.FLOAT) if typed else None)
            for op, ts in types.items()}


def rewrite(m: ModelProto, plans: list[GraphPlan], target: Target, res: FuseResult) -> None:
    """Select, then replace every selected region (in place) and finish the model."""
    names = NameGen(m)
    opset = default_opset(m)
    select(plans, target, res)
    fn_dtype = _function_dtypes(plans, target, opset)
    typed = target.typed_functions(opset)
    dead: set[str] = set()
    for p in plans:
        if not p.selected:
            continue
        idx, regions = p.index, []
        for s in p.selected:
            mt, ct, use_bias = s.match, s.compute_type, s.use_bias
            if s.legacy:
                em = target.emission(mt.form, use_bias, mt.alpha)
                new_nodes, use_bias = legacy_nodes(mt, s.legacy_bias, target, em, names, idx.graph)
                regions.append((mt, new_nodes, False))
                res.fusions.append(record(idx, mt, em, use_bias, ct))
                continue
            if typed:
                forced = fn_dtype[C.OP_TYPES[(mt.form, use_bias)]]
                if forced != ct:
                    ct, use_bias = forced, use_bias and forced == mt.leaf_type
            em = target.emission(mt.form, use_bias, mt.alpha)
            emit = native.emit if mt.single_op is not None else emit_nodes
            regions.append((mt, emit(mt, em, ct, use_bias, names), use_bias))
            res.fusions.append(record(idx, mt, em, use_bias, ct))
            dead.update(mt.consts)
        replace_regions(idx.graph, regions)
    if not res.fusions:
        return
    drop_dead_constants(m, dead)
    native.drop_unused_functions(m)
    drop_stale_value_info(m)
    target.finish(m, opset, fn_dtype)
