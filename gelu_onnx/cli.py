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


def _emit_json(doc) -> None:
    from .parity import json_safe

    print(json.dumps(json_safe(doc), indent=2))


def _table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[("" if c is None else str(c)) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in cells)


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "es" if word.endswith("s") else "s")


def _graph(g: str) -> str:
    return g or "main"


# --- argument types ----------------------------------------------------------------


def _dim(s: str):
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


def _tol(s: str):
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


def _tolerances(args) -> dict:
    from .contract import PARITY_TOLERANCE

    out: dict = {}
    for key, given in (("rtol", args.rtol), ("atol", args.atol)):
        for dtype, v in given or []:
            for dt in [dtype] if dtype else PARITY_TOLERANCE:
                out.setdefault(dt, {})[key] = v
    return out


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{s}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def _nonneg_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{s}'") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def _dims(args) -> dict:
    return dict(args.dim or [])


def _need_file(path: str, what: str = "") -> None:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{path}: no such file")
    if not p.is_file():
        raise InputError(f"{path}: not a regular file")


# --- commands ----------------------------------------------------------------------


def _checker(model_or_path, shown) -> None:
    import onnx

    try:
        onnx.checker.check_model(model_or_path)
    except onnx.checker.ValidationError as e:
        raise GeluOnnxError(f"{shown}: the fused model fails onnx.checker: {_one_line(str(e).splitlines()[0])} "
                            "(a bug: please report)") from e


def _skeleton(path):
    """Big single-file models are read as a skeleton whose weights stay in the
    file (gelu_onnx/splice.py); None for any other model (then io.load_model)."""
    from . import splice

    return splice.open_skeleton(path) if splice.wanted(path) else None


def cmd_fuse(args) -> int:
    _need_file(args.input)
    if _same_file(args.input, args.output) and not args.overwrite_input:
        raise InputError(f"{args.output} is the input file; refusing to overwrite it (pass --overwrite-input)")
    # The skeleton's weights are copied to the output byte for byte.
    skel = _skeleton(args.input)
    if skel is not None:
        with skel:
            return _fuse_finish(args, skel.loaded, skel)
    return _fuse_finish(args, _load(args.input), None)


def _fuse_finish(args, loaded, skel) -> int:
    import onnx

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
            _checker(out, args.output)
        saved = skel.save(out, args.output, overwrite_input=args.overwrite_input)
        in_memory = True
    else:
        in_memory = io.embedded_bytes(out) < io.MAX_PROTO_BYTES - (64 << 20) and not any(
            t.data_location == onnx.TensorProto.EXTERNAL for t in io.iter_tensors(out))
        if in_memory:
            _checker(out, args.output)
        # io: temp file + rename; external data files linked next to the output; the input is protected
        saved = loaded.save(out, args.output, overwrite_input=args.overwrite_input)
    if not in_memory:
        try:
            _checker(args.output, args.output)
        except BaseException:
            # never leave a model that failed the checker behind
            keep = {os.path.realpath(f) for f in loaded.external_files}
            for f in [saved.path] + list(saved.data_files):
                if os.path.realpath(f) not in keep:
                    with contextlib.suppress(OSError):
                        os.remove(f)
            raise
    notes += saved.notes
    fusions = [_record(f) for f in res.fusions]
    near = [_record(n) for n in res.near_misses]
    by_form = Counter(f.get("form") for f in fusions)
    if args.json:
        _emit_json({
            "ok": True,
            "input": args.input,
            "output": args.output,
            "target": args.target,
            "fused": len(fusions),
            "by_form": dict(by_form),
            "fusions": fusions,
            "near_misses": near,
            "notes": notes,
        })
        return 0
    forms = ", ".join(f"{k}: {v}" for k, v in sorted(by_form.items())) or "none found"
    print(f"fused {_n(len(fusions), 'GELU')} ({forms}) -> {args.output} [target {args.target}]")
    if near:
        print(f"{_n(len(near), 'near-miss')} left unfused:")
        for n in near:
            print(f"  [{_graph(n.get('graph'))}] {n.get('anchor')}: {n.get('code')}: {n.get('reason')}")
    for note in notes:
        print(f"note: {note}")
    return 0


