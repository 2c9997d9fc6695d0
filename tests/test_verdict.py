"""check's reference-relative verdict, piece by piece (docs/verdict.md): the
reference copy of the original (float64 / float32 retyping, float32 islands,
the fallback), the rule's bounds, TF32's provider options and note, the
fixed-bound mode, and an original that fails on generated inputs."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh
from scipy.special import erf

from helpers.model_helpers import gelu_model, save

import gelu_onnx
from gelu_onnx import contract, verify
from gelu_onnx.verify import parity_check, reference, runners, verdict


def _gelu64(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _cpu(m):
    return runners.runner(m, "cpu", False, "disable", label="reference")


def _ffn(dtype=T.FLOAT16, seed=0) -> onnx.ModelProto:
    """x @ W + b -> erf GELU spelled with a value_float Constant (float32
    math between Casts for fp16, as mixed-precision exports do)."""
    rng = np.random.default_rng(seed)
    npdt = np.float16 if dtype == T.FLOAT16 else np.float32
    w = (rng.standard_normal((8, 8)) * 0.5).astype(npdt)
    b = (rng.standard_normal(8) * 0.5).astype(npdt)
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
             h.make_node("Cast", ["a"], ["af"], to=T.FLOAT),
             h.make_node("Constant", [], ["r2"], value_float=math.sqrt(2)),
             h.make_node("Div", ["af", "r2"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
             h.make_node("Constant", [], ["one"], value=nh.from_array(np.array(1, np.float32))),
             h.make_node("Add", ["e", "one"], ["p"]), h.make_node("Mul", ["af", "p"], ["q"]),
             h.make_node("Constant", [], ["half"], value_floats=[0.5]),
             h.make_node("Mul", ["q", "half"], ["yf"]), h.make_node("Cast", ["yf"], ["y"], to=dtype)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", dtype, ["n", 8])],
                     [h.make_tensor_value_info("y", dtype, ["n", 8])],
                     [nh.from_array(w, "W"), nh.from_array(b, "b")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("dtype,want_dtype,islands", [(T.FLOAT16, "float32", []), (T.FLOAT, "float64", ["Erf"])])
def test_reference_matches_numpy(dtype, want_dtype, islands):
    """fp16: a float32 copy; float32: a float64 copy whose Erf (no float64
    kernel in the CPU EP) runs in float32 between Casts."""
    m = _ffn(dtype)
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float16 if dtype == T.FLOAT16 else np.float32)
    ref = reference.build(runners.load(m), _cpu, {"x": x})
    assert ref.dtype == want_dtype and ref.islands == islands, ref.label
    isl = " (Erf in float32)" if islands else ""
    assert ref.label == f"the original in {want_dtype}{isl} (CPU, optimizations off)"
    y = ref.run({"x": x})["y"]
    assert y.dtype == np.dtype(want_dtype)
    w, b = (nh.to_array(t).astype(np.float64) for t in m.graph.initializer)
    want = _gelu64(x.astype(np.float64) @ w + b)
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)  # float32 erf (and float32 math for fp16)
    y0 = runners.runner(m, "cpu", False, "all").run({"x": x})["y"].astype(np.float64)
    assert np.abs(y0 - want).max() > 2 * np.abs(y - want).max()  # the original is further
    assert m == _ffn(dtype)  # the input model is not modified


def test_float32_copy_and_original_fallbacks(monkeypatch):
    m = _ffn()
    x = np.ones((2, 8), np.float16)
    ref = reference.build(runners.load(m), _refuse_float32, {"x": x})
    assert ref.dtype == "float64" and ref.run({"x": x})["y"].dtype == np.float64
    assert "float32 copy of the original does not run" in ref.notes[0]
    # a Resize: its scales must stay float32, so it runs as a float32 island of the float64 copy
    nodes = [h.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 2, 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.array([1, 1, 2, 2], np.float32), "s")])
    rm = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)
    feeds = {"x": np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)}
    ref = reference.build(runners.load(rm), _cpu, feeds)
    assert ref.dtype == "float64" and ref.label == "the original in float64 (Resize in float32) (CPU, optimizations off)"
    assert ref.run(feeds)["y"].shape == (1, 1, 4, 4) and not ref.warnings
    # no copy builds (a runner that refuses float64 weights): the original itself, and a warning in full words
    ref = reference.build(runners.load(rm), _refuse_float64, feeds)
    assert ref.dtype == "original" and ref.label == "the original itself (CPU, optimizations off)"
    assert ref.run(feeds)["y"].shape == (1, 1, 4, 4) and "does not run" in ref.notes[-1]
    (w,) = ref.warnings
    assert w.startswith("the reference is the original itself, not a more precise copy of it (the float64 copy: ")
    assert "no float64 here" in w and "[ONNXRuntimeError]" not in w and w.endswith("(docs/verdict.md)")


def _refuse_float64(m):
    if any(t.data_type == T.DOUBLE for t in getattr(m, "model", m).graph.initializer):
        raise verify.runners.UnsupportedError("no float64 here")
    return _cpu(m)


def test_why_a_copy_failed_is_whole_words():
    long = "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation " + "for the node " * 60
    why = reference.why(RuntimeError(long + "\nsecond line"))
    assert why.startswith("Could not find an implementation for") and why.endswith(" (...)")
    assert len(why) <= 410 and why[:-6].endswith(("for", "the", "node")), why[-30:]


def test_external_data_stays_where_it_is(tmp_path):
    """External data: the copy reads the tensors it does not retype (here an
    int64 index table) from the original's folder (found on a dynamo
    BERT-base, whose int64 tensors live in its .data file)."""
    rng = np.random.default_rng(0)
    m = _ffn(T.FLOAT)
    m.graph.node[-1].output[0] = "y0"
    m.graph.node.append(h.make_node("Gather", ["y0", "idx"], ["y"], axis=1))
    m.graph.initializer.append(nh.from_array(rng.integers(0, 8, 600).astype(np.int64), "idx"))
    m.graph.output[0].CopyFrom(h.make_tensor_value_info("y", T.FLOAT, ["n", 600]))
    (tmp_path / "m").mkdir()
    src = tmp_path / "m" / "m.onnx"
    onnx.save(m, str(src), save_as_external_data=True, location="m.data", size_threshold=64)
    before = {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()}
    fused = tmp_path / "f.onnx"
    gelu_onnx.fuse_file(str(src), str(fused), target="custom")
    rep = verify.check(str(src), str(fused), use_library=False)
    assert rep.ok and rep.precise_reference == "the original in float64 (Erf in float32) (CPU, optimizations off)", rep.notes
    assert {p.name: p.read_bytes() for p in (tmp_path / "m").iterdir()} == before


def test_a_copy_too_large_is_not_made(monkeypatch):
    monkeypatch.setattr(contract, "REFERENCE_MAX_BYTES", 8 * 8 * 4 - 1)  # W as float32 is 256 bytes
    x = np.ones((2, 8), np.float16)
    ref = reference.build(runners.load(_ffn()), _cpu, {"x": x})
    assert ref.dtype == "original" and "would hold" in ref.notes[0] and "would hold" in ref.notes[1]


def test_no_reference_at_all_means_fixed_bounds():
    def refuse(m):
        raise verify.runners.UnsupportedError("nothing runs here")

    ref = reference.build(runners.load(_ffn()), refuse, {"x": np.ones((2, 8), np.float16)})
    assert ref.dtype == "none" and ref.runner is None and "fixed tolerances" in ref.notes[-1]


def _refuse_float32(m):
    """A runner that builds no model holding float32 weights (the float32 copy)."""
    if any(t.data_type == T.FLOAT for t in getattr(m, "model", m).graph.initializer):
        raise verify.runners.UnsupportedError("no float32 here")
    return _cpu(m)


def test_retyped_covers_constants_casts_and_subgraphs():
    then = h.make_graph([h.make_node("Constant", [], ["c"], value=nh.from_array(np.array(2, np.float16))), h.make_node("Mul", ["x", "c"], ["t"])],
                        "then", [], [h.make_tensor_value_info("t", T.FLOAT16, [3])])
    other = h.make_graph([h.make_node("ConstantOfShape", ["shp"], ["z"]), h.make_node("Cast", ["z"], ["o"], to=T.FLOAT16),
                          h.make_node("Add", ["x", "o"], ["t2"])], "else", [],
                         [h.make_tensor_value_info("t2", T.FLOAT16, [3])])
    nodes = [h.make_node("Shape", ["x"], ["shp"]), h.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT16, [3]), h.make_tensor_value_info("cond", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT16, [3])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9)
    onnx.checker.check_model(m, full_check=True)
    r64 = reference.retyped(m, T.DOUBLE)
    onnx.checker.check_model(r64, full_check=True)
    x = np.array([1.0, 2.0, 3.0], np.float16)
    for cond, want in ((True, 2 * x), (False, x)):
        out = _cpu(r64).run({"x": x.astype(np.float64), "cond": np.array(cond)})["y"]
        assert out.dtype == np.float64 and np.array_equal(out, want.astype(np.float64))


def test_rule_bounds_and_floor():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(10_000)
    noise = rng.choice([-1.0, 1.0], ref.size) * 1e-3
    v = contract.REFERENCE_VERDICT
    for scale, ok in ((1.0, True), (v["mean_factor"] * 0.95, True), (v["mean_factor"] * 1.05, False)):
        t = verdict.Tally()
        t.add(ref, ref + noise, ref + scale * noise)
        got = verdict.judge(t, "float32")
        assert got.passed is ok, (scale, got)
        assert math.isclose(got.original_mean, 1e-3) and math.isclose(got.fused_mean, scale * 1e-3)
    # one element far off: the mean barely moves, the max bound catches it
    far = ref + noise
    far[7] += 10 * v["max_factor"] * 1e-3
    t = verdict.Tally()
    t.add(ref, ref + noise, far)
    got = verdict.judge(t, "float32")
    assert not got.passed and "max |fused - reference|" in got.message and "mean" not in got.message
    assert t.beyond(got.max_bound) == 1
    # the original is exact: the floor, a few eps of the output's scale, decides
    eps, rms = verdict.EPS["float16"], float(np.sqrt(np.mean(ref**2)))
    floor = v["floor_eps"]["float16"]["mean"]
    for off, ok in ((0.5 * floor * eps * rms, True), (2 * floor * eps * rms, False)):
        t = verdict.Tally()
        t.add(ref, ref, ref + off)
        assert verdict.judge(t, "float16").passed is ok
    # non-finite elements are left to the NaN/inf count
    t = verdict.Tally()
    t.add(np.array([1.0, np.nan]), np.array([1.0, 2.0]), np.array([1.0, np.inf]))
    assert t.n == 1


def test_tf32_provider_options_and_note():
    assert runners.cuda_provider_options(False) == {"use_tf32": "0"}
    assert runners.cuda_provider_options(True) == {"use_tf32": "1"}
    assert runners.cuda_provider_options(None) == {}  # bench: ONNX Runtime's default
    assert "use_tf32=0" in parity_check.tf32_note(False) and "--tf32" in parity_check.tf32_note(False)
    assert "without TF32" in parity_check.tf32_note(True)
    # no CUDA EP here: the check stops before anything runs, whatever --tf32 says
    import onnxruntime as ort
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("a CUDA EP is installed: the GPU checks cover it")
    with pytest.raises(verify.runners.UnsupportedError, match="onnxruntime-gpu"):
        runners.ort_providers("cuda", False)


def test_fixed_bound_where_asked_and_json(tmp_path):
    o = save(gelu_model("erf", T.FLOAT16), tmp_path / "o.onnx")
    f = save(gelu_model("gelu20", T.FLOAT16), tmp_path / "f.onnx")
    rep = verify.check(o, f, use_library=False)
    (row,) = rep.outputs
    assert rep.ok and row.verdict == "reference" and row.rtol is None and row.mean_bound > 0
    assert rep.precise_reference == "the original in float32 (CPU, optimizations off)"
    fixed = verify.check(o, f, use_library=False, tolerances={"float16": {"rtol": 0.0, "atol": 0.0}})
    (row,) = fixed.outputs
    assert row.verdict == "fixed" and row.rtol == 0.0 and row.atol == 0.0
    by_name = verify.check(o, f, use_library=False, output_tolerances={"y": {"rtol": 1e-3, "atol": 1e-3}})
    assert by_name.outputs[0].verdict == "fixed"
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", "check", o, f, "--json", "--no-library"],
                       capture_output=True, text=True)
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["tf32"] is None and d["precise_reference"]
    row = d["outputs"][0]
    for k in ("verdict", "fused_mean_dev", "fused_max_dev", "original_mean_dev", "original_max_dev", "mean_bound",
              "max_bound"):
        assert row[k] is not None, k
    text = subprocess.run([sys.executable, "-m", "gelu_onnx", "check", o, f, "--no-library", "-v"],
                          capture_output=True, text=True).stdout
    assert "reference: the original in float32 (CPU, optimizations off)" in text
    assert "judged by" in text and "fused-ref mean/max" in text and "original-ref mean/max" in text
    fixed = subprocess.run([sys.executable, "-m", "gelu_onnx", "check", o, f, "--no-library", "--rtol", "1e-3",
                            "--atol", "1e-3"], capture_output=True, text=True).stdout
    assert "reference:" not in fixed and "rtol=0.001,atol=0.001" in fixed  # every dtype fixed: no reference run


def test_original_failing_on_generated_inputs_is_exit_2(tmp_path):
    """Generated ids reach the Gather through an Add the input generator does
    not follow: the original fails before anything is compared."""
    nodes = [h.make_node("Add", ["ids", "shift"], ["i2"]), h.make_node("Gather", ["table", "i2"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("ids", T.INT64, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)],
                     [nh.from_array(np.ones((10, 4), np.float32), "table"), nh.from_array(np.array(50, np.int64), "shift")])
    p = save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=9), tmp_path / "m.onnx")
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", "check", p, p], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr  # ours only: ONNX Runtime's own log is off
    line = lines[0]
    assert "the original model fails on the generated inputs" in line and "--inputs" in line, line
    # the user's own inputs: the runtime's failure is reported as it is
    np.savez(tmp_path / "in.npz", ids=np.full((2, 3), 70, np.int64))
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", "check", p, p, "--inputs", str(tmp_path / "in.npz")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "generated" not in r.stderr and "failed to run the original" in r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_golden_outputs_say_their_bound_is_fixed(tmp_path):
    """--reference-outputs: the report (text and JSON) says the bound is fixed
    and how to get the reference verdict (issue 32)."""
    o = save(gelu_model("erf", T.FLOAT), tmp_path / "o.onnx")
    f = save(gelu_model("gelu20", T.FLOAT), tmp_path / "f.onnx")
    gold, inp = tmp_path / "gold.json", tmp_path / "in.json"
    r = subprocess.run([sys.executable, "-m", "gelu_onnx", "check", o, f, "--save-outputs", gold, "--save-inputs", inp],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    args = [sys.executable, "-m", "gelu_onnx", "check", f, "--reference-outputs", gold, "--inputs", inp]
    text = subprocess.run(args, capture_output=True, text=True).stdout
    d = json.loads(subprocess.run(args + ["--json"], capture_output=True, text=True).stdout)
    (note,) = [n for n in d["notes"] if n.startswith("golden outputs are judged by a fixed bound")]
    assert "float32: rtol=1e-05, atol=1e-05" in note and "gelu-onnx check ORIGINAL.onnx FUSED.onnx" in note
    assert " ".join(f"note: {note}".split()) in " ".join(text.split())  # the text wraps at 100 columns
    assert d["outputs"][0]["verdict"] == "fixed" and d["precise_reference"] is None
    plain = json.loads(subprocess.run([sys.executable, "-m", "gelu_onnx", "check", o, f, "--json"],
                                      capture_output=True, text=True).stdout)
    assert not any(n.startswith("golden") for n in plain["notes"])


def test_islands_inside_if_branches_and_functions():
    """Nodes without types outside their graph (If branches, model-local
    function bodies): one-input ops probed by op type, Erf made an island."""
    then = h.make_graph([h.make_node("Erf", ["x"], ["t"])], "then", [], [h.make_tensor_value_info("t", T.FLOAT, [4])])
    other = h.make_graph([h.make_node("Identity", ["x"], ["e"])], "else", [],
                         [h.make_tensor_value_info("e", T.FLOAT, [4])])
    fn = h.make_function("local", "ErfTwice", ["a"], ["b"], [h.make_node("Erf", ["a"], ["m"]),
                                                            h.make_node("Erf", ["m"], ["b"])],
                         [h.make_opsetid("", 17)])
    nodes = [h.make_node("If", ["cond"], ["y0"], then_branch=then, else_branch=other),
             h.make_node("ErfTwice", ["y0"], ["y"], domain="local")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4]),
                                  h.make_tensor_value_info("cond", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("local", 1)], functions=[fn],
                     ir_version=9)
    x = np.array([-1.5, -0.25, 0.5, 2.0], np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        ref = reference.build(runners.load(m), _cpu, feeds)
        assert ref.label == "the original in float64 (Erf in float32) (CPU, optimizations off)", ref.notes
        y = ref.run(feeds)["y"]
        want = erf(erf(erf(x.astype(np.float64)) if cond else x.astype(np.float64)))
        assert y.dtype == np.float64 and np.allclose(y, want, rtol=1e-6, atol=1e-6)


def test_contrib_attention_is_an_island_with_its_int_input():
    """com.microsoft.Attention has no float64 CPU kernel: its float inputs run
    Cast to float32, its int32 mask stays as it is, its output Cast back."""
    rng = np.random.default_rng(0)
    hid, heads = 8, 2
    w = nh.from_array(rng.standard_normal((hid, 3 * hid)).astype(np.float32) * 0.3, "w")
    b = nh.from_array(rng.standard_normal(3 * hid).astype(np.float32) * 0.1, "b")
    nodes = [h.make_node("Attention", ["x", "w", "b", "mask"], ["a"], domain="com.microsoft", num_heads=heads),
             h.make_node("Tanh", ["a"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, hid]),
                                  h.make_tensor_value_info("mask", T.INT32, [1, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 3, hid])], [w, b])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)], ir_version=9)
    feeds = {"x": rng.standard_normal((1, 3, hid)).astype(np.float32), "mask": np.ones((1, 3), np.int32)}
    ref = reference.build(runners.load(m), _cpu, feeds)
    assert ref.label == "the original in float64 (com.microsoft.Attention in float32) (CPU, optimizations off)"
    y = ref.run(feeds)["y"]
    y0 = _cpu(m).run(feeds)["y"]
    assert y.dtype == np.float64 and np.allclose(y, y0, rtol=1e-5, atol=1e-6) and not ref.warnings
