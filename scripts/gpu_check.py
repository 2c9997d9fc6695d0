"""The one GPU command (`make gpu-check`): everything the CUDA side claims,
measured on the machine's GPU, in one run of <= 6 minutes on an H100/H200,
and ONE small table under benchmarks/results/ naming the device.

    python3 scripts/gpu_check.py [--lib PATH/libgelu_onnx_ort.so] [--out FILE.md]

Runs as is on a machine with torch (CUDA), onnx, onnxruntime-gpu, numpy and
the CUDA toolkit, without this package installed and without network: the
sources run from this checkout (PYTHONPATH), the library is the one given,
or $GELU_ONNX_ORT_LIBRARY, or what `make setup` left in build/ (carry it from
the build machine), else the kernels are built here with plain nvcc/g++
(then the ONNX Runtime steps skip: the custom-op library needs ORT's headers).
Steps, each with its own time limit, each PASS / FAIL / SKIP (with the reason):
  kernel tests      tests/test_cuda_kernels.py (accuracy contract, layouts, 2^31)
  memcheck          compute-sanitizer --tool memcheck over the layout tests
  racecheck         compute-sanitizer --tool racecheck over the same
  bench_cuda        benchmarks/bench_cuda.py: accuracy, fraction of copy, vs torch gelu
  ort ops + bert    benchmarks/bench_ort_cuda.py: ours vs BiasGelu/FastGelu/Gelu/
                    QuickGelu in the CUDA EP (fp32, fp16), BERT-base through every target
  check             gelu-onnx check original fused --provider cuda (BERT-base fp32)
Without a CUDA device it writes nothing and says why (exit 0: skipped).
The table: `# gpu-check on <device>`, the versions, then
`| step | result | seconds | figures |`, one row per step.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMMON = REPO / "plugins" / "common"
BUDGET_S = 360
SANITIZE_K = "bias_offsets_and_tails"  # every form, dtype, bias row, offset, tail; small sizes


def device() -> tuple[str | None, str]:
    """(device name, versions) or (None, why there is none)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA device (torch.cuda.is_available() is False)"
    return torch.cuda.get_device_name(0), f"torch {torch.__version__}, CUDA {torch.version.cuda}"


def missing(*modules: str) -> str:
    """'missing Python modules: a, b' for those not importable here, else ''."""
    import importlib.util

    gone = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"missing Python modules: {', '.join(gone)}" if gone else ""


