"""The public fusion API: a model in memory (``gelu_onnx.fuse``,
``fuse_with_report``, ``inspect``: plan, i.e. match and check every graph,
then rewrite) and the file pipeline, what ``gelu-onnx fuse`` and ``gelu-onnx
inspect`` do to files, as library calls (``gelu_onnx.fuse_file``,
``gelu_onnx.inspect_file``, ``gelu_onnx.save``).

fuse_file, top to bottom: docs/design.md, "The file pipeline".
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import ModelProto

from . import interrupts, onnxio, ortlib
from .cliout import collapse_whitespace
from .errors import GeluOnnxError, InputError, MissingFileError, UnsupportedError
from .fusion import functions, targets
from .fusion import plan as fusion
from .fusion import training
from .fusion.report import Fusion, FuseResult
from .fusion.rewrite import checkmodel
from .fusion.targets import DEFAULT as DEFAULT_TARGET, Target, TargetName
from .onnxio import LoadedModel, load_model_proto, splice
from .onnxio.fileops import folder_lock, path_arg, same_file, utf8_path
from .onnxio.fileops import in_folder as _cwd  # onnx.checker resolves a model's external data against the cwd
from .onnxio.format import MAX_PROTO_BYTES, MMAP_MIN_BYTES

__all__ = ["fuse", "fuse_with_report", "inspect", "Fusion", "FuseResult", "ModelLike", "fuse_file", "inspect_file",
           "save", "check_input", "write_model"]

# What the API takes as a model: a ModelProto, or a path to an .onnx file.
ModelLike = ModelProto | str | os.PathLike


def require_file(path) -> None:
    """A path the tool reads must be an existing regular file (one line otherwise)."""
    path = path_arg(path)
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        raise MissingFileError(f"{path}: no such file") from None
    except OSError as e:  # a name over the OS limits, a loop of links, no permission
        raise InputError(f"{path}: cannot access it ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: not a regular file")


@dataclass
class FileFuseResult:
    """What fuse_file did: the fusion report and the notes of writing it."""

    input: str
    output: str
    result: FuseResult
    notes: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        return self.result.target

    def as_dict(self) -> dict:
        """The report as ``gelu-onnx fuse --json`` prints it (less "ok")."""
        return {"input": self.input, "output": self.output, **self.result.as_dict(), "notes": list(self.notes)}


@dataclass
class FileInspectResult:
    """What inspect_file found; ``warnings`` are one-line messages for stderr."""

    input: str
    result: FuseResult
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The report as ``gelu-onnx inspect --json`` prints it (less "ok")."""
        r = self.result
        return {"input": self.input, "target": r.target, "gelus": len(r.fusions), "already": len(r.already),
                "gelu_like_near_misses": sum(n.gelu_like for n in r.near_misses), "fusions": [f.as_dict() for f in r.fusions], "near_misses": [n.as_dict() for n in r.near_misses],
                "already_target_ops": [f.as_dict() for f in r.already], "warnings": list(self.warnings)}


# Below this file size a plain parse + serialize costs well under a second
# (and io reads such files rather than mapping them).
SPLICE_MIN_BYTES = MMAP_MIN_BYTES


def splice_wanted(path, min_bytes: int | None = None) -> bool:
    """Whether fuse / inspect try the splice path for this file (onnxio/splice.py)."""
    if os.environ.get("GELU_ONNX_SPLICE", "1") == "0":
        return False
    try:
        return os.stat(path).st_size >= (SPLICE_MIN_BYTES if min_bytes is None else min_bytes)
    except OSError:
        return False


@contextlib.contextmanager
def _opened(path):
    """(loaded model, skeleton or None): big single-file models are read as a
    skeleton whose weights stay in the file (splice, imported only then); others
    by onnxio.load_model."""
    skel = None
    if splice_wanted(path):
        skel = splice.open_skeleton(path)
    if skel is None:
        yield onnxio.load_model(path), None
        return
    with skel:
        yield skel.loaded, skel


def _in_folder(skel):
    # the skeleton's placeholders resolve against the input's folder
    return skel.in_folder() if skel is not None else contextlib.nullcontext()


def fuse_file(src, dst, target=DEFAULT_TARGET, *, overwrite_input: bool = False) -> FileFuseResult:
    """Fuse every GELU of the model file ``src`` for ``target`` and write it to
    ``dst`` exactly as ``gelu-onnx fuse`` does (docs/design.md, "The file pipeline").
    ``src`` and its data files are never modified (``dst`` may be ``src``
    only with ``overwrite_input``); on any failure every pre-existing file is
    as it was. Raises gelu_onnx.errors.GeluOnnxError subclasses (one-line
    messages) for bad input and unsupported models."""
    src, dst = path_arg(src), path_arg(dst)
    require_file(src)
    if same_file(src, dst) and not overwrite_input:
        raise InputError(f"{dst} is the input file; refusing to overwrite it (pass --overwrite-input)")
    onnxio.check_output_path(dst, src, overwrite_input)  # before any work (the write checks again)
    with _opened(src) as (loaded, skel):
        quick = _quick_check(loaded, skel)
        if not quick:
            check_input(loaded, src, skel)
        with _in_folder(skel):
            # in place: this freshly loaded copy is ours; the file is untouched
            try:
                res = fuse_with_report(loaded, target=target, inplace=True, input_check=quick)
            except Exception:
                if quick:  # bad input first, as if it had been checked before fusing
                    check_input(loaded, src)
                raise
        if quick:
            check, res.input_check = res.input_check, None
            check_input(loaded, src, check_model=check)
        notes = list(res.notes)
        write_model(res.model, dst, source=loaded, skeleton=skel, overwrite_input=overwrite_input,
                            notes=notes, checked_against=src)
    return FileFuseResult(src, dst, res, notes)


