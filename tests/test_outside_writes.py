"""What the command leaves outside its output, and what reaches stderr
(docs/cli.md, "Files written outside the output" and "ONNX Runtime's own
messages"): every command run with HOME and TMPDIR pointed at fresh folders
writes there only the documented cache file (nothing with
GELU_ONNX_CACHE=off; never ONNX Runtime's telemetry files); with HOME not
writable, a success prints nothing on stderr and a failure exactly our one
line, also when ONNX Runtime fails inside a run."""
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

CACHE = Path(".cache") / "gelu-onnx" / "ort-max-ir.json"


def _gather_model(folder: Path) -> tuple[Path, Path]:
    """Gather -> bias Add -> erf GELU, and token ids with one past the table:
    ONNX Runtime fails at run time (and logs a coloured line of its own)."""
    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((10, 4)).astype(np.float32), "E"),
             nh.from_array((rng.standard_normal(4) + 0.5).astype(np.float32), "b")]
    inits += [nh.from_array(np.array(v, np.float32), n) for n, v in (("s2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    nodes = [h.make_node("Gather", ["E", "ids"], ["g"]), h.make_node("Add", ["g", "b"], ["x"]),
             h.make_node("Div", ["x", "s2"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
             h.make_node("Add", ["e", "one"], ["p"]), h.make_node("Mul", ["x", "p"], ["q"]),
             h.make_node("Mul", ["q", "half"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("ids", T.INT64, [2, 3])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3, 4])], inits)
    path = folder / "gather.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), path)
    ids = folder / "ids.npz"
    np.savez(ids, ids=np.array([[1, 2, 3], [4, 5, 99]], np.int64))
    return path, ids


def _cli(args, home, tmp, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("GELU_ONNX_", "ORT_")) and k != "XDG_CACHE_HOME"}
    e.update(HOME=str(home), TMPDIR=str(tmp), **env)
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, env=e,
                          timeout=300)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


@pytest.fixture()
def work(tmp_path):
    src = external_model(tmp_path / "m")
    gather, ids = _gather_model(tmp_path / "m")
    out = tmp_path / "out"
    out.mkdir()
    return src, gather, ids, out


def _commands(src, gather, ids, out):
    """(argv, exit code) of every command, the way a user runs them."""
    fused = out / "f.onnx"
    return [
        (["info"], 0),
        (["inspect", src], 0),
        (["fuse", src, "-o", fused], 0),
        (["check", src, fused, "--save-inputs", out / "i.npz", "--save-outputs", out / "o.npz"], 0),
        (["bench", src, fused, "--warmup", "1", "--repeats", "2", "--opt-levels", "basic"], 0),
        (["check", gather, gather, "--inputs", ids], 2),
    ]


@pytest.mark.parametrize("cache", ["default", "off"])
def test_each_command_writes_only_what_is_documented(work, tmp_path, cache):
    src, gather, ids, out = work
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {"GELU_ONNX_CACHE": "off"} if cache == "off" else {}
    inputs_before = _tree(src.parent)
    for argv, code in _commands(src, gather, ids, out):
        r = _cli(argv, home, tmp, **env)
        assert r.returncode == code, (argv, r.stderr)
        assert not _tree(tmp), (argv, _tree(tmp))
        assert _tree(home) <= {str(CACHE)}, (argv, _tree(home))  # never ONNX Runtime's telemetry files
    assert _tree(home) == ({str(CACHE)} if cache == "default" else set())  # fuse asked the runtime
    assert _tree(src.parent) == inputs_before
    assert _tree(out) == {"f.onnx", "w.bin", "i.npz", "o.npz"}


@pytest.mark.parametrize("home_kind", ["read_only_folder", "a_file"])
def test_onnxruntime_never_adds_a_stderr_line_whatever_home_is(work, tmp_path, home_kind):
    """HOME not writable (a read-only folder; a file, which root cannot
    write into either): ONNX Runtime would warn that it cannot persist its
    telemetry id, and log its own error line before ours when a model fails
    inside a run."""
    src, gather, ids, out = work
    if home_kind == "a_file":
        home = tmp_path / "home-file"
        home.write_text("")
    else:
        home = tmp_path / "home-ro"
        home.mkdir()
        home.chmod(0o555)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    try:
        for argv, code in _commands(src, gather, ids, out):
            if argv[0] == "bench":
                continue  # the slowest: covered by the test above
            r = _cli(argv, home, tmp)
            assert r.returncode == code, (argv, r.stderr)
            if code == 0:
                assert r.stderr == b"", (argv, r.stderr)
            else:
                line = b"gelu-onnx: error: onnxruntime failed to run the original model: "
                assert r.stderr.startswith(line) and r.stderr.count(b"\n") == 1 and r.stderr.endswith(b"\n"), r.stderr
                assert b"idx=99" in r.stderr
    finally:
        if home.is_dir():
            home.chmod(0o755)
