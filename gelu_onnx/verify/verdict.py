"""The reference-relative verdict: is the fused model as accurate as the original?

Per float output, over the elements finite in the reference ``ref``
(gelu_onnx.verify.reference), the original ``orig`` and ``fused``:

    mean|fused - ref| <= max(MEAN_FACTOR * mean|orig - ref|, FLOOR[dtype].mean * eps * rms(ref))
    max |fused - ref| <= max(MAX_FACTOR  * max |orig - ref|, FLOOR[dtype].max  * eps * max|ref|)

(gelu_onnx.contract.REFERENCE_VERDICT; ``eps``: the output dtype's machine
epsilon). The mean bound is the sharp one (a correct fusion rounds as well
as the original; a wrong GELU in one layer moves every element), the max
bound catches errors confined to a few elements, and the floors replace
(never add to) the factor's bound where the original is nearly exact: an
additive floor let a dropped bias in a 12-layer bf16 stack pass (issue 32).
The measurements: docs/verdict.md.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import contract
from .inputs import dtype_str


# machine epsilon (the spacing of values in [1, 2)) per output dtype
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


@dataclass
class Tally:
    """Running sums over iterations for one output."""

    n: int = 0  # elements finite in all three runs
    same_inf: int = 0  # elements the same infinity in all three
    ref_sq: float = 0.0
    ref_max: float = 0.0
    orig_sum: float = 0.0
    orig_max: float = 0.0
    fused_sum: float = 0.0
    fused_max: float = 0.0
    fused_devs: list = field(default_factory=list)  # |fused - ref| per iteration (float32), to count outliers

    def add(self, ref: np.ndarray, orig: np.ndarray, fused: np.ndarray) -> None:
        r, o, f = (np.asarray(a).astype(np.float64).ravel() for a in (ref, orig, fused))
        keep = np.isfinite(r) & np.isfinite(o) & np.isfinite(f)
        self.same_inf += int(np.count_nonzero(np.isinf(r) & (r == o) & (r == f)))
        r, o, f = r[keep], o[keep], f[keep]
        if not r.size:
            return
        do, df = np.abs(o - r), np.abs(f - r)
        self.n += r.size
        self.ref_sq += float(np.dot(r, r))
        self.ref_max = max(self.ref_max, float(np.abs(r).max()))
        self.orig_sum += float(do.sum())
        self.orig_max = max(self.orig_max, float(do.max()))
        self.fused_sum += float(df.sum())
        self.fused_max = max(self.fused_max, float(df.max()))
        self.fused_devs.append(df.astype(np.float32))

    def beyond(self, bound: float) -> int:
        """Elements whose |fused - ref| exceeds ``bound``."""
        return sum(int(np.count_nonzero(d > bound)) for d in self.fused_devs)


@dataclass
class Verdict:
    passed: bool
    fused_mean: float | None
    fused_max: float | None
    original_mean: float | None
    original_max: float | None
    mean_bound: float | None
    max_bound: float | None
    message: str = ""


def judge(t: Tally, dtype: str) -> Verdict:
    """The verdict of one output from its tally."""
    if not t.n:  # not a certificate: nothing was compared (certify says so on the row)
        return Verdict(False, None, None, None, None, None, None, "")
    v = contract.REFERENCE_VERDICT
    e = EPS[dtype]
    rms = (t.ref_sq / t.n) ** 0.5
    om, fm = t.orig_sum / t.n, t.fused_sum / t.n
    floor = v["floor_eps"][dtype]
    mean_bound = max(v["mean_factor"] * om, floor["mean"] * e * rms)
    max_bound = max(v["max_factor"] * t.orig_max, floor["max"] * e * t.ref_max)
    bad = []
    if not fm <= mean_bound:
        bad.append(f"mean |fused - reference| {fm:.3g} > {mean_bound:.3g} "
                   f"({v['mean_factor']:g} x the original's {om:.3g}, or the floor)")
    if not t.fused_max <= max_bound:
        bad.append(f"max |fused - reference| {t.fused_max:.3g} > {max_bound:.3g} "
                   f"({v['max_factor']:g} x the original's {t.orig_max:.3g}, or the floor)")
    return Verdict(not bad, fm, t.fused_max, om, t.orig_max, mean_bound, max_bound, "; ".join(bad))


class Rule:
    """Which rows the verdict judges: float outputs (and GELU tensors) with no
    fixed tolerance given for their dtype or name; and how it marks a row."""

    def __init__(self, tolerances=None, output_tolerances=None):
        self.fixed_dtypes = set(tolerances or {})
        self.fixed_names = set(output_tolerances or {})

    def judges(self, name: str, dtype: str) -> bool:
        return dtype in EPS and dtype not in self.fixed_dtypes and name not in self.fixed_names

    def tally(self, tallies: dict, precise, orig, fused) -> None:
        """Add one iteration's tensors (dicts by name) to ``tallies``."""
        for name, r in precise.items():
            if name not in orig or name not in fused:
                continue
            o, f = np.asarray(orig[name]), np.asarray(fused[name])
            dt = dtype_str(o)
            if dt == dtype_str(f) and o.shape == f.shape == np.shape(r) and self.judges(name, dt):
                tallies.setdefault(name, Tally()).add(r, o, f)

    def apply(self, row, tallies: dict):
        """``row`` (a comparator.OutputParity) judged by the verdict when it has a tally."""
        if row.dtype not in EPS:
            row.verdict = "exact"
            return row
        t = tallies.get(row.name)
        if t is None or row.rtol is None or not self.judges(row.name, row.dtype):
            return row
        v = judge(t, row.dtype)
        row.verdict = "reference"
        row.fused_mean_dev, row.fused_max_dev = v.fused_mean, v.fused_max
        row.original_mean_dev, row.original_max_dev = v.original_mean, v.original_max
        row.mean_bound, row.max_bound = v.mean_bound, v.max_bound
        row.rtol = row.atol = None
        row.compared, row.same_infinity = t.n, t.same_inf
        row.mismatched = row.nonfinite_mismatched + (t.beyond(v.max_bound) if v.max_bound is not None else 0)
        row.passed = v.passed and not row.nonfinite_mismatched
        msgs = [v.message] if v.message and not v.passed else []
        if row.nonfinite_mismatched:
            msgs.append(f"{row.nonfinite_mismatched} NaN/inf where the other model is finite or different")
        row.message = "; ".join(msgs)
        return row