def inspect_file(src, target=DEFAULT_TARGET) -> FileInspectResult:
    """Every GELU that fuse_file would fuse for ``target`` and every near-miss,
    as ``gelu-onnx inspect`` reports them; nothing is written."""
    from .verify.pairing import custom_ops_gone

    src = path_arg(src)
    require_file(src)
    with _opened(src) as (loaded, skel):
        check_input(loaded, src, skel)
        with _in_folder(skel):
            rep = inspect(loaded, target)
            warning = custom_ops_gone(loaded.model)
    return FileInspectResult(src, rep, [warning] if warning else [])


def save(model, path, *, base_dir: str | None = None) -> str:
    """Write ``model`` as ``gelu-onnx fuse`` writes its output (write_model; its
    external data files, relative to ``base_dir``, copied next to it). Returns
    the path written."""
    if not isinstance(model, onnx.ModelProto):
        raise InputError(f"expected an onnx.ModelProto to save, got {type(model).__name__}")
    return write_model(model, path_arg(path), base_dir=base_dir)


def check_input(loaded, src, skeleton=None, check_model: bytes | None = None) -> None:
    """The input must be a model a runtime would take: onnx.checker with
    strict type and shape inference (full_check) on the input's check model
    (docs/safety.md, "The check model"): ``check_model``, which the fuse pass
    built with repeated GELU regions stood in for, or else the input itself
    (the file, or the skeleton from its folder), which is the check model with
    nothing stood in for. value_info that contradicts the graph, attributes
    of the wrong type, recursive model-local functions are bad input (exit
    2), found before the output is written, so a fault inside a region that
    fusion removes cannot hide behind a valid output. A check model that
    fails is not trusted: the input itself is checked then, and only its
    failure is the input's (in its words)."""
    errors = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError)
    if check_model is not None:
        try:
            onnx.checker.check_model(check_model, full_check=True)
            return
        except errors:
            pass
    path = loaded.path or os.path.abspath(src)
    try:
        if skeleton is not None:
            with skeleton.in_folder():  # placeholders: data inside the input file
                onnx.checker.check_model(loaded.model, full_check=True)
        elif utf8_path(path):  # external data resolve relative to the file
            onnx.checker.check_model(path, full_check=True)
        else:  # onnx takes UTF-8 paths only: the model, from its folder
            with _cwd(os.path.dirname(path)):
                onnx.checker.check_model(onnx.load_model(path, load_external_data=False), full_check=True)
    except errors as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{src}: the input model fails onnx.checker: {collapse_whitespace(first)}") from None


def _quick_check(loaded, skel) -> bool:
    """Whether the fuse pass builds the input's check model (check_input
    after matching, fusion/rewrite/checkmodel.py) rather than the input
    being checked before fusing: a model in memory without external data or
    functions."""
    return (skel is None and not loaded.external_files and not len(loaded.model.functions)
            and loaded.file_size < MAX_PROTO_BYTES - (64 << 20))