def cmd_inspect(args) -> int:
    from . import inspect as _inspect

    _need_file(args.input)
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
        _emit_json({"ok": True, "input": args.input, "target": target, "gelus": len(fusions), "fusions": fusions,
                    "near_misses": near, "warnings": [warning] if warning else []})
        return 0
    shown = f" [target {target}]" if args.target else ""
    print(f"{args.input}: {_n(len(fusions), 'GELU')} found, {_n(len(near), 'near-miss')}{shown}")
    if fusions:
        rows = [[_graph(f.get("graph")), f.get("root"), f.get("form"), "yes" if f.get("bias") else "no",
                 "" if f.get("alpha") is None else f"{f['alpha']:g}", f.get("dtype"), len(f.get("nodes") or [])]
                + ([f.get("op")] if args.target else []) for f in fusions]
        print()
        print(_table(rows, ["graph", "root", "form", "bias", "alpha", "dtype", "nodes"]
                     + (["becomes"] if args.target else [])))
    if near:
        print()
        print(_table([[_graph(n.get("graph")), n.get("anchor"), n.get("code"), n.get("reason")] for n in near],
                     ["graph", "anchor", "code", "reason"]))
    return 0


def _ops_gone(model) -> str | None:
    from .pairing import custom_ops_gone

    return custom_ops_gone(model)


def _fmt(x, spec=".3g") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)


def _tol_by_name(s: str):
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


def _providers(s: str) -> list[str]:
    from .parity import PROVIDERS

    ps = [p.strip() for p in s.split(",") if p.strip()]
    bad = [p for p in ps if p not in PROVIDERS]
    if not ps or bad:
        raise argparse.ArgumentTypeError(f"'{s}': choose a comma-separated list from {', '.join(PROVIDERS)}")
    return ps


def cmd_check(args) -> int:
    from . import parity_check

    models = list(args.models)
    if len(models) > 2:
        raise InputError(f"check takes ORIGINAL.onnx FUSED.onnx (or FUSED.onnx with --reference-outputs), got {len(models)} files")
    if len(models) == 1 and args.reference_outputs is None:
        raise InputError("check needs ORIGINAL.onnx FUSED.onnx, or FUSED.onnx with --reference-outputs golden.json")
    original, fused = (None, models[0]) if len(models) == 1 else models
    for path in [m for m in models] + [x for x in (args.inputs, args.reference_outputs) if x is not None]:
        _need_file(path)
    rep = parity_check.check(
        original, fused,
        seed=args.seed, iterations=args.iterations, inputs=args.inputs, dims=_dims(args),
        dim_default=args.dim_default, scale=args.scale, tolerances=_tolerances(args),
        output_tolerances=dict(args.tol or []), providers=args.provider or ["cpu"],
        reference_provider=args.reference_provider, use_library=False if args.no_library else None,
        opt_level=args.opt_level, save_inputs=args.save_inputs, save_outputs=args.save_outputs,
        reference_outputs=args.reference_outputs, localize_gelus=args.localize, allow_pickle=args.allow_pickle,
    )
    for w in rep.warnings:
        print(f"gelu-onnx: warning: {w}", file=sys.stderr)
    if args.json:
        _emit_json(rep.to_dict())
        return 0 if rep.ok else 1
    ref = f"golden outputs {args.reference_outputs}" if original is None or args.reference_outputs else original
    where = ", ".join(rep.providers)
    if rep.reference_provider and rep.reference_provider != rep.providers[0]:
        where += f" (original on {rep.reference_provider})"
    print(f"check {ref} vs {fused}: provider {where}, library {'yes' if rep.library else 'no'}, "
          f"opt level {rep.opt_level}, {_n(rep.iterations, 'iteration')}")
    src = "random, seed %d" % rep.seed if rep.seed is not None else rep.inputs[0]["source"] if rep.inputs else "none"
    print(f"inputs ({src}): " + ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in rep.inputs))
    for run in rep.runs:
        if len(rep.runs) > 1:
            print(f"\n[{run.provider}]")
        _print_rows(run.outputs, "output")
        if run.fusions:
            print()
            _print_fusions(run.fusions, run.first_failure)
    if len(rep.runs) > 1:
        print()
        rows = [[r.provider, f"{sum(o.passed for o in r.outputs)}/{len(r.outputs)}",
                 _fmt(max((o.max_abs for o in r.outputs if o.max_abs is not None), default=None)),
                 _fmt(max((o.max_ulp for o in r.outputs if o.max_ulp is not None), default=None)),
                 r.first_failure or "-", "PASS" if r.ok else "FAIL"] for r in rep.runs]
        print(_table(rows, ["provider", "outputs ok", "worst max_abs", "worst max_ulp", "first failing GELU", "result"]))
    for p in rep.problems:
        print(f"problem: {p}")
    for n in rep.notes:
        print(f"note: {n}")
    passed = sum(r.passed for r in rep.outputs)
    tail = f"{passed} of {len(rep.outputs)} outputs within tolerance"
    if len(rep.runs) > 1:
        tail += f" on {rep.runs[0].provider}; {sum(r.ok for r in rep.runs)} of {len(rep.runs)} providers pass"
    if rep.fusions:
        tail += f"; {sum(f['pass'] for f in rep.fusions)} of {len(rep.fusions)} GELUs"
    print(f"{'PASS' if rep.ok else 'FAIL'}: {tail}")
    return 0 if rep.ok else 1


