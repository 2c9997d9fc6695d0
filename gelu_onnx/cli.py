"""The ``gelu-onnx`` command line: fuse, inspect, check, bench.

Every failure is one line on stderr ("gelu-onnx: error: ...") and the exit
code of its class in gelu_onnx.errors (argparse's own usage errors exit 2);
unexpected exceptions are "internal error" lines, exit 4, with the traceback
only under GELU_ONNX_DEBUG=1. ``--json`` puts a machine-readable result on
stdout (on failure: {"ok": false, "error": ..., "exit_code": ...}).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections import Counter
from pathlib import Path

from . import __version__
from . import cli_check
from .cliutil import add_input_args, dims, emit_json, need_file, nonneg_int, one_line, plural, positive_int, table
from .errors import GeluOnnxError, InputError, UnsupportedError

TARGETS = ("custom", "standard", "ort")
EXIT_INTERNAL = 4


# --- model I/O -----------------------------------------------------------------


def _load(path):
    from .io import load_model

    return load_model(path)


def _same_file(a, b) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve() or (Path(b).exists() and os.path.samefile(a, b))
    except OSError:
        return False


def _record(obj) -> dict:
    if dataclasses.is_dataclass(obj):  # flat records: a shallow copy (asdict deep-copies, 10k fusions = 1.4 s)
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if hasattr(obj, "_asdict"):
        return dict(obj._asdict())
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def _graph(g: str) -> str:
    return g or "main"


# --- argument types ----------------------------------------------------------------


# --- commands ----------------------------------------------------------------------


def _checker(model_or_path, shown, source: str) -> None:
    """onnx.checker on the output; when it fails, the input is asked too: a
    model that was invalid before we touched it is bad input (exit 2), not a
    bug of ours. (Checking the input only then keeps big models fast.)"""
    import onnx

    try:
        onnx.checker.check_model(model_or_path)
    except (onnx.checker.ValidationError, ValueError) as e:
        try:
            onnx.checker.check_model(source)
        except (onnx.checker.ValidationError, ValueError, OSError) as src_err:
            raise InputError(f"{source}: the input model fails onnx.checker: "
                             f"{one_line(str(src_err).splitlines()[0] if str(src_err) else src_err)}") from None
        raise GeluOnnxError(f"{shown}: the fused model fails onnx.checker: {one_line(str(e).splitlines()[0])} "
                            "(a bug: please report)") from e


def _skeleton(path):
    """Big single-file models are read as a skeleton whose weights stay in the
    file (gelu_onnx/splice.py); None for any other model (then io.load_model)."""
    from . import splice

    return splice.open_skeleton(path) if splice.wanted(path) else None


def cmd_fuse(args) -> int:
    need_file(args.input)
    if _same_file(args.input, args.output) and not args.overwrite_input:
        raise InputError(f"{args.output} is the input file; refusing to overwrite it (pass --overwrite-input)")
    # The skeleton's weights are copied to the output byte for byte.
    skel = _skeleton(args.input)
    if skel is not None:
        with skel:
            return _fuse_finish(args, skel.loaded, skel)
    return _fuse_finish(args, _load(args.input), None)


def _fuse_finish(args, loaded, skel) -> int:
    from . import fuse_with_report, io
    from .io import lower_ir_version

    # splice: the skeleton's placeholders resolve against the input's folder
    with skel.in_folder() if skel is not None else contextlib.nullcontext():
        # in place: the CLI owns this freshly loaded copy; the file is untouched
        res = fuse_with_report(loaded, target=args.target, inplace=True)
    out = res.model
    # Write the lowest IR version the model needs (onnx >= 1.23 stamps 14 on
    # everything), so older runtimes load it too; what a model really needs
    # beyond that must load in the installed onnxruntime (asked, not assumed).
    notes = list(res.notes)
    old = lower_ir_version(out)
    if old is not None:
        notes.append(f"IR version lowered from {old} to {out.ir_version} (the lowest this model needs)")
    if out.ir_version > io.IR_FLOOR:
        from . import ortinfo

        if out.ir_version > ortinfo.max_ir_version():
            raise UnsupportedError(f"{args.input}: the model needs IR version {out.ir_version} features; "
                                   f"the installed onnxruntime {ortinfo.version()} loads IR <= "
                                   f"{ortinfo.max_ir_version()}")
    # The checker resolves external data relative to the model file (and takes
    # > 2 GiB only as a file): check those after writing, the rest before.
    # (not ByteSize(): upb computes it by serializing the whole model)
    if skel is not None:
        # The skeleton is small; its stripped weights are checked as external
        # data inside the input file (their lengths exactly by splice).
        with skel.in_folder():
            _checker(out, args.output, args.input)
        saved = skel.save(out, args.output, overwrite_input=args.overwrite_input)
        in_memory = True
    else:
        in_memory = io.checkable_in_memory(out)
        if in_memory:
            _checker(out, args.output, args.input)
        # io: temp file + rename; external data files linked next to the output; the input is protected
        saved = loaded.save(out, args.output, overwrite_input=args.overwrite_input, keep_backups=True)
    if not in_memory:
        try:
            _checker(args.output, args.output, args.input)
        except BaseException:
            # never leave a model that failed the checker behind, and put
            # back the previous output and data files it replaced
            saved.rollback()
            raise
    saved.commit()
    notes += saved.notes
    fusions = [_record(f) for f in res.fusions]
    near = [_record(n) for n in res.near_misses]
    by_form = Counter(f.get("form") for f in fusions)
    if args.json:
        emit_json({"ok": True, "input": args.input, "output": args.output, **res.as_dict(), "notes": notes})
        return 0
    forms = ", ".join(f"{k}: {v}" for k, v in sorted(by_form.items())) or "none found"
    kept = f", {len(res.already)} already {args.target} ops" if res.already else ""
    print(f"fused {plural(len(fusions), 'GELU')} ({forms}{kept}) -> {args.output} [target {args.target}]")
    if near:
        print(f"{plural(len(near), 'near-miss')} left unfused:")
        for n in near:
            print(f"  [{_graph(n.get('graph'))}] {n.get('anchor')}: {n.get('code')}: {n.get('reason')}")
    for note in notes:
        print(f"note: {note}")
    return 0


def cmd_inspect(args) -> int:
    from . import inspect as _inspect

    need_file(args.input)
    skel = _skeleton(args.input)
    target = args.target or "custom"
    if skel is not None:
        with skel, skel.in_folder():
            rep = _inspect(skel.loaded, target)
            warning = _ops_gone(skel.loaded.model)
    else:
        loaded = _load(args.input)
        rep = _inspect(loaded, target)
        warning = _ops_gone(loaded.model)
    if warning:
        print(f"gelu-onnx: warning: {warning}", file=sys.stderr)
    fusions = [_record(f) for f in rep.fusions]
    near = [_record(n) for n in rep.near_misses]
    if args.json:
        emit_json({"ok": True, "input": args.input, "target": target, "gelus": len(fusions), "fusions": fusions,
                   "near_misses": near, "already_target_ops": [_record(f) for f in rep.already],
                   "warnings": [warning] if warning else []})
        return 0
    shown = f" [target {target}]" if args.target else ""
    print(f"{args.input}: {plural(len(fusions), 'GELU')} found, {plural(len(near), 'near-miss')}{shown}")
    if fusions:
        rows = [[_graph(f.get("graph")), f.get("root"), f.get("form"), "yes" if f.get("bias") else "no",
                 "" if f.get("alpha") is None else f"{f['alpha']:g}", f.get("dtype"), len(f.get("nodes") or [])]
                + ([f.get("op")] if args.target else []) for f in fusions]
        print()
        print(table(rows, ["graph", "root", "form", "bias", "alpha", "dtype", "nodes"]
                     + (["becomes"] if args.target else [])))
    if near:
        print()
        print(table([[_graph(n.get("graph")), n.get("anchor"), n.get("code"), n.get("reason")] for n in near],
                     ["graph", "anchor", "code", "reason"]))
    return 0


def _ops_gone(model) -> str | None:
    from .pairing import custom_ops_gone

    return custom_ops_gone(model)


def cmd_bench(args) -> int:
    from . import bench as _bench

    need_file(args.original)
    if args.fused:
        need_file(args.fused)
    if args.inputs is not None:
        need_file(args.inputs)
    levels = [s.strip() for s in args.opt_levels.split(",") if s.strip()]
    # progress on stderr, only when it is a terminal (tqdm's disable=None)
    from tqdm import tqdm

    bar = tqdm(total=len(levels) * _bench.runs_per_level(args.warmup, args.repeats), desc="bench", unit="run",
               disable=None, file=sys.stderr, leave=False)
    with bar:
        rep = _bench.bench(
            args.original, args.fused, target=args.target, opt_levels=levels, threads=args.threads,
            warmup=args.warmup, repeats=args.repeats, provider=args.provider,
            use_library=False if args.no_library else None, seed=args.seed, inputs=args.inputs,
            dims=dims(args), dim_default=args.dim_default, allow_pickle=args.allow_pickle, progress=bar.update,
        )
    for w in rep.warnings:
        print(f"gelu-onnx: warning: {w}", file=sys.stderr)
    if args.json:
        emit_json(rep.to_dict())
        return 0
    m, v = rep.machine, rep.versions
    what = rep.fused + (f" ({plural(rep.fusions, 'GELU')} fused)" if rep.fusions is not None else "")
    print(f"bench {rep.original} vs {what}")
    print(f"machine: {m['cpu']}, {m['usable_cpus']} usable CPUs, intra-op threads {rep.threads}, provider {rep.provider}")
    print(f"versions: onnxruntime {v['onnxruntime']}, onnx {v['onnx']}, numpy {v['numpy']}, python {v['python']}, "
          f"gelu-onnx {v['gelu_onnx']}; custom-op library {'yes' if rep.library else 'no'}")
    print("inputs: " + ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in rep.inputs))
    print(f"median of {rep.repeats} runs after {rep.warmup} warmup, interleaved blocks:")
    rows = [[t.opt_level, f"{t.original_ms:.3f}", f"{t.fused_ms:.3f}", f"{t.ratio:.3f}",
             "ok" if t.parity_ok else "MISMATCH"] for t in rep.results]
    print(table(rows, ["opt level", "original ms", "fused ms", "fused/original", "parity"]))
    for n in rep.notes:
        print(f"note: {n}")
    return 0


# --- parser ------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from .bench import BENCH_DIM_DEFAULT
    from .parity import OPT_LEVELS

    ap = argparse.ArgumentParser(
        prog="gelu-onnx",
        description="Fuse every GELU spelling in an ONNX graph into one op, and prove the result matches.",
        epilog="exit codes: 0 ok, 1 parity failed, 2 bad input, 3 unsupported, 4 internal error",
    )
    ap.add_argument("--version", action="version", version=f"gelu-onnx {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("fuse", help="rewrite every GELU into one op and save the model",
                       description="Rewrite every GELU subgraph into one GELU op and save the model (temp file + rename).")
    p.add_argument("input", metavar="IN.onnx")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    p.add_argument("--target", choices=TARGETS, default="custom",
                   help="custom: ai.gelu_onnx ops with model-local functions (default); standard: ONNX Gelu-20; "
                        "ort: com.microsoft contrib ops")
    p.add_argument("--overwrite-input", action="store_true", help="allow OUT.onnx to be IN.onnx")
    p.add_argument("--json", action="store_true", help="print fusions, near-misses and notes as JSON on stdout")
    p.set_defaults(func=cmd_fuse)

    p = sub.add_parser("inspect", help="list every GELU and every near-miss (nothing is written)",
                       description="List every GELU found (graph, root tensor, form, bias, dtype) and every "
                                   "near-miss with the reason it is not fused. Nothing is written.")
    p.add_argument("input", metavar="IN.onnx")
    p.add_argument("--target", choices=TARGETS, default=None,
                   help="show what fuse --target would do: the op each GELU becomes, and the GELUs that target "
                        "cannot express (near-misses); default: custom, without the op column")
    p.add_argument("--json", action="store_true", help="print the findings as JSON on stdout")
    p.set_defaults(func=cmd_inspect)

    cli_check.add_parser(sub)


    p = sub.add_parser("bench", help="time original vs fused in ONNX Runtime",
                       description="Time ORIGINAL and FUSED side by side in one process at each ONNX Runtime "
                                   "optimization level; report medians and fused/original ratios, the machine and versions.")
    p.add_argument("original", metavar="ORIGINAL.onnx")
    p.add_argument("fused", metavar="FUSED.onnx", nargs="?", help="default: fuse ORIGINAL in memory with --target")
    p.add_argument("--target", choices=TARGETS, default="custom", help="target when FUSED is not given (default custom)")
    add_input_args(p, BENCH_DIM_DEFAULT)
    p.add_argument("--threads", type=positive_int, default=2, help="intra-op threads (default 2)")
    p.add_argument("--warmup", type=nonneg_int, default=10, help="untimed runs per session (default 10)")
    p.add_argument("--repeats", type=positive_int, default=50, help="timed runs per session (default 50)")
    p.add_argument("--opt-levels", default="basic,all", metavar="LIST",
                   help=f"comma-separated ONNX Runtime levels from {','.join(OPT_LEVELS)} (default basic,all)")
    p.add_argument("--provider", choices=("cpu", "cuda"), default="cpu", help="execution provider (default cpu)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("info", help="what this build contains and what the machine offers",
                       description="Versions, which native parts were built (ONNX Runtime library, CUDA kernels "
                                   "and architectures, TensorRT plugin), the onnxruntime flavours and providers "
                                   "installed, and what is missing with how to get it.")
    p.add_argument("--json", action="store_true", help="print gelu_onnx.build_info() as JSON")
    p.set_defaults(func=cmd_info)
    return ap


def cmd_info(args) -> int:
    from .buildinfo import build_info, describe

    info = build_info()
    if args.json:
        emit_json(info)
    else:
        print("\n".join(describe(info)))
    return 0


class _Signalled(KeyboardInterrupt):
    """SIGTERM / SIGHUP (timeout, CI cancellation, docker stop, a closed
    terminal) unwind like Ctrl-C, so every temp file is removed on the way."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_signalled(signum, _frame):
    raise _Signalled(signum)