def write_model(model, dst, *, source=None, skeleton=None, overwrite_input: bool = False,
                notes: list[str] | None = None, checked_against=None, base_dir=None) -> str:
    """Write a fused ``model`` to ``dst``: the lowest IR version it needs (and
    one the installed onnxruntime loads), onnx.checker, one atomic write that
    rolls back if the checker fails on the written file. ``source``: the
    onnxio.LoadedModel it came from (protects the input and its data files);
    ``skeleton``: the splice.Skeleton it was read as; ``checked_against``: the
    input path (named when the runtime cannot load the result). Appends one-line notes to ``notes``; returns the path."""
    notes = [] if notes is None else notes
    payload = None  # the model serialized once, for the checker and the write
    if skeleton is None and source is not None and source.data is not None:
        # read by the native scanner: what writing needs to know from the arrays of the bytes to write
        payload, facts = onnxio.serialized_facts(model)
    else:
        facts = onnxio.model_facts(model)  # one walk over the model for all that follows
    # onnx >= 1.23 stamps IR 14 on everything: write the lowest the model needs,
    # so older runtimes load it too.
    old = onnxio.lower_ir_version(model, facts)
    if old is not None:
        notes.append(f"IR version lowered from {old} to {model.ir_version} (the lowest this model needs)")
        payload = None if payload is None else model.SerializeToString()
    _loadable_ir(model, checked_against or dst, notes)
    shown = os.fspath(dst)
    # The checker resolves external data relative to the model file (and takes
    # > 2 GiB only as a file): check those after writing, the rest before.
    # A signal anywhere in here unwinds through the rollback (gelu_onnx.interrupts).
    # Other writers into the folder wait until this one committed or rolled
    # back: none decides on a data file this one may still take back.
    with interrupts.unwinding(), folder_lock(os.path.dirname(os.path.abspath(shown))):
        if skeleton is not None:
            # The skeleton is small; its stripped weights are checked as external
            # data inside the input file (their lengths exactly by splice).
            with skeleton.in_folder():
                _checker(model, shown)
            saved = skeleton.save(model, dst, overwrite_input=overwrite_input)
            in_memory = True
        else:
            in_memory = onnxio.checkable_in_memory(model, facts)
            if in_memory:
                _checker(model if payload is None else payload, shown)
            if source is not None:
                saved = onnxio.save_model(model, dst, source=source, overwrite_input=overwrite_input,
                                          keep_backups=True, facts=facts, payload=payload)
            else:
                saved = onnxio.save_model(model, dst, source_dir=base_dir, keep_backups=True, facts=facts)
        try:
            if not in_memory:
                interrupts.fault("write:checker")
                if utf8_path(saved.path):
                    _checker(saved.through_folder(), shown)
                else:  # onnx takes UTF-8 paths only: the model, from its folder
                    with _cwd(os.path.dirname(saved.path)):
                        _checker(model, shown)
        except BaseException:
            # never leave a model that failed the checker behind, and put back
            # the previous output and data files it replaced
            saved.rollback()
            raise
        saved.commit()
    notes += saved.notes
    return saved.path


def _loadable_ir(model, shown, notes: list[str]) -> None:
    """The IR version written must load in the installed onnxruntime (asked,
    not assumed: onnxruntime 1.16 loads IR <= 9). fuse needs no runtime:
    without one, nothing is asked and a note says so."""
    if importlib.util.find_spec("onnxruntime") is None:
        notes.append(f"the model needs IR version {model.ir_version}; onnxruntime is not installed, "
                     "so whether your runtime loads it was not asked")
        return
    limit = ortlib.max_ir_version()
    if model.ir_version > limit:
        raise UnsupportedError(f"{shown}: the model needs IR version {model.ir_version} features; "
                               f"the installed onnxruntime {ortlib.runtime_version()} loads IR <= {limit}")


def _checker(model_or_path, shown) -> None:
    """onnx.checker on the output. fuse_file checked the input first
    (check_input), so a failure here is a bug of ours."""
    try:
        onnx.checker.check_model(model_or_path)
    except (onnx.checker.ValidationError, ValueError) as e:
        first = collapse_whitespace(str(e).splitlines()[0])
        raise GeluOnnxError(f"{shown}: the fused model fails onnx.checker: {first} (a bug: please report)") from e


# --- loading ------------------------------------------------------------------

def _as_model(model, base_dir=None):
    """(ModelProto, folder its external data lives in, the table validation
    kept of the main graph, or None). Paths are loaded and validated by
    gelu_onnx.onnxio (no weight payload is read)."""
    if isinstance(model, ModelProto):
        return model, base_dir, None
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
    if src.functions:
        functions.refuse_foreign_functions(src)
    if inplace:
        m = src
    else:
        m = ModelProto()
        m.CopyFrom(src)
        table = None  # it lists src's nodes, not the copy's
    res = FuseResult(m, t.name)
    fplan = None
    if m.functions:  # the same as src's; with a GELU in them the main graph may change (inlined calls, a raised opset)
        table = None if functions.holds_gelu(m) else table
        m, fplan = functions.fuse_functions(m, t, res, fuse_with_report)
        res.model = m
    unchanged = table is not None  # the main graph is still the input's
    plans = fusion.plan(m, base_dir, table)
    if t.needs_upgrade(m) and (fusion.expressible(plans, t) or res.fusions):  # res.fusions: in functions
        left = t.prepare(m, res.notes, fusion.replaced(plans, t))  # an op is refused only if the fusion keeps it
        plans = fusion.plan(m, base_dir)
        fusion.refuse_unfused(plans, t, left)
        unchanged = False

    def keep_check_model(p):
        if fusion.standins_may_pay(p):  # else no check model
            res.input_check = checkmodel.check_model(m, p)

    defined = training.main_graph_names(m.graph) if m.training_info else None
    fusion.rewrite(m, plans, t, res, keep_check_model if input_check and unchanged else None)
    if defined is not None:
        training.refuse_unbound(m, defined - training.main_graph_names(m.graph))
    if fplan is not None:
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
    if m.functions:
        functions.refuse_foreign_functions(m)
        if functions.holds_gelu(m):
            # what fuse would do there (in bodies or inlined) is found by doing it on a copy
            done = fuse_with_report(m, t, base_dir=base_dir)
            return FuseResult(m, t.name, fusions=done.fusions, near_misses=done.near_misses, notes=done.notes,
                              already=done.already)
    res = FuseResult(m, t.name)
    fusion.report(fusion.plan(m, base_dir, table, may_sort=False), t, res)
    return res
