"""The ``gelu-onnx`` command line: fuse, inspect, check, bench; their parser and argument types, tables, JSON.

Every failure is one line on stderr ("gelu-onnx: error: ...") and the exit
code of its class in gelu_onnx.errors (argparse's own usage errors exit 2);
unexpected exceptions are "internal error" lines, exit 4, with the traceback
only under GELU_ONNX_DEBUG=1. ``--json`` puts a machine-readable result on
stdout (on failure: {"ok": false, "error": ..., "exit_code": ...}).
"""
from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import json
import os
import sys
import warnings

from . import __version__, interrupts
from .cliout import dims, emit_json, plural, table
from .files import require_file
from .errors import GeluOnnxError
from .fusion import targets

EXIT_INTERNAL = 4

# --- what the commands share: argument types, tables, JSON -------------------------

# The error handler the command's stdout and stderr write with: a path (or
# any text) holding bytes that are not UTF-8 reaches us as lone surrogates
# (os.fsdecode's surrogateescape); each is printed as the byte it stands
# for, \xff, and a character the locale cannot encode as \u00e9 (Python's
# backslashreplace). Never a UnicodeEncodeError. JSON keeps its own escape
# (\udcff), which json.loads and os.fsencode turn back into the same bytes.
ESCAPE = "gelu-onnx-escape"


def _escape(err: UnicodeError):
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = []
    for c in err.object[err.start:err.end]:
        o = ord(c)
        out.append(f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else c.encode("ascii", "backslashreplace").decode())
    return "".join(out), err.end


codecs.register_error(ESCAPE, _escape)


def dim_arg(s: str):
    name, sep, val = s.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{s}'")
    try:
        v = int(val)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': VALUE must be an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"'{s}': VALUE must be >= 0")
    return name, v


def tol_arg(s: str):
    """VALUE (every float dtype) or DTYPE=VALUE."""
    from .contract import PARITY_TOLERANCE

    dtype, sep, val = s.rpartition("=")
    if sep and dtype not in PARITY_TOLERANCE:
        raise argparse.ArgumentTypeError(f"'{dtype}' is not a float dtype (use one of {', '.join(PARITY_TOLERANCE)})")
    try:
        v = float(val)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected VALUE or DTYPE=VALUE, got '{s}'") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"'{s}': tolerance must be a finite number >= 0")
    return (dtype or None), v


def tol_by_name(s: str):
    """NAME:RTOL,ATOL (one output or GELU tensor)."""
    name, sep, vals = s.rpartition(":")
    parts = vals.split(",")
    if not sep or not name or len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected NAME:RTOL,ATOL, got '{s}'")
    try:
        rtol, atol = float(parts[0]), float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': RTOL and ATOL must be numbers") from None
    if not (0 <= rtol < float("inf") and 0 <= atol < float("inf")):
        raise argparse.ArgumentTypeError(f"'{s}': tolerances must be finite numbers >= 0")
    return name, {"rtol": rtol, "atol": atol}


def providers_arg(s: str) -> list[str]:
    from .contract import PROVIDERS

    ps = [p.strip() for p in s.split(",") if p.strip()]
    bad = [p for p in ps if p not in PROVIDERS]
    if not ps or bad:
        raise argparse.ArgumentTypeError(f"'{s}': choose a comma-separated list from {', '.join(PROVIDERS)}")
    return ps


def _int_at_least(low: int):
    """An argparse type: an integer >= low."""
    def parse(s: str) -> int:
        try:
            v = int(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got '{s}'") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {v}")
        return v
    return parse


positive_int, nonneg_int = _int_at_least(1), _int_at_least(0)


def add_input_args(p, dim_default: int) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--inputs", metavar="FILE", help="feed these arrays instead of random ones: .npz, or Polygraphy "
                                                    "saved inputs (JSON, e.g. polygraphy run --save-inputs)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="UNSAFE: let --inputs/--reference-outputs hold pickled object arrays (pickle can run code)")
    p.add_argument("--dim", type=dim_arg, action="append", metavar="NAME=VALUE",
                   help="size of a named (symbolic) input dimension; repeatable")
    p.add_argument("--dim-default", type=nonneg_int, default=dim_default, metavar="N",
                   help=f"size of named dims not given by --dim and of unknown dims (default {dim_default})")
    p.add_argument("--no-library", action="store_true",
                   help="do not register the gelu-onnx custom-op library (the fused model then runs its model-local functions)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show ONNX Runtime's own warnings (hidden by default: they describe the model)")


def one_line(s: str) -> str:
    return " ".join(str(s).split())


def _graph(g: str) -> str:
    return g or "main"


# --- commands ----------------------------------------------------------------------


