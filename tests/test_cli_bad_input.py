"""Bad input is one line and exit 2, valid input is not refused (the second
hostile suite's findings): invalid tensors/attributes/functions, deep
constant chains, rank-0 and absurd graph inputs, non-UTF-8 and over-long
paths, hard-linked external data, a Constant with several values."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from helpers.model_helpers import external_model

REPO = Path(__file__).resolve().parents[1]


def gelu(*args, env=None):
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *args], capture_output=True, env=e, timeout=300)


def erf_gelu(src: str, sqrt2: str, out: str = "y") -> list:
    return [h.make_node("Div", [src, sqrt2], ["d"]), h.make_node("Erf", ["d"], ["e"]),
            h.make_node("Add", ["e", "one"], ["p"]), h.make_node("Mul", [src, "p"], ["q"]),
            h.make_node("Mul", ["q", "half"], [out])]


CONSTS = [h.make_tensor(n, T.FLOAT, [], [v]) for n, v in (("one", 1.0), ("half", 0.5))]
IO = ([h.make_tensor_value_info("x", T.FLOAT, ["n", 4])], [h.make_tensor_value_info("y", T.FLOAT, ["n", 4])])


def save(m: onnx.ModelProto, path: Path) -> str:
    path.write_bytes(m.SerializeToString())  # as is: no checker, no re-stamping
    return str(path)


def matmul_with(w: onnx.TensorProto) -> onnx.ModelProto:
    g = h.make_graph([h.make_node("MatMul", ["x", "W"], ["y"])], "g", *IO, [w])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=10)


def _negative():
    w = nh.from_array(np.ones((4, 4), np.float32), "W")
    w.dims[0] = -4
    return matmul_with(w)


def _overflow():
    w = nh.from_array(np.ones((4, 4), np.float32), "W")
    w.dims[0] = 1 << 62
    return matmul_with(w)


def _short_raw():
    w = nh.from_array(np.ones((4, 4), np.float32), "W")
    w.raw_data = w.raw_data[:10]
    return matmul_with(w)


def _recursive_function():
    f = h.make_function("loc", "F", ["a"], ["b"], [h.make_node("F", ["a"], ["b"], domain="loc")],
                        [h.make_opsetid("", 17), h.make_opsetid("loc", 1)])
    g = h.make_graph([h.make_node("F", ["x"], ["y"], domain="loc")], "g", *IO)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("loc", 1)], functions=[f],
                        ir_version=10)


def _wrong_attribute_type():
    n = h.make_node("Gelu", ["x"], ["y"])
    n.attribute.append(h.make_attribute("approximate", 3))
    return h.make_model(h.make_graph([n], "g", *IO), opset_imports=[h.make_opsetid("", 20)], ir_version=10)


@pytest.mark.parametrize("build", [_negative, _overflow, _short_raw, _recursive_function, _wrong_attribute_type])
def test_invalid_models_are_bad_input(tmp_path, build):
    src = save(build(), tmp_path / "bad.onnx")
    r = gelu("fuse", src, "-o", str(tmp_path / "out.onnx"))
    err = r.stderr.decode()
    assert r.returncode == 2 and len(err.strip().splitlines()) == 1 and "onnx.checker" in err, err
    assert not (tmp_path / "out.onnx").exists()


def test_sqrt2_behind_600_identities_is_fused(tmp_path):
    nodes = [h.make_node("Constant", [], ["s0"], value=h.make_tensor("v", T.FLOAT, [], [2**0.5]))]
    nodes += [h.make_node("Identity", [f"s{i}"], [f"s{i + 1}"]) for i in range(600)]
    m = h.make_model(h.make_graph(nodes + erf_gelu("x", "s600"), "g", *IO, CONSTS),
                     opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    r = gelu("fuse", save(m, tmp_path / "deep.onnx"), "-o", str(tmp_path / "out.onnx"))
    assert r.returncode == 0 and r.stdout.decode().startswith("fused 1 GELU"), r.stderr


def test_constant_with_two_values_is_not_a_constant(tmp_path):
    c = h.make_node("Constant", [], ["s"], value=h.make_tensor("v", T.FLOAT, [], [2**0.5]), value_float=3.0)
    m = h.make_model(h.make_graph([c] + erf_gelu("x", "s"), "g", *IO, CONSTS),
                     opset_imports=[h.make_opsetid("", 17)], ir_version=10)
    import gelu_onnx

    assert not gelu_onnx.fuse_with_report(m).fusions  # which value a runtime takes is undefined: never fused


def test_rank0_inputs_can_be_checked(tmp_path):
    io0 = ([h.make_tensor_value_info("x", T.FLOAT, [])], [h.make_tensor_value_info("y", T.FLOAT, [])])
    m = h.make_model(h.make_graph([h.make_node("Gelu", ["x"], ["y"])], "g", *io0),
                     opset_imports=[h.make_opsetid("", 20)], ir_version=10)
    src = save(m, tmp_path / "r0.onnx")
    assert gelu("fuse", src, "-o", str(tmp_path / "f.onnx")).returncode == 0
    r = gelu("check", src, str(tmp_path / "f.onnx"))
    assert r.returncode == 0, r.stderr


def test_absurd_input_dims_are_refused_before_allocating(tmp_path):
    big = ([h.make_tensor_value_info("x", T.FLOAT, [1 << 20, 1 << 20])],
           [h.make_tensor_value_info("y", T.FLOAT, [1 << 20, 1 << 20])])
    m = h.make_model(h.make_graph([h.make_node("Gelu", ["x"], ["y"])], "g", *big),
                     opset_imports=[h.make_opsetid("", 20)], ir_version=10)
    src = save(m, tmp_path / "big.onnx")
    r = gelu("check", src, src)
    assert r.returncode == 2 and b"--dim" in r.stderr and b"MemoryError" not in r.stderr, r.stderr


def test_non_utf8_and_overlong_paths(tmp_path):
    src = external_model(tmp_path / "in")
    odd = os.fsencode(tmp_path) + b"/\xff\xfe.onnx"
    with open(odd, "wb") as f:
        f.write(open(src, "rb").read())
    env = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}
    r = gelu(b"fuse", odd, b"-o", os.fsencode(tmp_path) + b"/missing-dir/o.onnx", env=env)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and b"Traceback" not in r.stderr, r.stderr
    r = gelu("fuse", "/tmp/" + "a" * 300 + ".onnx", "-o", str(tmp_path / "o.onnx"))
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and b"Traceback" not in r.stderr, r.stderr


def test_hard_linked_external_data_is_refused(tmp_path):
    src = external_model(tmp_path / "in")
    os.link(tmp_path / "in" / "w.bin", tmp_path / "in" / "w2.bin")
    r = gelu("fuse", str(src), "-o", str(tmp_path / "o.onnx"))
    assert r.returncode == 2 and b"hard links" in r.stderr, r.stderr


def test_onnxruntime_warnings_stay_off_stderr(tmp_path):
    """An unused initializer makes ORT warn at session creation: not ours to print."""
    g = h.make_graph([h.make_node("Gelu", ["x"], ["y"])], "g", *IO, [nh.from_array(np.ones(3, np.float32), "unused")])
    src = save(h.make_model(g, opset_imports=[h.make_opsetid("", 20)], ir_version=10), tmp_path / "u.onnx")
    assert gelu("fuse", src, "-o", str(tmp_path / "f.onnx")).returncode == 0
    r = gelu("check", src, str(tmp_path / "f.onnx"))
    assert r.returncode == 0 and r.stderr == b"", r.stderr
    r = gelu("check", src, str(tmp_path / "f.onnx"), env={"GELU_ONNX_ORT_LOG": "1"})
    assert r.returncode == 0 and b"Removing initializer" in r.stderr  # asked for: shown
    r = gelu("check", src, str(tmp_path / "f.onnx"), "-v")
    assert r.returncode == 0 and b"Removing initializer" in r.stderr


def test_check_warns_when_our_kernels_will_not_run(tmp_path):
    """Fused for custom, checked where the library is not there (a user's
    GELU_ONNX_ORT_LIBRARY pointing nowhere): the check runs the functions and says so."""
    g = h.make_graph([h.make_node("Gelu", ["x"], ["y"])], "g", *IO)
    src = save(h.make_model(g, opset_imports=[h.make_opsetid("", 20)], ir_version=10), tmp_path / "g.onnx")
    assert gelu("fuse", src, "-o", str(tmp_path / "f.onnx")).returncode == 0
    r = gelu("check", src, str(tmp_path / "f.onnx"), env={"GELU_ONNX_ORT_LIBRARY": str(tmp_path / "none.so")})
    assert r.returncode == 0 and b"custom-op library is not available" in r.stderr, r.stderr
    r = gelu("check", src, str(tmp_path / "f.onnx"), "--no-library")  # asked for: no warning
    assert r.returncode == 0 and b"library is not available" not in r.stderr, r.stderr
    r = gelu("bench", src, str(tmp_path / "f.onnx"), "--repeats", "1", "--warmup", "0", "--opt-levels", "basic",
             env={"GELU_ONNX_ORT_LIBRARY": str(tmp_path / "none.so")})
    assert r.returncode == 0 and b"custom-op library is not available" in r.stderr, r.stderr
