"""The public fusion API: plan (match + check every graph), then rewrite."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import onnx
from onnx import ModelProto

from . import contract as C
from .fusion import functions
from .errors import InputError
from .fusion.graph import GraphIndex
from .onnxio.walk import subgraphs
from .fusion import native
from .fusion.legacy import find_legacy, legacy_nodes
from .fusion.match import Match, NearMiss, find_bias, find_matches
from .fusion.rewrite import (
    NameGen,
    add_functions,
    default_opset,
    drop_dead_constants,
    drop_stale_value_info,
    emit_nodes,
    ensure_opset,
    replace_regions,
    wider,
)
from .fusion.targets import TARGETS, Target, emission, make_function, supported, target_takes_bias

# What the API takes as a model: a ModelProto, or a path to an .onnx file.
ModelLike = ModelProto | str | os.PathLike


@dataclass
class Fusion:
    form: str
    bias: bool
    alpha: float | None
    graph: str
    root: str
    nodes: list[str]
    dtype: str
    op: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class FuseResult:
    model: ModelProto
    target: str
    fusions: list[Fusion] = field(default_factory=list)
    near_misses: list[NearMiss] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # GELUs already written as the target's own op, with nothing to absorb.
    already: list[Fusion] = field(default_factory=list)

    def summary(self) -> dict:
        by_form: dict[str, int] = {}
        for f in self.fusions:
            by_form[f.form] = by_form.get(f.form, 0) + 1
        return {
            "target": self.target,
            "fused": len(self.fusions),
            "by_form": by_form,
            "near_misses": len(self.near_misses),
            "already_target_ops": len(self.already),
            "notes": list(self.notes),
        }

    def as_dict(self) -> dict:
        """The report as `gelu-onnx fuse --json` prints it (same field names;
        the CLI adds ok, input and output)."""
        d = self.summary()
        d["fusions"] = [f.as_dict() for f in self.fusions]
        d["near_misses"] = [n.as_dict() for n in self.near_misses]
        d["already_target_ops"] = [f.as_dict() for f in self.already]
        return d


# --- loading ------------------------------------------------------------------

def _as_model(model, base_dir=None) -> tuple[ModelProto, str | None]:
    """(ModelProto, folder its external data lives in). Paths are loaded and
    validated by gelu_onnx.onnxio (no weight payload is read)."""
    if isinstance(model, ModelProto):
        return model, base_dir
    from .onnxio import LoadedModel, load_model_proto

    if isinstance(model, (str, os.PathLike, LoadedModel)):
        loaded = load_model_proto(model)
        return loaded.model, loaded.base_dir
    raise InputError(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")


# --- planning -----------------------------------------------------------------

def _plan(model: ModelProto, base_dir: str | None = None) -> list[tuple[GraphIndex, list[Match], list[NearMiss], list]]:
    """Match every graph (main graph and all If/Loop/Scan bodies) without
    changing anything; indexes stay valid for the rewrite that follows."""
    out: list[tuple[GraphIndex, list[Match], list[NearMiss], list]] = []

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
        out.append((idx, matches, misses + legacy_misses, legacy))

    visit(model.graph, None, "")
    return out


def _upgrade_for_standard(model: ModelProto, notes: list[str]) -> ModelProto:
    """Gelu exists from opset 20: raise the default-domain opset after proving,
    op by op from the ONNX schemas, that every op keeps its meaning
    (gelu_onnx.opset_upgrade); refuses naming the op otherwise."""
    from .fusion import opset_upgrade

    old = default_opset(model)
    notes.append(opset_upgrade.note(old, opset_upgrade.upgrade(model, C.STANDARD_GELU_OPSET)))
    return model


# --- the API --------------------------------------------------------------------

def fuse_with_report(model: ModelLike, target: Target = "custom", *, inplace: bool = False,
                     base_dir: str | None = None) -> FuseResult:
    """Fuse every GELU in ``model`` (a ModelProto, a path or an
    onnxio.LoadedModel) for ``target``. ``base_dir``: the folder a ModelProto's
    external data lives in (lets scalar GELU constants stored externally be
    read). The input ModelProto is never modified unless ``inplace=True``.
    """
    if target not in TARGETS:
        raise InputError(f"unknown target {target!r}: choose one of {', '.join(TARGETS)}")
    src, base_dir = _as_model(model, base_dir)
    if inplace:
        m = src
    else:
        m = ModelProto()
        m.CopyFrom(src)
    res = FuseResult(m, target)
    m, fplan = functions.prepare(m, target, res, fuse_with_report)
    res.model = m
    plan = _plan(m, base_dir)
    if target == "standard" and default_opset(m) < C.STANDARD_GELU_OPSET and any(
        supported(target, mt.form, wider(mt.leaf_type, mt.root_type)) is None
        for _, ms, _, lg in plan for mt in ms + [lm for lm, _ in lg]
    ):
        m = _upgrade_for_standard(m, res.notes)
        res.model = m
        plan = _plan(m, base_dir)
    _rewrite(m, plan, target, res)
    functions.label_inlined(res, fplan)
    return res


def fuse(model: ModelLike, target: Target = "custom", *, inplace: bool = False,
         base_dir: str | None = None) -> ModelProto:
    """Return a new ModelProto with every GELU fused (see fuse_with_report)."""
    return fuse_with_report(model, target, inplace=inplace, base_dir=base_dir).model


def inspect(model: ModelLike, target: Target = "custom", *, base_dir: str | None = None) -> FuseResult:
    """Every GELU that ``fuse`` would fuse, and every near-miss; changes nothing."""
    if target not in TARGETS:
        raise InputError(f"unknown target {target!r}: choose one of {', '.join(TARGETS)}")
    m, base_dir = _as_model(model, base_dir)
    if functions.holds_gelu(m):
        # what fuse would do there (in bodies or inlined) is found by doing it on a copy
        done = fuse_with_report(m, target, base_dir=base_dir)
        return FuseResult(m, target, done.fusions, done.near_misses, done.notes, done.already)
    res = FuseResult(m, target)
    for idx, keep, _ in _select(_plan(m, base_dir), target, res):
        for mt, ct, use_bias in keep:
            res.fusions.append(_record(idx, mt, emission(target, mt.form, use_bias, mt.alpha), use_bias, ct))
    return res


def _select(plan, target: str, res: FuseResult):
    """Per graph: the matches this target can express, each with its compute
    type and whether its bias Add is folded in; the rest become near-misses.
    Legacy-plugin matches carry their bias separately (third element)."""
    accepted = []
    for idx, matches, misses, legacy in plan:
        lb = {id(lm): b for lm, b in legacy}
        keep = []
        for mt in matches + [lm for lm, _ in legacy]:
            ct = wider(mt.leaf_type, mt.root_type)
            why = supported(target, mt.form, ct)
            if why:
                res.near_misses.append(_unsupported_miss(idx, mt, why))
                continue
            has_bias = lb[id(mt)] is not None if id(mt) in lb else bool(mt.bias)
            use_bias = has_bias and target_takes_bias(target, mt.form) and ct == mt.leaf_type
            em = emission(target, mt.form, use_bias, mt.alpha)
            if native.already_target(mt, em, use_bias):
                res.already.append(_record(idx, mt, em, use_bias, ct))
                continue
            keep.append((mt, ct, use_bias))
        res.near_misses.extend(misses)
        accepted.append((idx, keep, lb))
    return accepted


def _unsupported_miss(idx: GraphIndex, mt: Match, why: str) -> NearMiss:
    a = idx.node(mt.anchor)
    code = "no-standard-op" if "no standard op" in why else "unsupported-dtype"
    return NearMiss(idx.path, a.name or f"{a.op_type}#{mt.anchor}", code, why, mt.form)


def _record(idx: GraphIndex, mt: Match, em, use_bias: bool, ct: int) -> Fusion:
    names = [idx.node(i).name or f"{idx.node(i).op_type}#{i}" for i in mt.nodes]
    if use_bias and mt.bias_node is not None:
        bn = idx.node(mt.bias_node)
        names.insert(0, bn.name or f"Add#{mt.bias_node}")
    return Fusion(mt.form, use_bias, mt.alpha, idx.path, mt.root, names,
                  C.FLOAT_DTYPES.get(ct, str(ct)), em.qualified)


def _rewrite(m: ModelProto, plan, target: str, res: FuseResult) -> None:
    names = NameGen(m)
    opset = default_opset(m)
    # Older opsets have no CastLike: the function bodies are then typed, one
    # dtype per op type; call sites of other dtypes compute in float32.
    typed_functions = target == "custom" and opset < 15
    accepted = _select(plan, target, res)
    fn_types: dict[str, set[int]] = {}
    if target == "custom":
        for _, keep, _ in accepted:
            for mt, ct, use_bias in keep:
                fn_types.setdefault(C.OP_TYPES[(mt.form, use_bias)], set()).add(ct)
    fn_dtype: dict[str, int | None] = {}
    for op_type, types in fn_types.items():
        fn_dtype[op_type] = (next(iter(types)) if len(types) == 1 else onnx.TensorProto.FLOAT) \
            if typed_functions else None

    dead: set[str] = set()
    for idx, keep, legacy_bias in accepted:
        if not keep:
            continue
        plans = []
        for mt, ct, use_bias in keep:
            if id(mt) in legacy_bias:
                em = emission(target, mt.form, use_bias, mt.alpha)
                new_nodes, use_bias = legacy_nodes(mt, legacy_bias[id(mt)], target, em, names, idx.graph)
                plans.append((mt, new_nodes, False))
                res.fusions.append(_record(idx, mt, em, use_bias, ct))
                continue
            if typed_functions:
                forced = fn_dtype[C.OP_TYPES[(mt.form, use_bias)]]
                if forced != ct:
                    ct, use_bias = forced, use_bias and forced == mt.leaf_type
            em = emission(target, mt.form, use_bias, mt.alpha)
            emit = native.emit if mt.single_op is not None else emit_nodes
            plans.append((mt, emit(mt, em, ct, use_bias, names), use_bias))
            res.fusions.append(_record(idx, mt, em, use_bias, ct))
            dead.update(mt.consts)
        replace_regions(idx.graph, plans)
    if not res.fusions:
        return
    drop_dead_constants(m, dead)
    native.drop_unused_functions(m)
    drop_stale_value_info(m)
    if target == "custom":
        ensure_opset(m, C.DOMAIN, C.OPSET_VERSION)
        add_functions(m, [make_function(op, opset, fn_dtype[op]) for op in sorted(fn_dtype)])
    elif target == "ort":
        ensure_opset(m, C.MS_DOMAIN, 1)


def save(model: ModelProto, path: str | os.PathLike, *, base_dir: str | None = None) -> str:
    """Write ``model`` as ``gelu-onnx fuse`` writes its output
    (gelu_onnx.files.write_model): the lowest IR version it needs, onnx.checker,
    one atomic write (temp file + rename) that is rolled back if the checker
    fails on the written file, a model over protobuf's 2 GB limit with its
    tensors in ``<name>.data``, and external data files (relative to
    ``base_dir``) copied next to it. Returns the path written."""
    from .files import write_model

    return write_model(model, path, base_dir=base_dir)