def cmd_fuse(args) -> int:
    from .files import fuse_file

    done = fuse_file(args.input, args.output, target=args.target, overwrite_input=args.overwrite_input)
    res = done.result
    if args.json:
        emit_json({"ok": True, **done.as_dict()})
        return 0
    counts = res.summary()
    forms = ", ".join(f"{k}: {v}" for k, v in sorted(counts["by_form"].items())) or "none found"
    kept = f", {len(res.already)} already {args.target} ops" if res.already else ""
    print(f"fused {plural(counts['fused'], 'GELU')} ({forms}{kept}) -> {args.output} [target {args.target}]")
    if res.near_misses:
        print(f"{plural(len(res.near_misses), 'near-miss')} left unfused:")
        for n in res.near_misses:
            print(f"  [{_graph(n.graph)}] {n.anchor}: {n.code}: {n.reason}")
    for note in done.notes:
        print(f"note: {note}")
    return 0


def cmd_inspect(args) -> int:
    from .files import inspect_file

    found = inspect_file(args.input, args.target or targets.DEFAULT)
    for w in found.warnings:
        print(f"gelu-onnx: warning: {w}", file=sys.stderr)
    if args.json:
        emit_json({"ok": True, **found.as_dict()})
        return 0
    fusions, near = found.result.fusions, found.result.near_misses
    shown = f" [target {args.target}]" if args.target else ""
    print(f"{args.input}: {plural(len(fusions), 'GELU')} found, {plural(len(near), 'near-miss')}{shown}")
    if fusions:
        rows = [[_graph(f.graph), f.root, f.form, "yes" if f.bias else "no",
                 "" if f.alpha is None else f"{f.alpha:g}", f.dtype, len(f.nodes or [])]
                + ([f.op] if args.target else []) for f in fusions]
        print()
        print(table(rows, ["graph", "root", "form", "bias", "alpha", "dtype", "nodes"]
                     + (["becomes"] if args.target else [])))
    if near:
        print()
        print(table([[_graph(n.graph), n.anchor, n.code, n.reason] for n in near],
                     ["graph", "anchor", "code", "reason"]))
    return 0


def cmd_check(args) -> int:
    from .cli_check import cmd_check as check  # its report: imported by this command only

    return check(args)


def cmd_bench(args) -> int:
    from .verify import bench as _bench

    require_file(args.original)
    if args.fused:
        require_file(args.fused)
    if args.inputs is not None:
        require_file(args.inputs)
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


