"""Calling the shared CPU kernels through their C ABI and judging their
results against a float64 reference: used by the CPU, CUDA, onnxruntime
version and script tests."""
from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest
from scipy import special

from gelu_onnx import contract, ortlib


FORMS = {"erf": 0, "tanh": 1, "sigmoid": 2}


DTYPES = {"float32": (0, np.dtype(np.float32)), "float16": (1, np.dtype(np.float16)),
          "bfloat16": (2, np.dtype(ml_dtypes.bfloat16))}


ALPHA = np.float32(contract.QUICK_GELU_ALPHA)


# ulp bound a + b*|t|
ULP_BOUND = {"erf": (6.5, 0.0), "erf-precise": (1.5, 0.0), "tanh": (3.0, 3.0), "sigmoid": (2.0, 2.0)}


# CPU features each vector path is built for (plugins/common/gelu_cpu.cpp's dispatch).
ISA_FLAGS = {"avx2": {"avx2", "fma", "f16c"}, "avx512": {"avx512f", "avx512bw", "avx512dq", "avx512vl"}}


def cpu_flags() -> set[str]:
    """This CPU's feature flags (/proc/cpuinfo; empty where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return set(next((l for l in f if l.startswith("flags")), "").split())
    except OSError:
        return set()


def cpu_paths():
    """CPU paths to test: scalar always, vector paths when this CPU has them."""
    have = cpu_flags()
    out = [pytest.param("scalar")]
    for isa, need in ISA_FLAGS.items():
        marks = [] if need <= have else [pytest.mark.skip(reason=f"this CPU lacks {sorted(need - have)}")]
        out.append(pytest.param(isa, marks=marks))
    return out


def run(lib, form, x, bias=None, alpha=ALPHA, begin=0, end=None):
    dt = {np.dtype(v[1]): v[0] for v in DTYPES.values()}[x.dtype]
    x = np.ascontiguousarray(x)
    y = np.full_like(x, np.nan) if x.dtype == np.float32 else np.zeros_like(x)
    end = x.size if end is None else end
    b = None if bias is None else np.ascontiguousarray(bias)
    rc = lib.gelu_cpu_range(FORMS[form], dt, x.ctypes.data, None if b is None else b.ctypes.data,
                            0 if b is None else b.size, y.ctypes.data, begin, end, float(alpha))
    assert rc == 0
    return y


def reference(form, v, alpha=ALPHA):
    """float64 GELU of float64 v."""
    v = np.asarray(v, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if form == "erf":
            r = v * 0.5 * special.erfc(-v / np.sqrt(2.0))
        elif form == "tanh":
            r = v * special.expit(2.0 * np.sqrt(2.0 / np.pi) * (v + contract.TANH_CUBIC_COEFF * v**3))
        else:
            r = v * special.expit(np.float64(alpha) * v)
    # The limits at +-inf (inf * 0 is NaN in float64): +inf and -0.
    return np.where(np.isinf(v), np.where(v > 0, v, -0.0), r)


def t_of(form, v):
    v = np.asarray(v, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if form == "erf":
            return np.zeros_like(v)
        if form == "tanh":
            return np.abs(2.0 * np.sqrt(2.0 / np.pi) * (v + contract.TANH_CUBIC_COEFF * v**3))
        return np.abs(np.float64(ALPHA) * v)


def ulp_error(y, ref):
    """|y - ref| in units of the float32 ulp at ref (2^-149 in the subnormal range)."""
    e = np.floor(np.log2(np.maximum(np.abs(ref), 1e-300)))
    ulp = np.exp2(np.maximum(e, -126) - 23)
    d = np.abs(y.astype(np.float64) - ref) / ulp
    same = (y.astype(np.float64) == ref) | (np.isnan(y) & np.isnan(ref))
    return np.where(same, 0.0, d)


def f32_sweep(step=257):
    """Every step-th float32 of either sign below 2^31 bits (0 .. NaN), plus
    the awkward ones: zeros, infinities, NaN, subnormals, |x| > 10."""
    pos = np.arange(0, 0x7F800000, step, dtype=np.uint32)
    special_vals = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, -1e-40,
                             1.1754942e-38, -1.1754942e-38, 3.4028235e38, -3.4028235e38,
                             10.0, -10.0, 10.5, -10.5, 14.9, -14.9, 15.0, -15.0, 30.0, -30.0,
                             100.0, -100.0, 1e30, -1e30], np.float32)
    dense = np.linspace(-16, 16, 400001, dtype=np.float32)
    return np.concatenate([pos.view(np.float32), (pos | 0x80000000).view(np.float32), special_vals, dense])


def check_f32(form, x, y, bound_key=None):
    ref = reference(form, x)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(y), nan), "NaN exactly where the reference is NaN"
    x, y, ref = x[~nan], y[~nan], ref[~nan]
    # Signs, infinities and zeros behave as in the reference.
    assert np.array_equal(np.isinf(y), np.isinf(ref))
    normal = np.abs(ref) >= 2.0**-126
    d = ulp_error(y, ref)
    a, b = ULP_BOUND[bound_key or form]
    bound = a + b * np.minimum(t_of(form, x), 1e30) if b else np.full(x.shape, a)
    worst = np.argmax(np.where(normal, d - bound, -np.inf))
    assert np.all(d[normal] <= bound[normal]), (
        f"{form}: {d[worst]:.2f} ulp at x={x[worst]!r} (y={y[worst]!r}, ref={ref[worst]!r}), bound {bound[worst]:.2f}")
    # Subnormal results: the relative bound (in normal-range ulps) plus the
    # extra roundings of gradual underflow, at most 3 + |x| units of 2^-149.
    sub = ~normal
    abs_err = np.abs(y[sub].astype(np.float64) - ref[sub]) / 2.0**-149
    rel_part = bound[sub] * np.abs(ref[sub]) * 2.0**126  # bound * 2^-23 * |ref|, in 2^-149 units
    allowed = 3 + np.abs(x[sub].astype(np.float64)) + rel_part
    assert np.all(abs_err <= allowed), f"{form}: subnormal result error {abs_err.max()}"
    return float(d[normal].max())


def kernel_library():
    """ctypes handle to the custom-op library's kernel C ABI (gelu_cpu_range,
    gelu_cpu_isa, gelu_cpu_set_isa, gelu_cpu_erf_precise, gelu_cuda_launch; see
    plugins/common/gelu_kernels.h)."""
    lib = ctypes.CDLL(str(ortlib.library_path(required=True)))
    i64, vp = ctypes.c_int64, ctypes.c_void_p
    lib.gelu_cpu_range.argtypes = [ctypes.c_int, ctypes.c_int, vp, vp, i64, vp, i64, i64, ctypes.c_float]
    lib.gelu_cpu_range.restype = ctypes.c_int
    lib.gelu_cuda_launch.argtypes = [ctypes.c_int, ctypes.c_int, vp, vp, i64, vp, i64, ctypes.c_float, vp]
    lib.gelu_cuda_launch.restype = ctypes.c_int
    lib.gelu_cpu_isa.restype = ctypes.c_char_p
    lib.gelu_cpu_set_isa.argtypes = [ctypes.c_char_p]
    lib.gelu_cpu_set_isa.restype = ctypes.c_char_p
    lib.gelu_cpu_erf_precise.argtypes = [ctypes.c_int]
    lib.gelu_cpu_erf_precise.restype = ctypes.c_int
    lib.gelu_onnx_ort_api_version.restype = ctypes.c_uint32
    return lib
