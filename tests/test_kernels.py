"""The shared CPU kernels, called through their C ABI (ctypes), against a
float64 reference (scipy) over dense sweeps and special values, for every form,
dtype and CPU path this machine has.

Stated bounds (also in DEVELOPERS.md), fp32, results in the normal range:
  erf      <= 6.5 ulp everywhere (default, all-float math), <= 1.5 ulp in the
           precise mode (GELU_ONNX_ERF=precise: tail rational in double);
           x*Phi(x) without cancellation, so the left tail keeps full
           relative accuracy down to the subnormal range
  tanh     <= 3.0 * (1 + |t|) ulp, t = 2*sqrt(2/pi)*(x + 0.044715 x^3)
  sigmoid  <= 2.0 * (1 + |t|) ulp, t = alpha*x
(the |t| term is the float rounding of t itself, amplified by e^t's slope:
no float implementation that forms t in float does better)
Subnormal results: the same relative bound, plus (3 + |x|) * 2^-149 for the
roundings of gradual underflow.
fp16 / bf16: every one of the 65536 inputs, result within 1 ulp of the
correctly rounded float64 reference (most are exactly it).
"""
from __future__ import annotations

import os
import subprocess
import sys

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


@pytest.fixture(scope="module")
def lib():
    return ortlib.kernel_library()


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


@pytest.fixture(params=cpu_paths())
def isa(request, lib):
    got = lib.gelu_cpu_set_isa(request.param.encode()).decode()
    assert got == request.param
    yield got
    lib.gelu_cpu_set_isa(None)


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


@pytest.fixture(params=["fast", "precise"])
def erf_mode(request, lib):
    lib.gelu_cpu_erf_precise(int(request.param == "precise"))
    yield request.param
    lib.gelu_cpu_erf_precise(0)


