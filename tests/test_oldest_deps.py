"""The Python package on the OLDEST versions pyproject.toml declares (onnx,
numpy, ml_dtypes, tqdm, onnxruntime), not only on what pip serves today: a
virtualenv with exactly those (cached under ~/.cache, made once) runs this
checkout's gelu_onnx (PYTHONPATH) with this build's custom-op library and
model scanner.

For every target: `fuse` a bundled export, the output loads and passes
`check` against the original in that onnxruntime - or, where that old
runtime cannot load what the target needs (Gelu-20 needs onnxruntime >=
1.17), `fuse` refuses with exit 3 and one line naming the runtime's limit.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.version import Version

from gelu_onnx import libs, ortlib
from gelu_onnx.onnxio import wire

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "models" / "bert_torchscript_op17.onnx"
PACKAGES = ("onnx", "numpy", "ml_dtypes", "tqdm")


def _floors() -> dict[str, str]:
    """name -> the lowest version pyproject.toml allows (dependencies + [cpu])."""
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = {}
    for spec in meta["dependencies"] + meta["optional-dependencies"]["cpu"]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", spec.split("#")[0].replace(" ", ""))
        assert m, f"a lower bound >= is expected for {spec}"
        out[m.group(1)] = m.group(2)
    return out


@pytest.fixture(scope="module")
def old_python():
    floors = _floors()
    assert set(PACKAGES) | {"onnxruntime"} <= set(floors)
    pins = [f"{k}=={v}" for k, v in sorted(floors.items())]
    key = hashlib.sha256(" ".join(pins + [sys.version]).encode()).hexdigest()[:12]
    venv = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gelu-onnx-tests" / f"oldest-{key}"
    py = venv / "bin" / "python"
    if not (venv / "ok").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            if re.search(r"(?i)connection|network|resolve host|timed out", r.stderr):
                pytest.skip(f"PyPI unreachable: {r.stderr.strip().splitlines()[-1]}")
            pytest.fail(f"the declared lower bounds {pins} do not install on Python "
                        f"{sys.version_info.major}.{sys.version_info.minor}:\n{r.stderr[-2000:]}")
        (venv / "ok").write_text(" ".join(pins))
    got = subprocess.run([str(py), "-c", "import onnx, onnxruntime, numpy, ml_dtypes, tqdm; print(onnx.__version__, "
                          "onnxruntime.__version__, numpy.__version__, ml_dtypes.__version__, tqdm.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()
    want = [floors[k] for k in ("onnx", "onnxruntime", "numpy", "ml_dtypes", "tqdm")]
    assert [Version(v) for v in got] == [Version(v) for v in want], (got, want)
    return py


def _run(py, *args):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    lib = ortlib.library_path(required=False)
    if lib is not None:
        env[ortlib.ENV_VAR] = str(lib)
    scanner = libs.find(wire.LIBRARY, wire.ENV_LIBRARY)  # the fuse pass needs it; a source checkout has none
    if scanner is not None:
        env[wire.ENV_LIBRARY] = str(scanner)
    return subprocess.run([str(py), "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=600)


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_fuse_and_check_on_the_oldest_declared_versions(old_python, tmp_path, target):
    out = tmp_path / "fused.onnx"
    r = _run(old_python, "fuse", MODEL, "-o", out, "--target", target)
    if r.returncode == 3:  # the old runtime cannot load what this target writes: said, not written
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "the installed onnxruntime" in lines[0] and "loads IR" in lines[0], r.stderr
        assert target == "standard" and not out.exists()
        return
    assert r.returncode == 0, r.stderr
    assert "fused 2 GELUs" in r.stdout
    r = _run(old_python, "check", MODEL, out)
    assert r.returncode == 0 and "PASS" in r.stdout, r.stdout + r.stderr
    r = _run(old_python, "inspect", out, "--json")
    assert r.returncode == 0, r.stderr
