"""The TensorRT plugin's TensorRT-free core (plugins/tensorrt/core), tested
through its C++ test executable, plus a cross-check of its op table against
gelu_onnx/contract.py.

The executable is found like the other build products (GELU_ONNX_TRT_CORE_TEST,
the package's _lib folder, the installed distribution). In a source checkout
that was never built, it is compiled here from source with the system C++
compiler (a few seconds) so the core is still tested; the test skips only when
neither exists.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gelu_onnx import contract
from gelu_onnx import libs

REPO = Path(__file__).resolve().parents[1]
CORE_TEST = "gelu_trt_core_test"
PLUGIN_TEST = "gelu_trt_plugin_test"
AUTOREG_TEST = "gelu_trt_autoreg_test"


@pytest.fixture(scope="module")
def core_test_binary(tmp_path_factory) -> Path:
    found = libs.find(CORE_TEST, "GELU_ONNX_TRT_CORE_TEST")
    if found is not None:
        return found
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    src = REPO / "plugins" / "tensorrt"
    if cxx is None or not (src / "core" / "gelu_trt_core.cpp").is_file():
        pytest.skip(f"{CORE_TEST} was not built with the package and no C++ compiler / source tree is here")
    out = tmp_path_factory.mktemp("trt_core") / CORE_TEST
    cmd = [
        cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror",
        f"-I{src / 'core'}", f"-I{REPO / 'plugins' / 'common'}",
        str(src / "core" / "gelu_trt_core.cpp"), str(REPO / "tests" / "native" / "tensorrt" / "test_trt_core.cpp"),
        "-o", str(out),
    ]  # fmt: skip
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"compiling the core test failed:\n{r.stderr[-4000:]}"
    return out


def test_core_checks_pass(core_test_binary):
    r = subprocess.run([str(core_test_binary)], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert " 0 failures" in r.stdout


def test_core_rejects_unknown_arguments(core_test_binary):
    r = subprocess.run([str(core_test_binary), "--bogus"], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr


def test_core_table_matches_contract(core_test_binary):
    r = subprocess.run([str(core_test_binary), "--table-json"], check=False, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    table = json.loads(r.stdout)
    # plugin namespace / version / name = the custom op's domain / op-set version / op type
    assert table["domain"] == contract.DOMAIN
    assert table["opset_version"] == contract.OPSET_VERSION
    assert table["plugin_version"] == str(contract.OPSET_VERSION)
    assert table["attr_alpha"] == contract.ATTR_ALPHA
    assert table["quick_gelu_alpha"] == pytest.approx(contract.QUICK_GELU_ALPHA, abs=1e-6)  # stored as float32
    ops = {(o["form"], o["bias"]): o["op_type"] for o in table["ops"]}
    assert ops == contract.OP_TYPES
    for o in table["ops"]:
        assert o["fields"] == ([contract.ATTR_ALPHA] if o["form"] == "sigmoid" else []), o


@pytest.mark.parametrize(
    "name,env", [(PLUGIN_TEST, "GELU_ONNX_TRT_PLUGIN_TEST"), (AUTOREG_TEST, "GELU_ONNX_TRT_AUTOREG_TEST")]
)
def test_plugin_layer_checks_pass(name, env):
    """The TensorRT-facing layer driven through the real TensorRT interfaces, and
    the load-time registration of the autoreg library (both exist only when the
    package was built against TensorRT; they need libnvinfer, not a GPU)."""
    exe = libs.find(name, env)
    if exe is None:
        pytest.skip("the TensorRT plugin was not built (no TensorRT >= 10 / CUDA at build time)")
    r = subprocess.run([str(exe)], check=False, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 failures" in r.stdout or "nothing to check" in r.stdout
