"""Where the fp32 exact-GELU kernel's error comes from: a float32 emulation of
the fast path's steps (numpy float32 rounding, FMAs through float64) against
scipy's float64 erfc, on every 97th negative float with 1e-4 < |x| < 13
(the left tail, where the result is x * Phi(x) and nothing damps an error).

    python scripts/erf_error_budget.py

It prints, in units of u = 2^-24 (relative), the rounding error of the tail
rational's numerator P and denominator Q (Horner in float32), of the division,
and the approximation error of P/Q itself; then the max ulp error of y for the
same structure with P and Q exact and with s = Phi(-|x|) correctly rounded.
This is the measurement behind docs/kernels.md's "why the default erf mode is
not <= 2 ulp": P and Q alone cost up to ~3.5 u each, and even a correctly
rounded s followed by y = x * s reaches 2 ulp, so <= 2 ulp needs the tail and
the final product in extended precision (the `precise` mode, double).
Last, the polynomial degree the table-driven alternative would need on each of
its 8 intervals (the design scripts/erf_table_probe.cpp times).
Coefficients are read from plugins/common/gelu_erf_coeffs.h (one source).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from numpy.polynomial import chebyshev
from scipy import special

F32 = np.float32
U = 2.0 ** -24
HEADER = Path(__file__).resolve().parents[1] / "plugins" / "common" / "gelu_erf_coeffs.h"


def coefficients() -> tuple[list[float], list[float]]:
    c = dict(re.findall(r"#define GELU_R_([PQ]\d) ([0-9.e+-]+)", HEADER.read_text()))
    p = [float(c[f"P{i}"]) for i in range(5)]
    q = [1.0] + [float(c[f"Q{i}"]) for i in range(1, 6)]
    return p, q


def fma(a, b, c):
    """float32 FMA: the float64 product of two float32 is exact; one rounding to float32
    (the double rounding through float64 is below what this script resolves)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def horner(coef, a, exact):
    if exact:
        a = a.astype(np.float64)
        p = np.full_like(a, coef[-1])
        for c in coef[-2::-1]:
            p = p * a + c
        return p
    p = np.full_like(a, F32(coef[-1]))
    for c in coef[-2::-1]:
        p = fma(p, a, np.full_like(a, F32(c)))
    return p.astype(np.float64)


def stat(name, rel):
    v = np.abs(rel) / U
    print(f"  {name:28s} max {v.max():5.2f} u   p99 {np.quantile(v, 0.99):5.2f} u")


# The 8 intervals of |x| that scripts/erf_table_probe.cpp indexes by the
# exponent and top mantissa bit of |x| + 1.
TABLE_EDGES = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 7.0, 11.0, 15.0)


def table_degree(lo: float, hi: float, goal_u: float = 0.1) -> int:
    """Lowest polynomial degree that fits ln R on [lo, hi] to goal_u (absolute error in
    ln R is relative error in y); least squares on Chebyshev points, near-minimax."""
    t = np.cos(np.linspace(0, np.pi, 2001))
    f = np.log(special.erfcx(((lo + hi) / 2 + (hi - lo) / 2 * t) / np.sqrt(2)) / 2)
    for deg in range(2, 20):
        if np.abs(chebyshev.chebval(t, chebyshev.chebfit(t, f, deg)) - f).max() <= goal_u * U:
            return deg
    raise RuntimeError(f"no degree below 20 fits [{lo}, {hi}]")


def main() -> None:
    P, Q = coefficients()
    bits = np.arange(0, 2**31, 97, dtype=np.uint64).astype(np.uint32) | np.uint32(0x80000000)
    x = bits.view(F32)
    x = x[np.isfinite(x) & (np.abs(x) > 1e-4) & (np.abs(x) < 13)]
    a = np.abs(x)
    a64 = a.astype(np.float64)
    ref = -a64 * 0.5 * special.erfc(a64 / np.sqrt(2))
    R = special.erfcx(a64 / np.sqrt(2)) / 2  # the rational's target: Phi(-a) = exp(-a^2/2) * R(a)
    E = np.exp(-a64 * a64 / 2)
    ulp = np.spacing(np.abs(ref).astype(F32)).astype(np.float64)

    pf, pe = horner(P, a, False), horner(P, a, True)
    qf, qe = horner(Q, a, False), horner(Q, a, True)
    print(f"{x.size} negative float32 inputs; relative errors in u = 2^-24")
    stat("P, float32 Horner", pf / pe - 1)
    stat("Q, float32 Horner", qf / qe - 1)
    stat("P/Q division rounding", (pf / qf).astype(F32) / (pf / qf) - 1)
    stat("P/Q approximation of R", pe / qe / R - 1)

    def ulps(y):
        return (np.abs(y.astype(np.float64) - ref) / ulp).max()

    print("max error of y = x * Phi(x), ulp:")
    for name, p, q in (("float32 P and Q (the fast path)", pf, qf), ("exact P, float32 Q", pe, qf),
                       ("float32 P, exact Q", pf, qe), ("exact P and Q", pe, qe)):
        s = ((p / q).astype(F32).astype(np.float64) * E).astype(F32)
        print(f"  {name:34s} {ulps(x * s):5.2f}")
    print(f"  {'s = Phi(-|x|) correctly rounded':34s} {ulps(x * (R * E).astype(F32)):5.2f}"
          "   <- the floor of 'round s, then multiply'")
    print("table design (scripts/erf_table_probe.cpp): degree for ln R to 0.1 u per interval:")
    print("  " + "  ".join(f"[{lo:g},{hi:g}): {table_degree(lo, hi)}"
                           for lo, hi in zip(TABLE_EDGES, TABLE_EDGES[1:])))


if __name__ == "__main__":
    main()
