"""The reference-relative verdict: is the fused model as accurate as the original?

Per float output, with ``ref`` the precise reference run
(gelu_onnx.verify.reference), ``orig`` the original and ``fused`` the fused
model on the same inputs, over the elements where all three are finite:

    mean|fused - ref| <= MEAN_FACTOR * mean|orig - ref| + MEAN_FLOOR_EPS * eps * rms(ref)
    max |fused - ref| <= MAX_FACTOR  * max |orig - ref| + MAX_FLOOR_EPS  * eps * max|ref|

(constants in gelu_onnx.contract.REFERENCE_VERDICT, ``eps`` the machine
epsilon of the output's dtype). The mean bound is the sharp one: a fused
graph that rounds differently but as well as the original has the same mean
deviation (12-layer fp16 BERT: 6.29e-4 vs 6.36e-4 of rms(ref)), while a
wrong GELU in one layer of twelve moves every element (erf emitted as tanh,
fp32: 90x the original's). The max bound catches errors confined to a few
elements. The floors keep a bound above zero where the original is (nearly)
exact. docs/verdict.md has the measurements.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import contract


# machine epsilon (the spacing of values in [1, 2)) per output dtype
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


@dataclass
class Tally:
    """Running sums over iterations for one output."""

    n: int = 0
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
    if not t.n:
        return Verdict(True, None, None, None, None, None, None, "no element finite in all three runs")
    v = contract.REFERENCE_VERDICT
    e = EPS[dtype]
    rms = (t.ref_sq / t.n) ** 0.5
    om, fm = t.orig_sum / t.n, t.fused_sum / t.n
    mean_bound = v["mean_factor"] * om + v["mean_floor_eps"] * e * rms
    max_bound = v["max_factor"] * t.orig_max + v["max_floor_eps"] * e * t.ref_max
    bad = []
    if not fm <= mean_bound:
        bad.append(f"mean |fused - reference| {fm:.3g} > {mean_bound:.3g} "
                   f"({v['mean_factor']:g} x the original's {om:.3g} + floor)")
    if not t.fused_max <= max_bound:
        bad.append(f"max |fused - reference| {t.fused_max:.3g} > {max_bound:.3g} "
                   f"({v['max_factor']:g} x the original's {t.orig_max:.3g} + floor)")
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
        from .inputs import dtype_str

        for name, r in precise.items():
            if name not in orig or name not in fused:
                continue
            o, f = np.asarray(orig[name]), np.asarray(fused[name])
            dt = dtype_str(o)
            if dt == dtype_str(f) and o.shape == f.shape == np.shape(r) and self.judges(name, dt):
                tallies.setdefault(name, Tally()).add(r, o, f)

    def apply(self, row, tallies: dict):
        """``row`` (a parity_check.OutputStats) judged by the verdict when it
        has a tally; its fixed-bound fields are cleared then."""
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
        row.mismatched = row.nonfinite_mismatched + (t.beyond(v.max_bound) if v.max_bound is not None else 0)
        row.passed = v.passed and not row.nonfinite_mismatched
        msgs = [v.message] if v.message and not v.passed else []
        if row.nonfinite_mismatched:
            msgs.append(f"{row.nonfinite_mismatched} NaN/inf where the other model is finite or different")
        row.message = "; ".join(msgs)
        return row
