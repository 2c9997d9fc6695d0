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
import importlib
import json
import math
import os
import sys
import warnings

from . import __version__, interrupts, memlimit, streams
from .buildinfo import ORT_HINT, build_info, describe
from .cliout import collapse_whitespace, emit_json
from .contract import BENCH_DIM_DEFAULT, DIM_DEFAULT, LOCALIZE_MODES, OPT_LEVELS, PARITY_TOLERANCE, PROVIDERS
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


def _require(ok, message: str) -> None:
    """argparse's one-line refusal of an argument, unless ``ok``."""
    if not ok:
        raise argparse.ArgumentTypeError(message)


def _parsed(conv, text: str, message: str):
    """``conv(text)``, or argparse's refusal with ``message``."""
    try:
        return conv(text)
    except ValueError:
        raise argparse.ArgumentTypeError(message) from None


def dim_arg(s: str):
    name, sep, val = s.partition("=")
    _require(sep and name, f"expected NAME=VALUE, got '{s}'")
    v = _parsed(int, val, f"'{s}': VALUE must be an integer")
    _require(v >= 0, f"'{s}': VALUE must be >= 0")
    return name, v


def tol_arg(s: str):
    """VALUE (every float dtype), DTYPE=VALUE, or NAME:VALUE (one output or
    tensor, Polygraphy's spelling): ("dtype", DTYPE or None, v) / ("name", NAME, v)."""
    name, colon, nval = s.rpartition(":")
    dtype, sep, val = s.rpartition("=")
    kind, key = "dtype", (dtype or None)
    if colon and name and not sep:
        kind, key, val = "name", name, nval
    else:
        _require(not sep or dtype in PARITY_TOLERANCE,
                 f"'{dtype}' is not a float dtype (use one of {', '.join(PARITY_TOLERANCE)})")
    v = _parsed(float, val, f"expected VALUE, DTYPE=VALUE or NAME:VALUE, got '{s}'")
    _require(0 <= v < float("inf"), f"'{s}': tolerance must be a finite number >= 0")
    return kind, key, v


class LocalizeAction(argparse.Action):
    """``--localize [gelus|all]``: a bare ``--localize`` before the model
    paths (``check --localize A.onnx B.onnx``, as when it took no value)
    leaves the path it swallowed to the models."""

    def __call__(self, parser, namespace, value, option_string=None):
        if value is None or value in LOCALIZE_MODES:
            namespace.localize = value or "gelus"
            return
        namespace.localize = "gelus"
        if getattr(namespace, "models", None):
            namespace.models.append(value)
        else:
            namespace.models_before = [*getattr(namespace, "models_before", []), value]


def shape_arg(s: str):
    """NAME:[D0,D1,...] (Polygraphy's --input-shapes)."""
    name, sep, dims_s = s.rpartition(":")
    body = dims_s.strip()
    _require(sep and name and body.startswith("[") and body.endswith("]"),
             f"expected NAME:[D0,D1,...] (e.g. input_ids:[1,128]), got '{s}'")
    dims = _parsed(lambda b: [int(d) for d in b.split(",") if d.strip()], body[1:-1],
                   f"'{s}': dimensions must be integers")
    _require(all(d >= 0 for d in dims), f"'{s}': dimensions must be >= 0")
    return name, dims


def tol_by_name(s: str):
    """NAME:RTOL,ATOL (one output or GELU tensor)."""
    name, sep, vals = s.rpartition(":")
    parts = vals.split(",")
    _require(sep and name and len(parts) == 2, f"expected NAME:RTOL,ATOL, got '{s}'")
    rtol, atol = _parsed(lambda p: [float(x) for x in p], parts, f"'{s}': RTOL and ATOL must be numbers")
    _require(0 <= rtol < float("inf") and 0 <= atol < float("inf"), f"'{s}': tolerances must be finite numbers >= 0")
    return name, {"rtol": rtol, "atol": atol}


def providers_arg(s: str) -> list[str]:
    ps = [p.strip() for p in s.split(",") if p.strip()]
    _require(ps and all(p in PROVIDERS for p in ps), f"'{s}': choose a comma-separated list from {', '.join(PROVIDERS)}")
    return ps


