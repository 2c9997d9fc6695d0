"""`--target standard` on TorchScript exports at old opsets (issue 26).

BERT, ViT, GPT-2, T5 v1.1's encoder, Whisper's encoder and CLIP's text tower
(tiny configs, random non-zero biases and norm parameters:
tests/helpers/old_opset_exports.py), exported by torch 2.13 with ``dynamo=False`` at
opsets 9..19, go through ``gelu-onnx fuse --target standard`` and
``gelu-onnx check`` as a user runs them: every GELU the torch model computes
becomes one ONNX Gelu, the result is at opset 20, passes onnx.checker (full)
and ONNX Runtime gives the original's outputs on the model's own inputs.

A representative subset (each model at one old opset, each adapter family
that the exports contain, a 12-layer BERT, a fp16 ViT) always runs; the full 6 x 11
matrix is marked slow. Its last run by hand, with
``python tests/helpers/old_opset_exports.py``, is benchmarks/results/old_opset_exports.md.

A tiny conv net exported at opsets 9 and 10 brings the adapted ops torch
writes outside transformers (Upsample / Resize-10 with a non-integer scale,
Clip-6, Pad-2 with a value, TopK-1, a channel Softmax) through the same path.

What torch cannot write is asserted, not skipped: the TorchScript exporter
refuses BERT and CLIP at opset 9 (dynamic Slice), and writes T5 at opsets
9..11 with an int64 Min that no opset before 12 allows (ONNX Runtime refuses
that file too): gelu-onnx answers exit 2 (bad input) there.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
from helpers import old_opset_exports as E  # noqa: E402

import gelu_onnx  # noqa: E402
from gelu_onnx import cli, contract  # noqa: E402

GELUS = {"bert": 2, "bert12": 12, "vit": 2, "vit_fp16": 2, "gpt2": 2, "t5_v1_1": 2, "whisper_encoder": 4, "clip_text": 2}
NOT_EXPORTED = {("bert", 9), ("clip_text", 9)}
INVALID_FROM_TORCH = {("t5_v1_1", 9), ("t5_v1_1", 10), ("t5_v1_1", 11)}
SUBSET = [("bert", 11), ("bert12", 10), ("vit", 9), ("vit_fp16", 11), ("gpt2", 10), ("t5_v1_1", 12), ("whisper_encoder", 9),
          ("clip_text", 12), ("t5_v1_1", 11), ("bert", 9)]
FULL = [(m, o) for m in E.MODELS for o in E.OPSETS if (m, o) not in SUBSET]


@pytest.fixture(scope="session")
def exported(tmp_path_factory):
    """One export per (model, opset) for the session: path, or torch's reason."""
    root = tmp_path_factory.mktemp("old_opsets")
    cache: dict = {}

    def get(name: str, opset: int):
        if (name, opset) not in cache:
            path = root / f"{name}_op{opset}.onnx"
            cache[(name, opset)] = (path, E.export(name, opset, path))
        return cache[(name, opset)]
    return get


def _run(path_or_model, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    src = path_or_model if isinstance(path_or_model, str) else path_or_model.SerializeToString()
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _case(exported, name, opset, capsys):
    src, why = exported(name, opset)
    if (name, opset) in NOT_EXPORTED:
        assert why and "Slice with dynamic inputs" in why, why
        return
    assert why is None, why
    dst = src.with_name(src.stem + "_standard.onnx")
    rc = cli.main(["fuse", str(src), "-o", str(dst), "--target", "standard"])
    err = capsys.readouterr().err
    if (name, opset) in INVALID_FROM_TORCH:
        assert rc == 2 and "Min" in err and "int64" in err, err
        return
    assert rc == 0, err
    assert cli.main(["check", str(src), str(dst)]) == 0, capsys.readouterr().out
    out = onnx.load(str(dst))
    assert next(o.version for o in out.opset_import if o.domain in ("", "ai.onnx")) == contract.STANDARD_GELU_OPSET
    onnx.checker.check_model(out, full_check=True)
    gelus = sum(n.op_type == "Gelu" and n.domain in ("", "ai.onnx") for n in out.graph.node)
    # every attention Softmax below 13 is over the last axis: proven from the
    # inferred rank, so no Flatten/Reshape pair is added around it
    flat = [sum(n.op_type == "Flatten" for n in g.node) for g in (onnx.load(str(src)).graph, out.graph)]
    assert flat[0] == flat[1], flat
    assert gelus == GELUS[name], gelus
    feeds = E.feeds(name)
    for a, b in zip(_run(str(dst), feeds), _run(str(src), feeds)):
        tol = 2e-3 if a.dtype == np.float16 else 1e-5  # fp16: the parity goal of `check`
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=max(tol, 1e-4), atol=tol)
    res = gelu_onnx.inspect(str(src), "standard")
    assert len(res.fusions) == GELUS[name]


@pytest.mark.parametrize("name,opset", SUBSET, ids=[f"{m}-op{o}" for m, o in SUBSET])
def test_old_opset_export_to_standard(exported, name, opset, capsys):
    _case(exported, name, opset, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name,opset", FULL, ids=[f"{m}-op{o}" for m, o in FULL])
def test_old_opset_export_to_standard_full(exported, name, opset, capsys):
    _case(exported, name, opset, capsys)


class _OpsModule:
    """A tiny conv net whose TorchScript export at old opsets holds the ops
    the upgrade adapts (Upsample/Resize-10 with a non-integer scale, Clip-6,
    Pad-2 with a value, TopK-1, Softmax over a non-last axis) next to two GELUs."""

    @staticmethod
    def build():
        import torch
        import torch.nn.functional as F

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv, self.lin = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Linear(8, 8)

            def forward(self, x):
                y = self.conv(x)
                a = F.interpolate(y, scale_factor=2.0, mode="nearest")
                b = F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=False)
                c = F.interpolate(y, scale_factor=1.5, mode="nearest")
                z = F.gelu(self.lin((a + b).permute(0, 2, 3, 1)))
                return (z, F.gelu(c), torch.softmax(y, dim=1), torch.clamp(y, -0.2, 0.3),
                        F.pad(y, (1, 2, 0, 1), value=0.7), y.topk(3, dim=1)[0])

        torch.manual_seed(0)
        m = M().eval()
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.1)  # biases non-zero
        return m


@pytest.mark.parametrize("opset,adapted", [(9, {"Clip", "Pad", "Softmax", "TopK", "Upsample"}),
                                           (10, {"Clip", "Pad", "Resize", "Softmax"})])
def test_real_exports_of_the_adapted_ops(tmp_path, opset, adapted, capsys):
    import warnings

    import torch

    src, dst = tmp_path / "m.onnx", tmp_path / "s.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(_OpsModule.build(), (torch.randn(2, 3, 6, 5),), str(src), dynamo=False,
                          opset_version=opset, input_names=["x"])
    capsys.readouterr()
    assert cli.main(["fuse", str(src), "-o", str(dst), "--target", "standard"]) == 0
    note = next(ln for ln in capsys.readouterr().out.splitlines() if "raised the default opset" in ln)
    assert set(note.split("adapted ")[1].split(";")[0].split(", ")) == adapted, note
    assert cli.main(["check", str(src), str(dst)]) == 0, capsys.readouterr().out
    onnx.checker.check_model(onnx.load(str(dst)), full_check=True)
