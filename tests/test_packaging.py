"""What a deployer gets: a publishable wheel and sdist, no onnxruntime forced
on them, and `gelu-onnx info` telling what the build contains.

The wheel is built here for real (pip wheel, the CMake build without CUDA to
keep it quick: the tag, contents and metadata do not depend on CUDA)."""
from __future__ import annotations

import email
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _pip(*args, cwd=None, timeout=1200):
    return subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = _pip("wheel", str(REPO), "--no-deps", "-w", str(out), "-Ccmake.define.GELU_ONNX_CUDA=OFF",
             f"-Cbuild-dir={out / 'build'}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (whl,) = out.glob("*.whl")
    return whl


@pytest.mark.slow
def test_wheel_is_publishable(wheel):
    assert "-py3-none-" in wheel.name and wheel.name.endswith("_x86_64.whl"), wheel.name  # no CPython ABI
    names = zipfile.ZipFile(wheel).namelist()
    assert "gelu_onnx/_lib/libgelu_onnx_ort.so" in names and "gelu_onnx/_lib/build_info.json" in names
    assert "gelu_onnx/_lib/libgelu_onnx_scan.so" in names
    assert "gelu_onnx/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert not [n for n in names if n.rsplit("/", 1)[-1].endswith("_test") or "/tests/" in n], names
    # only the product's libraries: nothing test-only (tests/native: the CUDA emulation, the
    # stand-in libnvinfer, the C++ test programs) is built into or installed with the wheel
    lib = {n.rsplit("/", 1)[-1] for n in names if n.startswith("gelu_onnx/_lib/")}
    assert lib <= {"libgelu_onnx_ort.so", "libgelu_onnx_scan.so", "build_info.json", "libgelu_onnx_trt.so",
                   "libgelu_onnx_trt_autoreg.so"}, lib
    meta = email.message_from_bytes(zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))))
    requires = meta.get_all("Requires-Dist")
    hard = [r for r in requires if "extra ==" not in r]
    assert not [r for r in hard if r.startswith("onnxruntime")], hard  # never forced over the user's flavour
    assert any(r.startswith("onnxruntime-gpu") and 'extra == "gpu"' in r for r in requires), requires
    assert any(r.startswith("onnxruntime") and 'extra == "cpu"' in r for r in requires), requires
    built = json.loads(zipfile.ZipFile(wheel).read("gelu_onnx/_lib/build_info.json"))
    assert built["ort_library"] is True and built["cuda_kernels"] is False
    assert any("GELU_ONNX_CUDA=OFF" in m for m in built["missing"]), built


@pytest.mark.slow
def test_sdist_is_lean(tmp_path):
    # cwd: the checkout's build/ folder would shadow the `build` package
    r = subprocess.run([sys.executable, "-m", "build", "--sdist", "--outdir", str(tmp_path), str(REPO)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    (sdist,) = tmp_path.glob("*.tar.gz")
    names = tarfile.open(sdist).getnames()
    assert sdist.stat().st_size < 3 * 2**20, sdist.stat().st_size
    assert not [n for n in names if n.endswith(".onnx")], [n for n in names if n.endswith(".onnx")][:5]
    assert any(n.endswith("/LICENSE") for n in names) and any(n.endswith("/plugins/CMakeLists.txt") for n in names)


def _info(env=None) -> dict:
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.update(env or {})
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", "info", "--json"], capture_output=True, text=True,
                       env=e, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_info_reports_build_and_runtime():
    import onnx
    import onnxruntime as ort

    import gelu_onnx

    info = _info()
    assert info["onnx"] == onnx.__version__ and info["onnxruntime"] == ort.__version__
    assert info["providers"] == ort.get_available_providers()
    assert info == json.loads(json.dumps(gelu_onnx.build_info()))  # the CLI prints exactly the API's dict
    assert {"ort_library_path", "missing"} <= set(info["build"])


def test_info_says_when_two_onnxruntime_flavours_are_installed(tmp_path):
    """A second flavour's metadata next to the real onnxruntime (what pip leaves
    when both were installed) gives one warning with the fix."""
    dist = tmp_path / "onnxruntime_gpu-1.31.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: onnxruntime-gpu\nVersion: 1.31.1\n")
    info = _info({"PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}"})
    (w,) = [w for w in info["warnings"] if "flavours" in w]
    assert "pip uninstall -y onnxruntime onnxruntime-gpu && pip install onnxruntime-gpu==1.31.1" in w


def test_errors_subclass_the_builtins(tmp_path):
    import gelu_onnx

    with pytest.raises(FileNotFoundError):
        gelu_onnx.fuse(str(tmp_path / "missing.onnx"))
    with pytest.raises(ValueError):
        gelu_onnx.fuse(str(tmp_path), "custom")
    with pytest.raises(ValueError):
        gelu_onnx.fuse(b"not a model")


@pytest.mark.slow
def test_beside_onnxruntime_gpu_the_cuda_provider_stays(wheel, tmp_path):
    """The held-out check: a venv that has onnxruntime-gpu, our wheel installed
    into it: CUDA provider still listed, no CPU onnxruntime came in, info answers."""
    if os.environ.get("GELU_ONNX_GPU_COEXIST") != "1":
        pytest.skip("downloads onnxruntime-gpu (255 MB): set GELU_ONNX_GPU_COEXIST=1")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    for args in (["onnxruntime-gpu"], [str(wheel)]):
        r = subprocess.run([py, "-m", "pip", "install", "-q", *args], capture_output=True, text=True, timeout=1800)
        assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run([py, "-m", "pip", "list", "--format", "json"], capture_output=True, text=True, check=True)
    names = {p["name"].lower() for p in json.loads(r.stdout)}
    assert "onnxruntime-gpu" in names and "onnxruntime" not in names, names
    r = subprocess.run([py, "-c", "import onnxruntime as o; print(o.get_available_providers())"],
                       capture_output=True, text=True, check=True)
    assert "CUDAExecutionProvider" in r.stdout
    r = subprocess.run([str(venv / "bin" / "gelu-onnx"), "info", "--json"], capture_output=True, text=True)
    assert r.returncode == 0 and "CUDAExecutionProvider" in json.loads(r.stdout)["providers"]


def test_api_and_cli_json_use_the_same_field_names(tmp_path):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    import gelu_onnx

    g = h.make_graph([h.make_node("Gelu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, ["n"])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["n"])])
    src = tmp_path / "g.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 20)], ir_version=10), str(src))
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", "fuse", str(src), "-o", str(tmp_path / "f.onnx"), "--json"],
                       capture_output=True, text=True, env=e, timeout=120)
    cli = json.loads(r.stdout)
    api = gelu_onnx.fuse_with_report(str(src)).as_dict()
    assert set(cli) - {"ok", "input", "output"} == set(api)
    assert cli["fusions"] == api["fusions"] and cli["near_misses"] == api["near_misses"]