def _int_at_least(low: int, high: int | None = None):
    """An argparse type: an integer >= low (and <= high)."""
    def parse(s: str) -> int:
        v = _parsed(int, s, f"expected an integer, got '{s}'")
        _require(low <= v and (high is None or v <= high),
                 f"expected an integer >= {low}" + (f" and <= {high}" if high else "") + f", got {v}")
        return v
    return parse


positive_int, nonneg_int = _int_at_least(1), _int_at_least(0)
# ONNX Runtime starts every intra-op thread asked for: 10**5 of them hang the machine
thread_count = _int_at_least(1, 1024)


def finite_float(s: str) -> float:
    """An argparse type: a finite number (nan and inf would make every feed nan)."""
    v = _parsed(float, s, f"expected a number, got '{s}'")
    _require(math.isfinite(v), f"expected a finite number, got '{s}'")
    return v


def add_input_args(p, dim_default: int) -> None:
    p.add_argument("--seed", type=nonneg_int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--inputs", "--load-inputs", dest="inputs", metavar="FILE",
                   help="feed these arrays instead of random ones: .npz, or Polygraphy saved inputs (JSON, e.g. "
                        "polygraphy run --save-inputs)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="UNSAFE: let --inputs/--reference-outputs hold pickled object arrays (pickle can run code)")
    p.add_argument("--dim", type=dim_arg, action="append", metavar="NAME=VALUE",
                   help="size of a named (symbolic) input dimension; repeatable")
    p.add_argument("--dim-default", type=nonneg_int, default=dim_default, metavar="N",
                   help=f"size of named dims not given by --dim and of unknown dims (default {dim_default})")
    p.add_argument("--input-shapes", type=shape_arg, nargs="+", action="extend", metavar="NAME:[D0,...]",
                   help="shapes of the random inputs, Polygraphy's spelling (e.g. input_ids:[1,128]); sets the "
                        "named dims they declare")
    p.add_argument("--custom-op-library", action="append", default=[], metavar="PATH",
                   help="also register this custom-op library in every ONNX Runtime session; repeatable")
    p.add_argument("--no-library", action="store_true",
                   help="do not register the gelu-onnx custom-op library (the fused model then runs its model-local functions)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def output_args() -> argparse.ArgumentParser:
    """-q / -v, the same on every command (a parent of each subparser)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true",
                   help="print only the result line, no progress (errors and warnings still go to stderr; --json is unchanged)")
    g.add_argument("-v", "--verbose", action="store_true",
                   help="print everything: every near-miss (also anchors that compute no GELU), every row and column, "
                        "one line per step on stderr, ONNX Runtime's own warnings (hidden by default: they describe "
                        "the model)")
    return p


# --- parser ------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """A usage error is one line too (the usage itself: --help)."""

    def error(self, message):
        self.exit(2, f"gelu-onnx: error: {collapse_whitespace(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(
        prog="gelu-onnx",
        description="Fuse every GELU spelling in an ONNX graph into one op, and prove the result matches.",
        epilog="exit codes: 0 ok, 1 parity failed, 2 bad input, 3 unsupported, 4 internal error",
    )
    ap.add_argument("--version", action="version", version=f"gelu-onnx {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = [output_args()]

    p = sub.add_parser("fuse", parents=common, help="rewrite every GELU into one op and save the model",
                       description="Rewrite every GELU subgraph into one GELU op and save the model (temp file + rename).")
    p.add_argument("input", metavar="IN.onnx")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx",
                   help="where to write the fused model; missing folders are created (and removed again on failure)")
    p.add_argument("--target", choices=targets.TARGETS, default=targets.DEFAULT, help=targets.describe())
    p.add_argument("--overwrite-input", action="store_true", help="allow OUT.onnx to be IN.onnx")
    p.add_argument("--json", action="store_true", help="print fusions, near-misses and notes as JSON on stdout")
    p.set_defaults(func=("cli_fuse", "cmd_fuse"))

    p = sub.add_parser("inspect", parents=common, help="list every GELU and every near-miss (nothing is written)",
                       description="List every GELU found (graph, root tensor, form, bias, dtype) and every "
                                   "near-miss with the reason it is not fused. Nothing is written.")
    p.add_argument("input", metavar="IN.onnx")
    p.add_argument("--target", choices=targets.TARGETS, default=None,
                   help="show what fuse --target would do: the op each GELU becomes, and the GELUs that target "
                        f"cannot express (near-misses); default: {targets.DEFAULT}, without the op column")
    p.add_argument("--json", action="store_true", help="print the findings as JSON on stdout")
    p.set_defaults(func=("cli_fuse", "cmd_inspect"))

    p = sub.add_parser("check", parents=common, help="parity: run original and fused on the same inputs, compare outputs",
                       description="Run ORIGINAL and FUSED on the same inputs and compare every output. A float "
                                   "output passes when the fused model is about as close as the original to a more "
                                   "precise run of the original (float64/float32 on the CPU; docs/verdict.md), or "
                                   "within --atol/--rtol of the original when those are given. Exit 1 when any fails.")
    p.add_argument("models", nargs="+", metavar="ORIGINAL.onnx FUSED.onnx",
                   help="the original and the fused model; only FUSED.onnx with --reference-outputs")
    add_input_args(p, DIM_DEFAULT)
    p.add_argument("--iterations", type=positive_int, default=None, metavar="N",
                   help="run N iterations (random inputs: seeds SEED..SEED+N-1; default 1, or every iteration of --inputs)")
    p.add_argument("--scale", type=finite_float, default=1.0, help="random floats are N(0,1) * SCALE (default 1)")
    p.add_argument("--rtol", type=tol_arg, nargs="+", action="extend", metavar="[DTYPE=|NAME:]VALUE",
                   help="judge float outputs (or one dtype's, or one output's: NAME:VALUE, Polygraphy's spelling) "
                        "by |original-fused| <= atol + rtol*|original| instead of the reference; repeatable")
    p.add_argument("--atol", type=tol_arg, nargs="+", action="extend", metavar="[DTYPE=|NAME:]VALUE",
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
    p.add_argument("--localize", nargs="?", action=LocalizeAction, default=None, metavar="gelus|all",
                   help="also compare every GELU's output tensor with the original's and name the first that fails; "
                        "'all': every float tensor both graphs compute (Polygraphy's mark all; costs memory)")
    p.add_argument("--reference-outputs", metavar="GOLDEN.json",
                   help="compare with these golden outputs (Polygraphy RunResults, e.g. polygraphy run --save-outputs) "
                        "made from --inputs; ORIGINAL.onnx may then be left out")
    p.add_argument("--save-inputs", metavar="FILE", help="also write the inputs used (.json: Polygraphy format, "
                                                          "every iteration; else .npz), for re-running with --inputs")
    p.add_argument("--save-outputs", metavar="FILE.json",
                   help="write the reference's and the fused model's outputs as Polygraphy RunResults JSON")
    p.set_defaults(func=("cli_check", "cmd_check"))

    p = sub.add_parser("bench", parents=common, help="time original vs fused in ONNX Runtime",
                       description="Time ORIGINAL and FUSED side by side in one process at each ONNX Runtime "
                                   "optimization level; report medians and fused/original ratios, the machine and versions.")
    p.add_argument("original", metavar="ORIGINAL.onnx")
    p.add_argument("fused", metavar="FUSED.onnx", nargs="?", help="default: fuse ORIGINAL in memory with --target")
    p.add_argument("--target", choices=targets.TARGETS, default=targets.DEFAULT,
                   help=f"target when FUSED is not given (default {targets.DEFAULT})")
    add_input_args(p, BENCH_DIM_DEFAULT)
    p.add_argument("--threads", type=thread_count, default=2, help="intra-op threads (default 2)")
    p.add_argument("--warmup", type=nonneg_int, default=3, help="untimed runs per session (default 3)")
    p.add_argument("--repeats", type=positive_int, default=15, help="timed runs per session (default 15)")
    p.add_argument("--opt-levels", default="basic,all", metavar="LIST",
                   help=f"comma-separated ONNX Runtime levels from {','.join(OPT_LEVELS)} (default basic,all)")
    p.add_argument("--provider", choices=("cpu", "cuda"), default="cpu", help="execution provider (default cpu)")
    p.add_argument("--max-seconds", type=float, default=20.0, metavar="S",
                   help="stop warmup and timing once S seconds have passed, all levels together, after at least 3 "
                        "timed runs of each session (default 20; 0: every --warmup and --repeats run)")
    p.set_defaults(func=("cli_bench", "cmd_bench"))

    p = sub.add_parser("info", parents=common, help="what this build contains and what the machine offers",
                       description="Versions, which native parts were built (ONNX Runtime library, CUDA kernels "
                                   "and architectures, TensorRT plugin), the onnxruntime flavours and providers "
                                   "installed, and what is missing with how to get it.")
    p.add_argument("--json", action="store_true", help="print gelu_onnx.build_info() as JSON")
    p.set_defaults(func=cmd_info)
    return ap


def cmd_info(args) -> int:
    info = build_info()
    if args.json:
        emit_json(info)
    else:
        print("\n".join(describe(info, quiet=args.quiet)))
    return 0


def main(argv=None) -> int:
    out, err = streams.install(ESCAPE)
    try:
        try:
            args = build_parser().parse_args(argv)  # usage errors: one line, exit 2
        except SystemExit as e:  # also --help / --version: their text must reach stdout too
            out.settle(e.code == 0)
            raise
        debug = os.environ.get("GELU_ONNX_DEBUG") == "1"
        if getattr(args, "verbose", False):  # ONNX Runtime's warnings too (verify.runners reads the level)
            os.environ.setdefault("GELU_ONNX_ORT_LOG", "2")
        else:  # Python's warnings (numpy's overflow in a cast of huge random feeds, ...) are not errors
            warnings.simplefilter("ignore")
        # SIGTERM / SIGHUP (timeout, CI cancellation, docker stop, a closed
        # terminal) unwind like Ctrl-C, so every temp file is removed on the way
        with interrupts.unwinding():
            code = _run(args, debug)
        out.settle(code == 0)
        return code
    finally:
        sys.stdout, sys.stderr = out.stream, err.stream


def _command(func):
    """A command's function: cmd_info here; the others (module, name) in the
    module that prints their report, imported for that command only (the
    parity checker and the runtime are not a fuse's imports: docs/design.md,
    "Dependencies and start-up"), with signals deferred as __main__ does."""
    if callable(func):
        return func
    with interrupts.critical():
        return getattr(importlib.import_module(f"{__package__}.{func[0]}"), func[1])


def _run(args, debug: bool) -> int:
    try:
        try:
            return _command(args.func)(args)
        except Exception as e:  # an allocation failure, however it surfaced, is named as such (exit 3)
            if debug or not memlimit.allocation_failed(e):
                raise
            paths = [getattr(args, k, None) for k in ("input", "original", "fused")] + list(getattr(args, "models", []))
            raise memlimit.not_enough(f"run gelu-onnx {args.command}", models=[p for p in paths if p]) from None
    except GeluOnnxError as e:
        if debug:
            raise
        code, detail = e.exit_code, collapse_whitespace(e.message)
        msg = f"gelu-onnx: error: {detail}"
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", None)
        print(f"gelu-onnx: {'interrupted' if signum is None else f'terminated by signal {signum}'}; "
              "nothing half-written was left", file=sys.stderr)
        return 130 if signum is None else 128 + signum
    except Exception as e:
        if debug:
            raise
        if isinstance(e, ModuleNotFoundError) and e.name == "onnxruntime":  # it is an optional dependency
            code, detail = 3, f"onnxruntime is not installed; this command runs models: {ORT_HINT}"
            msg = f"gelu-onnx: error: {detail}"
        else:
            code = EXIT_INTERNAL
            detail = f"internal error: {type(e).__name__}: {collapse_whitespace(e)}"
            msg = f"gelu-onnx: {detail} (please report; GELU_ONNX_DEBUG=1 shows the traceback)"
    if getattr(args, "json", False):
        print(json.dumps({"ok": False, "error": detail, "exit_code": code}))
    print(msg, file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
