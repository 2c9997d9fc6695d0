"""The check: per iteration the original (or golden outputs) and the fused
model on each provider, compared output by output, judged by the
reference-relative verdict (gelu_onnx.verify.verdict) or, where the caller
gives a tolerance and for golden outputs, by a fixed bound; with
``localize`` every GELU tensor too (gelu_onnx.verify.localize).
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from . import comparator as cmp
from . import feedfiles, localize, pairing, reference, runners, verdict
from .inputs import DIM_DEFAULT, check_feeds, describe_inputs, input_specs, make_inputs
from .. import contract
from ..cliout import json_safe
from ..errors import InputError, UnsupportedError
from ..fusion.functions import refuse_foreign_functions
from ..onnxio import check_output_path
from ..onnxio.save import refuse_unreplaceable


@dataclass
class ProviderRun:
    provider: str
    ok: bool
    outputs: list[cmp.OutputParity]
    fusions: list[dict] = field(default_factory=list)
    first_failure: str | None = None  # the first GELU (in the original's order) that fails


@dataclass
class CheckReport:
    ok: bool
    outputs: list[cmp.OutputParity]  # the first provider's rows (all of them in ``runs``)
    inputs: list[dict]
    provider: str
    reference_provider: str | None  # None: golden outputs from a file
    library: bool
    opt_level: str
    seed: int | None
    original: str | None
    fused: str
    iterations: int = 1
    providers: list[str] = field(default_factory=list)
    runs: list[ProviderRun] = field(default_factory=list)
    reference: str = "original"  # or "golden:<file> (<runner>)"
    precise_reference: str | None = None  # what the reference-relative verdict judged against
    tf32: bool | None = None  # CUDA sessions with TF32 (None: no CUDA session)
    fusions: list[dict] = field(default_factory=list)  # localize, first provider
    first_failure: str | None = None
    localize: str | None = None  # "gelus" or "all"
    custom_op_libraries: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def provider_problem(provider: str) -> str | None:
    """Why this provider cannot run here (None: it can)."""
    if provider == "tensorrt":
        return None if importlib.util.find_spec("tensorrt") else (
            "--provider tensorrt needs TensorRT's Python package (tensorrt), which is not installed")
    try:  # an unknown provider: InputError (exit 2), before any unsupported one
        runners.ort_providers(provider)
    except UnsupportedError as e:
        return e.message
    return None


def tf32_note(tf32: bool) -> str:
    """What the report says about TF32 when a CUDA session ran."""
    if tf32:
        return ("TF32 on in the CUDA sessions (--tf32, ONNX Runtime's default); the reference runs on the CPU, "
                "without TF32")
    return "TF32 off in every CUDA session (use_tf32=0); --tf32 keeps ONNX Runtime's default"


class Steps:
    """The check's steps, each reported to ``progress(step, seconds)`` at its start (seconds None) and end."""

    def __init__(self, progress):
        self.progress = progress or (lambda step, seconds: None)

    @contextlib.contextmanager
    def __call__(self, step: str):
        self.progress(step, None)
        t0 = time.perf_counter()
        yield
        self.progress(step, time.perf_counter() - t0)


def feeds_for(original, fused_model, *, inputs, iterations, seed, dims, dim_default, scale, allow_pickle):
    """(feeds per iteration, their source as the report says it, the seed or None): random, given or from a file."""
    model = original.model if original is not None else fused_model
    if inputs is None:
        return [make_inputs(model, seed=seed + i, overrides=dims, dim_default=dim_default, scale=scale)
                for i in range(iterations or 1)], "random", seed
    if isinstance(inputs, Mapping):
        its, source = [dict(inputs)], "given"
    elif isinstance(inputs, (list, tuple)):
        its, source = [dict(f) for f in inputs], "given"
        if not its:
            raise InputError("inputs: an empty list of iterations")
    else:
        its = feedfiles.load_inputs(inputs, model, allow_pickle=allow_pickle)
        source = f"{'json' if str(inputs).lower().endswith('.json') else 'npz'}:{inputs}"
    if iterations is not None and iterations != len(its):
        raise InputError(f"--iterations {iterations}: the inputs hold {len(its)} iteration(s)")
    return its, source, None