def _print_rows(rows, what: str) -> None:
    table = [[r.name, r.dtype, r.shape, _fmt(r.max_abs), _fmt(r.mean_abs), _fmt(r.median_abs), _fmt(r.p99_abs),
              _fmt(r.max_rel), _fmt(r.max_ulp), _fmt(r.rtol), _fmt(r.atol), "PASS" if r.passed else "FAIL"]
             for r in rows]
    print(_table(table, [what, "dtype", "shape", "max_abs", "mean_abs", "median_abs", "p99_abs", "max_rel",
                         "max_ulp", "rtol", "atol", "result"]))
    for r in rows:
        if r.message:
            print(f"  {r.name}: {r.message}")


def _print_fusions(fusions, first) -> None:
    table = [[f["tensor"], f["summary"], f["fused_op"] or "-", _fmt(f.get("max_abs")), _fmt(f.get("p99_abs")),
              _fmt(f.get("max_ulp")), "PASS" if f["pass"] else "FAIL"] for f in fusions]
    print(_table(table, ["GELU tensor", "original GELU (inspect)", "fused op", "max_abs", "p99_abs", "max_ulp",
                         "result"]))
    for f in fusions:
        if not f["pass"] and f.get("message"):
            print(f"  {f['tensor']}: {f['message']}")
    if first:
        f = next(x for x in fusions if x["tensor"] == first)
        print(f"first failing GELU: {first} ({f['summary']})")


def cmd_bench(args) -> int:
    from . import bench as _bench

    _need_file(args.original)
    if args.fused:
        _need_file(args.fused)
    if args.inputs is not None:
        _need_file(args.inputs)
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
            dims=_dims(args), dim_default=args.dim_default, allow_pickle=args.allow_pickle, progress=bar.update,
        )
    if args.json:
        _emit_json(rep.to_dict())
        return 0
    m, v = rep.machine, rep.versions
    what = rep.fused + (f" ({_n(rep.fusions, 'GELU')} fused)" if rep.fusions is not None else "")
    print(f"bench {rep.original} vs {what}")
    print(f"machine: {m['cpu']}, {m['usable_cpus']} usable CPUs, intra-op threads {rep.threads}, provider {rep.provider}")
    print(f"versions: onnxruntime {v['onnxruntime']}, onnx {v['onnx']}, numpy {v['numpy']}, python {v['python']}, "
          f"gelu-onnx {v['gelu_onnx']}; custom-op library {'yes' if rep.library else 'no'}")
    print("inputs: " + ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in rep.inputs))
    print(f"median of {rep.repeats} runs after {rep.warmup} warmup, interleaved blocks:")
    rows = [[t.opt_level, f"{t.original_ms:.3f}", f"{t.fused_ms:.3f}", f"{t.ratio:.3f}",
             "ok" if t.parity_ok else "MISMATCH"] for t in rep.results]
    print(_table(rows, ["opt level", "original ms", "fused ms", "fused/original", "parity"]))
    for n in rep.notes:
        print(f"note: {n}")
    return 0


# --- parser ------------------------------------------------------------------------


