"""A CheckReport as text: what `gelu-onnx check` prints and what
gelu_onnx.testing.assert_parity raises.

The default view fits 100 columns (a CI log does not wrap it): per output
its errors against the original and the verdict; ``verbose`` adds the
deviations from the precise reference the verdict compared, every localized
tensor and uncut names. A ULP count is shown where it describes the error:
up to ULP_SHOWN units; more means values near zero, where max_abs says it
(``verbose`` shows every count).
"""
from __future__ import annotations

import textwrap

from ..texttable import clip, fmt, plural, table

WIDTH = 100
ULP_SHOWN = 1024
NAME_WIDTH = 28
SHAPE_WIDTH = 18
LOCALIZED_SHOWN = 10  # --localize rows in the default view (failures first)


def report_text(rep, verbose: bool = False, golden: str | None = None) -> str:
    """Every line of the report; ``golden``: the golden-outputs file, when the reference is one."""
    out = []
    ref = f"golden outputs {golden}" if golden else rep.original
    where = ", ".join(rep.providers)
    if rep.reference_provider and rep.reference_provider != rep.providers[0]:
        where += f" (original on {rep.reference_provider})"
    out.append(f"check {ref} vs {rep.fused}: provider {where}, library {'yes' if rep.library else 'no'}, "
               f"opt level {rep.opt_level}, {plural(rep.iterations, 'iteration')}")
    src = "random, seed %d" % rep.seed if rep.seed is not None else rep.inputs[0]["source"] if rep.inputs else "none"
    out.append(f"inputs ({src}): " + ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in rep.inputs))
    if rep.precise_reference:
        out.append(f"reference: {rep.precise_reference}")
    for run in rep.runs:
        if len(rep.runs) > 1:
            out.append(f"\n[{run.provider}]")
        out.append(_rows(run.outputs, verbose))
        if not verbose:
            out += _fixed_bounds(run.outputs)
        out += [_wrap(f"  {r.name}: {r.message}") for r in run.outputs if r.message]
        if run.fusions:
            out.append("")
            out += _localized(run.fusions, run.first_failure, rep.localize or "gelus", verbose)
    if len(rep.runs) > 1:
        rows = [[r.provider, f"{sum(o.passed for o in r.outputs)}/{len(r.outputs)}",
                 fmt(max((o.max_abs for o in r.outputs if o.max_abs is not None), default=None)),
                 clip(r.first_failure or "-", NAME_WIDTH), "PASS" if r.ok else "FAIL"] for r in rep.runs]
        out += ["", table(rows, ["provider", "outputs ok", "worst max_abs", "first failing tensor", "result"])]
    out += [_wrap(f"problem: {p}") for p in rep.problems]
    out += [_wrap(f"note: {n}") for n in rep.notes]
    out.append(f"{'PASS' if rep.ok else 'FAIL'}: {summary(rep)}")
    return "\n".join(out)


def _wrap(line: str) -> str:
    """A message line folded at WIDTH columns (continuations indented; words never cut)."""
    return textwrap.fill(line, WIDTH, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)


def summary(rep) -> str:
    """The verdict line's tail: how many outputs (providers, localized tensors) pass."""
    tail = f"{sum(r.passed for r in rep.outputs)} of {len(rep.outputs)} outputs within tolerance"
    if len(rep.runs) > 1:
        tail += f" on {rep.runs[0].provider}; {sum(r.ok for r in rep.runs)} of {len(rep.runs)} providers pass"
    if rep.fusions:
        what = "tensors" if rep.localize == "all" else "GELUs"
        tail += f"; {sum(f['pass'] for f in rep.fusions)} of {len(rep.fusions)} {what}"
    return tail


def _ulp(r, verbose: bool) -> str:
    return "-" if r.max_ulp is None or (not verbose and r.max_ulp > ULP_SHOWN) else str(r.max_ulp)


def _judged(r) -> str:
    return r.verdict if r.verdict in ("reference", "exact") else f"rtol={fmt(r.rtol)},atol={fmt(r.atol)}"


def _pair(mean, mx) -> str:
    return "-" if mean is None else f"{fmt(mean)}/{fmt(mx)}"


def _rows(rows, verbose: bool) -> str:
    """Errors between original and fused; -v: each one's deviation from the reference too."""
    if verbose:
        cells = [[r.name, r.dtype, r.shape, fmt(r.max_abs), fmt(r.mean_abs), fmt(r.p99_abs), _ulp(r, True),
                  _judged(r), _pair(r.fused_mean_dev, r.fused_max_dev),
                  _pair(r.original_mean_dev, r.original_max_dev), "PASS" if r.passed else "FAIL"] for r in rows]
        return table(cells, ["output", "dtype", "shape", "max_abs", "mean_abs", "p99_abs", "max_ulp", "judged by",
                             "fused-ref mean/max", "original-ref mean/max", "result"])
    cells = [[clip(r.name, NAME_WIDTH), r.dtype, clip(str(r.shape), SHAPE_WIDTH), fmt(r.max_abs), fmt(r.mean_abs),
              _ulp(r, False), r.verdict,
              "PASS" if r.passed else "FAIL"] for r in rows]
    return table(cells, ["output", "dtype", "shape", "max_abs", "mean_abs", "max_ulp", "judged", "result"])


def _fixed_bounds(rows) -> list[str]:
    """The default table says 'fixed': which bound, for which outputs."""
    by_tol: dict[str, list[str]] = {}
    for r in rows:
        if r.verdict == "fixed":
            by_tol.setdefault(_judged(r), []).append(r.name)
    return [_wrap(f"fixed: |original-fused| <= atol + rtol*|original|, {tol} ({', '.join(names)})")
            for tol, names in by_tol.items()]


def _localized(fusions, first, mode: str, verbose: bool) -> list[str]:
    """The localized tensors: GELUs (all of them), or with --localize all the
    failing ones first (LOCALIZED_SHOWN of them unless verbose)."""
    if mode == "all" and not verbose:
        shown = [f for f in fusions if not f["pass"]][:LOCALIZED_SHOWN]
    else:
        shown = fusions
    head = "GELU tensor" if mode != "all" else "tensor"
    what = "original GELU (inspect)" if mode != "all" else "written by"
    w = (None, None, None) if verbose else (NAME_WIDTH, 34, 22)
    cells = [[clip(f["tensor"], w[0]), clip(f["summary"], w[1]), clip(f["fused_op"] or "-", w[2]),
              fmt(f.get("max_abs")), "PASS" if f["pass"] else "FAIL"] for f in shown]
    out = [table(cells, [head, what, "fused op", "max_abs", "result"])] if cells else []
    if len(shown) < len(fusions):
        failing = sum(not f["pass"] for f in fusions)
        out.append(f"({len(shown)} of the {failing} failing tensors shown; -v or --json for all {len(fusions)})"
                   if failing else f"(no tensor fails; -v or --json for all {len(fusions)})")
    out += [_wrap(f"  {f['tensor']}: {f['message']}") for f in shown if not f["pass"] and f.get("message")]
    if first:
        f = next(x for x in fusions if x["tensor"] == first)
        kind = "GELU" if mode != "all" else "tensor"
        out.append(f"first failing {kind}: {first} ({f['summary']})")
    return out
