"""The CUDA kernels on a real device, through their C ABI (gelu_cuda_launch,
ctypes) with torch for device memory and the stream. Their math is the
device's own (gelu_cuda_math.h: hardware ex2/rcp approximations), so they are
held to the accuracy contract against float64, not to the CPU kernels' bits:
fp32 within tests/test_cpu_kernels.py's ulp bounds, fp16/bf16 within one step
of the correctly rounded value, NaN/inf as the reference; every form x dtype,
bias, unaligned pointers and odd lengths (the one-element kernel beside the
128-bit one), and a tensor of more than 2^31 elements (64-bit indexing).

Skips, saying why, without torch, without a CUDA device, or with a library
built without CUDA (`make gpu-check` runs them on a GPU machine).
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from helpers.kernel_helpers import DTYPES, FORMS, check_f32, f32_sweep, reference

from gelu_onnx import contract

ALPHA = np.float32(contract.QUICK_GELU_ALPHA)
GELU_ERR_NO_CUDA = 6
INT_VIEW = {np.dtype(np.float32): np.int32, np.dtype(np.float16): np.int16, DTYPES["bfloat16"][1]: np.int16}


@pytest.fixture(scope="module")
def torch(lib):
    torch = pytest.importorskip("torch", reason="the CUDA tests use torch for device memory")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    buf = torch.zeros(8, dtype=torch.float32, device="cuda")
    rc = lib.gelu_cuda_launch(0, 0, buf.data_ptr(), None, 0, buf.data_ptr(), 8, 1.0, None)
    if rc == GELU_ERR_NO_CUDA:
        pytest.skip("the library was built without CUDA (no nvcc at build time)")
    assert rc == 0
    return torch


def to_device(torch, a):
    return torch.from_numpy(np.ascontiguousarray(a).view(INT_VIEW[a.dtype])).cuda()


def launch(lib, torch, form, dtype, x_ptr, bias, y_ptr, n, alpha=ALPHA):
    """gelu_cuda_launch on torch's current stream, then wait for it (bias: a device tensor or None)."""
    dt = {np.dtype(v[1]): v[0] for v in DTYPES.values()}[np.dtype(dtype)]
    rc = lib.gelu_cuda_launch(FORMS[form], dt, x_ptr, None if bias is None else bias.data_ptr(),
                              0 if bias is None else bias.numel(), y_ptr, n, float(alpha),
                              ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    assert rc == 0, f"gelu_cuda_launch returned {rc}"
    torch.cuda.synchronize()


def cuda_run(lib, torch, form, x, bias=None, alpha=ALPHA, offset=0):
    """GELU of x[offset:] on the device (offset shifts both pointers off 16-byte alignment)."""
    xd = to_device(torch, x)
    yd = torch.zeros_like(xd)
    bd = None if bias is None else to_device(torch, bias)
    es = x.dtype.itemsize
    launch(lib, torch, form, x.dtype, xd.data_ptr() + offset * es, bd, yd.data_ptr() + offset * es,
           x.size - offset, alpha)
    return yd.cpu().numpy().view(x.dtype)[offset:]


def within_contract(form, x, y, bias=None, alpha=ALPHA):
    """y = GELU(x (+ bias, added in float32 as the kernels do)) within the
    contract: fp32 the ulp bounds (check_f32), fp16/bf16 the correctly
    rounded value or a neighbour one step away; NaN where the reference is."""
    v = x.astype(np.float32)
    if bias is not None:
        v = (v.reshape(-1, bias.size) + bias.astype(np.float32)).reshape(-1)
    if x.dtype == np.float32:
        check_f32(form, v, y)
        return True
    ref = reference(form, v, alpha)
    nan = np.isnan(ref)
    if not np.array_equal(np.isnan(y.astype(np.float32)), nan):
        return False
    rounded = ref[~nan].astype(x.dtype)  # float64 -> half type: one rounding

    def ordered(a):
        i = a.view(np.int16).astype(np.int32)
        return np.where(i < 0, -(i & 0x7FFF), i)
    return bool(np.all(np.abs(ordered(y[~nan]) - ordered(rounded)) <= 1))


@pytest.mark.parametrize("form", list(FORMS))
def test_cuda_float32_within_the_bounds(lib, torch, form):
    x = f32_sweep(257)
    assert within_contract(form, x, cuda_run(lib, torch, form, x))


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_half_types_exhaustive(lib, torch, form, dtype):
    """All 65536 inputs within one step of the correctly rounded result."""
    x = np.arange(65536, dtype=np.uint16).view(DTYPES[dtype][1])
    assert within_contract(form, x, cuda_run(lib, torch, form, x))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_cuda_bias_offsets_and_tails(lib, torch, dtype):
    """Bias rows, pointers 0-7 elements off alignment, lengths that leave a tail."""
    npdt = DTYPES[dtype][1]
    rng = np.random.default_rng(5)
    for form in FORMS:
        for bias_len, rows in ((768, 7), (37, 11), (1, 5), (4096, 3)):
            x = (rng.standard_normal(bias_len * rows) * 3).astype(npdt)
            b = rng.standard_normal(bias_len).astype(npdt)
            assert within_contract(form, x, cuda_run(lib, torch, form, x, b), b), (form, bias_len)
        for offset in range(8):
            x = (rng.standard_normal(4099 + offset) * 3).astype(npdt)
            y = cuda_run(lib, torch, form, x, offset=offset)
            assert within_contract(form, np.ascontiguousarray(x[offset:]), y), (form, offset)


def test_cuda_more_than_2_31_elements(lib, torch):
    """fp16, 2^31 + 1024 elements (4 GiB per tensor), with a bias row of 1024:
    the elements around 2^31 and at the end are computed, and correctly."""
    n = 2**31 + 1024
    free, _ = torch.cuda.mem_get_info()
    if free < 2 * 2 * n + (2 << 30):
        pytest.skip(f"needs ~10 GiB of free device memory, {free / 2**30:.1f} GiB free")
    rng = np.random.default_rng(3)
    pattern = (rng.standard_normal(1 << 20) * 3).astype(np.float16)
    bias = rng.standard_normal(1024).astype(np.float16)
    src = to_device(torch, pattern)
    xd = src.repeat(n // src.numel() + 1)[:n].contiguous()
    yd = torch.full_like(xd, 0x7E00)  # NaN: an element left unwritten cannot pass
    bd = to_device(torch, bias)
    for form in FORMS:
        launch(lib, torch, form, np.float16, xd.data_ptr(), bd, yd.data_ptr(), n)
        for start in (0, 2**31 - 4096, n - 8192):
            stop = start + 8192
            x = xd[start:stop].cpu().numpy().view(np.float16)
            y = yd[start:stop].cpu().numpy().view(np.float16)
            # bias is indexed by the global element index: start is a multiple of 1024
            assert within_contract(form, x, y, bias), (form, start)
