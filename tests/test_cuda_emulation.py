"""The CUDA kernels run on the host: plugins/common/gelu_cuda_body.h (the
kernel body, __host__ __device__) compiled with g++ under ASan/UBSan and run by
gelu_cuda_emu.cpp for every (block, thread) of the device launch's grid, in
forward, reverse and shuffled order, against the accuracy contract
(tests/native/cuda/gelu_cuda_bound.h: a double reference; fp32 within
docs/kernels.md's ulp bounds, fp16/bf16 within one step of the correctly
rounded value, NaN/inf as specified) with the hardware approximations
(ex2.approx, rcp.approx) at the low or the high end of their documented
error (gelu_cuda_math.h): every form x dtype x bias, x/y/bias offsets 0..VEC
elements, tails, n = 0, bias lengths 1..1000, several trips per block (grids
capped at 1-5 blocks, and grids the launch never picks; gelu_cuda_emu_grid)
(tests/native/cuda/gelu_cuda_emu_check.cpp does the sweep). Each buffer is
allocated at its exact size, so one element read or written past x, b or y is
an ASan error.

A second, independent harness (tests/native/cuda/gelu_cuda_any_grid_check.cpp:
its own element I/O and grid walk, random shapes, grids the launch never picks)
also keeps a ledger of every pack load and store: no element stored twice,
none left out, no access outside x, b, y (a second store of the same value is
invisible to a comparison of results).

The opt-in slow check (GELU_ONNX_HUGE_TESTS=1, ~9 GB of memory) runs n > 2^31
fp16 with each array ending at a PROT_NONE guard page.
"""
from __future__ import annotations

import os
import platform
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
COMMON = REPO / "plugins" / "common"    # the kernels (gelu_cuda_body.h, the CPU kernels)
EMU = REPO / "tests" / "native" / "cuda"  # the emulation and its checks (test-only)
# the emulation's sources (in EMU), then the CPU kernels' (in COMMON)
SOURCES = {
    "gelu_cuda_emu.cpp": [],
    "gelu_cuda_emu_check.cpp": [],
    "gelu_cuda_any_grid_check.cpp": [],
    "gelu_cuda_accuracy.cpp": [],
    "gelu_cpu.cpp": [],
    "gelu_cpu_scalar.cpp": [],
    "gelu_cpu_avx2.cpp": ["-mavx2", "-mfma", "-mf16c"],
    "gelu_cpu_avx512.cpp": ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma", "-mf16c"],
}
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]


def _host_has_fma() -> bool:
    try:
        return " fma " in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


@pytest.fixture(scope="module")
def emu_objects(tmp_path_factory) -> dict[str, str]:
    """Every source compiled under ASan/UBSan: {source: object}."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler (g++ or clang++) to build the host emulation")
    if platform.machine() != "x86_64":
        pytest.skip("the CPU kernels' per-file ISA flags here are x86-64 ones")
    out = tmp_path_factory.mktemp("cuda_emu")
    # -mfma: fmaf inline instead of a libm call (~10x faster emulation; same bits).
    base = ["-std=c++17", "-O2", "-g", "-fno-omit-frame-pointer", "-ffp-contract=off",
            "-fno-fast-math", f"-I{EMU}", f"-I{COMMON}", *SANITIZE]
    emu_flags = ["-mfma"] if _host_has_fma() else []

    def compile_one(item):
        src, flags = item
        obj = out / (Path(src).stem + ".o")
        extra = emu_flags if src.startswith(("gelu_cuda_emu.cpp", "gelu_cuda_any", "gelu_cuda_acc")) else []
        cmd = [cxx, *base, *flags, *extra, "-c", str((COMMON if src.startswith("gelu_cpu") else EMU) / src),
               "-o", str(obj)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-4000:]}"
        return src, str(obj)

    with ThreadPoolExecutor(max_workers=2) as pool:  # the CI machine has 2 cores
        objs = dict(pool.map(compile_one, SOURCES.items()))
    return {"cxx": cxx, "dir": str(out), **objs}


def _link(objs: dict[str, str], name: str, *sources: str) -> Path:
    cpu = [o for s, o in objs.items() if s.startswith("gelu_cpu")]
    exe = Path(objs["dir"]) / name
    r = subprocess.run([objs["cxx"], *SANITIZE, *(objs[s] for s in sources), *cpu, "-o", str(exe)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return exe


@pytest.fixture(scope="module")
def emu_check(emu_objects) -> Path:
    return _link(emu_objects, "gelu_cuda_emu_check", "gelu_cuda_emu.cpp", "gelu_cuda_emu_check.cpp")


@pytest.fixture(scope="module")
def any_grid_check(emu_objects) -> Path:
    return _link(emu_objects, "gelu_cuda_any_grid_check", "gelu_cuda_any_grid_check.cpp")


def _run(exe: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    env.pop("GELU_ONNX_ERF", None)  # the check selects the CPU erf variant itself
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env)


def test_emulated_grid_within_the_contract(emu_check):
    r = _run(emu_check)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    # 3 orders x 3 forms x 3 dtypes reported, and the final verdict.
    assert r.stdout.count(" 0 mismatches so far") == 27, r.stdout
    assert r.stdout.strip().endswith("OK: 0 mismatches"), r.stdout


@pytest.fixture(scope="module")
def accuracy_check(emu_objects) -> Path:
    return _link(emu_objects, "gelu_cuda_accuracy", "gelu_cuda_emu.cpp", "gelu_cuda_accuracy.cpp")


def test_device_formulas_within_the_contract_at_both_error_ends(accuracy_check):
    """Every fp16/bf16 input (and 8 x 65536 sums x + b) and a stride-257
    sweep of all floats, every form, through the emulated kernels with the
    hardware approximations at -1 and +1 times their PTX ISA maximum error."""
    r = _run(accuracy_check)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert r.stdout.count(" 0 out of bound") == 2 * 3 * 3, r.stdout
    assert r.stdout.strip().endswith("OK"), r.stdout


def test_second_harness_any_grid_and_ledger(any_grid_check):
    r = _run(any_grid_check, "1200", "20260716")
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert r.stdout.strip().endswith("OK, 0 failures"), r.stdout


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("GELU_ONNX_HUGE_TESTS") != "1",
                    reason="opt-in: set GELU_ONNX_HUGE_TESTS=1 (n > 2^31, ~9 GB of memory, minutes)")
def test_emulated_grid_beyond_2_31_elements(emu_check):
    r = _run(emu_check, "huge")
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert r.stdout.count(" 0 elements out of bound") == 2, r.stdout
