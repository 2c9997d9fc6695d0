"""One build of the custom-op library in the oldest onnxruntime releases it
supports, not only the one the suite runs on: 1.16.3 (the floor: API 16,
KernelCompute v1, the library's own thread pool) and 1.17.3 (API 17: ORT's
intra-op pool and output shape inference).

Each release is pip-installed (no dependencies but numpy < 2, which they were
built against) into a cache folder and driven from a child process whose
PYTHONPATH puts it first. The models hold our op nodes and no model-local
function, so a session exists only if the library registered; the outputs
must then equal the same kernel called directly, bit for bit, and the float64
reference within the stated bounds. Skips (with pip's message) only where
PyPI cannot be reached.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper
from helpers.kernel_helpers import check_f32, kernel_library, reference, run

from gelu_onnx import contract, ortlib

VERSIONS = {"1.16.3": 16, "1.17.3": 17}  # release -> the API version the library must negotiate
DTYPES = {"f32": (TP.FLOAT, np.float32), "f16": (TP.FLOAT16, np.float16)}
SHAPE = (2, 64, 768)  # 98 304 elements: more than one 16Ki work chunk, so the pools split it
CACHE = Path(os.environ.get("GELU_ONNX_TEST_CACHE", Path.home() / ".cache" / "gelu_onnx_tests"))

CHILD = textwrap.dedent(r"""
    import ctypes, json, sys
    import numpy as np, onnxruntime as ort
    lib_path, work = sys.argv[1], sys.argv[2]
    with open(work + "/cases.json") as f:
        cases = json.load(f)
    out = {"version": ort.__version__, "results": {}}
    for name, case in cases.items():
        so = ort.SessionOptions()
        so.register_custom_ops_library(lib_path)
        so.intra_op_num_threads = 2
        feeds = dict(np.load(work + "/" + name + ".in.npz"))
        try:
            sess = ort.InferenceSession(work + "/" + name + ".onnx", so, providers=["CPUExecutionProvider"])
            y = sess.run(None, feeds)[0]
            np.save(work + "/" + name + ".out.npy", y)
            out["results"][name] = {"ok": True, "shape": list(y.shape),
                                    "declared": [d if isinstance(d, (int, str)) else None
                                                 for d in (sess.get_outputs()[0].shape or [])]}
        except Exception as e:
            out["results"][name] = {"ok": False, "error": str(e)}
    out["api"] = ctypes.CDLL(lib_path).gelu_onnx_ort_api_version()
    print(json.dumps(out))
""")


def _install(version: str) -> Path:
    """onnxruntime==version (+ numpy < 2) in a cache folder; installed once, atomically."""
    dest = CACHE / f"onnxruntime-{version}"
    if (dest / ".complete").exists():
        return dest
    tmp = CACHE / f".onnxruntime-{version}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check",
                        "--target", str(tmp), f"onnxruntime=={version}", "numpy<2"],
                       check=False, capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        lines = [line for line in (r.stderr or r.stdout).splitlines() if line.strip()]
        pytest.skip(f"cannot pip-install onnxruntime=={version}: {lines[-1] if lines else r.returncode}")
    (tmp / ".complete").touch()
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def _model(op_type: str, onnx_dtype: int, alpha: float | None) -> bytes:
    _, bias = contract.FORM_OF_OP_TYPE[op_type]
    ins = [helper.make_tensor_value_info("X", onnx_dtype, ["A", "B", "H"])]
    if bias:
        ins.append(helper.make_tensor_value_info("B", onnx_dtype, ["H"]))
    attrs = {} if alpha is None else {contract.ATTR_ALPHA: alpha}
    node = helper.make_node(op_type, [i.name for i in ins], ["Y"], domain=contract.DOMAIN, **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", onnx_dtype, None)])
    # IR 9 / opset 17: what onnxruntime 1.16 reads.
    return helper.make_model(graph, ir_version=9, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(contract.DOMAIN, contract.OPSET_VERSION)]).SerializeToString()


def _cases(work: Path) -> dict:
    """Every op type x f32/f16 on SHAPE, plus a bias of the wrong length and a zero-size input."""
    rng = np.random.default_rng(7)
    cases = {}
    for op_type, (form, bias) in contract.FORM_OF_OP_TYPE.items():
        alpha = contract.QUICK_GELU_ALPHA if form == "sigmoid" else None
        for dname, (odt, npdt) in DTYPES.items():
            name = f"{op_type}-{dname}"
            x = (rng.standard_normal(SHAPE) * 3).astype(npdt)
            feeds = {"X": x}
            if bias:
                feeds["B"] = rng.standard_normal(SHAPE[-1]).astype(npdt)
            cases[name] = {"op_type": op_type, "form": form}
            (work / f"{name}.onnx").write_bytes(_model(op_type, odt, alpha))
            np.savez(work / f"{name}.in.npz", **feeds)
    x = rng.standard_normal((1, 4, 768)).astype(np.float32)
    for name, feeds in (("bad-bias", {"X": x, "B": np.ones(5, np.float32)}),
                        ("zero-size", {"X": np.zeros((1, 0, 768), np.float32), "B": np.ones(768, np.float32)})):
        cases[name] = {"op_type": "BiasGeluErf"}
        (work / f"{name}.onnx").write_bytes(_model("BiasGeluErf", TP.FLOAT, None))
        np.savez(work / f"{name}.in.npz", **feeds)
    (work / "cases.json").write_text(json.dumps(cases))
    return cases


@pytest.mark.parametrize("version", list(VERSIONS))
def test_library_in_older_onnxruntime(version, tmp_path):
    site = _install(version)
    lib_path = ortlib.library_path()
    cases = _cases(tmp_path)
    (tmp_path / "child.py").write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
    r = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(lib_path), str(tmp_path)],
                       check=False, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["version"] == version  # the child really ran the old release
    assert out["api"] == VERSIONS[version]
    res = out["results"]

    lib = kernel_library()
    for name, case in cases.items():
        if name in ("bad-bias", "zero-size"):
            continue
        assert res[name]["ok"], f"{name}: {res[name].get('error')}"
        feeds = dict(np.load(tmp_path / f"{name}.in.npz"))
        y = np.load(tmp_path / f"{name}.out.npy")
        x, b = feeds["X"], feeds.get("B")
        want = run(lib, case["form"], x, b)
        assert y.dtype == x.dtype and y.shape == x.shape
        assert np.array_equal(y.view(np.uint16 if x.dtype == np.float16 else np.uint32),
                              want.view(np.uint16 if x.dtype == np.float16 else np.uint32)), name
        # and within tests/test_cpu_kernels.py's float64 bounds
        v = (x.astype(np.float32) + (0 if b is None else b.astype(np.float32))).ravel()
        if x.dtype == np.float32:
            check_f32(case["form"], v, y.ravel())
        else:  # fp16: within 1 ulp of the float64 reference
            ref = reference(case["form"], v)
            err = np.abs(y.ravel().astype(np.float64) - ref) / np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
            assert (err <= 1.0).all(), f"{name}: {err.max():.2f} ulp"
        if VERSIONS[version] >= 17:  # output shape inference keeps the symbolic dims
            assert res[name]["declared"] == ["A", "B", "H"], res[name]
    assert not res["bad-bias"]["ok"]
    assert "BiasGeluErf" in res["bad-bias"]["error"] and "bias has shape [5]" in res["bad-bias"]["error"], res["bad-bias"]
    assert res["zero-size"]["ok"] and res["zero-size"]["shape"] == [1, 0, 768], res["zero-size"]
