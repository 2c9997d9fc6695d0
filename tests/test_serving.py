"""Serving a fused model from C++: examples/serve_cpp/serve.cpp, built by its
build.sh with g++ against the ONNX Runtime headers the package build found
(ONNXRUNTIME_ROOT, or the Debian headers CMake fetched into build/) and the
libonnxruntime.so shipped in the installed onnxruntime wheel. It runs a fused
BERT (erf) and GPT-2 (tanh) export with our library registered through the
C++ API and without it (the model-local functions), and both must match the
ORIGINAL export run by onnxruntime's Python API on the same inputs."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gelu_onnx
from gelu_onnx import ortlib

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "serve_cpp"
DIM = 8  # serve's default size of every symbolic dimension
# every export, target and optimizer level below; by default one of each (the optimizer runs dominate)
FULL = os.environ.get("GELU_ONNX_FULL_SERVING") == "1"


def ort_headers() -> Path | None:
    """The folder holding onnxruntime_cxx_api.h, found as plugins/cmake/OrtHeaders.cmake finds it."""
    roots = [Path(os.environ["ONNXRUNTIME_ROOT"])] if os.environ.get("ONNXRUNTIME_ROOT") else []
    cands = [r / sub for r in roots for sub in ("include", "include/onnxruntime", "include/onnxruntime/core/session")]
    cands += sorted(ROOT.glob("build/*/_deps/ort-headers/usr/include/onnxruntime"))
    return next((c for c in cands if (c / "onnxruntime_cxx_api.h").is_file()), None)


def ort_library() -> Path | None:
    libs = sorted((Path(ort.__file__).parent / "capi").glob("libonnxruntime.so*"))
    return libs[0] if libs else None


@pytest.fixture(scope="module")
def serve(tmp_path_factory) -> Path:
    inc, lib = ort_headers(), ort_library()
    if shutil.which("g++") is None or inc is None or lib is None:
        pytest.skip(f"needs g++, ONNX Runtime headers ({inc}) and the wheel's libonnxruntime.so ({lib})")
    out = tmp_path_factory.mktemp("serve")
    r = subprocess.run(["sh", str(EXAMPLE / "build.sh"), str(out)], env=dict(os.environ, ORT_INCLUDE=str(inc),
                       ORT_LIB=str(lib)), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return out / "serve"


def feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """serve.cpp's inputs: symbolic dims DIM; floats ((k * 7) % 23 - 11) / 8, integers 1."""
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value or DIM for d in i.type.tensor_type.shape.dim]
        n = int(np.prod(shape))
        if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT:
            k = np.arange(n)
            out[i.name] = (((k * 7) % 23 - 11) / 8).astype(np.float32).reshape(shape)
        else:
            out[i.name] = np.ones(shape, np.int64)
    return out


def run_serve(serve: Path, model: Path, save: Path, library: Path | None) -> str:
    save.mkdir()
    args = [str(serve), str(model), "--save", str(save)] + (["--library", str(library)] if library else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("export", ["bert_torchscript_op17.onnx", "gpt2_torchscript_op17.onnx"][:2 if FULL else 1])
def test_cpp_serves_the_fused_model_with_and_without_the_library(serve, tmp_path, export):
    if not ortlib.available():
        pytest.skip("the custom-op library is not built")
    src = ROOT / "models" / export
    fused = tmp_path / "fused.onnx"
    done = gelu_onnx.fuse_file(src, fused, target="custom")
    assert done.result.fusions  # the served model holds our ops
    original = onnx.load(str(src))
    sess = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])  # the ORIGINAL graph, Python API
    want = sess.run(None, feeds(original))
    lib = ortlib.library_path()
    for name, library in (("lib", lib), ("functions", None)):
        text = run_serve(serve, fused, tmp_path / name, library)
        assert text.splitlines()[0] == f"library: {library or 'none (model-local functions)'}"
        for i, ref in enumerate(want):
            got = np.fromfile(tmp_path / name / f"{i}.f32", np.float32).reshape(ref.shape)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=f"{export} output {i} ({name})")
            shape = "x".join(map(str, ref.shape))
            assert re.match(rf"{re.escape(sess.get_outputs()[i].name)} \[{shape}\]: sum -?[0-9]", text.splitlines()[1 + i]), text


def test_cpp_runs_our_kernels_when_the_library_is_registered(serve, tmp_path):
    """With the model-local functions stripped, only the library's kernels can run the fused nodes."""
    if not ortlib.available():
        pytest.skip("the custom-op library is not built")
    src = ROOT / "models" / "bert_torchscript_op17.onnx"
    m = gelu_onnx.fuse(str(src), target="custom")
    del m.functions[:]
    bare = tmp_path / "bare.onnx"
    onnx.save(m, str(bare))
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds(m))
    run_serve(serve, bare, tmp_path / "lib", ortlib.library_path())
    got = np.fromfile(tmp_path / "lib" / "0.f32", np.float32).reshape(want[0].shape)
    np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-4)
    r = subprocess.run([str(serve), str(bare)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "ai.gelu_onnx" in r.stderr, r.stderr  # no kernel, no function: refused


def test_cpp_serve_says_what_went_wrong(serve, tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    r = subprocess.run([str(serve), str(junk)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr.startswith("serve: error: "), r.stderr


# --- with ONNX Runtime's transformer optimizer: the order docs/serving.md recommends stays right -------------

GPT2 = ROOT / "models" / "gpt2_torchscript_op17.onnx"  # gelu_new (tanh GELUs); n_embd 32, n_head 2 (models/archs.py)


def _optimized(src: Path, dst: Path, level: int) -> Path:
    from onnxruntime.transformers import optimizer

    optimizer.optimize_model(str(src), model_type="gpt2", num_heads=2, hidden_size=32, opt_level=level,
                             use_gpu=False).save_model_to_file(str(dst))
    return dst


def _ops(path: Path) -> list[str]:
    m = onnx.load(str(path))
    return sorted(f"{n.domain}.{n.op_type}" for n in m.graph.node if n.domain in ("com.microsoft", "ai.gelu_onnx")
                  and "Gelu" in n.op_type)


def test_optimizer_first_then_fuse_keeps_tanh_gelus_right(tmp_path):
    """The recommended order: the optimizer (any level), then gelu-onnx fuse (any target)."""
    opt = _optimized(GPT2, tmp_path / "opt.onnx", 1)
    assert _ops(opt) == ["com.microsoft.FastGelu"] * 2  # the optimizer's own tanh GELU, with the bias
    for target, op in (("custom", "ai.gelu_onnx.BiasGeluTanh"), ("ort", "com.microsoft.FastGelu"))[:2 if FULL else 1]:
        out = tmp_path / f"{target}.onnx"
        gelu_onnx.fuse_file(opt, out, target=target)
        assert _ops(out) == [op] * 2
        rep = gelu_onnx.check(str(GPT2), str(out))  # against the export itself
        assert rep.ok, [(o.name, o.max_abs, o.message) for o in rep.outputs]


def test_standard_then_optimizer_turns_tanh_into_erf(tmp_path):
    """The pitfall docs/serving.md warns of: the optimizer rewrites Gelu(approximate="tanh") + bias as
    com.microsoft.BiasGelu, the erf GELU, at any level; check sees it."""
    std = tmp_path / "std.onnx"
    gelu_onnx.fuse_file(GPT2, std, target="standard")
    for level in (0, 1)[0 if FULL else 1:]:
        out = _optimized(std, tmp_path / f"std_opt{level}.onnx", level)
        assert _ops(out) == ["com.microsoft.BiasGelu"] * 2
        assert not gelu_onnx.check(str(GPT2), str(out)).ok