def _check_save_paths(saves: Mapping[str, Any], models, files) -> None:
    """Before anything runs: a save path is never a file this check reads, nor a device or FIFO, nor
    the other save path, nor an existing file of another kind than the .npz / JSON a save writes."""
    read = [m.path for m in models if m.path] + [f for m in models for f in m.external_files] + list(files)
    taken: dict[str, str] = {}
    for flag, path in saves.items():
        if path is None:
            continue
        try:
            where, out, _ = check_output_path(path, check_existing=False)
            for f in read:
                if os.path.exists(out) and os.path.exists(f) and os.path.samefile(out, f):
                    raise InputError(f"{where}: is a file this check reads ({f}); refusing to overwrite it")
            refuse_unreplaceable(where, out, feedfiles.is_array_file)
        except InputError as e:
            raise InputError(f"{flag} {e.message}") from None
        real = os.path.realpath(out)
        if real in taken:
            raise InputError(f"{flag} {where}: same file as {taken[real]}")
        taken[real] = flag


def check(original, fused, *, seed: int = 0, iterations: int | None = None, inputs=None,
          dims: Mapping[str, int] | None = None, dim_default: int = DIM_DEFAULT, scale: float = 1.0,
          tolerances=None, output_tolerances: Mapping[str, Mapping[str, float]] | None = None,
          providers: Sequence[str] = ("cpu",), provider: str | None = None, reference_provider: str | None = None,
          use_library: bool | None = None, opt_level: str = "all", save_inputs=None, save_outputs=None,
          reference_outputs=None, localize_gelus: bool | str = False, allow_pickle: bool = False,
          tf32: bool = False, custom_op_libraries: Sequence[str] = (), progress=None,
          input_shapes: Mapping[str, Sequence[int]] | None = None) -> CheckReport:
    """Run the reference and the fused model on the same inputs; compare every output.

    ``original``: path / ModelProto / LoadedModel, or None with
    ``reference_outputs`` (a Polygraphy RunResults file; then ``inputs`` must
    be the inputs those outputs were made from). ``providers``: where the
    fused model runs, each compared with the reference; the original runs on
    ``reference_provider`` (default: the first provider). ``localize_gelus``:
    True (or "gelus") also compares every GELU tensor of the original's main
    graph, "all" every float tensor both graphs compute. ``tolerances``
    ({dtype: {rtol, atol}}) / ``output_tolerances`` ({name: {rtol, atol}}):
    judge those outputs by that fixed bound instead of the reference-relative
    verdict. ``input_shapes``: Polygraphy's --input-shapes ({input: [dims]}).

    One session at a time, each released before the next is built: what is
    kept between them is their outputs, and the models without their weights."""
    providers = list(dict.fromkeys([provider] if provider is not None else providers)) or ["cpu"]
    reference_provider = reference_provider or providers[0]
    mode = localize.mode(localize_gelus)
    if original is None and reference_outputs is None:
        raise InputError("give ORIGINAL.onnx, or golden outputs with --reference-outputs")
    if reference_outputs is not None and inputs is None:
        raise InputError("--reference-outputs needs --inputs: the inputs the golden outputs were made from")
    if mode and original is None:
        raise InputError("--localize needs ORIGINAL.onnx: the tensors are compared with the original's")
    if iterations is not None and iterations < 1:
        raise InputError(f"--iterations must be >= 1, got {iterations}")
    bad = [m for m in [provider_problem(p) for p in providers + [reference_provider]] if m]
    if bad:
        raise UnsupportedError("; ".join(dict.fromkeys(bad)))
    libs = runners.custom_op_libraries(custom_op_libraries)
    step = Steps(progress)
    with step("load the models"):
        lo = runners.load_lean(original) if original is not None else None
        lf = runners.load_lean(fused)
    models = [m for m in (lo, lf) if m is not None]
    for m in models:  # our library would run our kernel in place of such a function's body
        refuse_foreign_functions(m.model)
    _check_save_paths({"--save-inputs": save_inputs, "--save-outputs": save_outputs}, models,
                      [x for x in (inputs, reference_outputs) if isinstance(x, (str, os.PathLike))])
    if input_shapes:
        dims = pairing.shape_dims((lo or lf).model, input_shapes, dims)
    feeds_its, source, seed = feeds_for(lo, lf.model, inputs=inputs, iterations=iterations, seed=seed, dims=dims,
                                     dim_default=dim_default, scale=scale, allow_pickle=allow_pickle)
    problems, notes, warnings = [], check_feeds(feeds_its), []
    if not libs and (gone := pairing.custom_ops_gone(lf.model)):
        warnings.append(gone)
    need_f = {s.name for s in input_specs(lf.model)}
    missing = sorted(need_f - set(feeds_its[0]))
    if missing:
        had = ("the inputs do not hold" if inputs is not None else "the original does not have" if lo is not None
               else "the inputs file does not hold")
        raise InputError(f"the fused model needs input(s) {had}: {', '.join(missing)}")
    dropped = {s.name for s in input_specs(lo.model)} - need_f if lo is not None else ()
    if dropped:
        problems.append(f"the fused model no longer takes input(s) {', '.join(sorted(dropped))}")
    use = runners.resolve_library(use_library)
    warnings += runners.library_warnings(lf.model, use, use_library, providers)
    if "tensorrt" in providers + [reference_provider]:
        notes.append("TensorRT runs the model through gelu_onnx.tensorrt (the library flag does not apply there)")

    sites, o_model, f_model = [], lo, lf
    if mode:
        ex = localize.expose(lo, lf, every_tensor=mode == "all")
        sites, notes = ex.sites, notes + ex.notes
        o_model = runners.load(ex.original, base_dir=lo.base_dir)
        f_model = runners.load(ex.fused, base_dir=lf.base_dir)
    model_outputs = [o.name for o in (lo or lf).model.graph.output]
    run_opts = {"use": use, "tf32": tf32, "libraries": libs}

    # the reference, per iteration
    golden_runner, ref_its, ref_times, ref_gelus = None, [], [], []
    if reference_outputs is not None:
        golden_runner, ref_its = _golden(reference_outputs, lf.model, len(feeds_its), allow_pickle, notes)
        model_outputs = list(ref_its[0])
    if o_model is not None and (reference_outputs is None or sites):
        with step(f"run the original on {reference_provider}"):
            try:
                outs, times = runners.run_all(o_model, reference_provider, feeds_its, opt_level=opt_level, label="original",
                                       **run_opts)
            except InputError as e:
                if source != "random":
                    raise
                raise InputError(f"the original model fails on the generated inputs, before anything is compared "
                                 f"({e.message}); pass inputs it accepts with --inputs FILE") from None
        split = [localize.split(out, sites, model_outputs) for out in outs]
        ref_gelus = [go for _, go in split]
        if reference_outputs is None:
            ref_its, ref_times = [mo for mo, _ in split], times
        del outs, split
    # the precise run that judges both (not with golden outputs: no original run to judge)
    precise, precise_its, precise_gelus = None, [], []
    every_fixed = set(contract.PARITY_TOLERANCE) <= set(tolerances or {})  # --rtol/--atol for all dtypes
    if reference_outputs is None and o_model is not None and not every_fixed:
        with step("run the precise reference"):
            precise = reference.build(o_model, lambda m: runners.runner(
                m, "cpu", use, "disable", label="reference", libraries=libs, lean=True), feeds_its[0])
            notes += precise.notes
            warnings += precise.warnings
            if precise.runner is not None:
                for i, feeds in enumerate(feeds_its):
                    mo, go = localize.split(precise.run(feeds) if i else precise.first, sites, model_outputs)
                    precise_its.append(mo)
                    precise_gelus.append(go)
            precise.runner = precise.first = None  # released before the fused sessions are built
            gc.collect()
    if precise is not None and not precise_its:
        precise = None  # nothing ran: fixed bounds (a note says why)
    if "cuda" in providers + [reference_provider]:
        notes.append(tf32_note(tf32))
    judged = verdict.Rule(tolerances, output_tolerances) if precise is not None else None

    runs, saved = [], []
    fused_outputs = [o.name for o in lf.model.graph.output]
    for p in providers:
        with step(f"run the fused model on {p}"):
            outs, times = runners.run_all(f_model, p, feeds_its, opt_level=opt_level, label="fused", **run_opts)
        split = [localize.split(out, sites, fused_outputs) for out in outs]
        del outs
        kept = [mo for mo, _ in split]
        rows = _rows(ref_its, kept, precise_its, judged, tolerances, output_tolerances)
        fusions = []
        if sites:  # a GELU tensor may be an output too: its own rows
            by_name = {r.name: r for r in _rows(ref_gelus, [go for _, go in split], precise_gelus, judged, tolerances,
                                                output_tolerances)}
            fusions = [localize.fusion_record(s, by_name[s.tensor] if s.in_fused else None) for s in sites]
        first = next((f["tensor"] for f in fusions if not f["pass"]), None)
        ok = not problems and all(r.passed for r in rows) and first is None
        runs.append(ProviderRun(p, ok, rows, fusions, first))
        saved.append((f"gelu-onnx-fused-{p}", kept, times))

    if reference_outputs is not None:
        notes.append(verdict.golden_note(runs[0].outputs))
    # written last, once everything ran: a check that fails on bad input
    # leaves an existing file of that name as it was
    if save_inputs is not None:
        feedfiles.save_inputs(feeds_its, save_inputs)
    if save_outputs is not None:
        ref_name = golden_runner or f"gelu-onnx-original-{reference_provider}"
        docs = [(ref_name, ref_its, ref_times)] + saved
        feedfiles.save_outputs([(n, o) for n, o, _ in docs], save_outputs, {n: t for n, _, t in docs})
    return CheckReport(
        ok=all(r.ok for r in runs), outputs=runs[0].outputs,
        inputs=describe_inputs(feeds_its[0], source), provider=providers[0],
        reference_provider=None if reference_outputs is not None else reference_provider, library=use,
        opt_level=opt_level, seed=seed, original=None if original is None else runners.model_label(original),
        fused=runners.model_label(fused), iterations=len(feeds_its), providers=providers, runs=runs,
        reference=f"golden:{reference_outputs} ({golden_runner})" if reference_outputs is not None else "original",
        precise_reference=precise.label if precise is not None else None,
        tf32=tf32 if "cuda" in providers + [reference_provider] else None,
        fusions=runs[0].fusions, first_failure=runs[0].first_failure, localize=mode or None,
        custom_op_libraries=[str(x) for x in libs], problems=problems, notes=notes, warnings=warnings)


