"""Error statistics of one compared tensor (mean, median and 99th percentile
of |original - fused| where both are finite, beside the row's maxima), and
their merge over iterations: maxima of maxima, summed counts, the
distribution of every iteration's errors together (kept as float32: ample
for a statistic).
"""
from __future__ import annotations

import copy
from typing import Sequence

import numpy as np

STATS = ("mean_abs", "median_abs", "p99_abs")
_MAXIMA = ("max_abs", "max_rel", "max_ulp")
_COUNTS = ("mismatched", "nonfinite_mismatched", "elements", "compared", "same_infinity")


def abs_stats(diff: np.ndarray) -> dict:
    """{mean_abs, median_abs, p99_abs} of finite absolute errors (None when there are none)."""
    d = np.asarray(diff, np.float64).ravel()
    if d.size == 0:
        return dict.fromkeys(STATS)
    return {
        "mean_abs": float(d.mean()),
        "median_abs": float(np.median(d)),
        "p99_abs": float(np.percentile(d, 99)),
    }


def keep(row, diff: np.ndarray):
    """Attach a row's finite absolute errors (for a later merge) and its statistics."""
    d = np.asarray(diff, np.float32).ravel()
    row.__dict__["_abs"] = d  # not a dataclass field: never serialized
    for k, v in abs_stats(d).items():
        setattr(row, k, v)
    return row


def _max(values):
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def merge(rows: Sequence):
    """One row for several iterations of the same tensor."""
    if len(rows) == 1:
        return rows[0]
    out = copy.copy(rows[0])
    for k in _MAXIMA:
        setattr(out, k, _max(getattr(r, k) for r in rows))
    for k in _COUNTS:
        setattr(out, k, sum(getattr(r, k) for r in rows))
    keep(out, np.concatenate([r.__dict__.get("_abs", np.empty(0, np.float32)) for r in rows]))
    out.passed = all(r.passed for r in rows)
    failing = [(i, r) for i, r in enumerate(rows) if not r.passed]
    if failing:
        out.message = "; ".join(f"iteration {i}: {r.message}" for i, r in failing[:3]) + (
            f"; and {len(failing) - 3} more iterations" if len(failing) > 3 else "")
    else:
        out.message = ""
    return out
