"""The gelu-onnx CLI, run as a real subprocess (python -m gelu_onnx)."""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

from gelu_onnx import cli, contract, onnxio, ortlib
from gelu_onnx.errors import UnsupportedError

from helpers.model_helpers import gelu_model, save

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("fuse", "inspect", "check", "bench")


def gelu(*args, env=None, cwd=None):
    e = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("GELU_ONNX_DEBUG", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=300)


def assert_one_line_error(r, code, fragment=""):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("gelu-onnx"), r.stderr
    assert fragment in last, (fragment, last)


def near_miss_model() -> onnx.ModelProto:
    """Two erf GELUs: the first fusable, the second's Erf output is also a graph output."""
    m = gelu_model("erf")
    g = m.graph
    nodes = list(g.node)
    # second GELU on y, its intermediate 'e2' exposed as a graph output
    ren = {"x": "y", "d": "d2", "e": "e2", "a": "a2", "m": "m2", "y": "y2"}
    for n in nodes:
        new = helper.make_node(n.op_type, [ren.get(i, i) for i in n.input], [ren.get(o, o) for o in n.output])
        g.node.append(new)
    g.output.append(helper.make_tensor_value_info("y2", T.FLOAT, ["batch", 8]))
    g.output.append(helper.make_tensor_value_info("e2", T.FLOAT, ["batch", 8]))
    for i, n in enumerate(g.node):
        n.name = f"n{i}"
    onnx.checker.check_model(m)
    return m


# --- help / usage ----------------------------------------------------------------------


def test_help_of_every_command():
    r = gelu("--help")
    assert r.returncode == 0 and all(c in r.stdout for c in COMMANDS)
    for c in COMMANDS:
        r = gelu(c, "--help")
        assert r.returncode == 0 and r.stdout.startswith(f"usage: gelu-onnx {c}"), r.stderr
        assert "--json" in r.stdout
    assert gelu("--version").stdout.strip() == f"gelu-onnx {__import__('gelu_onnx').__version__}"


@pytest.mark.parametrize("argv", [
    [],
    ["frobnicate"],
    ["fuse", "in.onnx"],  # -o missing
    ["fuse", "in.onnx", "-o", "o.onnx", "--target", "tensorrt"],
    ["check", "a.onnx"],
    ["check", "a.onnx", "b.onnx", "--dim", "batch"],
    ["check", "a.onnx", "b.onnx", "--rtol", "float8=1"],
    ["check", "a.onnx", "b.onnx", "--atol", "-1"],
    ["bench", "a.onnx", "--repeats", "0"],
])
def test_bad_arguments_exit_2_without_traceback(argv):
    r = gelu(*argv)
    assert_one_line_error(r, 2)