def find_tool(name: str) -> str | None:
    for d in (os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"):
        if d and Path(d, "bin", name).is_file():
            return str(Path(d, "bin", name))
    return shutil.which(name)


def find_library(given: str | None) -> Path | None:
    for cand in (given, os.environ.get("GELU_ONNX_ORT_LIBRARY")):
        if cand and Path(cand).is_file():
            return Path(cand).resolve()
    hits = sorted(REPO.glob("build/*/libgelu_onnx_ort.so")) + sorted(REPO.glob("gelu_onnx/_lib/libgelu_onnx_ort.so"))
    return hits[0].resolve() if hits else None


def has_cuda(lib: Path) -> bool:
    """Built with CUDA: the no-CUDA stub's gelu_cuda_last_error() says so from the start."""
    import ctypes

    h = ctypes.CDLL(str(lib))
    h.gelu_cuda_last_error.restype = ctypes.c_char_p
    return b"built without CUDA" not in (h.gelu_cuda_last_error() or b"")


def build_kernels(out: Path) -> Path:
    """The kernels (CUDA + CPU, the C ABI of gelu_kernels.h) as one shared
    library, with plain nvcc and g++: for the tests and bench_cuda when no
    built library is at hand."""
    nvcc, cxx = find_tool("nvcc"), shutil.which("g++") or shutil.which("c++")
    if not nvcc or not cxx:
        raise RuntimeError(f"no built library and no compiler to build one (nvcc: {nvcc}, g++: {cxx})")
    out.mkdir(parents=True, exist_ok=True)
    isa = {"gelu_cpu.cpp": [], "gelu_cpu_scalar.cpp": [], "gelu_cpu_avx2.cpp": ["-mavx2", "-mfma", "-mf16c"],
           "gelu_cpu_avx512.cpp": ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma", "-mf16c"]}
    objs = []
    for src, flags in isa.items():
        obj = out / (src + ".o")
        subprocess.run([cxx, "-std=c++17", "-O3", "-fPIC", "-ffp-contract=off", f"-I{COMMON}", *flags, "-c",
                        str(COMMON / src), "-o", str(obj)], check=True, capture_output=True)
        objs.append(str(obj))
    cu = out / "gelu_cuda.o"
    subprocess.run([nvcc, "-std=c++17", "-O3", "--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true",
                    "-arch=native", "-Xcompiler", "-fPIC", f"-I{COMMON}", "-c", str(COMMON / "gelu_cuda.cu"),
                    "-o", str(cu)], check=True, capture_output=True)
    lib = out / "libgelu_kernels_gpu_check.so"
    subprocess.run([nvcc, "-shared", "-cudart", "static", str(cu), *objs, "-o", str(lib)], check=True,
                   capture_output=True)
    return lib


def run(cmd: list[str], env: dict, timeout: int) -> tuple[int, str, float]:
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
        return r.returncode, r.stdout + r.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, text + f"\n(timed out after {timeout} s)", time.monotonic() - t0


def tail(text: str, n: int = 1) -> str:
    lines = [l.strip() for l in text.strip().splitlines() if l.strip()]
    return " / ".join(lines[-n:])[:160] if lines else ""


def bench_figures(doc: dict) -> str:
    acc = doc["accuracy"]
    f32 = max(r["max_ulp"] for r in acc if r["dtype"] == "float32")
    half = sum(r.get("over_1_step", 0) for r in acc)
    parts = [f"fp32 max {f32:.2f} ulp, half >1 step: {half}"]
    big = {}
    for r in doc["throughput"]:
        if "of_copy_bandwidth" in r:
            big[(r["dtype"], r["name"])] = max(big.get((r["dtype"], r["name"]), (0, 0)), (r["elements"], r["of_copy_bandwidth"]))
    for dt in ("float32", "float16", "bfloat16"):
        mine = [big[(dt, k)][1] for k in ("ours GeluErf", "ours GeluTanh", "ours BiasGeluErf") if (dt, k) in big]
        torch_ = big.get((dt, "torch gelu"), (0, 0))[1]
        if mine:
            parts.append(f"{dt} of copy {min(mine):.2f}-{max(mine):.2f} (torch gelu {torch_:.2f})")
    return "; ".join(parts)


def ort_figures(doc: dict) -> str:
    ops = ", ".join(f"{r['dtype']} {r['op']} {r['speedup']:.2f}x" for r in doc["ops"])
    bert = ", ".join(f"{r['dtype']} custom {r['custom_vs_original']:.2f}x" for r in doc["bert_base"])
    return f"vs ORT's own op: {ops}; BERT-base vs original (ALL): {bert}"


def table(dev: str, versions: str, lib: str, rows: list[dict]) -> str:
    """The one results table (the format the docstring documents)."""
    total = sum(r["seconds"] for r in rows)
    out = [f"# gpu-check on {dev}", "", f"{versions}; library {lib}. `make gpu-check` "
           f"(scripts/gpu_check.py), {total:.0f} s in all.", "",
           "| step | result | seconds | figures |", "|---|---|---|---|"]
    for r in rows:
        figures = r["figures"].replace("|", "/")
        out.append(f"| {r['step']} | {r['result']} | {r['seconds']:.0f} | {figures} |")
    return "\n".join(out) + "\n"


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", default=None, help="libgelu_onnx_ort.so built with CUDA (default: build/ or $GELU_ONNX_ORT_LIBRARY)")
    ap.add_argument("--out", default=None, help="the table (default benchmarks/results/gpu_check_<device>.md)")
    args = ap.parse_args(argv)
    dev, versions = device()
    if dev is None:
        print(f"gpu-check: SKIPPED: {versions}; nothing run, no table written")
        return 0
    py = sys.executable
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]))
    rows: list[dict] = []

    def step(name, result, seconds=0.0, figures=""):
        rows.append({"step": name, "result": result, "seconds": seconds, "figures": figures})
        print(f"gpu-check: {name}: {result} ({seconds:.0f} s) {figures}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="gelu-gpu-check-"))
    lib = find_library(args.lib)
    ort_lib = lib if lib is not None and has_cuda(lib) else None
    kernels = ort_lib
    if kernels is None:
        try:
            kernels = build_kernels(work / "build")
            step("build kernels (nvcc)", "PASS", figures=f"no CUDA library found ({lib}): built {kernels.name}")
        except (RuntimeError, subprocess.CalledProcessError) as e:
            step("build kernels (nvcc)", "FAIL", figures=str(e)[:160])
    kenv = dict(env, GELU_ONNX_ORT_LIBRARY=str(kernels or ""))
    pytest_cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda_kernels.py"]
    test_gap = missing("pytest", "numpy", "scipy", "ml_dtypes", "onnx")
    if kernels and test_gap:
        for name in ("kernel tests", "memcheck", "racecheck"):
            step(name, "SKIP", figures=test_gap)
    if kernels and not test_gap:
        rc, out, s = run(pytest_cmd, kenv, 90)
        step("kernel tests", "PASS" if rc == 0 else "FAIL", s, tail(out))
        sanitizer = find_tool("compute-sanitizer")
        for tool in ("memcheck", "racecheck"):
            if not sanitizer:
                step(tool, "SKIP", figures="no compute-sanitizer (CUDA toolkit bin/)")
                continue
            rc, out, s = run([sanitizer, "--tool", tool, "--error-exitcode", "99", *pytest_cmd, "-k", SANITIZE_K], kenv, 60)
            found = re.findall(r"ERROR SUMMARY: \d+ errors?|RACECHECK SUMMARY: \d+ hazards?[^\n]*", out)
            step(tool, "PASS" if rc == 0 else "FAIL", s, "; ".join(found[-1:]) or tail(out))
    if kernels:
        bench_json = work / "bench_cuda.json"
        rc, out, s = run([py, "benchmarks/bench_cuda.py", "--lib", str(kernels), "--rounds", "5", "--json",
                          str(bench_json)], kenv, 90)
        figures = bench_figures(json.loads(bench_json.read_text())) if rc == 0 and bench_json.is_file() else tail(out)
        step("bench_cuda", "PASS" if rc == 0 else "FAIL", s, figures)
    ort_gap = missing("onnx", "onnxruntime", "numpy", "ml_dtypes")
    if ort_lib is None or ort_gap:
        why = ort_gap or "needs libgelu_onnx_ort.so built with CUDA (make setup with nvcc; carry build/)"
        step("ort ops + bert", "SKIP", figures=why)
        step("check --provider cuda", "SKIP", figures=why)
    else:
        oenv = dict(env, GELU_ONNX_ORT_LIBRARY=str(ort_lib))
        ort_json = work / "ort.json"
        rc, out, s = run([py, "benchmarks/bench_ort_cuda.py", "--lib", str(ort_lib), "--quick", "--json", str(ort_json),
                          "--workdir", str(work)], oenv, 120)
        figures = ort_figures(json.loads(ort_json.read_text())) if rc == 0 and ort_json.is_file() else tail(out)
        step("ort ops + bert", "PASS" if rc == 0 else "FAIL", s, figures)
        sys.path.insert(0, str(REPO / "benchmarks"))
        import bench_ort_cuda  # noqa: E402  (onnx, numpy, onnxruntime: present on this machine)

        orig = work / "bert_check.onnx"
        bench_ort_cuda.bert_base(orig, False, batch=2)
        fused = bench_ort_cuda.fuse(orig, "custom")
        rc, out, s = run([py, "-m", "gelu_onnx", "check", str(orig), str(fused), "--provider", "cuda"], oenv, 60)
        step("check --provider cuda", "PASS" if rc == 0 else "FAIL", s, tail(out, 2))
    path = Path(args.out) if args.out else REPO / "benchmarks" / "results" / f"gpu_check_{slug(dev)}.md"
    path.write_text(table(dev, versions, (ort_lib or kernels or Path("none")).name, rows))
    shutil.rmtree(work, ignore_errors=True)
    print(f"gpu-check: table written to {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 1 if any(r["result"] == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
