"""Parity checker: inputs, ulp arithmetic, comparison rules, real ORT runs.

References are independent of the code under test: float64 numpy/scipy for
GELU values, exhaustive enumeration / numpy.nextafter for ulp distances.
"""
from __future__ import annotations

import os

import math

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh
from scipy.special import erf

from gelu_onnx import contract, ortlib, verify
from gelu_onnx.cliout import json_safe
from gelu_onnx.errors import InputError, UnsupportedError
from helpers.model_helpers import gelu_model, save

BF16 = np.dtype(ml_dtypes.bfloat16)


# --- hand-built models (shared with test_cli.py) -------------------------------------


def gelu64(x):
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


# --- ulp distance against independent counts --------------------------------------


def _all_finite_sorted(dtype) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        bits = np.arange(2**16, dtype=np.uint16).view(dtype).astype(np.float64)
    return np.unique(bits[np.isfinite(bits)])  # -0 and +0 collapse into one value


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), BF16], ids=["float16", "bfloat16"])
def test_ulp_matches_rank_in_sorted_value_list(dtype):
    # Independent definition: the number of representable values between a and b.
    values = _all_finite_sorted(dtype)
    rng = np.random.default_rng(1)
    a = rng.choice(values, 4000).astype(dtype)
    with np.errstate(over="ignore"):
        near = a[2000:].astype(np.float64) * (1 + rng.normal(0, 0.01, 2000))
        b = np.concatenate([rng.choice(values, 2000), near]).astype(dtype)
    keep = np.isfinite(b.astype(np.float64))
    a, b = a[keep], b[keep]
    want = np.abs(np.searchsorted(values, a.astype(np.float64)) - np.searchsorted(values, b.astype(np.float64)))
    assert np.array_equal(verify.ulp_distance(a, b).astype(np.int64), want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_ulp_matches_nextafter_walk(dtype):
    starts = np.array([0.0, -0.0, 1.0, -1.0, 1e-3, -2.5, 65000 if dtype == np.float16 else 1e30], dtype)
    for s in starts:
        for direction in (np.inf, -np.inf):
            x = s
            for k in range(1, 40):
                with np.errstate(over="ignore"):
                    x = np.nextafter(x, dtype(direction))
                if not np.isfinite(x):
                    break  # walked off the largest finite value
                got = int(verify.ulp_distance(np.array([s], dtype), np.array([x], dtype))[0])
                assert got == k, (s, direction, k)


def test_ulp_signed_zero_and_crossing_zero():
    a = np.array([0.0, -0.0, np.nextafter(np.float32(0), np.float32(1))], np.float32)
    b = np.array([-0.0, 0.0, np.nextafter(np.float32(0), np.float32(-1))], np.float32)
    assert verify.ulp_distance(a, b).tolist() == [0, 0, 2]


# --- compare ------------------------------------------------------------------------


def test_compare_nan_same_places_is_equal_nan_elsewhere_fails():
    a = np.array([1.0, np.nan, np.inf, -np.inf], np.float32)
    (row,) = verify.compare({"y": a}, {"y": a.copy()})
    assert row.passed and row.max_abs == 0 and row.max_ulp == 0
    b = a.copy()
    b[0] = np.nan
    (row,) = verify.compare({"y": a}, {"y": b})
    assert not row.passed and row.nonfinite_mismatched == 1 and row.mismatched == 1
    b = a.copy()
    b[2] = -np.inf
    (row,) = verify.compare({"y": a}, {"y": b})
    assert not row.passed and row.nonfinite_mismatched == 1


def test_compare_default_tolerances_follow_contract_per_dtype():
    for name, tol in contract.PARITY_TOLERANCE.items():
        dt = BF16 if name == "bfloat16" else np.dtype(name)
        ref = np.array([1.0, 2.0, 0.0], dt)
        (row,) = verify.compare({"y": ref}, {"y": ref})
        assert (row.rtol, row.atol, row.dtype) == (tol["rtol"], tol["atol"], name)


def test_compare_tolerance_boundary_and_override():
    ref = np.array([1.0, 0.0], np.float64)
    tol = contract.PARITY_TOLERANCE["float64"]
    inside = ref + np.array([0.9 * (tol["atol"] + tol["rtol"]), 0.9 * tol["atol"]])
    outside = ref + np.array([3 * (tol["atol"] + tol["rtol"]), 0.0])
    assert verify.compare({"y": ref}, {"y": inside})[0].passed
    row = verify.compare({"y": ref}, {"y": outside})[0]
    assert not row.passed and row.mismatched == 1
    assert math.isclose(row.max_abs, 3 * (tol["atol"] + tol["rtol"]), rel_tol=1e-6)
    assert verify.compare({"y": ref}, {"y": outside}, {"float64": {"rtol": 1e-3}})[0].passed


def test_compare_missing_extra_shape_dtype_int():
    a = np.zeros((2, 3), np.float32)
    rows = verify.compare({"y": a, "z": a}, {"y": a, "w": a})
    by = {r.name: r for r in rows}
    assert by["y"].passed
    assert not by["z"].passed and "missing" in by["z"].message
    assert not by["w"].passed and "only in the fused" in by["w"].message
    assert "shape" in verify.compare({"y": a}, {"y": a.reshape(3, 2)})[0].message
    assert "dtype" in verify.compare({"y": a}, {"y": a.astype(np.float16)})[0].message
    i = np.array([1, 2, 3], np.int64)
    assert verify.compare({"i": i}, {"i": i})[0].passed
    row = verify.compare({"i": i}, {"i": i + np.array([0, 0, 1])})[0]
    assert not row.passed and row.max_abs == 1 and row.max_ulp is None


# --- inputs -------------------------------------------------------------------------------


def _ids_model():
    ids = helper.make_tensor_value_info("input_ids", T.INT64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", T.INT64, ["batch", "seq"])
    flag = helper.make_tensor_value_info("flag", T.BOOL, [3])
    y = helper.make_tensor_value_info("y", T.FLOAT, ["batch", "seq", 4])
    table = nh.from_array(np.arange(37 * 4, dtype=np.float32).reshape(37, 4), "emb")
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids32"], to=T.INT32), helper.make_node("Gather", ["emb", "ids32"], ["y"])]
    g = helper.make_graph(nodes, "g", [ids, mask, flag], [y], [table])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 10
    return m


def test_make_inputs_seeded_shapes_and_ranges():
    m = _ids_model()
    f1 = verify.make_inputs(m, seed=3, overrides={"seq": 50}, dim_default=6)
    f2 = verify.make_inputs(m, seed=3, overrides={"seq": 50}, dim_default=6)
    assert all(np.array_equal(f1[k], f2[k]) for k in f1)
    assert f1["input_ids"].shape == (6, 50) and f1["input_ids"].dtype == np.int64
    assert f1["input_ids"].min() >= 0 and f1["input_ids"].max() < 37  # table size seen through the Cast
    assert f1["input_ids"].max() > 20  # and actually spread over it
    assert np.all(f1["attention_mask"] == 1)
    assert f1["flag"].dtype == bool and f1["flag"].shape == (3,)
    f3 = verify.make_inputs(m, seed=4, overrides={"seq": 50}, dim_default=6)
    assert not np.array_equal(f1["input_ids"], f3["input_ids"])
    # the feeds really run
    out = verify.run(m, f1, use_library=False)
    assert out["y"].shape == (6, 50, 4)


def test_make_inputs_errors():
    m = _ids_model()
    with pytest.raises(InputError, match="named dims: batch, seq"):
        verify.make_inputs(m, overrides={"sequence": 3})
    bad = gelu_model()
    bad.graph.input[0].type.tensor_type.ClearField("shape")
    with pytest.raises(InputError, match="declares no shape"):
        verify.make_inputs(bad)


def test_make_inputs_float_dtypes():
    for dt, np_dt in ((T.FLOAT, np.float32), (T.FLOAT16, np.float16), (T.BFLOAT16, BF16)):
        f = verify.make_inputs(gelu_model(dtype=dt), dim_default=3)
        assert f["x"].dtype == np_dt and f["x"].shape == (3, 8)


def test_load_npz_validation(tmp_path):
    m = gelu_model()
    good = tmp_path / "good.npz"
    np.savez(good, x=np.ones((5, 8), np.float32))
    assert verify.load_npz(good, m)["x"].shape == (5, 8)
    cases = {
        "missing": ({"z": np.ones((5, 8), np.float32)}, "missing input"),
        "extra": ({"x": np.ones((5, 8), np.float32), "xx": np.ones(1)}, "'xx' is not an input"),
        "dtype": ({"x": np.ones((5, 8), np.float64)}, "is float64, the model declares float32"),
        "rank": ({"x": np.ones((5, 8, 1), np.float32)}, "rank 3"),
        "fixed": ({"x": np.ones((5, 7), np.float32)}, r"declares \[batch, 8\]"),
    }
    for name, (arrays, msg) in cases.items():
        p = tmp_path / f"{name}.npz"
        np.savez(p, **arrays)
        with pytest.raises(InputError, match=msg):
            verify.load_npz(p, m)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip at all")
    with pytest.raises(InputError, match="cannot read it as .npz"):
        verify.load_npz(junk, m)
    with pytest.raises(InputError, match="no such file"):
        verify.load_npz(tmp_path / "absent.npz", m)
    np.save(tmp_path / "one.npy", np.ones((5, 8), np.float32))
    with pytest.raises(InputError, match="single .npy array"):
        verify.load_npz(tmp_path / "one.npy", m)
    with pytest.raises(InputError, match="does not exist"):
        verify.save_npz({"x": np.ones(1)}, tmp_path / "no" / "dir.npz")


def test_load_npz_named_dim_consistency(tmp_path):
    m = _ids_model()
    p = tmp_path / "in.npz"
    np.savez(p, input_ids=np.zeros((2, 5), np.int64), attention_mask=np.ones((2, 6), np.int64), flag=np.ones(3, bool))
    with pytest.raises(InputError, match="dim 'seq' is 5"):
        verify.load_npz(p, m)


def test_npz_bfloat16_round_trip(tmp_path):
    m = gelu_model(dtype=T.BFLOAT16)
    feeds = verify.make_inputs(m, dim_default=2)
    p = tmp_path / "bf.npz"
    verify.save_npz(feeds, p)
    back = verify.load_npz(p, m)
    assert back["x"].dtype == BF16 and np.array_equal(back["x"].view(np.uint16), feeds["x"].view(np.uint16))
    np.savez(tmp_path / "bf2.npz", x=feeds["x"])  # ml_dtypes array as numpy saves it ('V2')
    assert verify.load_npz(tmp_path / "bf2.npz", m)["x"].dtype == BF16


# --- check on real ORT sessions ------------------------------------------------------


@pytest.mark.parametrize("opt", ["disable", "all"])
def test_check_erf_vs_onnx_gelu_passes(tmp_path, opt):
    rep = verify.check(save(gelu_model("erf"), tmp_path / "o.onnx"), save(gelu_model("gelu20"), tmp_path / "f.onnx"),
                       dims={"batch": 16}, use_library=False, opt_level=opt)
    assert rep.ok, rep.to_dict()
    (row,) = rep.outputs
    assert row.passed and row.shape == [16, 8] and row.max_abs <= 1e-6
    assert rep.inputs == [{"name": "x", "dtype": "float32", "shape": [16, 8], "source": "random"}]


def test_check_wrong_constant_fails_with_independent_error(tmp_path):
    o, w = save(gelu_model("erf"), tmp_path / "o.onnx"), save(gelu_model("wrong"), tmp_path / "w.onnx")
    rep = verify.check(o, w, seed=7, dims={"batch": 4}, use_library=False, opt_level="disable")
    assert not rep.ok
    (row,) = rep.outputs
    x = verify.make_inputs(gelu_model(), seed=7, overrides={"batch": 4})["x"].astype(np.float64)
    wrong64 = 0.5 * x * (1 + erf(x / 2))
    want = np.abs(gelu64(x) - wrong64).max()
    assert row.mismatched > 0 and math.isclose(row.max_abs, want, rel_tol=1e-4)


def test_check_bfloat16_outputs(tmp_path):
    o = save(gelu_model("erf", T.BFLOAT16), tmp_path / "o.onnx")
    f = save(gelu_model("gelu20", T.BFLOAT16), tmp_path / "f.onnx")
    w = save(gelu_model("wrong", T.BFLOAT16), tmp_path / "w.onnx")
    rep = verify.check(o, f, dims={"batch": 64}, use_library=False)
    assert rep.ok and rep.outputs[0].dtype == "bfloat16"
    assert rep.outputs[0].max_ulp <= 1  # both compute in fp32 and round once
    # Outputs really are the GELU of the inputs (float64 reference, one bf16 rounding).
    feeds = verify.make_inputs(gelu_model(dtype=T.BFLOAT16), overrides={"batch": 64})
    y = verify.run(o, feeds, use_library=False)["y"]
    ref = gelu64(feeds["x"].astype(np.float64)).astype(np.float32).astype(BF16)
    assert verify.ulp_distance(y, ref).max() <= 1
    assert not verify.check(o, w, dims={"batch": 64}, use_library=False).ok


def test_check_and_bench_warn_when_our_kernels_will_not_run(tmp_path, monkeypatch, lib):
    # A fused model passes through its model-local functions without the
    # library: the report must say the kernels were not what it proved.
    import gelu_onnx
    from gelu_onnx.verify import bench

    o = save(gelu_model("erf"), tmp_path / "o.onnx")
    f = save(gelu_onnx.fuse(gelu_model("erf"), target="custom"), tmp_path / "f.onnx")
    assert verify.check(o, f, dims={"batch": 4}).warnings == []  # library found: our kernels ran
    monkeypatch.setenv("GELU_ONNX_ORT_LIBRARY", str(tmp_path / "missing.so"))
    rep = verify.check(o, f, dims={"batch": 4})
    assert rep.ok and not rep.library
    assert len(rep.warnings) == 1 and "custom-op library is not available" in rep.warnings[0]
    assert verify.check(o, f, dims={"batch": 4}, use_library=False).warnings == []  # asked for: no surprise
    b = bench.bench(o, f, warmup=1, repeats=2, opt_levels=["all"], dims={"batch": 4})
    assert b.warnings == rep.warnings and all(r.parity_ok for r in b.results)


def test_check_float16(tmp_path):
    o = save(gelu_model("erf", T.FLOAT16), tmp_path / "o.onnx")
    f = save(gelu_model("gelu20", T.FLOAT16), tmp_path / "f.onnx")
    rep = verify.check(o, f, use_library=False)
    assert rep.ok and rep.outputs[0].dtype == "float16"


def test_check_npz_inputs_are_used(tmp_path):
    o, f = save(gelu_model("erf"), tmp_path / "o.onnx"), save(gelu_model("gelu20"), tmp_path / "f.onnx")
    p = tmp_path / "in.npz"
    np.savez(p, x=np.full((3, 8), 2.0, np.float32))
    rep = verify.check(o, f, inputs=str(p), use_library=False)
    assert rep.ok and rep.seed is None and rep.inputs[0]["shape"] == [3, 8] and rep.inputs[0]["source"].startswith("npz:")


def test_check_ir14_follows_the_installed_runtime(tmp_path):
    o = save(gelu_model("erf"), tmp_path / "o.onnx")
    f = save(gelu_model("gelu20", ir=14), tmp_path / "f.onnx")
    if ortlib.max_ir_version() >= 14:
        assert verify.check(o, f, use_library=False).ok
    else:
        with pytest.raises(UnsupportedError, match=f"IR version 14; the installed onnxruntime .* loads IR <= "
                                                   f"{ortlib.max_ir_version()}"):
            verify.check(o, f, use_library=False)


def test_max_ir_version_is_what_the_runtime_says():
    """The probe against the runtime's own words: its refusal of an IR far
    too new names its limit ("max supported IR version: N")."""
    import re

    import onnxruntime as ort

    m = gelu_model("erf", ir=99)
    with pytest.raises(Exception) as e:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    said = re.search(r"max supported IR version: (\d+)", str(e.value))
    assert said, str(e.value)
    assert ortlib.max_ir_version() == int(said.group(1))
    assert ortlib.loads_ir(ortlib.max_ir_version()) and not ortlib.loads_ir(ortlib.max_ir_version() + 1)


def test_the_ir_limit_is_asked_once_per_installed_runtime(tmp_path):
    """max_ir_version asks the runtime the first time and keeps its answer
    on disk under the runtime's version, install path and library file: the
    next process answers without importing onnxruntime; an answer kept for
    another runtime is not used; GELU_ONNX_CACHE=off keeps nothing."""
    import json
    import subprocess
    import sys

    probe = ("import sys; from gelu_onnx import ortlib; "
             "print(ortlib.max_ir_version(), 'onnxruntime' in sys.modules)")

    def run(cache, **more):
        env = {**os.environ, **more}
        env.pop("GELU_ONNX_CACHE", None)
        if cache is not None:
            env["GELU_ONNX_CACHE"] = str(cache)
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
        limit, imported = out.stdout.split()
        return int(limit), imported == "True"

    limit = ortlib.max_ir_version()
    assert run(tmp_path / "c") == (limit, True)  # asked: onnxruntime imported
    kept = json.loads((tmp_path / "c" / "ort-max-ir.json").read_text())
    (key, value), = kept.items()
    assert value == limit and key.startswith(ort_version() + "|")
    assert run(tmp_path / "c") == (limit, False)  # answered from the file
    (tmp_path / "c" / "ort-max-ir.json").write_text(json.dumps({"0.0.1|elsewhere|1|1": 3}))
    assert run(tmp_path / "c") == (limit, True)  # another runtime's answer: asked again
    # the default place ($XDG_CACHE_HOME/gelu-onnx), and GELU_ONNX_CACHE=off never reading it
    assert run(None, XDG_CACHE_HOME=str(tmp_path / "x")) == (limit, True)
    assert (tmp_path / "x" / "gelu-onnx" / "ort-max-ir.json").is_file()
    assert run(None, XDG_CACHE_HOME=str(tmp_path / "x")) == (limit, False)
    assert run("off", XDG_CACHE_HOME=str(tmp_path / "x")) == (limit, True)


def ort_version() -> str:
    import onnxruntime as ort

    return ort.__version__


def test_check_fused_interface_change_fails(tmp_path):
    o = gelu_model("erf")
    f = gelu_model("gelu20")
    f.graph.output[0].name = "y2"
    f.graph.node[-1].output[0] = "y2"
    rep = verify.check(o, f, use_library=False)
    assert not rep.ok
    assert {r.name: r.passed for r in rep.outputs} == {"y": False, "y2": False}


def test_json_safe_non_finite():
    assert json_safe({"a": [float("inf"), float("nan"), 1.0]}) == {"a": ["inf", "nan", 1.0]}