def _add_input_args(p, dim_default: int) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--inputs", metavar="FILE", help="feed these arrays instead of random ones: .npz, or Polygraphy "
                                                    "saved inputs (JSON, e.g. polygraphy run --save-inputs)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="UNSAFE: let --inputs/--reference-outputs hold pickled object arrays (pickle can run code)")
    p.add_argument("--dim", type=_dim, action="append", metavar="NAME=VALUE",
                   help="size of a named (symbolic) input dimension; repeatable")
    p.add_argument("--dim-default", type=_nonneg_int, default=dim_default, metavar="N",
                   help=f"size of named dims not given by --dim and of unknown dims (default {dim_default})")
    p.add_argument("--no-library", action="store_true",
                   help="do not register the gelu-onnx custom-op library (the fused model then runs its model-local functions)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")


def build_parser() -> argparse.ArgumentParser:
    from .bench import BENCH_DIM_DEFAULT
    from .parity import DIM_DEFAULT, OPT_LEVELS, PROVIDERS

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

    p = sub.add_parser("check", help="parity: run original and fused on the same inputs, compare outputs",
                       description="Run ORIGINAL and FUSED on the same inputs and compare every output "
                                   "(max abs/rel error, ulp). Exit 1 when any output is outside tolerance.")
    p.add_argument("models", nargs="+", metavar="ORIGINAL.onnx FUSED.onnx",
                   help="the original and the fused model; only FUSED.onnx with --reference-outputs")
    _add_input_args(p, DIM_DEFAULT)
    p.add_argument("--iterations", type=_positive_int, default=None, metavar="N",
                   help="run N iterations (random inputs: seeds SEED..SEED+N-1; default 1, or every iteration of --inputs)")
    p.add_argument("--scale", type=float, default=1.0, help="random floats are N(0,1) * SCALE (default 1)")
    p.add_argument("--rtol", type=_tol, action="append", metavar="[DTYPE=]VALUE",
                   help="relative tolerance for every float output, or for one dtype; repeatable")
    p.add_argument("--atol", type=_tol, action="append", metavar="[DTYPE=]VALUE",
                   help="absolute tolerance, same forms as --rtol")
    p.add_argument("--tol", type=_tol_by_name, action="append", metavar="NAME:RTOL,ATOL",
                   help="tolerance of one output (or GELU tensor with --localize); wins over --rtol/--atol; repeatable")
    p.add_argument("--provider", type=_providers, default=None, metavar="P[,P...]",
                   help=f"where the fused model runs, each compared with the reference: {', '.join(PROVIDERS)} "
                        "(default cpu; cuda needs onnxruntime-gpu)")
    p.add_argument("--reference-provider", choices=PROVIDERS, default=None,
                   help="where the original runs (default: the first --provider)")
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
    p.add_argument("--target", choices=TARGETS, default="custom", help="target when FUSED is not given (default custom)")
    _add_input_args(p, BENCH_DIM_DEFAULT)
    p.add_argument("--threads", type=_positive_int, default=2, help="intra-op threads (default 2)")
    p.add_argument("--warmup", type=_nonneg_int, default=10, help="untimed runs per session (default 10)")
    p.add_argument("--repeats", type=_positive_int, default=50, help="timed runs per session (default 50)")
    p.add_argument("--opt-levels", default="basic,all", metavar="LIST",
                   help=f"comma-separated ONNX Runtime levels from {','.join(OPT_LEVELS)} (default basic,all)")
    p.add_argument("--provider", choices=("cpu", "cuda"), default="cpu", help="execution provider (default cpu)")
    p.set_defaults(func=cmd_bench)
    return ap


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def main(argv=None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)  # usage errors: argparse prints usage + one error line, exit 2
    debug = os.environ.get("GELU_ONNX_DEBUG") == "1"
    try:
        return args.func(args)
    except GeluOnnxError as e:
        if debug:
            raise
        code, detail = e.exit_code, _one_line(e.message)
        msg = f"gelu-onnx: error: {detail}"
    except KeyboardInterrupt:
        print("gelu-onnx: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as e:
        if debug:
            raise
        code = EXIT_INTERNAL
        detail = f"internal error: {type(e).__name__}: {_one_line(e)}"
        msg = f"gelu-onnx: {detail} (please report; GELU_ONNX_DEBUG=1 shows the traceback)"
    if getattr(args, "json", False):
        print(json.dumps({"ok": False, "error": detail, "exit_code": code}))
    print(msg, file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
