"""TorchScript exports (torch.onnx.export, ``dynamo=False``) of tiny Hugging
Face models at old opsets, as published checkpoints from before 2023 were
written. Shared by tests/test_old_opset_exports.py and the by-hand sweep
(``python tests/helpers/old_opset_exports.py``; its table is
benchmarks/results/old_opset_exports.md).

The models are models/archs.py's tiny configs with every 1-D parameter
(biases, LayerNorm scale and shift) drawn at random and non-zero, so a
wrong adaptation of a LayerNorm/bias path shows in the outputs. CLIP's text
tower is built with hidden_act="gelu" (OpenCLIP / LAION checkpoints): its
default quick_gelu has no standard op, so `standard` would leave it alone
and raise nothing.
"""
from __future__ import annotations

import contextlib
import io
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("bert", "vit", "gpt2", "t5_v1_1", "whisper_encoder", "clip_text")
OPSETS = tuple(range(9, 20))


def _arch(name: str):
    sys.path.insert(0, str(ROOT))
    import transformers as T

    from models import archs as A

    arch = next(a for a in A.archs() if a.name == name.replace("bert12", "bert").removesuffix("_fp16"))
    if name == "bert12":  # the deep one: 12 layers, 12 GELUs
        arch.build = lambda: T.BertModel(T.BertConfig(
            attn_implementation="eager", vocab_size=A.VOCAB, hidden_size=32, num_hidden_layers=12, num_attention_heads=2,
            intermediate_size=64, max_position_embeddings=32))
    if name == "clip_text":
        arch.build = lambda: T.CLIPTextModel(T.CLIPTextConfig(  # the same tiny config, GELU activation
            attn_implementation="eager", vocab_size=A.VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, max_position_embeddings=16, hidden_act="gelu", eos_token_id=A.VOCAB - 1))
    return arch


def feeds(name: str) -> dict[str, np.ndarray]:
    """The model's inputs (float ones in fp16 for a ``*_fp16`` name)."""
    from models.export_models import make_inputs

    out = make_inputs(_arch(name).inputs)
    if name.endswith("_fp16"):
        out = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in out.items()}
    return out


def export(name: str, opset: int, path: Path) -> str | None:
    """Write the export to ``path``; None, or torch's one-line reason when it
    cannot write this opset."""
    import torch

    arch = _arch(name)  # puts the repository on sys.path
    from models.export_models import Positional

    names = list(arch.inputs)
    torch.manual_seed(0)
    model = arch.build().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:  # biases and norm parameters: random, non-zero
                base = 1.0 if pname.endswith("weight") else 0.0
                p.copy_(base + 0.2 * torch.rand(p.shape, generator=g) + 0.05)
    if name.endswith("_fp16"):  # the whole model in half precision, as a fp16 checkpoint exports
        model = model.half()

    args = tuple(torch.from_numpy(v) for v in feeds(name).values())
    axes = {n: {int(k): v for k, v in s["axes"].items()} for n, s in arch.inputs.items()}
    buf = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            warnings.simplefilter("ignore")
            torch.onnx.export(Positional(model, names), args, str(path), dynamo=False, opset_version=opset,
                              input_names=names, dynamic_axes=axes, do_constant_folding=True)
    except Exception as e:  # noqa: BLE001 - torch cannot write this opset: say why in one line
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}" if str(e).strip() else type(e).__name__
    return None


def main() -> None:
    import argparse
    import subprocess
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--opsets", nargs="*", type=int, default=list(OPSETS))
    ap.add_argument("--keep", help="keep the exports in this folder (and reuse those already there)")
    a = ap.parse_args()
    out = Path(a.keep or tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    print("| model | opset | fuse --target standard | adapted | check |")
    print("|---|---|---|---|---|")
    for name in a.models:
        for opset in a.opsets:
            src, dst = out / f"{name}_op{opset}.onnx", out / f"{name}_op{opset}_standard.onnx"
            why = None if src.exists() and a.keep else export(name, opset, src)
            if why:
                print(f"| {name} | {opset} | torch cannot export: {why} | - | - |", flush=True)
                continue
            cli = [sys.executable, "-m", "gelu_onnx"]
            f = subprocess.run(cli + ["fuse", str(src), "-o", str(dst), "--target", "standard"],
                               capture_output=True, text=True)
            fused = f"exit {f.returncode}" + (f": {f.stderr.strip()}" if f.returncode else "")
            fused = fused.replace(f"{out}/", "")  # no machine paths in the table
            note = next((ln for ln in f.stdout.splitlines() if "raised the default opset" in ln), "")
            adapted = note.split("adapted ", 1)[1].split(";")[0] if "adapted " in note else "-"
            c = "-"
            if f.returncode == 0:
                p = subprocess.run(cli + ["check", str(src), str(dst)], capture_output=True, text=True)
                c = f"exit {p.returncode}" + ("" if p.returncode == 0 else f": {p.stdout.strip()[-200:]}")
            print(f"| {name} | {opset} | {fused} | {adapted} | {c} |", flush=True)


if __name__ == "__main__":
    main()