def _rows(refs, gots, precise, judged, tolerances, output_tolerances) -> list[cmp.OutputParity]:
    """One row per tensor over every iteration, judged by the verdict (``judged``) or its fixed bound, certified."""
    per_it = [cmp.compare(r, g, tolerances, output_tolerances) for r, g in zip(refs, gots)]
    rows = [cmp.merge([it[j] for it in per_it]) for j in range(len(per_it[0]))]
    if judged is not None:
        tallies: dict[str, verdict.Tally] = {}
        for p, r, g in zip(precise, refs, gots):
            judged.tally(tallies, p, r, g)
        rows = [judged.apply(r, tallies) for r in rows]
    return [verdict.certify(r) for r in rows]


def _golden(reference_outputs, fused_model, n_its: int, allow_pickle: bool, notes: list[str]):
    """(runner name, outputs per iteration) of a Polygraphy RunResults file."""
    golden_runner, ref_its = feedfiles.load_reference_outputs(reference_outputs, fused_model,
                                                              allow_pickle=allow_pickle)
    if len(ref_its) != n_its:
        raise InputError(f"--reference-outputs {reference_outputs}: {len(ref_its)} iteration(s) of outputs "
                         f"for {n_its} iteration(s) of inputs")
    # Polygraphy may have marked more tensors (--onnx-outputs mark all): like its
    # comparator, compare what the fused model outputs and say what was left
    fo = [o.name for o in fused_model.graph.output]
    extra = sorted(set().union(*ref_its) - set(fo))
    if extra and not set().union(*ref_its) & set(fo):
        raise InputError(f"--reference-outputs {reference_outputs}: none of its tensors is an output of the "
                         f"fused model (it has {', '.join(extra[:5])}; the model outputs {', '.join(fo)})")
    if extra:
        notes.append(f"{len(extra)} golden tensor(s) that are not outputs of the fused model were not compared: "
                     f"{', '.join(extra[:5])}{', ...' if len(extra) > 5 else ''}")
        ref_its = [{k: v for k, v in it.items() if k in fo} for it in ref_its]
    return golden_runner, ref_its
