"""gelu_onnx.files: fuse_file / inspect_file are the CLI's fuse and inspect.

The CLI only parses and prints, so the library call and the command must
write the same bytes and report the same JSON; failures are the same
one-line errors, and a failed write leaves the previous output in place.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import gelu_onnx
from gelu_onnx.errors import InputError, MissingFileError

MODELS = Path(__file__).resolve().parents[1] / "models"
BERT = MODELS / "bert_torchscript_op17.onnx"


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_fuse_file_writes_what_the_cli_writes(tmp_path, target):
    lib_out, cli_out = tmp_path / "lib.onnx", tmp_path / "cli.onnx"
    done = gelu_onnx.fuse_file(BERT, lib_out, target=target)
    r = _cli("fuse", BERT, "-o", cli_out, "--target", target, "--json")
    assert r.returncode == 0, r.stderr
    assert lib_out.read_bytes() == cli_out.read_bytes()
    doc = json.loads(r.stdout)
    mine = done.as_dict()
    assert doc.pop("ok") is True
    assert doc.pop("output") == str(cli_out) and mine.pop("output") == str(lib_out)
    assert doc.pop("input") == str(BERT) and mine.pop("input") == str(BERT)
    assert json.loads(json.dumps(mine, default=str)) == doc
    assert done.result.fusions and done.target == target
    onnx.checker.check_model(onnx.load(lib_out))


def test_inspect_file_reports_what_the_cli_reports(tmp_path):
    found = gelu_onnx.inspect_file(BERT, "ort")
    r = _cli("inspect", BERT, "--target", "ort", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc.pop("ok") is True
    assert json.loads(json.dumps(found.as_dict(), default=str)) == doc
    assert found.as_dict()["gelus"] == len(found.result.fusions) > 0


def test_fuse_file_refusals_are_one_line_errors(tmp_path):
    with pytest.raises(MissingFileError):
        gelu_onnx.fuse_file(tmp_path / "absent.onnx", tmp_path / "out.onnx")
    with pytest.raises(InputError, match="not a regular file"):
        gelu_onnx.fuse_file(tmp_path, tmp_path / "out.onnx")
    src = tmp_path / "m.onnx"
    src.write_bytes(BERT.read_bytes())
    with pytest.raises(InputError, match="is the input file"):
        gelu_onnx.fuse_file(src, src)
    assert src.read_bytes() == BERT.read_bytes()


def test_fuse_file_in_place_only_when_asked(tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(BERT.read_bytes())
    done = gelu_onnx.fuse_file(src, src, target="custom", overwrite_input=True)
    assert done.result.fusions
    assert {n.domain for n in onnx.load(src).graph.node} >= {gelu_onnx.DOMAIN}
