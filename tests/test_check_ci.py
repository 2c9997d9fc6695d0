"""`check` and `bench` for CI (issue 32, points 4-5), on real ONNX Runtime runs:
the lean lifecycle gives the same verdict as the whole model, assert_parity and
the README's pytest file, Polygraphy's spellings, --custom-op-library with a
second real library (onnxruntime-extensions), --localize all, progress and
-q/-v, bench's time budget."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import gelu_onnx
from gelu_onnx import files
from gelu_onnx.testing import assert_parity
from gelu_onnx.verify import bench, kernel_coverage, parity_check, reference, runners

README = Path(__file__).resolve().parents[1] / "README.md"


def ffn(n_in: int = 8, n_out: int = 16, seed: int = 0, extra=()) -> onnx.ModelProto:
    """x @ W1 + b1 -> erf GELU -> @ W2 + b2 -> y (random non-zero biases); ``extra``: more nodes after y."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.normal(0, n_in ** -0.5, (n_in, n_out)).astype(np.float32), "W1"),
             numpy_helper.from_array(rng.normal(0, 0.1, n_out).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.normal(0, n_out ** -0.5, (n_out, n_in)).astype(np.float32), "W2"),
             numpy_helper.from_array(rng.normal(0, 0.1, n_in).astype(np.float32), "b2")]
    inits += [helper.make_tensor(n, T.FLOAT, [], [v]) for n, v in (("r2", 2**0.5), ("one", 1.0), ("half", 0.5))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h"]),
             helper.make_node("Div", ["h", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["h", "p"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["g"]), helper.make_node("MatMul", ["g", "W2"], ["o0"]),
             helper.make_node("Add", ["o0", "b2"], ["y"])] + list(extra)
    outs = [helper.make_tensor_value_info("y", T.FLOAT, ["batch", n_in])]
    opsets = [helper.make_opsetid("", 17)]
    if extra:
        outs = [helper.make_tensor_value_info(o, T.FLOAT, None) for n in extra for o in n.output]
        opsets.append(helper.make_opsetid("ai.onnx.contrib", 1))
    g = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", T.FLOAT, ["batch", n_in])], outs, inits)
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    return m


def pair(tmp_path, model=None, fused=None):
    model = model or ffn()
    orig, out = tmp_path / "model.onnx", tmp_path / "fused.onnx"
    onnx.save(model, orig)
    onnx.save(fused if fused is not None else gelu_onnx.fuse(model), out)
    return orig, out


def wrong_weight(model: onnx.ModelProto) -> onnx.ModelProto:
    """The fused model with W2 scaled by 1.01: a fault that is no GELU's."""
    m = gelu_onnx.fuse(model)
    for i, t in enumerate(m.graph.initializer):
        if t.name == "W2":
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 1.01, "W2"))
    return m


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def rows(rep):
    return [(r.name, r.passed, r.max_abs, r.fused_mean_dev, r.original_mean_dev) for r in rep.outputs]


# --- point 4: the lean lifecycle changes memory, not results ---------------------------