def test_missing_and_malformed_files(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00garbage, not a protobuf\xff" * 10)
    good = save(gelu_model(), tmp_path / "g.onnx")
    assert_one_line_error(gelu("inspect", tmp_path / "nope.onnx"), 2, "no such file")
    assert_one_line_error(gelu("fuse", junk, "-o", tmp_path / "o.onnx"), 2)
    assert not (tmp_path / "o.onnx").exists()
    assert_one_line_error(gelu("check", good, junk), 2)
    assert_one_line_error(gelu("check", good, tmp_path), 2, "not a regular file")


# --- fuse / inspect ----------------------------------------------------------------------


def test_fuse_then_check_round_trip(tmp_path):
    src = save(near_miss_model(), tmp_path / "in.onnx")
    before = hashlib.sha256(Path(src).read_bytes()).hexdigest()
    for target in ("custom", "standard", "ort"):
        out = tmp_path / f"out_{target}.onnx"
        r = gelu("fuse", src, "-o", out, "--target", target)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("fused 1 GELU (erf: 1)") and "near-miss" in r.stdout
        m = onnx.load(str(out))
        onnx.checker.check_model(m)
        assert m.ir_version <= ortlib.max_ir_version()
        ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
        r = gelu("check", src, out, "--dim", "batch=32", "--no-library")
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.strip().splitlines()[-1] == "PASS: 3 of 3 outputs within tolerance"
    assert hashlib.sha256(Path(src).read_bytes()).hexdigest() == before  # input untouched


def test_fuse_json_and_inspect_json(tmp_path):
    src = save(near_miss_model(), tmp_path / "in.onnx")
    r = gelu("fuse", src, "-o", tmp_path / "o.onnx", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"ok", "input", "output", "target", "fused", "by_form", "fusions", "near_misses", "notes"} <= set(doc)
    assert doc["ok"] and doc["fused"] == 1 and doc["by_form"] == {"erf": 1}
    (f,) = doc["fusions"]
    assert {"form", "bias", "alpha", "graph", "root", "nodes", "dtype", "op"} <= set(f)
    assert f["root"] == "y" and f["op"] == f"{contract.DOMAIN}.{contract.OP_TYPES[('erf', False)]}"
    assert doc["near_misses"] and {"graph", "anchor", "reason", "code"} <= set(doc["near_misses"][0])

    r = gelu("inspect", src, "--json")
    doc2 = json.loads(r.stdout)
    assert r.returncode == 0 and {"ok", "input", "gelus", "fusions", "near_misses"} <= set(doc2)
    assert doc2["fusions"][0]["root"] == "y" and doc2["near_misses"][0]["code"] == doc["near_misses"][0]["code"]
    assert not (tmp_path / "in.onnx.fused").exists()

    r = gelu("inspect", src)
    assert r.returncode == 0 and "1 GELU found, 1 near-miss" in r.stdout
    assert doc["near_misses"][0]["reason"] in r.stdout


def test_fuse_ir14_input_gives_loadable_output(tmp_path):
    src = save(gelu_model("erf", ir=14), tmp_path / "in14.onnx")
    r = gelu("fuse", src, "-o", tmp_path / "o.onnx", "--json")
    assert r.returncode == 0, r.stderr
    out = onnx.load(str(tmp_path / "o.onnx"))
    assert out.ir_version == onnxio.IR_FLOOR  # the lowest it needs, not the 14 onnx stamped
    ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
    assert any("IR version lowered from 14" in n for n in json.loads(r.stdout)["notes"])


def test_fuse_refuses_to_overwrite_input(tmp_path):
    src = save(gelu_model(), tmp_path / "in.onnx")
    before = Path(src).read_bytes()
    r = gelu("fuse", src, "-o", src, "--json")
    assert_one_line_error(r, 2, "--overwrite-input")
    assert json.loads(r.stdout) == {"ok": False, "error": r.stderr.strip().removeprefix("gelu-onnx: error: "), "exit_code": 2}
    assert Path(src).read_bytes() == before
    r = gelu("fuse", src, "-o", src, "--overwrite-input")
    assert r.returncode == 0 and Path(src).read_bytes() != before


# --- check ------------------------------------------------------------------------------


@pytest.fixture()
def models(tmp_path):
    return {k: save(gelu_model(k), tmp_path / f"{k}.onnx") for k in ("erf", "gelu20", "wrong")}


def test_check_fail_exit_1_and_json(models, tmp_path):
    r = gelu("check", models["erf"], models["wrong"])
    assert r.returncode == 1 and r.stdout.strip().splitlines()[-1].startswith("FAIL")
    r = gelu("check", models["erf"], models["wrong"], "--json", "--seed", "3", "--dim", "batch=5")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert {"ok", "outputs", "inputs", "provider", "reference_provider", "library", "opt_level", "seed",
            "original", "fused", "problems", "notes"} <= set(doc)
    assert doc["ok"] is False and doc["seed"] == 3 and doc["inputs"][0]["shape"] == [5, 8]
    (row,) = doc["outputs"]
    assert {"name", "dtype", "shape", "max_abs", "max_rel", "max_ulp", "mismatched", "rtol", "atol", "passed",
            "message"} <= set(row)
    assert row["passed"] is False and row["max_abs"] > 0.05
    # A loose enough tolerance makes the same pair pass: the override is honoured.
    r = gelu("check", models["erf"], models["wrong"], "--atol", "0.2", "--rtol", "float32=5")
    assert r.returncode == 0, r.stdout


def test_check_pass_and_npz(models, tmp_path):
    saved = tmp_path / "used.npz"
    r = gelu("check", models["erf"], models["gelu20"], "--dim", "batch=7", "--save-inputs", saved)
    assert r.returncode == 0 and "PASS" in r.stdout
    assert np.load(saved)["x"].shape == (7, 8)
    r = gelu("check", models["erf"], models["gelu20"], "--inputs", saved, "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["ok"] and doc["seed"] is None and doc["inputs"][0]["shape"] == [7, 8]
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.ones((7, 8), np.float64))
    assert_one_line_error(gelu("check", models["erf"], models["gelu20"], "--inputs", bad), 2, "float64")
    assert_one_line_error(gelu("check", models["erf"], models["gelu20"], "--dim", "seq=3"), 2, "named dims: batch")


def test_check_ir14_and_unavailable_providers(models, tmp_path):
    ir14 = save(gelu_model("gelu20", ir=14), tmp_path / "ir14.onnx")
    if ortlib.max_ir_version() >= 14:  # onnxruntime >= 1.32: it loads, so the check runs
        r = gelu("check", models["erf"], ir14)
        assert r.returncode == 0, r.stdout + r.stderr
    else:  # the runtime's refusal, explained in one line with its own limit
        assert_one_line_error(gelu("check", models["erf"], ir14), 3,
                              f"loads IR <= {ortlib.max_ir_version()}")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        assert_one_line_error(gelu("check", models["erf"], models["gelu20"], "--provider", "cuda"), 3, "onnxruntime-gpu")
    r = gelu("check", models["erf"], models["gelu20"], "--provider", "tensorrt")
    if r.returncode != 0:  # no TensorRT here: one clear exit-3 line, not a crash
        assert_one_line_error(r, 3, "tensorrt")


def test_check_bfloat16(tmp_path):
    o = save(gelu_model("erf", T.BFLOAT16), tmp_path / "o.onnx")
    f = save(gelu_model("gelu20", T.BFLOAT16), tmp_path / "f.onnx")
    r = gelu("check", o, f, "--json", "--no-library")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["outputs"][0]["dtype"] == "bfloat16" and doc["outputs"][0]["max_ulp"] <= 1


# --- bench --------------------------------------------------------------------------------


def test_bench_json(models):
    r = gelu("bench", models["erf"], models["gelu20"], "--repeats", "3", "--warmup", "1", "--json", "--dim", "batch=64")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"original", "fused", "provider", "library", "threads", "results", "machine", "versions", "inputs"} <= set(doc)
    assert [t["opt_level"] for t in doc["results"]] == ["basic", "all"]
    for t in doc["results"]:
        assert t["original_ms"] > 0 and t["fused_ms"] > 0 and t["parity_ok"]
        assert abs(t["ratio"] - t["fused_ms"] / t["original_ms"]) < 1e-9
    assert doc["versions"]["onnxruntime"] == ort.__version__ and doc["machine"]["intra_op_threads"] == 2