@pytest.mark.parametrize("form", list(FORMS))
def test_float32_accuracy_vs_float64(lib, isa, form, erf_mode):
    if form != "erf" and erf_mode == "precise":
        pytest.skip("the precise mode changes only the erf form")
    step = 257 if isa != "scalar" else 1031  # the scalar path is ~10x slower
    x = f32_sweep(step)
    y = run(lib, form, x)
    check_f32(form, x, y, "erf-precise" if (form == "erf" and erf_mode == "precise") else form)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_exhaustive(lib, isa, form, dtype):
    """All 65536 inputs: within 1 ulp of the correctly rounded reference."""
    npdt = DTYPES[dtype][1]
    x = np.arange(65536, dtype=np.uint16).view(npdt)
    y = run(lib, form, x)
    ref = reference(form, x.astype(np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        ref_t = ref.astype(npdt)  # correctly rounded (float64 -> half type rounds once)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(y.astype(np.float32)), nan)
    yb, rb = y[~nan].view(np.uint16).astype(np.int32), ref_t[~nan].view(np.uint16).astype(np.int32)
    # Distance in representable steps (sign-magnitude -> ordered integers).
    order = lambda b: np.where(b & 0x8000, -(b & 0x7FFF), b)  # noqa: E731
    steps = np.abs(order(yb) - order(rb))
    assert steps.max() <= 1, f"{dtype} {form}: {steps.max()} ulp off at x={x[~nan][np.argmax(steps)]!r}"


def test_paths_are_bitwise_identical(lib):
    """Every available vector path computes exactly what the scalar path does
    (one algorithm, explicit FMAs only), for all forms and dtypes, with bias."""
    rng = np.random.default_rng(1)
    x32 = np.concatenate([rng.standard_normal(20011).astype(np.float32) * 4, f32_sweep(40009)])
    x32 = x32[~np.isnan(x32)]
    paths = [p.values[0] for p in cpu_paths() if not p.marks]
    for dtype, (_, npdt) in DTYPES.items():
        with np.errstate(over="ignore"):
            x = x32.astype(npdt)
        b = rng.standard_normal(37).astype(npdt)
        xx = x[: (x.size // 37) * 37]
        for form in FORMS:
            outs = []
            for p in paths:
                lib.gelu_cpu_set_isa(p.encode())
                outs.append((p, run(lib, form, x), run(lib, form, xx, b)))
            lib.gelu_cpu_set_isa(None)
            p0, y0, yb0 = outs[0]
            for p, y, yb in outs[1:]:
                for a, c in ((y0, y), (yb0, yb)):
                    same = (a.view(np.uint16 if a.itemsize == 2 else np.uint32) == c.view(np.uint16 if c.itemsize == 2 else np.uint32))
                    both_nan = np.isnan(a.astype(np.float32)) & np.isnan(c.astype(np.float32))
                    assert np.all(same | both_nan), f"{dtype} {form}: {p} differs from {p0}"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bias_len", [1, 7, 16, 33, 768])
def test_bias_and_sub_ranges(lib, isa, dtype, bias_len):
    """y[i] = f(x[i] + b[i % L]) with the sum in float32, for any [begin, end)."""
    npdt = DTYPES[dtype][1]
    rng = np.random.default_rng(bias_len)
    rows = 5
    x = (rng.standard_normal(rows * bias_len) * 3).astype(npdt)
    b = rng.standard_normal(bias_len).astype(npdt)
    v = (x.reshape(rows, bias_len).astype(np.float32) + b.astype(np.float32)).ravel()
    for form in FORMS:
        y = run(lib, form, x, b)
        ref = reference(form, v.astype(np.float64))
        tol = 4e-6 if dtype == "float32" else (1e-3 if dtype == "float16" else 8e-3)
        np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol)
        # A sub-range computes the same elements as the full call and leaves
        # the others alone (bias indexed by the global element index).
        begin, end = bias_len // 2 + 1, x.size - 3
        part = run(lib, form, x, b, begin=begin, end=end)
        np.testing.assert_array_equal(part[begin:end].view(np.uint8), y[begin:end].view(np.uint8))


def test_streaming_stores_are_bit_identical(lib, isa):
    """gelu_cpu_range_stream (non-temporal stores for big outputs) writes
    exactly what gelu_cpu_range does, for aligned and misaligned outputs,
    with and without bias, and leaves the elements outside the range alone."""
    import ctypes
    if not hasattr(lib, "gelu_cpu_range_stream"):
        pytest.skip("this build's library does not export gelu_cpu_range_stream (plugins/ort/exports.map)")
    fn = lib.gelu_cpu_range_stream
    fn.argtypes, fn.restype = lib.gelu_cpu_range.argtypes, ctypes.c_int
    def at(n, npdt, offset):  # zeros whose data starts `offset` elements past a 64-byte boundary
        raw = np.zeros(n * npdt.itemsize + 128, np.uint8)
        start = (-raw.ctypes.data) % 64 + offset * npdt.itemsize
        return raw[start:start + n * npdt.itemsize].view(npdt)

    rng = np.random.default_rng(7)
    for dtype, (dt, npdt) in DTYPES.items():
        b = rng.standard_normal(96).astype(npdt)
        x = (rng.standard_normal(96 * 41) * 4).astype(npdt)
        for offset in (0, 1, 3):  # 0: vector-aligned output (streaming stores); else ordinary ones
            for form in FORMS:
                for bias in (None, b):
                    want = run(lib, form, x, bias)
                    got = at(x.size, npdt, offset)
                    begin, end = 5, x.size - 7
                    rc = fn(FORMS[form], dt, x.ctypes.data, None if bias is None else bias.ctypes.data,
                            0 if bias is None else bias.size, got.ctypes.data, begin, end, float(ALPHA))
                    assert rc == 0
                    assert np.array_equal(got[begin:end].view(np.uint16 if got.itemsize == 2 else np.uint32),
                                          want[begin:end].view(np.uint16 if want.itemsize == 2 else np.uint32)), \
                        f"{dtype} {form} offset {offset} bias {bias is not None}"
                    assert not got[:begin].any() and not got[end:].any()


def test_alpha_is_used(lib):
    x = np.linspace(-6, 6, 1001, dtype=np.float32)
    for alpha in (1.0, 1.5, 1.702, 2.5):
        y = run(lib, "sigmoid", x, alpha=np.float32(alpha))
        np.testing.assert_allclose(y, reference("sigmoid", x, np.float32(alpha)), rtol=2e-6, atol=1e-30)


def test_argument_errors(lib):
    x = np.ones(8, np.float32)
    y = np.empty_like(x)
    p, q = x.ctypes.data, y.ctypes.data
    assert lib.gelu_cpu_range(3, 0, p, None, 0, q, 0, 8, 1.0) == 1  # bad form
    assert lib.gelu_cpu_range(0, 3, p, None, 0, q, 0, 8, 1.0) == 2  # bad dtype
    assert lib.gelu_cpu_range(0, 0, p, p, 0, q, 0, 8, 1.0) == 3     # bias without length
    assert lib.gelu_cpu_range(0, 0, p, None, 0, q, 5, 4, 1.0) == 4  # end < begin
    assert lib.gelu_cpu_range(0, 0, None, None, 0, None, 0, 8, 1.0) == 4
    assert lib.gelu_cpu_range(0, 0, None, None, 0, None, 3, 3, 1.0) == 0  # empty range
    # CUDA entry point: argument checks first, then "no CUDA" or a launch
    # error on a machine without a GPU -- never a crash.
    assert lib.gelu_cuda_launch(0, 0, p, None, 0, q, -1, 1.0, None) == 4
    assert lib.gelu_cuda_launch(0, 0, p, p, 3, q, 8, 1.0, None) == 3
    assert lib.gelu_cuda_launch(0, 0, p, None, 0, q, 0, 1.0, None) == 0


def test_erf_mode_env_var():
    code = "from gelu_onnx import ortlib; print(ortlib.kernel_library().gelu_cpu_erf_precise(-1))"
    for value, want in (("precise", "1"), ("fast", "0"), ("", "0")):
        env = dict(os.environ, GELU_ONNX_ERF=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want


def test_isa_env_var_caps_the_path():
    """GELU_ONNX_CPU_ISA=scalar makes a fresh process use the scalar path."""
    code = ("from gelu_onnx import ortlib; print(ortlib.kernel_library().gelu_cpu_isa().decode())")
    env = dict(os.environ, GELU_ONNX_CPU_ISA="scalar")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "scalar"
