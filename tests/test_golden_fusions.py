"""Golden outputs of the fusion: every bundled export (models/*.onnx) and
every case of the hand-built corpus (helpers/gelu_corpus.py), fused for every
target, must serialize to the bytes main gave at bb094da
(tests/golden_fusions.json: the first 16 hex digits of their sha256), or
differ for a reason listed in DIFFERENCES. The guard for a change to fusion/
that should change no output (replacing an implementation, moving code):
run it before and after. Opt-in, ~30 s of CPU: GELU_ONNX_GOLDEN=1.
Skips under another onnx or protobuf than wrote the file (serialization)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import google.protobuf
import onnx
import pytest

import gelu_onnx
from gelu_onnx.errors import GeluOnnxError
from helpers import gelu_corpus

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = json.loads((Path(__file__).parent / "golden_fusions.json").read_text())
TARGETS = ("custom", "standard", "ort")
# "<model or case>:<target>" -> why its bytes differ from bb094da's (checked by a test of its own)
DIFFERENCES: dict[str, str] = {}

pytestmark = [
    pytest.mark.skipif(os.environ.get("GELU_ONNX_GOLDEN") != "1", reason="opt-in: GELU_ONNX_GOLDEN=1"),
    pytest.mark.skipif((onnx.__version__, google.protobuf.__version__) != (GOLDEN["onnx"], GOLDEN["protobuf"]),
                       reason=f"golden bytes written by onnx {GOLDEN['onnx']}, protobuf {GOLDEN['protobuf']}"),
]


def _digest(model: onnx.ModelProto, target: str) -> str:
    try:
        out = gelu_onnx.fuse_with_report(model, target).model
    except GeluOnnxError as e:  # a refusal is an output too
        return f"{type(e).__name__}"
    return hashlib.sha256(out.SerializeToString()).hexdigest()[:16]


def _check(golden: dict, name: str, model: onnx.ModelProto) -> None:
    got = {t: _digest(model, t) for t in TARGETS}
    bad = [t for t in TARGETS if f"{name}:{t}" not in DIFFERENCES and got[t] != golden[f"{name}:{t}"]]
    assert not bad, f"{name}: other bytes than bb094da for {bad}"


@pytest.mark.parametrize("path", sorted((ROOT / "models").glob("*.onnx")), ids=lambda p: p.name)
def test_bundled_exports_fuse_to_the_golden_bytes(path):
    _check(GOLDEN["bundled"], path.name, onnx.load(str(path)))


def test_corpus_fuses_to_the_golden_bytes():
    cases = gelu_corpus.all_cases()
    assert {f"{c.name}:{t}" for c in cases for t in TARGETS} == set(GOLDEN["corpus"])
    for c in cases:
        _check(GOLDEN["corpus"], c.name, c.model)


def test_every_bundled_export_has_its_golden_bytes():
    assert {f"{p.name}:{t}" for p in (ROOT / "models").glob("*.onnx") for t in TARGETS} == set(GOLDEN["bundled"])
