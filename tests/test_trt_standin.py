"""The TensorRT plugin without TensorRT: linked with --no-undefined against a
stand-in libnvinfer written in this repository
(tests/native/tensorrt/nvinfer_standin.cpp: plugin registry with
loadLibrary, logger), enqueue through the host emulation of the CUDA kernels,
and driven through the real IPluginV3 call sequence
(tests/native/tensorrt/test_standin_sequence.cpp): every op type x dtype,
outputs within the CUDA accuracy contract (gelu_cuda_bound.h), a failed launch's CUDA error
text in the logger, and the default-namespace alias conflict.

It compiles against TensorRT's own headers, which are in no package and are
never committed: point GELU_ONNX_TRT_INCLUDE at one or more TensorRT
`include` folders (os.pathsep-separated; e.g. `git archive v10.16 include` of
github.com/NVIDIA/TensorRT). Without it the test is skipped, saying so.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "plugins"
COMMON = PLUGINS / "common"
TRT = PLUGINS / "tensorrt"
NATIVE = ROOT / "tests" / "native"  # the stand-in, its driver and the CUDA emulation (test-only)
INCLUDES = [p for p in os.environ.get("GELU_ONNX_TRT_INCLUDE", "").split(os.pathsep) if p]


def _cuda_include() -> Path | None:
    """cuda_runtime_api.h, which NvInferRuntime.h includes (headers only: nothing CUDA runs)."""
    cands = [Path(os.environ[v]) / "include" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(Path(nvcc).resolve().parent.parent / "include")
    cands.append(Path("/usr/local/cuda/include"))
    return next((c for c in cands if (c / "cuda_runtime_api.h").is_file()), None)


def _sh(*cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def kernel_objects(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("no g++ to build the stand-in")
    out = tmp_path_factory.mktemp("trt_standin_objs")
    flags = ["-std=c++17", "-fPIC", "-O2", "-fno-fast-math", "-ffp-contract=off", f"-I{COMMON}"]
    objs = []
    for src, extra in (("gelu_cpu.cpp", []), ("gelu_cpu_scalar.cpp", []),
                       ("gelu_cpu_avx2.cpp", ["-mavx2", "-mfma", "-mf16c"]),
                       ("gelu_cpu_avx512.cpp", ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma",
                                                "-mf16c", "-Wno-maybe-uninitialized"])):
        o = out / (src + ".o")
        _sh("g++", *flags, *extra, "-c", COMMON / src, "-o", o)
        objs.append(o)
    emu = out / "gelu_cuda_emu.o"
    _sh("g++", *flags, f"-I{NATIVE / 'cuda'}", "-c", NATIVE / "cuda" / "gelu_cuda_emu.cpp", "-o", emu)
    return objs, emu


@pytest.mark.skipif(not INCLUDES, reason="TensorRT's headers are in no package: set GELU_ONNX_TRT_INCLUDE to "
                                         "TensorRT include folder(s) (github.com/NVIDIA/TensorRT, never committed)")
@pytest.mark.parametrize("include", INCLUDES)
def test_ipluginv3_sequence_against_the_standin(tmp_path, kernel_objects, include):
    cuda = _cuda_include()
    if cuda is None:
        pytest.skip("no CUDA headers (cuda_runtime_api.h), which NvInferRuntime.h includes")
    cpu, emu = kernel_objects
    hdr = ["-isystem", include, "-isystem", cuda, f"-I{COMMON}", f"-I{TRT}", f"-I{TRT / 'core'}"]
    nvinfer = tmp_path / "libnvinfer.so"
    _sh("g++", "-std=c++17", "-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", *hdr,
        NATIVE / "tensorrt" / "nvinfer_standin.cpp", "-o", nvinfer, "-Wl,--no-undefined", "-ldl")
    plugin = tmp_path / "libgelu_onnx_trt.so"
    _sh("g++", "-std=c++17", "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-fvisibility=hidden", *hdr,
        TRT / "gelu_plugin.cpp", TRT / "gelu_plugin_creator.cpp", TRT / "plugin_registration.cpp",
        TRT / "core" / "gelu_trt_core.cpp", *cpu, emu, "-o", plugin, f"-L{tmp_path}", "-lnvinfer",
        "-Wl,--no-undefined")  # every symbol the plugin needs is in the stand-in or in the repo
    driver = tmp_path / "test_standin_sequence"
    _sh("g++", "-std=c++17", "-O1", "-Wall", "-Wextra", *hdr, f"-I{NATIVE / 'tensorrt'}", f"-I{NATIVE / 'cuda'}",
        NATIVE / "tensorrt" / "test_standin_sequence.cpp", TRT / "core" / "gelu_trt_core.cpp", *cpu, "-o", driver,
        f"-L{tmp_path}", "-lnvinfer", "-ldl", f"-Wl,-rpath,{tmp_path}")

    r = subprocess.run([driver, plugin, "sequence"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and ", 0 failures" in r.stdout, r.stdout + r.stderr

    # Another library already owns GeluErf in the default namespace: with the
    # aliases (the default) TensorRT's loadLibrary refuses our whole library;
    # GELU_ONNX_TRT_DEFAULT_NAMESPACE=0 drops the aliases and it loads.
    r = subprocess.run([driver, plugin, "alias-conflict"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "loadLibrary: refused" in r.stdout and "already registered" in r.stdout, r.stdout
    env = dict(os.environ, GELU_ONNX_TRT_DEFAULT_NAMESPACE="0")
    r = subprocess.run([driver, plugin, "alias-conflict"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and "loadLibrary: loaded" in r.stdout, r.stdout
