"""``gelu-onnx check``: its printed report (the work is
gelu_onnx.verify.parity_check.check; its arguments: cli.py). Imported by that
command only."""
from __future__ import annotations

import sys

from .files import require_file
from .cliout import dims, emit_json, plural, table
from .errors import InputError


def cmd_check(args) -> int:
    from .verify import parity_check

    models = list(args.models)
    if len(models) > 2:
        raise InputError(f"check takes ORIGINAL.onnx FUSED.onnx (or FUSED.onnx with --reference-outputs), got {len(models)} files")
    if len(models) == 1 and args.reference_outputs is None:
        raise InputError("check needs ORIGINAL.onnx FUSED.onnx, or FUSED.onnx with --reference-outputs golden.json")
    original, fused = (None, models[0]) if len(models) == 1 else models
    for path in [m for m in models] + [x for x in (args.inputs, args.reference_outputs) if x is not None]:
        require_file(path)
    rep = parity_check.check(
        original, fused,
        seed=args.seed, iterations=args.iterations, inputs=args.inputs, dims=dims(args),
        dim_default=args.dim_default, scale=args.scale, tolerances=tolerances(args),
        output_tolerances=dict(args.tol or []), providers=args.provider or ["cpu"],
        reference_provider=args.reference_provider, use_library=False if args.no_library else None,
        opt_level=args.opt_level, save_inputs=args.save_inputs, save_outputs=args.save_outputs,
        reference_outputs=args.reference_outputs, localize_gelus=args.localize, allow_pickle=args.allow_pickle,
        tf32=args.tf32,
    )
    for w in rep.warnings:
        print(f"gelu-onnx: warning: {w}", file=sys.stderr)
    if args.json:
        emit_json(rep.to_dict())
        return _verdict(rep, None)
    ref = f"golden outputs {args.reference_outputs}" if original is None or args.reference_outputs else original
    where = ", ".join(rep.providers)
    if rep.reference_provider and rep.reference_provider != rep.providers[0]:
        where += f" (original on {rep.reference_provider})"
    print(f"check {ref} vs {fused}: provider {where}, library {'yes' if rep.library else 'no'}, "
          f"opt level {rep.opt_level}, {plural(rep.iterations, 'iteration')}")
    src = "random, seed %d" % rep.seed if rep.seed is not None else rep.inputs[0]["source"] if rep.inputs else "none"
    print(f"inputs ({src}): " + ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in rep.inputs))
    if rep.precise_reference:
        print(f"reference: {rep.precise_reference}")
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
                 fmt(max((o.max_abs for o in r.outputs if o.max_abs is not None), default=None)),
                 fmt(max((o.max_ulp for o in r.outputs if o.max_ulp is not None), default=None)),
                 r.first_failure or "-", "PASS" if r.ok else "FAIL"] for r in rep.runs]
        print(table(rows, ["provider", "outputs ok", "worst max_abs", "worst max_ulp", "first failing GELU", "result"]))
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
    return _verdict(rep, tail)


def _verdict(rep, tail: str | None) -> int:
    """Exit 0, or 1 with one stderr line (every failing exit has one)."""
    if rep.ok:
        return 0
    if tail is None:
        tail = f"{sum(r.passed for r in rep.outputs)} of {len(rep.outputs)} outputs within tolerance"
    if rep.problems:
        tail += f"; {rep.problems[0]}"
    print(f"gelu-onnx: error: parity check failed: {tail}", file=sys.stderr)
    return 1


def _judged(r) -> str:
    if r.verdict == "reference":
        return "reference"
    return "exact" if r.verdict == "exact" else f"rtol={fmt(r.rtol)},atol={fmt(r.atol)}"


def _print_rows(rows, what: str) -> None:
    """Errors between original and fused, then each one's deviation from the reference."""
    cells = [[r.name, r.dtype, r.shape, fmt(r.max_abs), fmt(r.mean_abs), fmt(r.p99_abs), fmt(r.max_ulp), _judged(r),
              _pair(r.fused_mean_dev, r.fused_max_dev), _pair(r.original_mean_dev, r.original_max_dev),
              "PASS" if r.passed else "FAIL"] for r in rows]
    print(table(cells, [what, "dtype", "shape", "max_abs", "mean_abs", "p99_abs", "max_ulp", "judged by",
                        "fused-ref mean/max", "original-ref mean/max", "result"]))
    for r in rows:
        if r.message:
            print(f"  {r.name}: {r.message}")


def _pair(mean, mx) -> str:
    return "-" if mean is None else f"{fmt(mean)}/{fmt(mx)}"


def _print_fusions(fusions, first) -> None:
    cells = [[f["tensor"], f["summary"], f["fused_op"] or "-", fmt(f.get("max_abs")), fmt(f.get("max_ulp")),
              _pair(f.get("fused_mean_dev"), f.get("fused_max_dev")),
              _pair(f.get("original_mean_dev"), f.get("original_max_dev")), "PASS" if f["pass"] else "FAIL"]
             for f in fusions]
    print(table(cells, ["GELU tensor", "original GELU (inspect)", "fused op", "max_abs", "max_ulp",
                        "fused-ref mean/max", "original-ref mean/max", "result"]))
    for f in fusions:
        if not f["pass"] and f.get("message"):
            print(f"  {f['tensor']}: {f['message']}")
    if first:
        f = next(x for x in fusions if x["tensor"] == first)
        print(f"first failing GELU: {first} ({f['summary']})")


def tolerances(args) -> dict:
    from .contract import PARITY_TOLERANCE

    out: dict = {}
    for key, given in (("rtol", args.rtol), ("atol", args.atol)):
        for dtype, v in given or []:
            for dt in [dtype] if dtype else PARITY_TOLERANCE:
                out.setdefault(dt, {})[key] = v
    return out


def fmt(x, spec=".3g") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)
