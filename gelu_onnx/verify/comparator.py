"""Comparing two runs' outputs: per output, max abs / rel error and ULP
distance against the dtype's tolerance (contract.PARITY_TOLERANCE), and the
distribution of |original - fused| where both are finite (mean, median,
99th percentile). ``merge``: one row for several iterations: maxima of
maxima, summed counts, every iteration's errors together (kept as float32:
ample for a statistic)."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .. import contract
from .inputs import dtype_str, is_bf16


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise distance in units in the last place of a's dtype (float16 / bfloat16 / float32 /
    float64): the representable values between a and b, from the IEEE bit patterns (+0 and -0 are 0
    apart). Only meaningful where both are finite."""
    if a.dtype != b.dtype or a.dtype.itemsize not in _UINT or not (a.dtype.kind == "f" or is_bf16(a)):
        raise TypeError(f"ulp_distance needs two arrays of one float dtype, got {a.dtype} and {b.dtype}")
    u = _UINT[a.dtype.itemsize]
    sign = u(1) << u(8 * a.dtype.itemsize - 1)
    ia, ib = np.ascontiguousarray(a).view(u), np.ascontiguousarray(b).view(u)
    ma, mb = (ia & ~sign).astype(np.uint64), (ib & ~sign).astype(np.uint64)
    same = (ia & sign) == (ib & sign)
    return np.where(same, np.maximum(ma, mb) - np.minimum(ma, mb), ma + mb)


@dataclass
class OutputParity:
    name: str
    dtype: str
    shape: list | None
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulp: int | None = None
    mismatched: int = 0  # elements outside tolerance (incl. non-finite mismatches)
    nonfinite_mismatched: int = 0  # NaN/inf in one model and not at the same place in the other
    elements: int = 0
    # what the verdict rests on: elements finite in every run compared (for an
    # exact dtype: every element), and elements the same infinity in every run
    compared: int = 0
    same_infinity: int = 0
    rtol: float | None = None
    atol: float | None = None
    passed: bool = False
    message: str = ""
    mean_abs: float | None = None  # of |original - fused| where both are finite (keep)
    median_abs: float | None = None
    p99_abs: float | None = None
    # "reference" (gelu_onnx.verify.verdict), "fixed" (atol/rtol) or "exact"
    verdict: str = "fixed"
    fused_mean_dev: float | None = None  # mean |fused - reference|
    fused_max_dev: float | None = None
    original_mean_dev: float | None = None  # mean |original - reference|
    original_max_dev: float | None = None
    mean_bound: float | None = None
    max_bound: float | None = None


def _row(name: str, a: np.ndarray, message: str = "") -> OutputParity:
    return OutputParity(name=name, dtype=dtype_str(a), shape=list(a.shape), elements=int(a.size), message=message)