class _Parser(argparse.ArgumentParser):
    """A usage error is one line too (the usage itself: --help)."""

    def error(self, message):
        self.exit(2, f"gelu-onnx: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .contract import BENCH_DIM_DEFAULT, DIM_DEFAULT, OPT_LEVELS, PROVIDERS

    ap = _Parser(
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
    p.add_argument("--target", choices=targets.TARGETS, default=targets.DEFAULT, help=targets.describe())
    p.add_argument("--overwrite-input", action="store_true", help="allow OUT.onnx to be IN.onnx")
    p.add_argument("--json", action="store_true", help="print fusions, near-misses and notes as JSON on stdout")
    p.set_defaults(func=cmd_fuse)

    p = sub.add_parser("inspect", help="list every GELU and every near-miss (nothing is written)",
                       description="List every GELU found (graph, root tensor, form, bias, dtype) and every "
                                   "near-miss with the reason it is not fused. Nothing is written.")
    p.add_argument("input", metavar="IN.onnx")
    p.add_argument("--target", choices=targets.TARGETS, default=None,
                   help="show what fuse --target would do: the op each GELU becomes, and the GELUs that target "
                        f"cannot express (near-misses); default: {targets.DEFAULT}, without the op column")
    p.add_argument("--json", action="store_true", help="print the findings as JSON on stdout")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("check", help="parity: run original and fused on the same inputs, compare outputs",
                       description="Run ORIGINAL and FUSED on the same inputs and compare every output. A float "
                                   "output passes when the fused model is about as close as the original to a more "
                                   "precise run of the original (float64/float32 on the CPU; docs/verdict.md), or "
                                   "within --atol/--rtol of the original when those are given. Exit 1 when any fails.")
    p.add_argument("models", nargs="+", metavar="ORIGINAL.onnx FUSED.onnx",
                   help="the original and the fused model; only FUSED.onnx with --reference-outputs")
    add_input_args(p, DIM_DEFAULT)
    p.add_argument("--iterations", type=positive_int, default=None, metavar="N",
                   help="run N iterations (random inputs: seeds SEED..SEED+N-1; default 1, or every iteration of --inputs)")
    p.add_argument("--scale", type=float, default=1.0, help="random floats are N(0,1) * SCALE (default 1)")
    p.add_argument("--rtol", type=tol_arg, action="append", metavar="[DTYPE=]VALUE",
                   help="judge float outputs (or one dtype's) by |original-fused| <= atol + rtol*|original| "
                        "instead of the reference; repeatable")
    p.add_argument("--atol", type=tol_arg, action="append", metavar="[DTYPE=]VALUE",
                   help="absolute tolerance, same forms as --rtol")
    p.add_argument("--tol", type=tol_by_name, action="append", metavar="NAME:RTOL,ATOL",
                   help="tolerance of one output (or GELU tensor with --localize); wins over --rtol/--atol; repeatable")
    p.add_argument("--provider", type=providers_arg, default=None, metavar="P[,P...]",
                   help=f"where the fused model runs, each compared with the reference: {', '.join(PROVIDERS)} "
                        "(default cpu; cuda needs onnxruntime-gpu)")
    p.add_argument("--reference-provider", choices=PROVIDERS, default=None,
                   help="where the original runs (default: the first --provider)")
    p.add_argument("--tf32", action="store_true",
                   help="let CUDA sessions multiply in TF32 (ONNX Runtime's default; check turns it off)")
    p.add_argument("--opt-level", choices=OPT_LEVELS, default="all", help="ONNX Runtime graph optimization level (default all)")
    p.add_argument("--localize", action="store_true",
                   help="also compare every GELU's output tensor with the original's, and name the first that fails")
    p.add_argument("--reference-outputs", metavar="GOLDEN.json",
                   help="compare with these golden outputs (Polygraphy RunResults, e.g. polygraphy run --save-outputs) "
                        "made from --inputs; ORIGINAL.onnx may then be left out")
    p.add_argument("--save-inputs", metavar="FILE", help="also write the inputs used (.json: Polygraphy format, "
                                                          "every iteration; else .npz), for re-running with --inputs")
    p.add_argument("--save-outputs", metavar="FILE.json",
                   help="write the reference's and the fused model's outputs as Polygraphy RunResults JSON")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("bench", help="time original vs fused in ONNX Runtime",
                       description="Time ORIGINAL and FUSED side by side in one process at each ONNX Runtime "
                                   "optimization level; report medians and fused/original ratios, the machine and versions.")
    p.add_argument("original", metavar="ORIGINAL.onnx")
    p.add_argument("fused", metavar="FUSED.onnx", nargs="?", help="default: fuse ORIGINAL in memory with --target")
    p.add_argument("--target", choices=targets.TARGETS, default=targets.DEFAULT,
                   help=f"target when FUSED is not given (default {targets.DEFAULT})")
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


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)  # usage errors: one line, exit 2
    debug = os.environ.get("GELU_ONNX_DEBUG") == "1"
    if getattr(args, "verbose", False):  # ONNX Runtime's warnings too (verify.runners reads the level)
        os.environ.setdefault("GELU_ONNX_ORT_LOG", "2")
    else:  # Python's warnings (numpy's overflow in a cast of huge random feeds, ...) are not errors
        warnings.simplefilter("ignore")
    for stream in (sys.stdout, sys.stderr):  # paths need not be UTF-8: print them escaped, never crash
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors=ESCAPE)
    if sys.stdout is not None:
        sys.stdout = _Stdout(sys.stdout)
    # SIGTERM / SIGHUP (timeout, CI cancellation, docker stop, a closed
    # terminal) unwind like Ctrl-C, so every temp file is removed on the way
    try:
        with interrupts.unwinding():
            code = _run(args, debug)
        return _flushed(code)
    finally:
        if isinstance(sys.stdout, _Stdout):
            sys.stdout = sys.stdout._stream


def _flushed(code: int) -> int:
    """The report reached stdout, or one line says it did not (a full disk);
    a closed pipe is the reader going away (``| head``), not an error."""
    try:
        sys.stdout.flush()
    except _StdoutFailed as e:
        return _stdout_failed(e, code)
    return code


class _StdoutFailed(Exception):
    pass


class _Stdout:
    """sys.stdout, with its OS errors told apart from every other OSError."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, s):
        try:
            return self._stream.write(s)
        except OSError as e:
            raise _StdoutFailed(e) from e

    def flush(self):
        try:
            self._stream.flush()
        except OSError as e:
            raise _StdoutFailed(e) from e

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _stdout_failed(e: _StdoutFailed, code: int) -> int:
    err = e.args[0]
    # what is still buffered cannot be written: drop it, so the interpreter's
    # exit flush does not fail a second time (with a traceback)
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if isinstance(err, BrokenPipeError):
        return code
    print(f"gelu-onnx: error: cannot write the report to standard output ({err.strerror or err})", file=sys.stderr)
    return 2


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
    except _StdoutFailed as e:
        return _stdout_failed(e, 0)
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
