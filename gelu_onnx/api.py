"""The public fusion API: plan (match + check every graph), then rewrite."""
from __future__ import annotations

import os

from onnx import ModelProto

from .errors import InputError
from .fusion.rewrite import checkmodel
from .fusion import functions, targets
from .fusion import plan as fusion
from .fusion.report import Fusion, FuseResult
from .fusion.targets import Target, TargetName

__all__ = ["fuse", "fuse_with_report", "inspect", "Fusion", "FuseResult", "ModelLike"]

# What the API takes as a model: a ModelProto, or a path to an .onnx file.
ModelLike = ModelProto | str | os.PathLike


# --- loading ------------------------------------------------------------------

def _as_model(model, base_dir=None):
    """(ModelProto, folder its external data lives in, the main graph's
    onnxio.NodeTable or None). Paths are loaded and validated by
    gelu_onnx.onnxio (no weight payload is read)."""
    if isinstance(model, ModelProto):
        return model, base_dir, None
    from .onnxio import LoadedModel, load_model_proto

    if isinstance(model, (str, os.PathLike, LoadedModel)):
        loaded = load_model_proto(model)
        return loaded.model, loaded.base_dir, loaded.table
    raise InputError(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")


# --- the API --------------------------------------------------------------------

def fuse_with_report(model: ModelLike, target: TargetName | Target = targets.DEFAULT, *, inplace: bool = False,
                     base_dir: str | None = None, input_check: bool = False) -> FuseResult:
    """Fuse every GELU in ``model`` (a ModelProto, a path or an
    onnxio.LoadedModel) for ``target`` (a name or a fusion.targets.Target).
    ``base_dir``: the folder a ModelProto's external data lives in (lets
    scalar GELU constants stored externally be read). The input ModelProto is
    never modified unless ``inplace=True``. ``input_check``: also keep the
    input's check model in ``FuseResult.input_check`` (fusion/rewrite/checkmodel.py;
    None where the input itself must be checked).
    """
    t = targets.get(target)
    src, base_dir, table = _as_model(model, base_dir)
    functions.refuse_foreign_functions(src)
    if inplace:
        m = src
    else:
        m = ModelProto()
        m.CopyFrom(src)
        table = None  # it lists src's nodes, not the copy's
    res = FuseResult(m, t.name)
    if functions.holds_gelu(m):
        table = None  # the main graph may change (inlined calls, a raised opset)
    m, fplan = functions.fuse_functions(m, t, res, fuse_with_report)
    res.model = m
    unchanged = table is not None  # the main graph is still the input's
    plans = fusion.plan(m, base_dir, table)
    if t.needs_upgrade(m) and fusion.expressible(plans, t):
        t.prepare(m, res.notes)
        plans = fusion.plan(m, base_dir)
        unchanged = False

    def keep_check_model(p):
        res.input_check = checkmodel.check_model(m, p)

    fusion.rewrite(m, plans, t, res, keep_check_model if input_check and unchanged else None)
    functions.label_inlined(res, fplan)
    return res


def fuse(model: ModelLike, target: TargetName | Target = targets.DEFAULT, *, inplace: bool = False,
         base_dir: str | None = None) -> ModelProto:
    """Return a new ModelProto with every GELU fused (see fuse_with_report)."""
    return fuse_with_report(model, target, inplace=inplace, base_dir=base_dir).model


def inspect(model: ModelLike, target: TargetName | Target = targets.DEFAULT, *, base_dir: str | None = None) -> FuseResult:
    """Every GELU that ``fuse`` would fuse, and every near-miss; changes nothing."""
    t = targets.get(target)
    m, base_dir, table = _as_model(model, base_dir)
    functions.refuse_foreign_functions(m)
    if functions.holds_gelu(m):
        # what fuse would do there (in bodies or inlined) is found by doing it on a copy
        done = fuse_with_report(m, t, base_dir=base_dir)
        return FuseResult(m, t.name, fusions=done.fusions, near_misses=done.near_misses, notes=done.notes,
                          already=done.already)
    res = FuseResult(m, t.name)
    fusion.report(fusion.plan(m, base_dir, table, may_sort=False), t, res)
    return res