def compare_one(name: str, ref: np.ndarray, got: np.ndarray, tolerances=None) -> OutputParity:
    ref, got = np.asarray(ref), np.asarray(got)
    row = _row(name, ref)
    dt = row.dtype
    if dtype_str(got) != dt:
        row.message = f"dtype differs: original {dt}, fused {dtype_str(got)}"
        return row
    if ref.shape != got.shape:
        row.message = f"shape differs: original {list(ref.shape)}, fused {list(got.shape)}"
        return row
    base = contract.PARITY_TOLERANCE.get(dt)
    if base is None:  # integers, bool, strings: must be identical
        equal = ref == got
        row.mismatched = int(ref.size - np.count_nonzero(equal))
        row.compared = int(ref.size)
        if ref.dtype.kind in "iub" and ref.size:
            row.max_abs = float(np.max(np.abs(ref.astype(np.float64) - got.astype(np.float64))))
        row.passed = row.mismatched == 0
        row.message = "" if row.passed else f"{row.mismatched} of {ref.size} elements differ (exact match required for {dt})"
        return row
    tol = {**base, **(tolerances or {}).get(dt, {})}
    row.rtol, row.atol = tol["rtol"], tol["atol"]
    a, b = ref.astype(np.float64), got.astype(np.float64)
    equal = (a == b) | (np.isnan(a) & np.isnan(b))
    finite = np.isfinite(a) & np.isfinite(b)
    row.nonfinite_mismatched = int(np.count_nonzero(~equal & ~finite))
    row.compared = int(np.count_nonzero(finite))
    row.same_infinity = int(np.count_nonzero(equal & np.isinf(a)))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(a - b), 0.0)
    close = equal | (finite & (diff <= row.atol + row.rtol * np.abs(a)))
    row.mismatched = int(ref.size - np.count_nonzero(close))
    if np.any(finite):
        row.max_abs = float(diff[finite].max())
        nz = finite & (a != 0)  # zeros of the original are covered by atol
        row.max_rel = float((diff[nz] / np.abs(a[nz])).max()) if np.any(nz) else 0.0
        row.max_ulp = int(ulp_distance(ref[finite], got[finite]).max())
    keep(row, diff[finite])
    row.passed = row.mismatched == 0
    if not row.passed:
        parts = [f"{row.mismatched} of {ref.size} elements outside atol={row.atol:g} + rtol={row.rtol:g}*|original|"]
        if row.nonfinite_mismatched:
            parts.append(f"{row.nonfinite_mismatched} NaN/inf where the other model is finite or different")
        row.message = "; ".join(parts)
    return row


def compare(original_outputs: Mapping[str, np.ndarray], fused_outputs: Mapping[str, np.ndarray], tolerances=None,
            output_tolerances: Mapping[str, Mapping[str, float]] | None = None) -> list[OutputParity]:
    """Per-output parity rows, matched by name (original order, then fused-only
    names); ``output_tolerances`` ({name: {rtol, atol}}) win over ``tolerances``."""
    rows = []
    for name, ref in original_outputs.items():
        ref = np.asarray(ref)
        if name not in fused_outputs:
            rows.append(_row(name, ref, "missing from the fused model's outputs"))
            continue
        tol = tolerances
        if (output_tolerances or {}).get(name):
            tol = {dt: dict(v) for dt, v in (tolerances or {}).items()}
            tol.setdefault(dtype_str(ref), {}).update(output_tolerances[name])
        rows.append(compare_one(name, ref, fused_outputs[name], tol))
    for name, v in fused_outputs.items():
        if name not in original_outputs:
            rows.append(_row(name, np.asarray(v), "output exists only in the fused model"))
    return rows


def keep(row: OutputParity, diff: np.ndarray) -> OutputParity:
    """Attach a row's finite absolute errors (for a later merge) and their statistics."""
    d = np.asarray(diff, np.float32).ravel()
    row.__dict__["_abs"] = d  # not a dataclass field: never serialized
    d64 = d.astype(np.float64)
    row.mean_abs, row.median_abs, row.p99_abs = (float(d64.mean()), float(np.median(d64)),
                                                 float(np.percentile(d64, 99))) if d.size else (None, None, None)
    return row


def merge(rows: Sequence[OutputParity]) -> OutputParity:
    """One row for several iterations of the same tensor."""
    if len(rows) == 1:
        return rows[0]
    out = copy.copy(rows[0])
    for k in ("max_abs", "max_rel", "max_ulp"):
        setattr(out, k, max((getattr(r, k) for r in rows if getattr(r, k) is not None), default=None))
    for k in ("mismatched", "nonfinite_mismatched", "elements", "compared", "same_infinity"):
        setattr(out, k, sum(getattr(r, k) for r in rows))
    keep(out, np.concatenate([r.__dict__.get("_abs", np.empty(0, np.float32)) for r in rows]))
    out.passed = all(r.passed for r in rows)
    failing = [(i, r) for i, r in enumerate(rows) if not r.passed]
    out.message = "; ".join(f"iteration {i}: {r.message}" for i, r in failing[:3]) + (
        f"; and {len(failing) - 3} more iterations" if len(failing) > 3 else "")
    return out
