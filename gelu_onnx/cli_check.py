"""``gelu-onnx check``: its printed report and progress (the work is
gelu_onnx.verify.parity_check.check, the text gelu_onnx.verify.checktext;
its arguments: cli.py). Imported by that command only."""
from __future__ import annotations

import contextlib
import sys

from tqdm import tqdm

from .cliout import dims, emit_json
from .contract import PARITY_TOLERANCE
from .errors import InputError
from .files import require_file
from .verify import checktext, parity_check


def cmd_check(args) -> int:
    models = getattr(args, "models_before", []) + list(args.models)
    if len(models) > 2:
        raise InputError(f"check takes ORIGINAL.onnx FUSED.onnx (or FUSED.onnx with --reference-outputs), got {len(models)} files")
    if len(models) == 1 and args.reference_outputs is None:
        raise InputError("check needs ORIGINAL.onnx FUSED.onnx, or FUSED.onnx with --reference-outputs golden.json")
    original, fused = (None, models[0]) if len(models) == 1 else models
    for path in models + [x for x in (args.inputs, args.reference_outputs) if x is not None]:
        require_file(path)
    rtol_atol, by_name = tolerances(args)
    with progress(args, "check") as step:
        rep = parity_check.check(
            original, fused,
            seed=args.seed, iterations=args.iterations, inputs=args.inputs, dims=dims(args),
            input_shapes=dict(args.input_shapes or []), dim_default=args.dim_default, scale=args.scale,
            tolerances=rtol_atol, output_tolerances=by_name, providers=args.provider or ["cpu"],
            reference_provider=args.reference_provider, use_library=False if args.no_library else None,
            opt_level=args.opt_level, save_inputs=args.save_inputs, save_outputs=args.save_outputs,
            reference_outputs=args.reference_outputs, localize_gelus=args.localize or False,
            allow_pickle=args.allow_pickle, tf32=args.tf32, custom_op_libraries=args.custom_op_library,
            progress=step,
        )
    for w in rep.warnings:
        print(f"gelu-onnx: warning: {w}", file=sys.stderr)
    if args.json:
        emit_json(rep.to_dict())
    else:
        print(checktext.report_text(rep, verbose=getattr(args, "verbose", False), golden=args.reference_outputs))
    return _verdict(rep)


def _verdict(rep) -> int:
    """Exit 0, or 1 with one stderr line (every failing exit has one)."""
    if rep.ok:
        return 0
    tail = checktext.summary(rep)
    if rep.problems:
        tail += f"; {rep.problems[0]}"
    else:
        tail += next((f"; {r.name}: {r.message}" for r in rep.outputs if not r.passed and r.message), "")
    print(f"gelu-onnx: error: parity check failed: {tail}", file=sys.stderr)
    return 1


@contextlib.contextmanager
def progress(args, command: str):
    """``progress(step, seconds)`` for check/bench: with -v one stderr line per
    finished step; else, on a terminal (stderr isatty) and without -q, a tqdm
    line naming the running step; else nothing."""
    verbose = getattr(args, "verbose", False)
    bar = None
    if not verbose and not getattr(args, "quiet", False) and sys.stderr.isatty():
        bar = tqdm(desc=command, unit="step", file=sys.stderr, leave=False, bar_format="{desc} [{elapsed}]")

    def step(name: str, seconds: float | None) -> None:
        if verbose and seconds is not None:
            print(f"gelu-onnx {command}: {name}: {seconds:.1f} s", file=sys.stderr, flush=True)
        elif bar is not None:
            bar.set_description_str(f"{command}: {name}" + (" (done)" if seconds is not None else ""))
            bar.refresh()

    try:
        yield step
    finally:
        if bar is not None:
            bar.close()


def tolerances(args) -> tuple[dict, dict]:
    """({dtype: {rtol, atol}}, {output name: {rtol, atol}}) from --rtol/--atol
    (VALUE, DTYPE=VALUE, NAME:VALUE) and --tol NAME:RTOL,ATOL (which wins)."""
    by_dtype, by_name = {}, {}
    for key, given in (("rtol", args.rtol), ("atol", args.atol)):
        for kind, what, v in given or []:
            if kind == "name":
                by_name.setdefault(what, {})[key] = v
                continue
            for dt in [what] if what else PARITY_TOLERANCE:
                by_dtype.setdefault(dt, {})[key] = v
    for name, tol in args.tol or []:
        by_name.setdefault(name, {}).update(tol)
    return by_dtype, by_name