def certify(row):
    """A row passes only when its verdict rests on enough elements: at least
    one finite in every run, and at least contract.MIN_COMPARED_FRACTION of
    its elements finite, or the same infinity, in every run. An empty output,
    or one whose every value is NaN somewhere (NaN inputs, --scale nan),
    proves nothing and is not a PASS: exit 1, 'nothing compared'."""
    need = contract.MIN_COMPARED_FRACTION * row.elements
    if row.elements and row.compared and row.compared + row.same_infinity >= need:
        return row
    if not row.elements:
        why = f"nothing compared: the output is empty (shape {row.shape})"
    elif not row.compared:
        why = f"nothing compared: none of its {row.elements} elements is finite in every run"
    else:
        why = (f"too little compared: {row.compared + row.same_infinity} of {row.elements} elements are finite "
               f"(or the same infinity) in every run, fewer than {contract.MIN_COMPARED_FRACTION:.0%}")
    if row.passed or not row.message:  # a failed row keeps the reason it failed for
        row.message = why
    row.passed = False
    return row


def golden_note(rows) -> str:
    """What a check against golden outputs must say: its bound is fixed; how to get the reference verdict."""
    fixed = sorted({(r.dtype, r.rtol, r.atol) for r in rows if r.verdict == "fixed" and r.rtol is not None})
    bounds = "; ".join(f"{dt}: rtol={rt:g}, atol={at:g}" for dt, rt, at in fixed) or "no float output"
    return ("golden outputs are judged by a fixed bound, |golden - fused| <= atol + rtol * |golden| (" + bounds
            + "), not by the reference verdict: a fixed bound cannot tell a model's own rounding from a wrong GELU "
            "(it fails correct deep fp16 fusions, and passes a wrong GELU whose error stays below it). For the "
            "reference verdict, give the original model instead of the golden outputs: gelu-onnx check "
            "ORIGINAL.onnx FUSED.onnx --inputs INPUTS (docs/verdict.md)")
