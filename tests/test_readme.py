"""The README runs as written: its Python snippet and its quickstart (export, fuse, check, run), and
examples/triton's model configuration fits the quickstart's model."""
from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from gelu_onnx import cli, ortlib

README = Path(__file__).resolve().parents[1] / "README.md"
# the quickstart run as written exports a BERT with torch's dynamo exporter (about a minute): opt-in
QUICKSTART = os.environ.get("GELU_ONNX_QUICKSTART") == "1"


def test_python_snippet_runs_as_written(tmp_path):
    if not ortlib.available():
        pytest.skip("the snippet registers the custom-op library, which this build lacks")
    text = README.read_text()
    section = text[text.index("## Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["erf", "['ai.gelu_onnx.GeluErf']"], lines
    gelu_1 = 0.5 * (1 + math.erf(1 / math.sqrt(2)))  # float64 reference
    assert np.float32(lines[2]) == np.float32(gelu_1), (lines[2], gelu_1)  # correctly rounded (printed shortest)
    assert (tmp_path / "fused.onnx").is_file()
    assert lines[3] == "com.microsoft.Gelu ort.onnx", lines  # gelu_onnx.fuse_file, the CLI's pipeline
    assert (tmp_path / "ort.onnx").is_file()


def quickstart_block() -> str:
    text = README.read_text()
    section = text[text.index("## Quickstart"):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def test_quickstart_parts_are_valid_as_written():
    """By default (the run itself is opt-in, below): each `gelu-onnx` line of the quickstart parses
    with today's parser, and each Python heredoc compiles."""
    block = quickstart_block()
    commands = [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("gelu-onnx ")]
    assert [c[1] for c in commands] == ["fuse", "check"], commands
    for c in commands:
        cli.build_parser().parse_args(c[1:])  # a usage error exits 2
    heredocs = re.findall(r"python - <<'PY'\n(.*?)^PY$", block, re.S | re.M)
    assert len(heredocs) == 2, block
    for code in heredocs:
        compile(code, "README.md quickstart", "exec")


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """The README's quickstart, run as written by bash in an empty folder, with this
    environment's python and gelu-onnx first on PATH (what an activated venv does)."""
    if not QUICKSTART:
        pytest.skip("opt-in: GELU_ONNX_QUICKSTART=1 runs the README's quickstart (a torch export, about a minute)")
    if not ortlib.available():
        pytest.skip("the quickstart registers the custom-op library, which this build lacks")
    pytest.importorskip("transformers")
    pytest.importorskip("onnxscript")  # torch's dynamo exporter writes through it
    cwd = tmp_path_factory.mktemp("quickstart")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    r = subprocess.run(["bash", "-e", "-c", quickstart_block()], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=900)
    return cwd, r


def test_quickstart_runs_as_written(quickstart):
    cwd, r = quickstart
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout.splitlines()
    assert "fused 2 GELUs (erf: 2) -> fused/bert.onnx [target custom]" in out, r.stdout
    assert "PASS: 2 of 2 outputs within tolerance" in out, r.stdout
    assert out[-1] == "(2, 16, 64)", out[-5:]
    fused = onnx.load(str(cwd / "fused" / "bert.onnx"), load_external_data=False)
    assert [n.op_type for n in fused.graph.node if n.domain == "ai.gelu_onnx"] == ["BiasGeluErf"] * 2
    assert (cwd / "bert.onnx").is_file() and (cwd / "bert.onnx.data").is_file()  # the export, untouched by fuse


TRITON = Path(__file__).resolve().parents[1] / "examples" / "triton" / "bert_gelu" / "config.pbtxt"
TRITON_TYPES = {"TYPE_INT64": onnx.TensorProto.INT64, "TYPE_FP32": onnx.TensorProto.FLOAT,
                "TYPE_FP16": onnx.TensorProto.FLOAT16, "TYPE_INT32": onnx.TensorProto.INT32}


def triton_tensors(text: str, kind: str) -> dict:
    body = re.search(rf"^{kind} \[(.*?)^\]", text, re.S | re.M).group(1)
    found = {}
    for block in re.findall(r"\{(.*?)\}", body, re.S):
        name = re.search(r'name: "([^"]+)"', block).group(1)
        dtype = re.search(r"data_type: (\w+)", block).group(1)
        dims = [int(d) for d in re.search(r"dims: \[([^\]]*)\]", block).group(1).split(",")]
        found[name] = (TRITON_TYPES[dtype], dims)
    return found


def test_triton_config_matches_the_quickstart_model(quickstart):
    """examples/triton's config.pbtxt names the fused model's inputs and outputs with their types and
    dims (Triton's onnxruntime backend refuses a model whose config disagrees) and our library's file."""
    cwd, r = quickstart
    assert r.returncode == 0, r.stderr[-3000:]
    text = "\n".join(line.split("#")[0] for line in TRITON.read_text().splitlines())
    assert re.search(r'^backend: "onnxruntime"$', text, re.M)
    batched = int(re.search(r"^max_batch_size: (\d+)", text, re.M).group(1)) > 0
    lib = re.search(r'model_operations \{\s*op_library_filename: "([^"]+)"\s*\}', text).group(1)
    assert Path(lib).name == ortlib.library_path().name
    model = onnx.load(str(cwd / "fused" / "bert.onnx"), load_external_data=False)
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        want = {}
        for v in values:
            dims = [-1 if d.dim_param or not d.HasField("dim_value") else d.dim_value
                    for d in v.type.tensor_type.shape.dim]
            if batched:
                assert dims[0] == -1, (v.name, dims)  # the batch dimension Triton adds
                dims = dims[1:]
            want[v.name] = (v.type.tensor_type.elem_type, dims)
        assert triton_tensors(text, kind) == want, kind