def half(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` in float16: its float initializers and interface."""
    from onnx import numpy_helper as nh

    out = onnx.ModelProto()
    out.CopyFrom(m)
    for i, t in enumerate(out.graph.initializer):
        out.graph.initializer[i].CopyFrom(nh.from_array(nh.to_array(t).astype(np.float16), t.name))
    for vi in list(out.graph.input) + list(out.graph.output):
        vi.type.tensor_type.elem_type = T.FLOAT16
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_reference_with_widening_casts_computes_what_the_retyped_copy_does(dtype):
    m = ffn(64, 128) if dtype == "float32" else half(ffn(64, 128))  # W1, W2 >= 16 KiB: widened by Casts
    to, wide = (T.DOUBLE, np.float64) if dtype == "float32" else (T.FLOAT, np.float32)
    sk32 = reference.retyped(reference.skeleton(m), T.FLOAT)  # the islands ONNX Runtime needs, as check finds them
    sk_to = sk32 if to == T.FLOAT else reference.retyped(reference.skeleton(m), to)
    cands = (T.FLOAT,) if to == T.DOUBLE else (T.FLOAT16,)
    plan = kernel_coverage.plan(sk_to, sk32, to, cands,
                                lambda x: runners.runner(x, "cpu", False, "disable", label="probe"))
    assert plan.labels(m) == (["Erf"] if to == T.DOUBLE else [])
    whole = reference.retyped(m, to, None, plan)
    lean = reference.retyped_lean(m, to, None, plan)
    assert sum(n.op_type == "Cast" for n in lean.graph.node) == sum(n.op_type == "Cast" for n in whole.graph.node) + 2
    feeds = {"x": np.random.default_rng(1).standard_normal((5, 64)).astype(wide)}
    a = runners.run(whole, feeds, use_library=False, opt_level="disable")
    b = runners.run(lean, feeds, use_library=False, opt_level="disable")
    assert a["y"].dtype == wide and np.array_equal(a["y"], b["y"])
    assert m.graph.initializer[0].data_type == (T.FLOAT if dtype == "float32" else T.FLOAT16)  # untouched


def test_a_big_file_is_checked_as_a_skeleton_with_the_same_verdict(tmp_path, monkeypatch):
    orig, fused = pair(tmp_path, ffn(256, 512))  # W1, W2: 512 KiB, stripped by splice
    with_skeleton = parity_check.check(orig, fused, dims={"batch": 3})
    monkeypatch.setattr(files, "SPLICE_MIN_BYTES", 0)
    lean = runners.load_lean(orig)
    assert str(orig.resolve()) in lean.external_files and lean.model.ByteSize() < 100_000
    monkeypatch.setenv("GELU_ONNX_SPLICE", "0")
    whole = parity_check.check(orig, fused, dims={"batch": 3})
    assert with_skeleton.ok and rows(with_skeleton) == rows(whole)
    assert with_skeleton.precise_reference == whole.precise_reference


def test_a_fault_still_fails_through_the_skeleton(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "SPLICE_MIN_BYTES", 0)
    model = ffn(256, 512)
    orig, fused = pair(tmp_path, model, wrong_weight(model))
    rep = parity_check.check(orig, fused, dims={"batch": 3})
    assert not rep.ok and rep.outputs[0].verdict == "reference"


# --- point 5: CI ergonomics ------------------------------------------------------------


def test_the_readme_pytest_file_runs_as_written(tmp_path):
    text = README.read_text()
    section = text[text.index("## Parity in CI (pytest)"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    (tmp_path / "test_parity.py").write_text(code)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_parity.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]


def test_assert_parity_raises_with_the_report_table(tmp_path):
    model = ffn()
    orig, fused = pair(tmp_path, model, wrong_weight(model))
    with pytest.raises(AssertionError) as e:
        assert_parity(orig, fused, dims={"batch": 4})
    msg = str(e.value)
    assert re.search(r"^output\s+dtype\s+shape\s+max_abs", msg, re.M) and "\nFAIL: 0 of 1 outputs" in msg
    assert max(len(line) for line in msg.splitlines() if not line.startswith(("check ", "note:"))) <= 100
    good_orig, good_fused = pair(tmp_path / "ok" if (tmp_path / "ok").mkdir() is None else tmp_path)
    assert assert_parity(good_orig, good_fused).ok


def test_polygraphy_spellings(tmp_path):
    model = ffn()
    orig, fused = pair(tmp_path, model, wrong_weight(model))
    r = cli("check", orig, fused, "--input-shapes", "x:[3,8]", "--save-inputs", tmp_path / "in.json", "--json")
    assert r.returncode == 1, r.stderr  # the wrong weight fails the default verdict
    assert json.loads(r.stdout)["inputs"][0]["shape"] == [3, 8]
    # Polygraphy's per-output tolerances, on the inputs saved in Polygraphy's format
    r = cli("check", orig, fused, "--load-inputs", tmp_path / "in.json", "--rtol", "y:0.1", "--atol", "y:0.1", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)["outputs"][0]
    assert (out["rtol"], out["atol"], out["verdict"]) == (0.1, 0.1, "fixed")
    r = cli("check", orig, fused, "--input-shapes", "x:[3,9]")
    assert r.returncode == 2 and "fixed at 8" in r.stderr


def test_custom_op_library_runs_a_model_that_needs_a_second_library(tmp_path, monkeypatch):
    # onnxruntime_extensions sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python in os.environ on import:
    # monkeypatch restores it, else every later test's subprocess parses with pure-Python protobuf
    monkeypatch.setenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", ""))
    monkeypatch.delenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION")
    ext = pytest.importorskip("onnxruntime_extensions")
    model = ffn(extra=[helper.make_node("NegPos", ["y"], ["neg", "pos"], domain="ai.onnx.contrib")])
    orig, fused = pair(tmp_path, model)
    r = cli("check", orig, fused)
    assert r.returncode in (2, 3) and "NegPos" in r.stderr and "Traceback" not in r.stderr
    r = cli("check", orig, fused, "--custom-op-library", ext.get_library_path(), "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert [o["name"] for o in rep["outputs"]] == ["neg", "pos"] and rep["custom_op_libraries"]
    r = cli("bench", orig, fused, "--custom-op-library", ext.get_library_path(), "--repeats", "3", "--warmup", "0",
            "--opt-levels", "all", "--json")
    assert r.returncode == 0, r.stderr
    r = cli("check", orig, fused, "--custom-op-library", tmp_path / "missing.so")
    assert r.returncode == 2 and "missing.so" in r.stderr


def test_localize_all_finds_a_fault_that_is_no_gelu(tmp_path):
    model = ffn()
    orig, fused = pair(tmp_path, model, wrong_weight(model))
    gelus = parity_check.check(orig, fused, localize_gelus=True)
    assert gelus.first_failure is None  # the GELU comes before the fault
    every = parity_check.check(orig, fused, localize_gelus="all")
    assert every.first_failure == "o0", [(f["tensor"], f["pass"]) for f in every.fusions]
    tensors = [f["tensor"] for f in every.fusions]
    assert tensors[:2] == ["h0", "g"] and "d" not in tensors  # the bias + GELU is one node of the fused graph
    r = cli("check", orig, fused, "--localize", "all")
    assert r.returncode == 1 and "first failing tensor: o0 (MatMul" in r.stdout
    r = cli("check", "--localize", orig, fused)  # a bare --localize before the models, as before it took a value
    assert r.returncode == 1 and r.stdout.splitlines()[-1].endswith("1 of 1 GELUs"), r.stdout + r.stderr


def test_progress_lines_with_v_and_nothing_with_q(tmp_path):
    orig, fused = pair(tmp_path)
    r = cli("check", orig, fused, "-v")
    assert r.returncode == 0
    steps = [line for line in r.stderr.splitlines() if line.startswith("gelu-onnx check: ")]
    assert [s.split(":")[1].strip() for s in steps] == ["load the models", "run the original on cpu",
                                                         "run the precise reference", "run the fused model on cpu"]
    r = cli("check", orig, fused, "-q")
    assert r.returncode == 0 and r.stderr == ""
    width = max(len(line) for line in r.stdout.splitlines() if not line.startswith(("check ", "note:")))
    assert width <= 100


def test_a_terminal_gets_a_progress_line(tmp_path):
    """stderr a tty (a pty of 100 columns): tqdm's line names the running step; stdout is the report alone."""
    import fcntl
    import os
    import pty
    import struct
    import termios
    import threading

    orig, fused = pair(tmp_path)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    got = []

    def read():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the other end closed
                return
            if not chunk:
                return
            got.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    p = subprocess.run([sys.executable, "-m", "gelu_onnx", "check", orig, fused], stdout=subprocess.PIPE,
                       stderr=slave, text=True, timeout=300)
    os.close(slave)
    reader.join(10)
    os.close(master)
    err = b"".join(got).decode(errors="replace")
    assert p.returncode == 0 and p.stdout.startswith("check ")
    assert "check: run the precise reference" in err and "check: run the fused model on cpu" in err


def test_bench_stops_at_its_time_budget(tmp_path):
    orig, fused = pair(tmp_path)
    rep = bench.bench(orig, fused, opt_levels=["all"], warmup=1000, repeats=100_000, max_seconds=1.0, threads=1)
    t = rep.results[0]
    assert bench.MIN_TIMED <= t.repeats < 100_000 and rep.max_seconds == 1.0
