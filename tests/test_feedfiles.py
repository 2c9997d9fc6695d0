"""Untrusted input / golden-output files: .npz and Polygraphy JSON, read safely.

Polygraphy's files are made at test time by the real ``polygraphy`` tool (a
test dependency), so a change of its format breaks these tests, not users.
"""
from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from gelu_onnx.verify import arrayfiles, feedfiles, polyjson
from gelu_onnx.errors import InputError

POLYGRAPHY = Path(sys.executable).parent / "polygraphy"


def two_input_model() -> onnx.ModelProto:
    """y = x * 2 + ids-count: a float input with a named dim, an int64 input."""
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", 8])
    ids = helper.make_tensor_value_info("ids", T.INT64, ["batch"])
    y = helper.make_tensor_value_info("y", T.FLOAT, ["batch", 8])
    n = helper.make_tensor_value_info("n", T.INT64, ["batch"])
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"]), helper.make_node("Identity", ["ids"], ["n"])],
        "g", [x, ids], [y, n])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def polygraphy_run(model_path, tmp_path, *extra):
    """The real ``polygraphy run --onnxrt`` saving its inputs and outputs."""
    inp, out = tmp_path / "in.json", tmp_path / "golden.json"
    r = subprocess.run([str(POLYGRAPHY), "run", str(model_path), "--onnxrt", "--save-inputs", str(inp),
                        "--save-outputs", str(out), *extra], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return inp, out


def test_polygraphy_files_are_read(tmp_path):
    m = two_input_model()
    onnx.save(m, tmp_path / "m.onnx")
    inp, out = polygraphy_run(tmp_path / "m.onnx", tmp_path, "--iterations", "2",
                              "--input-shapes", "x:[3,8]", "ids:[3]")
    its = feedfiles.load_inputs(inp, m)
    assert len(its) == 2 and its[0]["x"].shape == (3, 8) and its[0]["ids"].dtype == np.int64
    assert not np.array_equal(its[0]["x"], its[1]["x"])
    runner, golden = feedfiles.load_reference_outputs(out, m)
    assert runner.startswith("onnxrt-runner") and len(golden) == 2
    for feeds, outs in zip(its, golden):  # independent reference: numpy on the same feeds
        np.testing.assert_array_equal(outs["y"], feeds["x"] * 2)
        np.testing.assert_array_equal(outs["n"], feeds["ids"])


def test_our_files_load_in_polygraphy(tmp_path):
    m = two_input_model()
    feeds = {"x": np.arange(16, dtype=np.float32).reshape(2, 8), "ids": np.array([3, 4], np.int64)}
    feedfiles.save_inputs([feeds], tmp_path / "in.json")
    feedfiles.save_outputs([("gelu-onnx:original", [{"y": feeds["x"] * 2}])], tmp_path / "out.json", {})
    code = ("from polygraphy.json import load_json; from polygraphy.comparator import RunResults;"
            f"f = load_json({str(tmp_path / 'in.json')!r}); r = RunResults.load({str(tmp_path / 'out.json')!r});"
            "print(f[0]['ids'].tolist(), r['gelu-onnx:original'][0]['y'].sum())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[3, 4] 240.0", r.stdout
    r = subprocess.run([str(POLYGRAPHY), "inspect", "data", str(tmp_path / "out.json")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "y [dtype=float32, shape=(2, 8)]" in r.stdout + r.stderr, r.stdout + r.stderr
    back = feedfiles.load_inputs(tmp_path / "in.json", m)[0]
    assert all(np.array_equal(back[k], v) for k, v in feeds.items())


def _npy(dtype: str, shape: tuple, data: bytes = b"") -> bytes:
    b = io.BytesIO()
    np.lib.format.write_array_header_1_0(b, {"descr": dtype, "fortran_order": False, "shape": shape})
    return b.getvalue() + data


def _json_inputs(path, arrays: dict) -> None:
    doc = [{k: {"array": base64.b64encode(v).decode(), "polygraphy_class": "ndarray"} for k, v in arrays.items()}]
    Path(path).write_text(json.dumps(doc))


def test_header_declaring_2_to_40_elements_is_refused(tmp_path):
    m = two_input_model()
    huge = _npy("<f4", (2**37, 8), b"\0" * 64)  # 2**40 elements, 64 bytes of data
    ids = _npy("<i8", (2**37,))
    p = tmp_path / "huge.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("x.npy", huge)
        z.writestr("ids.npy", ids)
    with pytest.raises(InputError, match=r"declares \[137438953472, 8\] float32 .* holds 64 data bytes"):
        feedfiles.load_inputs(p, m)
    j = tmp_path / "huge.json"
    _json_inputs(j, {"x": huge, "ids": ids})
    with pytest.raises(InputError, match="holds 64 data bytes"):
        feedfiles.load_inputs(j, m)


def test_zip_bomb_is_refused_before_inflating(tmp_path):
    """256 MiB of zeros deflated to ~0.25 MiB: refused from the zip directory alone."""
    m = two_input_model()
    rows = (256 << 20) // 32
    p = tmp_path / "bomb.npz"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            f.write(_npy("<f4", (rows, 8)))
            zero = bytes(1 << 20)
            for _ in range(256):
                f.write(zero)
        z.writestr("ids.npy", _npy("<i8", (rows,)) + bytes(rows * 8))
    assert p.stat().st_size < (4 << 20)
    with pytest.raises(InputError, match="compression bomb"):
        feedfiles.load_inputs(p, m)


def test_forged_zip_sizes_are_refused(tmp_path):
    """A member whose stored size is larger than the archive (a forged directory)."""
    p = tmp_path / "forged.npz"
    payload = zlib.compress(bytes(1 << 20))
    np.savez_compressed(p, x=np.zeros((4, 8), np.float32), ids=np.zeros(4, np.int64))
    raw = bytearray(p.read_bytes())
    z = zipfile.ZipFile(p)
    info = z.getinfo("x.npy")
    z.close()
    # central directory entry: compressed size at offset 20 of the record
    cd = raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"x.npy"))
    raw[cd + 20:cd + 24] = (len(raw) + len(payload)).to_bytes(4, "little")
    p.write_bytes(bytes(raw))
    assert info.compress_size < len(raw)
    with pytest.raises(InputError, match="truncated or forged|cannot read"):
        feedfiles.load_inputs(p, two_input_model())


def test_pickle_needs_allow_pickle(tmp_path):
    m = two_input_model()
    p = tmp_path / "obj.npz"
    np.savez(p, x=np.array([[object()] * 8], dtype=object), ids=np.zeros(1, np.int64))
    with pytest.raises(InputError, match="needs pickle .* --allow-pickle"):
        feedfiles.load_inputs(p, m)
    with pytest.raises(InputError, match="'x' is string, the model declares float32"):
        feedfiles.load_inputs(p, m, allow_pickle=True)  # loaded, then refused by its dtype
    j = tmp_path / "obj.json"
    b = io.BytesIO()
    np.save(b, np.array([None], dtype=object), allow_pickle=True)
    _json_inputs(j, {"x": b.getvalue(), "ids": arrayfiles.encode_npy(np.zeros(1, np.int64))})
    with pytest.raises(InputError, match="needs pickle"):
        feedfiles.load_inputs(j, m)


def test_headers_are_checked_against_the_model(tmp_path):
    m = two_input_model()
    cases = {
        "missing": ({"x": np.ones((2, 8), np.float32)}, "missing input.*ids"),
        "extra": ({"x": np.ones((2, 8), np.float32), "ids": np.ones(2, np.int64), "z": np.ones(1)},
                  "'z' is not an input"),
        "dtype": ({"x": np.ones((2, 8), np.float64), "ids": np.ones(2, np.int64)}, "is float64, the model declares float32"),
        "fixed": ({"x": np.ones((2, 7), np.float32), "ids": np.ones(2, np.int64)}, r"declares \[batch, 8\]"),
        "named": ({"x": np.ones((2, 8), np.float32), "ids": np.ones(3, np.int64)}, "dim 'batch' is 2"),
    }
    for name, (arrays, msg) in cases.items():
        for ext in ("npz", "json"):
            p = tmp_path / f"{name}.{ext}"
            if ext == "npz":
                np.savez(p, **arrays)
            else:
                _json_inputs(p, {k: arrayfiles.encode_npy(v) for k, v in arrays.items()})
            with pytest.raises(InputError, match=msg):
                feedfiles.load_inputs(p, m)


def test_malformed_json_is_one_clear_error(tmp_path):
    m = two_input_model()
    for text, msg in (("[" * 100000, "cannot read it as JSON"), ("{}", "not Polygraphy saved inputs"),
                      ("[]", "holds no iterations"), ('[{"x": {"array": 3}, "ids": 1}]', "not a Polygraphy-encoded"),
                      ('[{"x": {"array": "QUJD", "polygraphy_class": "ndarray"}, "ids": 1}]', "not a valid .npy")):
        p = tmp_path / "bad.json"
        p.write_text(text)
        with pytest.raises(InputError, match=msg):
            feedfiles.load_inputs(p, m)
    p.write_text("[]")
    with pytest.raises(InputError, match="not a Polygraphy RunResults"):
        feedfiles.load_reference_outputs(p, m)


def test_golden_outputs_checked_against_the_model(tmp_path):
    m = two_input_model()
    doc = polyjson.run_results_doc([("r", [{"y": np.ones((2, 8), np.float64)}])])
    p = tmp_path / "g.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="'y' is float64, the model declares float32"):
        feedfiles.load_reference_outputs(p, m)


def test_unwritable_save_path_is_one_clear_error(tmp_path):
    feeds = {"x": np.ones((2, 8), np.float32), "ids": np.ones(2, np.int64)}
    long_name = tmp_path / ("a" * 300 + ".npz")
    for path in (long_name, long_name.with_suffix(".json"), tmp_path / "absent" / "x.json"):
        with pytest.raises(InputError, match="cannot write it|does not exist"):
            feedfiles.save_inputs([feeds], path)
    assert [p.name for p in tmp_path.iterdir()] == []  # no temp file left behind