def test_bench_fuses_in_memory(models):
    r = gelu("bench", models["erf"], "--repeats", "2", "--warmup", "0", "--opt-levels", "disable", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "1 GELU fused" in r.stdout and "disable" in r.stdout


# --- error plumbing (in-process: a command that raises) -----------------------------------


def test_internal_errors_are_one_line_exit_4(monkeypatch, capsys):
    def boom(args):
        raise RuntimeError("kaput\nsecond line")

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), "inspect", boom))
    monkeypatch.delenv("GELU_ONNX_DEBUG", raising=False)
    assert cli.main(["inspect", "x.onnx"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("gelu-onnx: internal error: RuntimeError: kaput second line") and "\n" not in err
    monkeypatch.setenv("GELU_ONNX_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["inspect", "x.onnx"])


def test_gelu_onnx_errors_keep_their_exit_code(monkeypatch, capsys):
    def unsupported(args):
        raise UnsupportedError("no verified path")

    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_func(parser(), "inspect", unsupported))
    assert cli.main(["inspect", "x.onnx"]) == 3
    assert capsys.readouterr().err.strip() == "gelu-onnx: error: no verified path"


def _with_func(ap, command, func):
    sub = next(a for a in ap._actions if a.dest == "command")
    sub.choices[command].set_defaults(func=func)
    return ap


def _external_model(folder: Path) -> Path:
    """MatMul (weights in an external file) + erf GELU, saved in ``folder``."""
    from onnx import numpy_helper as nh

    m = gelu_model("erf", dims=("batch", 64))
    g = m.graph
    g.input[0].name = "h"
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    g.initializer.append(nh.from_array(w, "w"))
    g.node.insert(0, helper.make_node("MatMul", ["h", "w"], ["x"]))
    folder.mkdir()
    onnx.save_model(m, str(folder / "m.onnx"), save_as_external_data=True, location="m.data")  # constants stay inline
    return folder / "m.onnx"


def test_external_data_check_and_in_memory_bench(tmp_path):
    """check and an in-memory bench resolve external data in the model's folder, not the cwd."""
    src = _external_model(tmp_path / "src")
    fused = gelu_onnx_fuse(src)
    (tmp_path / "out").mkdir()
    onnx.save_model(fused, str(tmp_path / "out" / "f.onnx"), save_as_external_data=True, location="f.data")
    r = gelu("check", src, tmp_path / "out" / "f.onnx", "--no-library", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = gelu("bench", src, "--repeats", "2", "--warmup", "0", "--opt-levels", "basic", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["fusions"] == 1 and doc["results"][0]["parity_ok"]


def gelu_onnx_fuse(path):
    import gelu_onnx

    m = onnx.load(str(path))  # weights loaded: the copy saved above owns its data
    return gelu_onnx.fuse(m, target="custom")


def test_external_data_fuse_output_passes_checker(tmp_path):
    """fuse writes the data next to the output; the result must load with plain onnx.load."""
    src = _external_model(tmp_path / "src")
    (tmp_path / "out").mkdir()
    r = gelu("fuse", src, "-o", tmp_path / "out" / "f.onnx", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    onnx.checker.check_model(str(tmp_path / "out" / "f.onnx"))
    onnx.checker.check_model(str(src))  # and the input is still loadable too
    r = gelu("check", src, tmp_path / "out" / "f.onnx", "--no-library", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


# --- output people read: counts in words, near-misses worth reading, -q / -v, -o folders, hints ---------


BERT = ROOT / "models" / "bert_torchscript_op17.onnx"  # a real export: 2 erf GELUs and the pooler's lone Tanh


def test_inspect_and_fuse_count_gelus_already_in_target_form(tmp_path):
    fused = tmp_path / "fused.onnx"
    assert gelu("fuse", BERT, "-o", fused).returncode == 0
    r = gelu("inspect", fused)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{fused}: 2 GELUs found, all already custom ops: nothing to fuse, 0 near-misses"), r.stdout
    assert r.stdout.count("already") >= 3  # the headline and one table row per GELU
    r = gelu("inspect", fused, "--target", "standard")  # the same GELUs, which standard would rewrite
    assert r.stdout.startswith(f"{fused}: 2 GELUs found, 0 near-misses [target standard]"), r.stdout
    r = gelu("fuse", fused, "-o", tmp_path / "again.onnx")
    assert r.returncode == 0 and r.stdout.startswith(
        "fused 0 GELUs; all are already custom ops (ai.gelu_onnx.BiasGeluErf), kept as written"), r.stdout
    doc = json.loads(gelu("inspect", fused, "--json").stdout)
    assert doc["already_target_ops"] and len(doc["already_target_ops"]) == 2 and doc["fusions"] == []
    # one GELU already ours, one still decomposed behind it
    import gelu_onnx

    m = gelu_onnx.fuse(gelu_model("erf"), target="custom")
    ren = {"x": "y", "y": "y2"}
    for n in gelu_model("erf").graph.node:
        m.graph.node.append(helper.make_node(n.op_type, [ren.get(i, i + "2") if i not in ("c_div", "c_one", "c_half")
                                                         else i for i in n.input], [ren.get(o, o + "2") for o in n.output]))
    m.graph.initializer.extend(gelu_model("erf").graph.initializer)
    m.graph.output[0].name = "y2"
    mixed = save(m, tmp_path / "mixed.onnx")
    r = gelu("inspect", mixed)
    assert r.stdout.startswith(f"{mixed}: 2 GELUs found: 1 to fuse, 1 already custom op, 0 near-misses"), r.stdout
    r = gelu("fuse", mixed, "-o", tmp_path / "mixed_out.onnx")
    assert r.stdout.startswith("fused 1 GELU (erf: 1); 1 more is already custom op (ai.gelu_onnx.GeluErf), kept"), r.stdout


def test_near_misses_list_only_regions_close_to_a_gelu(tmp_path):
    r = gelu("inspect", BERT)
    assert r.returncode == 0 and "2 GELUs found, 0 near-misses" in r.stdout, r.stdout
    assert "pooler/activation/Tanh" not in r.stdout  # the pooler is no GELU
    assert "(not listed: 1 Tanh/Erf/Sigmoid that computes no GELU, such as a pooler's Tanh; -v lists it)" in r.stdout
    v = gelu("inspect", BERT, "-v")
    assert "2 GELUs found, 1 near-miss" in v.stdout and "pooler/activation/Tanh" in v.stdout, v.stdout
    doc = json.loads(gelu("inspect", BERT, "--json").stdout)  # JSON keeps every anchor, marked
    assert [n["gelu_like"] for n in doc["near_misses"]] == [False] and doc["gelu_like_near_misses"] == 0
    f = gelu("fuse", BERT, "-o", tmp_path / "f.onnx")
    assert "near-miss" not in f.stdout and "-v lists it" in f.stdout, f.stdout
    assert "near-miss left unfused" in gelu("fuse", BERT, "-o", tmp_path / "f.onnx", "-v").stdout
    # a GELU written with a wrong constant (x/2 for x/sqrt(2)) computes something close: listed by default
    wrong = save(gelu_model("wrong"), tmp_path / "wrong.onnx")
    r = gelu("inspect", wrong)
    assert "0 GELUs found, 1 near-miss" in r.stdout and "tolerance" in r.stdout, r.stdout
    assert json.loads(gelu("inspect", wrong, "--json").stdout)["near_misses"][0]["gelu_like"] is True


def test_quiet_and_verbose_on_every_command(tmp_path, capsys):
    for c in COMMANDS + ("info",):  # the parser, in this process (the commands below run as the CLI)
        with pytest.raises(SystemExit) as e:
            cli.main([c, "--help"])
        h = capsys.readouterr().out
        assert e.value.code == 0 and "-q, --quiet" in h and "-v, --verbose" in h, c
        with pytest.raises(SystemExit) as e:
            cli.main([c, "-q", "-v"])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 2 and "not allowed with" in err and len(err.splitlines()) == 1, (c, err)
    src = save(near_miss_model(), tmp_path / "in.onnx")
    r = gelu("fuse", src, "-o", tmp_path / "o.onnx", "-q")
    assert r.returncode == 0 and r.stdout.splitlines() == [f"fused 1 GELU (erf: 1) -> {tmp_path / 'o.onnx'} [target custom]"]
    assert len(gelu("fuse", src, "-o", tmp_path / "o.onnx").stdout.splitlines()) > 1  # near-miss and notes
    r = gelu("inspect", src, "-q")
    assert r.stdout.splitlines() == [f"{src}: 1 GELU found, 1 near-miss"]
    r = gelu("bench", src, "--repeats", "2", "--warmup", "0", "--opt-levels", "basic", "-q", "--dim", "batch=4")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("opt level") and len(r.stdout.splitlines()) == 2
    r = gelu("info", "-q")
    assert r.returncode == 0 and r.stdout.splitlines()[0].startswith("gelu-onnx ")
    assert all(line.startswith("warning: ") for line in r.stdout.splitlines()[1:])


def test_output_folders_are_created_and_removed_on_failure(tmp_path):
    src = save(gelu_model(), tmp_path / "in.onnx")
    out = tmp_path / "new" / "deeper" / "o.onnx"
    r = gelu("fuse", src, "-o", out)
    assert r.returncode == 0 and out.is_file(), r.stderr
    onnx.checker.check_model(str(out))
    before = sorted(p.name for p in tmp_path.iterdir())
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x08\x07garbage")
    assert_one_line_error(gelu("fuse", junk, "-o", tmp_path / "x" / "y" / "o.onnx"), 2)
    assert not (tmp_path / "x").exists()  # the folders made for the failed fuse went with it
    # killed after the model was written into the new folder, before it was renamed into place
    r = gelu("fuse", src, "-o", tmp_path / "x" / "y" / "o.onnx", env={"GELU_ONNX_TEST_FAULT": "write:before-rename=SIGTERM"})
    assert r.returncode == 128 + 15 and not (tmp_path / "x").exists(), (r.returncode, r.stderr)
    assert_one_line_error(gelu("fuse", src, "-o", f"{tmp_path / 'x' / 'y'}/"), 2, "ends with a path separator")
    assert not (tmp_path / "x").exists()
    (tmp_path / "file").write_text("not a folder")
    assert_one_line_error(gelu("fuse", src, "-o", tmp_path / "file" / "sub" / "o.onnx"), 2, "cannot create its folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(before + ["junk.onnx", "file"])
    assert (tmp_path / "file").read_text() == "not a folder"


def _fake_install(folder: Path, direct_url: dict | None) -> Path:
    """A gelu-onnx dist-info with pip's record of where it came from (PEP 610), found first on sys.path."""
    dist = folder / "gelu_onnx-0.0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: gelu-onnx\nVersion: 0.0.1\n")
    if direct_url is not None:
        (dist / "direct_url.json").write_text(json.dumps(direct_url))
    return folder


@pytest.mark.parametrize("direct_url, command", [
    ({"url": "file:///src/gelu%20onnx", "dir_info": {"editable": True}}, "pip install -e '/src/gelu onnx'"),
    ({"url": "file:///src/gelu-onnx", "dir_info": {}}, "pip install --force-reinstall --no-deps /src/gelu-onnx"),
    ({"url": "file:///w/gelu_onnx-0.1-py3-none-linux_x86_64.whl", "archive_info": {}},
     "pip install --force-reinstall --no-deps /w/gelu_onnx-0.1-py3-none-linux_x86_64.whl"),
    (None, "pip install --force-reinstall --no-deps gelu-onnx"),
])
def test_hints_name_a_command_for_this_install(tmp_path, direct_url, command):
    site = _fake_install(tmp_path, direct_url)
    r = gelu("info", env={"PYTHONPATH": f"{site}{os.pathsep}{ROOT}"})
    assert r.returncode == 0, r.stderr
    missing = [line for line in r.stdout.splitlines() if line.startswith("missing: ")]
    assert all("-D" not in line for line in missing), missing  # no CMake flags to a pip user
    trt = [line for line in missing if line.startswith("missing: TensorRT plugin")]
    if trt:  # TensorRT is not installed here: how to build the plugin for this install
        assert command in trt[0], (trt, command)


def test_without_onnxruntime_the_hint_installs_it(tmp_path):
    src = save(gelu_model(), tmp_path / "in.onnx")
    code = ("import sys; sys.modules['onnxruntime'] = None  # as if not installed\n"
            "from gelu_onnx import cli; sys.exit(cli.main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "check", src, src], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert_one_line_error(r, 3, "onnxruntime is not installed")
    assert "pip install onnxruntime" in r.stderr and "gelu-onnx[" not in r.stderr


def test_plugin_hint_names_this_install():
    from gelu_onnx import buildinfo, tensorrt

    if tensorrt.PLUGIN_ENV in os.environ:
        pytest.skip(f"{tensorrt.PLUGIN_ENV} is set")
    try:
        tensorrt.plugin_library_path()
    except UnsupportedError as e:  # not built here (no TensorRT): the hint rebuilds this very install
        assert f"TensorRT_ROOT=<TensorRT install dir> {buildinfo.reinstall_command()}" in str(e)
        assert buildinfo.reinstall_command() == f"pip install -e {shlex.quote(str(ROOT))}"  # make setup's install
    else:
        pytest.skip("the TensorRT plugin is built")
