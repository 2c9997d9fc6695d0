"""Timing: the original and the fused model side by side in one process.

Per ONNX Runtime optimization level both sessions are built with the same
options, warmed up, then timed in interleaved blocks (_time_pair), so that
clock drift, turbo and cache state hit both equally. The figure of merit is
median fused / median original (< 1: fused faster). Bounded for CI: warmup
and timing of each level stop once its share of ``max_seconds`` has passed
(at least MIN_TIMED timed runs of each session).
"""
from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from . import comparator as cmp
from . import runners
from .inputs import describe_inputs
from .pairing import interface_differences, shape_dims
from .parity_check import Steps, feeds_for
from .. import __version__
from ..cliout import json_safe
from ..contract import BENCH_DIM_DEFAULT
from ..errors import InputError
from ..files import fuse_with_report
from ..fusion.targets import DEFAULT as DEFAULT_TARGET

DEFAULT_OPT_LEVELS = ("basic", "all")


@dataclass
class Timing:
    opt_level: str
    original_ms: float  # median
    fused_ms: float
    ratio: float  # fused / original
    original_min_ms: float
    fused_min_ms: float
    parity_ok: bool  # outputs of the timed sessions agree within default tolerance
    repeats: int


@dataclass
class BenchReport:
    original: str
    fused: str
    target: str | None
    fusions: int | None  # when fused in memory
    provider: str
    library: bool
    threads: int
    warmup: int
    repeats: int
    inputs: list[dict]
    results: list[Timing]
    machine: dict
    versions: dict
    max_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return json_safe(asdict(self))


def cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine_info(threads: int) -> dict:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "usable_cpus": usable, "intra_op_threads": threads,
            "platform": platform.platform()}


BLOCK = 3  # timed runs per session per round of _time_pair
MIN_TIMED = 3  # timed runs of each session, whatever the time budget
MAX_SECONDS = 20.0  # default budget of warmup + timing, all levels together


