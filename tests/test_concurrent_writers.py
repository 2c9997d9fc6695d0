"""Concurrent writers into one output folder (docs/safety.md, "Concurrent
writers"): 8 processes fuse at the same instant, round after round, into a
fresh shared folder. Several inputs keep *different* weights under the same
data-file name (``w.bin``, ``d/w.bin``), one keeps the same bytes under it,
two embedded models are split into ``<output>.data`` and in odd rounds both
write the same output name. Every output that a writer reported as written
must load in ONNX Runtime and compute what its own input computes (never
another model's weights); a writer may be refused (exit 2), never fail
otherwise (exit 4). Round count: GELU_ONNX_CONCURRENT_ROUNDS (default 50)."""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import traceback

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

WRITERS = 8
ROUNDS = int(os.environ.get("GELU_ONNX_CONCURRENT_ROUNDS", "50"))
SPLIT_LIMIT = 3000  # GELU_ONNX_TEST_MAX_PROTO_BYTES of the writers whose model is split


def _model(seed: int, hidden: int) -> onnx.ModelProto:
    """MatMul + bias + erf GELU, random non-zero weights and bias."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((hidden, hidden)).astype(np.float32)
    b = (rng.standard_normal(hidden) + 0.5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Div", ["hb", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["hb", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array(1.4142135, np.float32), "s2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    g = helper.make_graph(nodes, f"g{seed}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, hidden])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _inputs(root: str) -> list[str]:
    """Eight input models: 0-2 different weights all in w.bin, 3 the bytes of
    0 in w.bin, 4-5 different weights in d/w.bin, 6-7 embedded (split when
    written)."""
    paths = []
    for k in range(WRITERS):
        folder = os.path.join(root, f"in{k}")
        os.makedirs(os.path.join(folder, "d"))
        path = os.path.join(folder, "m.onnx")
        seed = 0 if k == 3 else k
        if k < 6:
            onnx.save_model(_model(seed, 4), path, save_as_external_data=True, all_tensors_to_one_file=True,
                            location="w.bin" if k < 4 else "d/w.bin", size_threshold=0)
        else:
            onnx.save_model(_model(seed, 24), path)  # W: 2304 bytes, externalized by the split
        paths.append(path)
    return paths


def _output(root: str, rnd: int, k: int) -> str:
    name = "s.onnx" if k >= 6 and rnd % 2 else f"o{k}.onnx"
    return os.path.join(root, f"out{rnd}", name)


def _writer(k, paths, root, rounds, barrier, results):
    """One writer process: the library's fuse_file, as the CLI calls it."""
    if k >= 6:
        os.environ["GELU_ONNX_TEST_MAX_PROTO_BYTES"] = str(SPLIT_LIMIT)
    from gelu_onnx.errors import InputError
    from gelu_onnx.files import fuse_file

    got = []
    for rnd in range(rounds):
        barrier.wait()
        try:
            fuse_file(paths[k], _output(root, rnd, k), "custom" if rnd % 3 else "ort")
            got.append((rnd, "ok", ""))
        except InputError as e:
            got.append((rnd, "refused", e.message))
        except BaseException:  # noqa: BLE001 - exit 4 (or worse): reported by the test
            got.append((rnd, "bug", traceback.format_exc()))
    results.put((k, got))


def _run(path: str, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_concurrent_writers_never_read_another_models_data(tmp_path):
    root = str(tmp_path)
    paths = _inputs(root)
    for rnd in range(ROUNDS):
        os.mkdir(os.path.join(root, f"out{rnd}"))
    ctx = mp.get_context("spawn")  # a clean interpreter per writer, as separate CLI runs are
    barrier, results = ctx.Barrier(WRITERS), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(k, paths, root, ROUNDS, barrier, results)) for k in range(WRITERS)]
    for p in procs:
        p.start()
    outcome = dict(results.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    bugs = [(k, r, msg) for k, got in outcome.items() for r, what, msg in got if what == "bug"]
    assert not bugs, f"{len(bugs)} writes failed with an internal error; first:\n{bugs[0]}"

    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    x24 = np.random.default_rng(8).standard_normal((2, 24)).astype(np.float32)
    want = [_run(p, x if k < 6 else x24) for k, p in enumerate(paths)]
    written = refused = 0
    for rnd in range(ROUNDS):
        ok = {k for k in range(WRITERS) for r, what, _ in outcome[k] if r == rnd and what == "ok"}
        refused += WRITERS - len(ok)
        for k in sorted(ok):
            out = _output(root, rnd, k)
            # two writers of s.onnx: the file is the last one's, whole
            owners = [j for j in ok if _output(root, rnd, j) == out]
            got = _run(out, x if k < 6 else x24)
            assert any(np.allclose(got, want[j], rtol=1e-5, atol=1e-6) for j in owners), (
                f"round {rnd}: {os.path.basename(out)} does not compute what its input computes: "
                f"it reads another model's data ({sorted(os.listdir(os.path.dirname(out)))})")
            written += 1
        leftovers = [f for f in os.listdir(os.path.join(root, f"out{rnd}")) if f.endswith(".tmp")
                     or ".gelu-onnx-prev" in f]
        assert not leftovers, f"round {rnd}: {leftovers}"
    # the races were real: different weights under one name refuse someone in every round
    assert written >= ROUNDS * 4 and refused >= ROUNDS, (written, refused)


def test_two_cli_runs_into_one_folder(tmp_path):
    """The report's reproduction, through the CLI: two models keeping
    different weights in w.bin, fused at once into one folder: one output
    is written (and reads its own weights), the other run is refused with
    one line, exit 2."""
    root = str(tmp_path)
    paths = _inputs(root)[:2]
    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    for t in range(4):
        out = tmp_path / f"out{t}"
        out.mkdir()
        procs = [subprocess.Popen([sys.executable, "-m", "gelu_onnx", "fuse", p, "-o", str(out / f"{k}.onnx")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for k, p in enumerate(paths)]
        res = [(p.wait(120), p.stderr.read()) for p in procs]
        assert sorted(rc for rc, _ in res) == [0, 2], res
        for k, (rc, err) in enumerate(res):
            if rc == 0:
                assert err == ""
                assert np.allclose(_run(str(out / f"{k}.onnx"), x), _run(paths[k], x), rtol=1e-5, atol=1e-6)
            else:
                assert err.count("\n") == 1 and "w.bin" in err, err
        shutil.rmtree(out)
