"""`gelu-onnx check` as a Polygraphy user runs it: real `polygraphy run` files,
golden outputs without the original, --localize, per-output tolerances,
statistics, iterations, providers; `inspect --target`; `bench` on a bad pair.

Every run is a real subprocess of the CLI on real ONNX Runtime sessions; the
Polygraphy files are written by the real `polygraphy` tool at test time.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
import onnxruntime as ort
import pytest
from onnx import helper

from gelu_onnx import verify

from gelu_onnx.verify import feedfiles

ROOT = Path(__file__).resolve().parents[1]
POLYGRAPHY = Path(sys.executable).parent / "polygraphy"
BERT = ROOT / "models" / "bert_torchscript_op17.onnx"  # 2 erf GELUs with bias


def gelu(*args):
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("GELU_ONNX_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True,
                          env=e, timeout=300)


def ok(r, code=0):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    return r


def one_line_error(r, code, fragment):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("gelu-onnx: warning")]
    assert len(lines) == 1 and lines[0].startswith("gelu-onnx") and fragment in lines[0], r.stderr


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """BERT (tiny real export), its fused model, and Polygraphy's files for the original (2 iterations)."""
    d = tmp_path_factory.mktemp("bert")
    fused = d / "fused.onnx"
    ok(gelu("fuse", BERT, "-o", fused))
    r = subprocess.run([str(POLYGRAPHY), "run", str(BERT), "--onnxrt", "--iterations", "2",
                        "--input-shapes", "input_ids:[2,5]", "--save-inputs", str(d / "in.json"),
                        "--save-outputs", str(d / "golden.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    broken = onnx.load(fused)
    gelus = [n for n in broken.graph.node if n.domain == "ai.gelu_onnx"]
    assert len(gelus) == 2
    target = gelus[0]  # one fused GELU becomes a different function: x * sigmoid(x) (SiLU)
    x, bias = target.input[0], target.input[1]
    i = list(broken.graph.node).index(target)
    broken.graph.node.remove(target)
    broken.graph.node.insert(i, helper.make_node("Add", [x, bias], ["_xb"]))
    broken.graph.node.insert(i + 1, helper.make_node("Sigmoid", ["_xb"], ["_sg"]))
    broken.graph.node.insert(i + 2, helper.make_node("Mul", ["_xb", "_sg"], [target.output[0]]))
    onnx.save(broken, d / "broken.onnx")
    return {"dir": d, "orig": BERT, "fused": fused, "broken": d / "broken.onnx", "gelu": target.output[0],
            "in": d / "in.json", "golden": d / "golden.json"}


def test_polygraphy_inputs_with_the_original(bert):
    r = ok(gelu("check", bert["orig"], bert["fused"], "--inputs", bert["in"], "--json"))
    rep = json.loads(r.stdout)
    assert rep["ok"] and rep["iterations"] == 2 and rep["inputs"][0]["shape"] == [2, 5]
    assert rep["inputs"][0]["source"].startswith("json:")


def test_golden_outputs_without_the_original(bert):
    r = ok(gelu("check", bert["fused"], "--reference-outputs", bert["golden"], "--inputs", bert["in"], "--json"))
    rep = json.loads(r.stdout)
    assert rep["ok"] and rep["original"] is None and rep["reference"].startswith("golden:")
    assert {o["name"] for o in rep["outputs"]} == {o.name for o in onnx.load(BERT).graph.output}
    # the golden file is the reference: a model that differs fails against it
    r = ok(gelu("check", bert["broken"], "--reference-outputs", bert["golden"], "--inputs", bert["in"]), 1)
    assert "FAIL" in r.stdout.splitlines()[-1]
    one_line_error(gelu("check", bert["fused"], "--reference-outputs", bert["golden"]), 2, "needs --inputs")
    one_line_error(gelu("check", bert["fused"], "--reference-outputs", bert["in"], "--inputs", bert["in"]), 2,
                   "not a Polygraphy RunResults")


def test_saved_outputs_load_in_polygraphy(bert):
    out = bert["dir"] / "ours.json"
    ok(gelu("check", bert["orig"], bert["fused"], "--inputs", bert["in"], "--save-outputs", out))
    r = subprocess.run([str(POLYGRAPHY), "inspect", "data", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = r.stdout + r.stderr
    for runner in ("gelu-onnx-original-cpu", "gelu-onnx-fused-cpu"):
        assert re.search(runner + r"\s+\(2 iterations\)", text), text
    # and polygraphy's own comparator finds the fused run matches the original's
    code = ("import sys; from polygraphy.comparator import RunResults, Comparator, CompareFunc;"
            f"r = RunResults.load({str(out)!r});"
            "sys.exit(0 if bool(Comparator.compare_accuracy(r, compare_func=CompareFunc.simple(atol=1e-5, rtol=1e-5))) else 1)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
    # our own saved file is a valid reference for a later run
    ok(gelu("check", bert["fused"], "--reference-outputs", out, "--inputs", bert["in"]))


def other(fus, name):
    return next(t for t in fus if t != name)


def test_localize_names_the_replaced_gelu(bert):
    r = ok(gelu("check", bert["orig"], bert["broken"], "--localize", "--json"), 1)
    rep = json.loads(r.stdout)
    fus = {f["tensor"]: f for f in rep["fusions"]}
    assert len(fus) == 2 and rep["first_failure"] == bert["gelu"]
    bad = fus[bert["gelu"]]
    assert bad["pass"] is False and bad["max_abs"] > 1e-2
    assert bad["description"]["form"] == "erf" and bad["description"]["bias"] is True and bad["summary"]
    assert bad["fused_op"] == "Mul" and fus[other(fus, bert["gelu"])]["fused_op"] == "ai.gelu_onnx.BiasGeluErf"
    r = ok(gelu("check", bert["orig"], bert["broken"], "--localize"), 1)
    assert f"first failing GELU: {bert['gelu']}" in r.stdout
    r = ok(gelu("check", bert["orig"], bert["fused"], "--localize", "--json"))
    rep = json.loads(r.stdout)
    assert rep["first_failure"] is None and len(rep["fusions"]) == 2 and all(f["pass"] for f in rep["fusions"])
    one_line_error(gelu("check", bert["fused"], "--localize", "--reference-outputs", bert["golden"],
                        "--inputs", bert["in"]), 2, "--localize needs ORIGINAL")


def test_statistics_per_output_and_iterations(bert, tmp_path):
    """mean/median/p99 over 3 seeded iterations, against numpy on our own ORT runs."""
    saved = tmp_path / "in.json"
    r = ok(gelu("check", bert["orig"], bert["fused"], "--iterations", "3", "--seed", "7", "--save-inputs", saved,
                "--json"))
    rep = json.loads(r.stdout)
    its = feedfiles.load_inputs(saved, onnx.load(BERT))
    assert rep["iterations"] == 3 and len(its) == 3
    m = onnx.load(BERT)
    for i, feeds in enumerate(its):  # iteration i uses seed 7 + i
        want = verify.make_inputs(m, seed=7 + i)
        assert all(np.array_equal(feeds[k], want[k]) for k in want)
    from gelu_onnx import session_options

    so = session_options() if rep["library"] else ort.SessionOptions()
    so_plain = ort.SessionOptions()
    a = ort.InferenceSession(str(BERT), so_plain, providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(bert["fused"]), so, providers=["CPUExecutionProvider"])
    for row in rep["outputs"]:
        d = np.concatenate([np.abs(a.run([row["name"]], f)[0].astype(np.float64)
                                   - b.run([row["name"]], f)[0].astype(np.float64)).ravel() for f in its])
        assert row["elements"] == d.size
        assert row["max_abs"] == pytest.approx(d.max(), abs=1e-12)
        assert row["mean_abs"] == pytest.approx(d.mean(), rel=1e-5, abs=1e-12)
        assert row["median_abs"] == pytest.approx(np.median(d), rel=1e-5, abs=1e-12)
        assert row["p99_abs"] == pytest.approx(np.percentile(d, 99), rel=1e-5, abs=1e-12)
    one_line_error(gelu("check", bert["orig"], bert["fused"], "--iterations", "3", "--save-inputs", tmp_path / "x.npz"),
                   2, "an .npz holds one iteration")


def test_per_output_tolerance(bert):
    out = onnx.load(BERT).graph.output[0].name
    strict = ok(gelu("check", bert["orig"], bert["broken"], "--json"), 1)
    names = {o["name"]: o for o in json.loads(strict.stdout)["outputs"]}
    loose = max(o["max_abs"] for o in names.values()) * 2
    r = ok(gelu("check", bert["orig"], bert["broken"], "--json", *sum(
        (["--tol", f"{n}:0,{loose}"] for n in names), [])))
    rep = json.loads(r.stdout)
    assert rep["ok"] and all(o["atol"] == loose and o["rtol"] == 0 for o in rep["outputs"])
    # a name's tolerance wins over the per-dtype one, for that output only
    r = ok(gelu("check", bert["orig"], bert["broken"], "--json", "--tol", f"{out}:0,{loose}"), 1)
    rows = {o["name"]: o for o in json.loads(r.stdout)["outputs"]}
    assert rows[out]["passed"] and rows[out]["atol"] == loose
    assert any(not o["passed"] for o in rows.values())
    r = gelu("check", bert["orig"], bert["fused"], "--tol", "nocolon")
    assert r.returncode == 2 and "NAME:RTOL,ATOL" in r.stderr


def test_several_providers(bert):
    """cpu twice collapses to one run; an unavailable provider is one line and exit 3."""
    r = ok(gelu("check", bert["orig"], bert["fused"], "--provider", "cpu,cpu", "--json"))
    assert json.loads(r.stdout)["providers"] == ["cpu"]
    have = ort.get_available_providers()
    if "CUDAExecutionProvider" not in have:
        one_line_error(gelu("check", bert["orig"], bert["fused"], "--provider", "cpu,cuda"), 3, "--provider cuda")
    else:
        r = ok(gelu("check", bert["orig"], bert["fused"], "--provider", "cpu,cuda"))
        assert "[cpu]" in r.stdout and "[cuda]" in r.stdout and "2 of 2 providers pass" in r.stdout
    r = gelu("check", bert["orig"], bert["fused"], "--provider", "cpu,npu")
    assert r.returncode == 2 and "choose a comma-separated list" in r.stderr


def test_inlined_custom_ops_warn(bert, tmp_path):
    inl = tmp_path / "inlined.onnx"
    onnx.save(onnx.inliner.inline_local_functions(onnx.load(bert["fused"])), inl)
    r = ok(gelu("check", bert["orig"], inl, "--json"))
    assert "inlined" in json.loads(r.stdout)["warnings"][0]
    assert "gelu-onnx: warning:" in r.stderr and "inlined the functions" in r.stderr
    r = ok(gelu("check", bert["orig"], bert["fused"], "--json"))
    assert json.loads(r.stdout)["warnings"] == [] and "warning" not in r.stderr


def test_inspect_target_shows_what_fuse_would_do(tmp_path):
    quick = ROOT / "models" / "bert_quick_gelu_torchscript_op17.onnx"
    r = ok(gelu("inspect", quick, "--target", "standard", "--json"))
    rep = json.loads(r.stdout)
    assert rep["target"] == "standard" and rep["gelus"] == 0
    assert any("no standard op" in n["reason"] for n in rep["near_misses"])
    r = ok(gelu("inspect", quick, "--target", "ort"))
    assert "becomes" in r.stdout and "com.microsoft.QuickGelu" in r.stdout
    r = ok(gelu("inspect", BERT, "--target", "custom", "--json"))
    assert {f["op"] for f in json.loads(r.stdout)["fusions"]} == {"ai.gelu_onnx.BiasGeluErf"}


def test_bench_refuses_a_mismatched_pair(bert):
    other = ROOT / "models" / "convnext_torchscript_op17.onnx"
    one_line_error(gelu("bench", BERT, other, "--repeats", "1", "--warmup", "0"), 2,
                   "are not an original and its fused model")


def test_allow_pickle_flag(bert, tmp_path):
    p = tmp_path / "obj.npz"
    np.savez(p, input_ids=np.array([[1, 2]], dtype=object))
    one_line_error(gelu("check", bert["orig"], bert["fused"], "--inputs", p), 2, "--allow-pickle")
    one_line_error(gelu("check", bert["orig"], bert["fused"], "--inputs", p, "--allow-pickle"), 2,
                   "the model declares int64")


def test_golden_with_every_tensor_marked(bert, tmp_path):
    """`polygraphy run --onnx-outputs mark all`: the extra tensors are noted, the outputs compared."""
    r = subprocess.run([str(POLYGRAPHY), "run", str(BERT), "--onnxrt", "--onnx-outputs", "mark", "all",
                        "--save-inputs", str(tmp_path / "in.json"), "--save-outputs", str(tmp_path / "all.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = ok(gelu("check", bert["fused"], "--reference-outputs", tmp_path / "all.json", "--inputs",
                tmp_path / "in.json", "--json"))
    rep = json.loads(r.stdout)
    assert rep["ok"] and len(rep["outputs"]) == len(onnx.load(BERT).graph.output)
    assert any("were not compared" in n for n in rep["notes"])


def test_save_paths_never_replace_what_check_reads(bert, tmp_path):
    import hashlib

    def digest(p):
        return hashlib.sha256(Path(p).read_bytes()).hexdigest()

    before = {p: digest(p) for p in (bert["fused"], bert["in"])}
    one_line_error(gelu("check", BERT, bert["fused"], "--save-outputs", bert["fused"]), 2, "a file this check reads")
    one_line_error(gelu("check", BERT, bert["fused"], "--inputs", bert["in"], "--save-inputs", bert["in"]), 2,
                   "a file this check reads")
    one_line_error(gelu("check", BERT, bert["fused"], "--save-inputs", tmp_path / "a.json", "--save-outputs",
                        tmp_path / "a.json"), 2, "same file as --save-inputs")
    assert {p: digest(p) for p in before} == before and not (tmp_path / "a.json").exists()


def test_bench_progress(tmp_path):
    """The library reports every session run; the CLI draws a bar only on a terminal."""
    from gelu_onnx.verify import bench

    ticks = []
    bench.bench(BERT, None, repeats=4, warmup=1, opt_levels=("basic", "all"), progress=ticks.append)
    assert sum(ticks) == 2 * bench.runs_per_level(1, 4)
    import pty

    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a width
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "gelu_onnx", "bench", str(BERT), "--repeats", "3", "--warmup", "1",
                        "--opt-levels", "all"], stdout=subprocess.PIPE, stderr=slave, env=e, timeout=300)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert p.returncode == 0 and b"bench:" in shown and b"run" in shown, shown
    assert b"bench:" not in p.stdout  # the table on stdout stays clean
    r = ok(gelu("bench", BERT, "--repeats", "3", "--warmup", "1", "--opt-levels", "all"))
    assert "bench:" not in r.stderr  # not a terminal: no bar


def test_golden_reference_with_the_original_localizes(bert, tmp_path):
    """ORIGINAL and golden together: the golden outputs are the reference, the original serves --localize."""
    r = ok(gelu("check", bert["orig"], bert["broken"], "--reference-outputs", bert["golden"], "--inputs", bert["in"],
                "--localize", "--json"), 1)
    rep = json.loads(r.stdout)
    assert rep["reference"].startswith("golden:") and rep["first_failure"] == bert["gelu"]
    one_line_error(gelu("check", bert["fused"], "--reference-outputs", bert["golden"], "--inputs", bert["in"],
                        "--iterations", "3"), 2, "the inputs hold 2 iteration(s)")
    single = tmp_path / "one.json"
    single.write_text(json.dumps(json.loads(bert["in"].read_text())[:1]))
    one_line_error(gelu("check", bert["fused"], "--reference-outputs", bert["golden"], "--inputs", single), 2,
                   "2 iteration(s) of outputs for 1 iteration(s) of inputs")