def runs_per_level(warmup: int, repeats: int) -> int:
    """Session runs per optimization level (both sessions): the parity run, the
    warmup, one untimed run per block and the timed runs; for progress bars."""
    return 2 * (1 + warmup + (repeats + BLOCK - 1) // BLOCK + repeats)


def _time_pair(a: runners.OrtRunner, b: runners.OrtRunner, feeds_a, feeds_b, warmup: int, repeats: int,
               tick=lambda n=1: None, seconds: float | None = None):
    """``repeats`` timed runs of each session, in interleaved blocks: per round
    each session does one untimed run and then up to BLOCK timed ones, and the
    session that goes first alternates. Why blocks: after a run, ONNX Runtime's
    intra-op threads spin for a while; a run that directly follows the *other*
    session's shares the cores with those spinners (BERT-base, 2 threads:
    single-run alternation gave 141 vs 177 ms modes depending on what ran
    before). The untimed run absorbs that, so both sides are timed as a
    session that runs back to back, as a served model does. ``seconds``:
    warmup stops after a quarter of it, timing once it has all passed (after
    MIN_TIMED timed runs of each)."""
    start = time.perf_counter()
    left = (lambda share: True) if seconds is None else (lambda share: time.perf_counter() - start < share * seconds)
    for _ in range(warmup):
        if not left(0.25):
            break
        a.run(feeds_a)
        b.run(feeds_b)
        tick(2)
    ta, tb = [], []
    for i in range((repeats + BLOCK - 1) // BLOCK):
        if min(len(ta), len(tb)) >= min(MIN_TIMED, repeats) and not left(1.0):
            break
        order = ((a, feeds_a, ta), (b, feeds_b, tb)) if i % 2 == 0 else ((b, feeds_b, tb), (a, feeds_a, ta))
        for r, f, acc in order:
            r.run(f)
            tick(1)
            for _ in range(min(BLOCK, repeats - len(acc))):
                t0 = time.perf_counter()
                r.run(f)
                acc.append((time.perf_counter() - t0) * 1e3)
                tick(1)
    return ta, tb


def bench(original, fused=None, *, target: str = DEFAULT_TARGET, opt_levels=DEFAULT_OPT_LEVELS, threads: int = 2,
          warmup: int = 3, repeats: int = 15, provider: str = "cpu", use_library: bool | None = None, seed: int = 0,
          inputs=None, dims=None, dim_default: int = BENCH_DIM_DEFAULT, allow_pickle: bool = False, progress=None,
          max_seconds: float | None = MAX_SECONDS, custom_op_libraries=(), input_shapes=None,
          steps=None) -> BenchReport:
    """Time ``original`` against ``fused`` (path or ModelProto with the
    original's interface; None = fuse ``original`` in memory with ``target``).
    ``progress(n)``: after every n session runs (at most ``runs_per_level``
    per level). ``max_seconds``: the budget of warmup + timing, all levels
    together (None: every run). ``input_shapes``, ``steps``: as check's
    ``input_shapes``, ``progress``."""
    step = Steps(steps)
    if threads < 1:
        raise InputError(f"--threads must be >= 1, got {threads}")
    if warmup < 0 or repeats < 1:
        raise InputError(f"--warmup must be >= 0 and --repeats >= 1 (got {warmup}, {repeats})")
    if provider not in ("cpu", "cuda"):
        raise InputError(f"bench runs ONNX Runtime sessions: provider must be cpu or cuda, got '{provider}'")
    for lvl in opt_levels:
        if lvl not in runners.OPT_LEVELS:
            raise InputError(f"unknown optimization level '{lvl}' (choose from {', '.join(runners.OPT_LEVELS)})")
    # the file's weights stay in it when no fusing in memory needs them (both sessions load the files)
    lo = runners.load(original) if fused is None else runners.load_lean(original)
    po = lo.model
    notes, nfus = [], None
    if fused is None:
        res = fuse_with_report(po, target=target)
        # keeps the original's external-data references: resolve them in its folder
        fused_arg, nfus = runners.load(res.model, base_dir=lo.base_dir), len(res.fusions)
        notes.extend(res.notes)
        if nfus == 0:
            notes.append("no GELU was fused: both sessions run the same graph")
    else:
        fused_arg = runners.load_lean(fused)
        target = None
        diffs = interface_differences(po, fused_arg.model)
        if diffs:
            raise InputError(f"{runners.model_label(original)} and {runners.model_label(fused)} are not an original and its "
                             f"fused model: {'; '.join(diffs)}")
    if input_shapes:
        dims = shape_dims(po, input_shapes, dims)
    its, src, _ = feeds_for(lo, None, inputs=inputs, iterations=None, seed=seed, dims=dims, dim_default=dim_default,
                            scale=1.0, allow_pickle=allow_pickle)
    feeds = its[0]  # a Polygraphy inputs file: its first iteration
    use = runners.resolve_library(use_library)
    libs = runners.custom_op_libraries(custom_op_libraries)

    warnings = runners.library_warnings(fused_arg.model, use, use_library, [provider])
    tick = progress or (lambda n=1: None)
    results = []
    for lvl in opt_levels:
        with step(f"opt level {lvl}: build both sessions"):
            ro = runners.OrtRunner(lo, provider, use, lvl, threads, label="original", libraries=libs)
            rf = runners.OrtRunner(fused_arg, provider, use, lvl, threads, label="fused", libraries=libs)
        fo = {k: v for k, v in feeds.items() if k in ro.input_names}
        ff = {k: v for k, v in feeds.items() if k in rf.input_names}
        with step(f"opt level {lvl}: compare, warm up, time"):
            rows = cmp.compare(ro.run(fo), rf.run(ff))
            tick(2)
            ta, tb = _time_pair(ro, rf, fo, ff, warmup, repeats, tick,
                                None if max_seconds is None else max_seconds / len(opt_levels))
        mo, mf = statistics.median(ta), statistics.median(tb)
        results.append(Timing(lvl, mo, mf, mf / mo if mo > 0 else float("inf"), min(ta), min(tb),
                              all(r.passed for r in rows), min(len(ta), len(tb))))
        del ro, rf
    return BenchReport(
        original=runners.model_label(original), target=target, fusions=nfus, provider=provider, library=use,
        fused=runners.model_label(fused) if fused is not None else f"<fused in memory, target {target}>",
        threads=threads, warmup=warmup, repeats=repeats, max_seconds=max_seconds, inputs=describe_inputs(feeds, src),
        results=results, machine=machine_info(threads), warnings=warnings, notes=notes,
        versions={"gelu_onnx": __version__, "onnxruntime": ort.__version__, "onnx": onnx.__version__,
                  "numpy": np.__version__, "python": platform.python_version()})