@contextlib.contextmanager
def _signals_unwind():
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_signalled) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)  # usage errors: argparse prints usage + one error line, exit 2
    debug = os.environ.get("GELU_ONNX_DEBUG") == "1"
    for stream in (sys.stdout, sys.stderr):  # paths need not be UTF-8: print them escaped, never crash
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    with _signals_unwind():
        return _run(args, debug)


def _run(args, debug: bool) -> int:
    try:
        return args.func(args)
    except GeluOnnxError as e:
        if debug:
            raise
        code, detail = e.exit_code, one_line(e.message)
        msg = f"gelu-onnx: error: {detail}"
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", None)
        print(f"gelu-onnx: {'interrupted' if signum is None else f'terminated by signal {signum}'}; "
              "nothing half-written was left", file=sys.stderr)
        return 130 if signum is None else 128 + signum
    except BrokenPipeError:
        return 0
    except Exception as e:
        if debug:
            raise
        if isinstance(e, ModuleNotFoundError) and e.name == "onnxruntime":  # it is an optional dependency
            code, detail = 3, ("onnxruntime is not installed; this command runs models: "
                               "pip install 'gelu-onnx[cpu]' (or 'gelu-onnx[gpu]' for onnxruntime-gpu)")
            msg = f"gelu-onnx: error: {detail}"
        else:
            code = EXIT_INTERNAL
            detail = f"internal error: {type(e).__name__}: {one_line(e)}"
            msg = f"gelu-onnx: {detail} (please report; GELU_ONNX_DEBUG=1 shows the traceback)"
    if getattr(args, "json", False):
        print(json.dumps({"ok": False, "error": detail, "exit_code": code}))
    print(msg, file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
