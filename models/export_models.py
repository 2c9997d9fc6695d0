"""Export tiny Hugging Face transformers to ONNX with both torch exporters.

Each architecture is built from a TINY config (1-2 layers, hidden 32, small
vocab / image) with a fixed seed, exported with the TorchScript exporter
(``dynamo=False``) and the dynamo exporter (``dynamo=True``) at opsets 14, 17
and 18, and written as one self-contained file (weights embedded, IR <= 10)
plus an entry in ``manifest.json``.

``expected_gelus`` in the manifest is counted from the torch model, not from
the graph: a forward pass with hooks on every GELU activation module (and a
torch-function mode for bare ``F.gelu`` calls) counts the GELU activations
the model computes, and the count must equal the number derived from the
config (layers x GELUs per layer + extras), or the architecture is rejected.
The graph is inspected separately (Erf/Tanh/Sigmoid/Gelu node counts) as a
cross-check.

Combinations an exporter cannot produce are recorded under ``skipped`` in the
manifest with the reason; nothing is dropped silently.

Usage (from the repository root)::

    python models/export_models.py              # everything (~15 min, 2 cores)
    python models/export_models.py --only bert gpt2   # re-export some; others kept
    python models/export_models.py --list
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import os
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import torch
import transformers
from torch.overrides import TorchFunctionMode
from transformers import activations as hf_act

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
IR_VERSION = 10  # onnxruntime 1.31 loads <= 13; 10 is what torch's dynamo exporter writes
OPSETS = (14, 17, 18)
EXPORTERS = ("torchscript", "dynamo")
SEED = 0
# Export-faithfulness check: ORT on the exported file vs. the torch model.
EXPORT_ATOL = 1e-4

# --------------------------------------------------------------------------
# Counting GELUs in the torch model (independent of the ONNX graph and of
# gelu_onnx's matcher).
# --------------------------------------------------------------------------


def _bloom_gelu_cls():
    from transformers.models.bloom.modeling_bloom import BloomGelu

    return BloomGelu


def _module_form(mod: torch.nn.Module) -> str | None:
    """GELU form an activation module computes, or None if it is not a GELU."""
    if isinstance(mod, hf_act.QuickGELUActivation):
        return "sigmoid"
    if isinstance(
        mod,
        (
            hf_act.NewGELUActivation,
            hf_act.FastGELUActivation,
            hf_act.AccurateGELUActivation,
            hf_act.GELUTanh,
            _bloom_gelu_cls(),
        ),
    ):
        return "tanh"
    if isinstance(mod, (hf_act.GELUActivation, hf_act.ClippedGELUActivation)):
        return "erf"
    if isinstance(mod, torch.nn.GELU):
        return "tanh" if mod.approximate == "tanh" else "erf"
    return None


class _GeluCounter(TorchFunctionMode):
    """Counts GELU activations during one forward.

    A GELU activation module counts once (whatever it calls inside); a bare
    ``torch.nn.functional.gelu`` call outside such a module counts once too
    (Whisper's conv stem calls it directly). Erf/Tanh/Sigmoid calls outside
    GELU modules are tallied separately (poolers, SiLU...) for the record.
    """

    def __init__(self, model: torch.nn.Module, extra_fns: list[tuple[object, str, str]]):
        super().__init__()
        self.forms: Counter = Counter()
        self.others: Counter = Counter()
        self._depth = 0
        self._handles = []
        self._patched = []
        for mod in model.modules():
            form = _module_form(mod)
            if form is not None:
                self._handles.append(mod.register_forward_pre_hook(self._enter(form)))
                self._handles.append(mod.register_forward_hook(self._leave))
        # Architectures that spell GELU as a plain python function (ESM).
        for owner, attr, form in extra_fns:
            fn = getattr(owner, attr)
            self._patched.append((owner, attr, fn))
            setattr(owner, attr, self._wrap(fn, form))

    def _enter(self, form):
        def hook(_mod, _args):
            if self._depth == 0:
                self.forms[form] += 1
            self._depth += 1

        return hook

    def _leave(self, _mod, _args, _out):
        self._depth -= 1

    def _wrap(self, fn, form):
        def wrapped(*a, **k):
            if self._depth == 0:
                self.forms[form] += 1
            self._depth += 1
            try:
                return fn(*a, **k)
            finally:
                self._depth -= 1

        return wrapped

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._depth == 0:
            if func is torch.nn.functional.gelu:
                approx = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
                self.forms["tanh" if approx == "tanh" else "erf"] += 1
            elif func in (torch.erf, torch.tanh, torch.sigmoid, torch.Tensor.tanh,
                          torch.Tensor.sigmoid, torch.nn.functional.silu, torch.nn.functional.tanh,
                          torch.nn.functional.sigmoid, torch.special.erf):
                self.others[getattr(func, "__name__", str(func))] += 1
        return func(*args, **(kwargs or {}))

    def close(self):
        for h in self._handles:
            h.remove()
        for owner, attr, fn in self._patched:
            setattr(owner, attr, fn)


def count_torch_gelus(model, inputs: dict, extra_fns) -> tuple[Counter, Counter]:
    counter = _GeluCounter(model, extra_fns)
    try:
        with torch.no_grad(), counter:
            model(**inputs)
    finally:
        counter.close()
    return counter.forms, counter.others


def graph_op_counts(model: onnx.ModelProto) -> dict[str, int]:
    """Erf/Tanh/Sigmoid/Gelu-like node counts, recursing into subgraphs and functions."""
    keep = ("Erf", "Tanh", "Sigmoid", "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Pow", "Relu", "Mish", "HardSigmoid")
    c: Counter = Counter()

    def walk(nodes):
        for n in nodes:
            if n.op_type in keep:
                c[n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"] += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g.node)
                for g in a.graphs:
                    walk(g.node)

    walk(model.graph.node)
    for f in model.functions:
        walk(f.node)
    return dict(sorted(c.items()))


# --------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------

TEXT = {"input_ids": {"shape": [2, 8], "dtype": "int64", "axes": {0: "batch", 1: "sequence"}}}
VOCAB = 64


def _text(vocab=VOCAB, mask=False):
    """input_ids [+ attention_mask, all ones: range [1, 2)].

    Decoder models get the mask as an input, as real exports do: without it
    transformers' mask code probes position ids for packed sequences with
    ``torch.diff``, which the TorchScript exporter cannot export.
    """
    spec = json.loads(json.dumps(TEXT))
    spec["input_ids"]["range"] = [0, vocab]
    if mask:
        spec["attention_mask"] = {**json.loads(json.dumps(TEXT["input_ids"])), "range": [1, 2]}
    return spec


def _pixels(size=32, channels=3):
    return {"pixel_values": {"shape": [2, channels, size, size], "dtype": "float32", "axes": {0: "batch"}}}


@dataclasses.dataclass
class Arch:
    name: str  # file stem
    architecture: str  # human name
    hf_class: str
    activation: str  # the config's hidden_act / activation_function string
    build: Callable[[], torch.nn.Module]
    inputs: dict
    # By construction: how many GELUs (per form) the forward computes.
    expected_forms: dict[str, int]
    notes: str = ""
    extra_fns: Callable[[], list] = lambda: []
    kind: str = "model"  # "model" | "activation-variant" | "negative-control"


def _cfg(cls, **kw):
    kw.setdefault("attn_implementation", "eager")
    return cls(**kw)


def _bert_like(config_cls, model_cls, act="gelu", **extra):
    def build():
        cfg = _cfg(
            config_cls,
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=32,
            hidden_act=act,
            **extra,
        )
        return model_cls(cfg)

    return build


def _archs() -> list[Arch]:
    T = transformers
    A: list[Arch] = []

    # --- the four the issue names ---------------------------------------
    A.append(Arch("bert", "BERT", "BertModel", "gelu", _bert_like(T.BertConfig, T.BertModel), _text(), {"erf": 2},
                  notes="pooler adds one Tanh that is not a GELU"))
    A.append(Arch("vit", "ViT", "ViTModel", "gelu",
                  lambda: T.ViTModel(_cfg(T.ViTConfig, image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=64, hidden_act="gelu")),
                  _pixels(), {"erf": 2}, notes="pooler adds one Tanh that is not a GELU"))
    A.append(Arch("gpt2", "GPT-2", "GPT2Model", "gelu_new",
                  lambda: T.GPT2Model(_cfg(T.GPT2Config, vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                           activation_function="gelu_new", use_cache=False)),
                  _text(mask=True), {"tanh": 2}))
    A.append(Arch("clip_text", "CLIP text", "CLIPTextModel", "quick_gelu",
                  lambda: T.CLIPTextModel(_cfg(T.CLIPTextConfig, vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                               num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=16,
                                               hidden_act="quick_gelu", eos_token_id=VOCAB - 1)),
                  _text(), {"sigmoid": 2}))

    # --- more architectures --------------------------------------------
    A.append(Arch("roberta", "RoBERTa", "RobertaModel", "gelu", _bert_like(T.RobertaConfig, T.RobertaModel), _text(), {"erf": 2}))
    A.append(Arch("xlm_roberta", "XLM-RoBERTa", "XLMRobertaModel", "gelu",
                  _bert_like(T.XLMRobertaConfig, T.XLMRobertaModel), _text(), {"erf": 2}))
    A.append(Arch("electra", "ELECTRA", "ElectraModel", "gelu",
                  _bert_like(T.ElectraConfig, T.ElectraModel, embedding_size=16), _text(), {"erf": 2}))
    A.append(Arch("albert", "ALBERT", "AlbertModel", "gelu_new",
                  _bert_like(T.AlbertConfig, T.AlbertModel, act="gelu_new", embedding_size=16), _text(), {"tanh": 2},
                  notes="ALBERT shares one layer's weights across both layers; the GELU runs twice"))
    A.append(Arch("mpnet", "MPNet", "MPNetModel", "gelu", _bert_like(T.MPNetConfig, T.MPNetModel), _text(), {"erf": 2}))
    A.append(Arch("deberta_v2", "DeBERTa-v2", "DebertaV2Model", "gelu",
                  _bert_like(T.DebertaV2Config, T.DebertaV2Model, relative_attention=True, position_buckets=8,
                             max_relative_positions=16, pos_att_type=["p2c", "c2p"]),
                  _text(), {"erf": 2}))
    A.append(Arch("distilbert", "DistilBERT", "DistilBertModel", "gelu",
                  lambda: T.DistilBertModel(_cfg(T.DistilBertConfig, vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2,
                                                 hidden_dim=64, max_position_embeddings=32, activation="gelu")),
                  _text(), {"erf": 2}))
    A.append(Arch("esm", "ESM", "EsmModel", "gelu",
                  _bert_like(T.EsmConfig, T.EsmModel, pad_token_id=1, mask_token_id=2, position_embedding_type="absolute",
                             token_dropout=False),
                  _text(), {"erf": 2}, notes="ESM spells GELU as its own python erf function",
                  extra_fns=lambda: [(__import__("transformers.models.esm.modeling_esm", fromlist=["x"]), "gelu", "erf")]))
    A.append(Arch("gpt_neo", "GPT-Neo", "GPTNeoModel", "gelu_new",
                  lambda: T.GPTNeoModel(_cfg(T.GPTNeoConfig, vocab_size=VOCAB, max_position_embeddings=32, hidden_size=32,
                                             num_layers=2, num_heads=2, intermediate_size=64,
                                             attention_types=[[["global", "local"], 1]], window_size=4,
                                             activation_function="gelu_new", use_cache=False)),
                  _text(mask=True), {"tanh": 2}))
    A.append(Arch("gptj", "GPT-J", "GPTJModel", "gelu_new",
                  lambda: T.GPTJModel(_cfg(T.GPTJConfig, vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2,
                                           rotary_dim=8, activation_function="gelu_new", use_cache=False)),
                  _text(mask=True), {"tanh": 2}))
    A.append(Arch("codegen", "CodeGen", "CodeGenModel", "gelu_new",
                  lambda: T.CodeGenModel(_cfg(T.CodeGenConfig, vocab_size=VOCAB, n_positions=32, n_ctx=32, n_embd=32,
                                              n_layer=2, n_head=4, rotary_dim=4, activation_function="gelu_new",
                                              use_cache=False)),
                  _text(mask=True), {"tanh": 2}, notes="4 heads: CodeGen's fused qkv splits into mp_num=4 groups"))
    A.append(Arch("gpt_bigcode", "GPT-BigCode (StarCoder)", "GPTBigCodeModel", "gelu_pytorch_tanh",
                  lambda: T.GPTBigCodeModel(_cfg(T.GPTBigCodeConfig, vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2,
                                                 n_head=2, activation_function="gelu_pytorch_tanh", use_cache=False)),
                  _text(mask=True), {"tanh": 2}))
    A.append(Arch("bloom", "BLOOM", "BloomModel", "bloom_gelu",
                  lambda: T.BloomModel(_cfg(T.BloomConfig, vocab_size=VOCAB, hidden_size=32, n_layer=2, n_head=2,
                                            use_cache=False)),
                  _text(mask=True), {"tanh": 2}, notes="BLOOM's Megatron GELU: tanh(0.79788456*x*(1+0.044715*x*x))"))
    A.append(Arch("falcon", "Falcon", "FalconModel", "gelu",
                  lambda: T.FalconModel(_cfg(T.FalconConfig, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, new_decoder_architecture=False, multi_query=True,
                                             parallel_attn=True, bias=False, alibi=False, use_cache=False)),
                  _text(mask=True), {"erf": 2}))
    A.append(Arch("phi", "Phi", "PhiModel", "gelu_new",
                  lambda: T.PhiModel(_cfg(T.PhiConfig, vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=32,
                                          partial_rotary_factor=0.5, hidden_act="gelu_new", use_cache=False)),
                  _text(mask=True), {"tanh": 2}))
    A.append(Arch("t5_v1_1", "T5 v1.1 encoder (gated GELU)", "T5EncoderModel", "gelu_new",
                  lambda: T.T5EncoderModel(_cfg(T.T5Config, vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                                                num_heads=2, feed_forward_proj="gated-gelu", use_cache=False)),
                  _text(), {"tanh": 2}, notes="gated-gelu: gelu_new(wi_0 x) * (wi_1 x)"))
    A.append(Arch("bart", "BART", "BartModel", "gelu",
                  lambda: T.BartModel(_cfg(T.BartConfig, vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1,
                                           encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                           decoder_ffn_dim=64, max_position_embeddings=32, activation_function="gelu",
                                           use_cache=False)),
                  _text(), {"erf": 2}, notes="encoder + decoder, 1 layer each; decoder_input_ids derived from input_ids"))
    A.append(Arch("whisper_encoder", "Whisper encoder", "WhisperEncoder", "gelu",
                  lambda: T.WhisperModel(_cfg(T.WhisperConfig, vocab_size=VOCAB, num_mel_bins=8, max_source_positions=16, pad_token_id=1,
                                              bos_token_id=0, eos_token_id=2, decoder_start_token_id=0,
                                              max_target_positions=16, d_model=32, encoder_layers=2, decoder_layers=1,
                                              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                              decoder_ffn_dim=64, activation_function="gelu")).get_encoder(),
                  {"input_features": {"shape": [2, 8, 32], "dtype": "float32", "axes": {0: "batch"}}},
                  {"erf": 4}, notes="2 GELUs in the conv stem (F.gelu) + 1 per layer"))
    A.append(Arch("wav2vec2", "Wav2Vec2", "Wav2Vec2Model", "gelu",
                  lambda: T.Wav2Vec2Model(_cfg(T.Wav2Vec2Config, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=2, intermediate_size=64, conv_dim=(16, 16),
                                               conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                                               num_conv_pos_embedding_groups=2, feat_extract_norm="group",
                                               do_stable_layer_norm=False, mask_time_prob=0.0)),
                  {"input_values": {"shape": [2, 400], "dtype": "float32", "axes": {0: "batch", 1: "samples"}}},
                  {"erf": 5}, notes="2 conv-stem GELUs + 1 positional-conv GELU + 1 per layer"))
    A.append(Arch("deit", "DeiT", "DeiTModel", "gelu",
                  lambda: T.DeiTModel(_cfg(T.DeiTConfig, image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                           num_attention_heads=2, intermediate_size=64)),
                  _pixels(), {"erf": 2}))
    A.append(Arch("beit", "BEiT", "BeitModel", "gelu",
                  lambda: T.BeitModel(_cfg(T.BeitConfig, vocab_size=VOCAB, image_size=32, patch_size=8, hidden_size=32,
                                           num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                           use_relative_position_bias=True)),
                  _pixels(), {"erf": 2}))
    A.append(Arch("swin", "Swin", "SwinModel", "gelu",
                  lambda: T.SwinModel(_cfg(T.SwinConfig, image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                           num_heads=[1, 2], window_size=4, mlp_ratio=2.0)),
                  _pixels(), {"erf": 2}))
    A.append(Arch("convnext", "ConvNeXt", "ConvNextModel", "gelu",
                  lambda: T.ConvNextModel(T.ConvNextConfig(num_stages=2, hidden_sizes=[16, 32], depths=[1, 1],
                                                           image_size=32)),
                  _pixels(), {"erf": 2}))
    A.append(Arch("segformer", "SegFormer", "SegformerModel", "gelu",
                  lambda: T.SegformerModel(T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                                             hidden_sizes=[16, 32], patch_sizes=[7, 3], strides=[4, 2],
                                                             num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                                                             decoder_hidden_size=32)),
                  _pixels(), {"erf": 2}, notes="Mix-FFN: depthwise conv between the two linears"))
    A.append(Arch("clip_vision", "CLIP vision", "CLIPVisionModel", "quick_gelu",
                  lambda: T.CLIPVisionModel(_cfg(T.CLIPVisionConfig, image_size=32, patch_size=8, hidden_size=32,
                                                 intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                                 hidden_act="quick_gelu")),
                  _pixels(), {"sigmoid": 2}))

    # --- Hugging Face activation variants on a BERT body ----------------
    variants = {
        "gelu_new": {"tanh": 2},
        "gelu_fast": {"tanh": 2},
        "gelu_python": {"erf": 2},
        "gelu_pytorch_tanh": {"tanh": 2},
        "gelu_python_tanh": {"tanh": 2},
        "gelu_accurate": {"tanh": 2},
        "gelu_10": {"erf": 2},
        "quick_gelu": {"sigmoid": 2},
    }
    for act, forms in variants.items():
        A.append(Arch(f"bert_{act}", f"BERT with hidden_act={act}", "BertModel", act,
                      _bert_like(T.BertConfig, T.BertModel, act=act), _text(), forms, kind="activation-variant",
                      notes="gelu_10 clips the GELU output to [-10, 10]: the GELU inside still counts" if act == "gelu_10" else ""))

    # --- negative controls: no GELU at all ------------------------------
    A.append(Arch("opt", "OPT (ReLU)", "OPTModel", "relu",
                  lambda: T.OPTModel(_cfg(T.OPTConfig, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, ffn_dim=64,
                                          num_attention_heads=2, max_position_embeddings=32, word_embed_proj_dim=32,
                                          activation_function="relu", use_cache=False)),
                  _text(mask=True), {}, kind="negative-control"))
    A.append(Arch("llama", "LLaMA (SiLU)", "LlamaModel", "silu",
                  lambda: T.LlamaModel(_cfg(T.LlamaConfig, vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                            max_position_embeddings=32, hidden_act="silu", use_cache=False)),
                  _text(mask=True), {}, kind="negative-control", notes="x*sigmoid(x) (alpha 1) is SiLU, not QuickGELU"))
    A.append(Arch("bert_silu", "BERT with hidden_act=silu", "BertModel", "silu",
                  _bert_like(T.BertConfig, T.BertModel, act="silu"), _text(), {}, kind="negative-control"))
    return A


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------


class _Positional(torch.nn.Module):
    """Calls an HF model with named inputs and returns its top-level tensors.

    Both exporters then see a plain positional signature and a flat tuple.
    """

    def __init__(self, model, names):
        super().__init__()
        self.model = model
        self.names = list(names)

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=False)
        if isinstance(out, torch.Tensor):
            return (out,)
        return tuple(t for t in out if isinstance(t, torch.Tensor))


def make_inputs(spec: dict, seed: int = SEED) -> dict[str, np.ndarray]:
    """The test inputs a manifest entry describes (also used by the tests)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, s in spec.items():
        if s["dtype"].startswith("int"):
            lo, hi = s.get("range", [0, 2])
            out[name] = rng.integers(lo, hi, size=s["shape"], dtype=s["dtype"])
        else:
            out[name] = rng.standard_normal(s["shape"]).astype(s["dtype"])
    return out


def _strip_metadata(model: onnx.ModelProto) -> None:
    """Drop per-node stack traces / doc strings (most of a dynamo file's size)."""

    def strip(nodes):
        for n in nodes:
            n.doc_string = ""
            del n.metadata_props[:]
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    strip(a.g.node)
                for g in a.graphs:
                    strip(g.node)

    strip(model.graph.node)
    for f in model.functions:
        strip(f.node)
    del model.graph.value_info[:]  # shape annotations from the exporter; ORT re-infers


@contextlib.contextmanager
def _quiet():
    buf = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        # onnxscript reports a failed version conversion only through logging
        # (lastResort handler -> the redirected stderr), so keep logging on.
        warnings.simplefilter("ignore")
        yield buf


def _reason(e: BaseException, limit: int = 300) -> str:
    """One line: torch.onnx buries the cause under an 'Exception summary' header."""
    text = str(e)
    lines = [ln.strip() for ln in text.split("## Exception summary", 1)[-1].splitlines() if ln.strip()]
    return f"{type(e).__name__}: {(lines[0] if lines else '')[:limit]}"


def _export(wrapper, args, names, outputs, axes, exporter, opset) -> tuple[onnx.ModelProto, list[str]]:
    notes = []
    with tempfile.TemporaryDirectory() as td, _quiet() as log:
        path = os.path.join(td, "m.onnx")
        if exporter == "torchscript":
            torch.onnx.export(wrapper, args, path, dynamo=False, opset_version=opset, input_names=names,
                              output_names=outputs, dynamic_axes=axes, do_constant_folding=True)
            model = onnx.load(path)
        else:
            try:
                dims: dict[str, object] = {}
                shapes = tuple({k: dims.setdefault(v, torch.export.Dim(v)) for k, v in axes[n].items()} for n in names)
                prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset, input_names=names,
                                         output_names=outputs, dynamic_shapes=(shapes,), optimize=True)
            except Exception as e:  # noqa: BLE001 - record and retry static
                notes.append(f"dynamic shapes failed ({_reason(e, 200)}), exported with static shapes")
                prog = torch.onnx.export(wrapper, args, dynamo=True, opset_version=opset, input_names=names,
                                         output_names=outputs, optimize=True)
            model = prog.model_proto
        text = log.getvalue()
    if "Failed to convert the model to the target version" in text:
        reason = next((ln for ln in text.splitlines() if "Assertion" in ln), "")
        notes.append(f"onnx version converter failed: {reason.split('Assertion', 1)[-1].strip()[:200]}")
    _strip_metadata(model)
    model.ir_version = min(model.ir_version, IR_VERSION)
    return model, notes


def _dyn_axes(model: onnx.ModelProto, name: str) -> dict[str, str]:
    vi = next(i for i in model.graph.input if i.name == name)
    return {str(k): d.dim_param for k, d in enumerate(vi.type.tensor_type.shape.dim) if d.dim_param}


def _ort_run(model: onnx.ModelProto, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def export_arch(arch: Arch, out_dir: Path, opsets=OPSETS, exporters=EXPORTERS):
    """Export one architecture; returns (entries, skipped)."""
    names = list(arch.inputs)

    def fresh():
        # Same seed, same weights. A new instance per export: a TorchScript
        # trace can leave state behind that breaks a later torch.export
        # (Swin: data-dependent guard), so exports must not share a model.
        torch.manual_seed(SEED)
        with _quiet():
            model = arch.build().eval()
        return model, _Positional(model, names).eval()

    model, wrapper = fresh()
    feeds = make_inputs(arch.inputs)
    tins = {k: torch.from_numpy(v) for k, v in feeds.items()}
    args = tuple(tins[n] for n in names)

    forms, others = count_torch_gelus(model, tins, arch.extra_fns())
    forms = dict(sorted((k, v) for k, v in forms.items() if v))
    if forms != arch.expected_forms:
        raise RuntimeError(f"{arch.name}: hooks counted {forms}, construction says {arch.expected_forms}")
    with torch.no_grad():
        ref = [t.numpy() for t in wrapper(*args)]
    outputs = ["output" if len(ref) == 1 else f"output_{i}" for i in range(len(ref))]
    axes = {n: {int(k): v for k, v in s["axes"].items()} for n, s in arch.inputs.items()}

    entries, skipped = [], []
    for exporter in exporters:
        for opset in opsets:
            combo = {"name": arch.name, "exporter": exporter, "opset_requested": opset}
            try:
                with torch.no_grad():
                    onx, notes = _export(fresh()[1], args, names, outputs, axes, exporter, opset)
            except Exception as e:  # noqa: BLE001 - recorded in the manifest
                skipped.append({**combo, "reason": _reason(e)})
                continue
            opset_got = next(o.version for o in onx.opset_import if o.domain in ("", "ai.onnx"))
            if opset_got != opset:
                # The dynamo exporter builds opset 18 and down-converts; when that
                # fails it keeps 18, a copy of the opset-18 export.
                reason = f"exporter produced opset {opset_got} instead of {opset}"
                reason += f" ({'; '.join(notes)})" if notes else ""
                skipped.append({**combo, "reason": reason + "; not kept (the native export covers it)"})
                continue
            blob = onx.SerializeToString()
            digest = hashlib.sha256(blob).hexdigest()
            try:
                onnx.checker.check_model(onx, full_check=True)
                got = _ort_run(onx, feeds)
            except Exception as e:  # noqa: BLE001 - an invalid export is recorded, not kept
                skipped.append({**combo, "reason": f"export is invalid ({_reason(e, 200)})"
                                + (f"; {'; '.join(notes)}" if notes else "")})
                continue
            diff = max(float(np.max(np.abs(a - b))) if a.size else 0.0 for a, b in zip(got, ref))
            if not diff <= EXPORT_ATOL:
                skipped.append({**combo, "reason": f"export is not faithful: ORT vs torch max |diff| {diff:.3g}"})
                continue
            fname = f"{arch.name}_{exporter}_op{opset_got}.onnx"
            tmp = out_dir / (fname + ".tmp")
            tmp.write_bytes(blob)
            os.replace(tmp, out_dir / fname)
            n_graph = graph_op_counts(onx)
            n_gelu = sum(forms.values())
            already = sum(v for k, v in n_graph.items() if k.endswith("Gelu"))
            entries.append({
                "file": fname,
                "name": arch.name,
                "architecture": arch.architecture,
                "hf_class": arch.hf_class,
                "activation": arch.activation,
                "kind": arch.kind,
                "exporter": exporter,
                "opset_requested": opset,
                "opset": opset_got,
                "ir_version": onx.ir_version,
                # Test shapes, and the axes the file really left dynamic.
                "inputs": {n: {"dtype": s["dtype"], "shape": s["shape"], "dynamic_axes": _dyn_axes(onx, n),
                               **({"range": s["range"]} if "range" in s else {})}
                           for n, s in arch.inputs.items()},
                "outputs": outputs,
                "expected_gelus": n_gelu,
                "expected_forms": forms,
                # GELUs the exporter already emitted as one op are not fusions.
                # Per target. ONNX has no standard op for x*sigmoid(a*x), so
                # --target standard leaves QuickGELUs as they are.
                "expected_fusions": {
                    "custom": n_gelu - already,
                    "standard": n_gelu - already - forms.get("sigmoid", 0),
                    "ort": n_gelu - already,
                },
                "expected_gelus_standard": n_gelu - already - forms.get("sigmoid", 0),
                "graph_ops": n_graph,
                "torch_other_calls": dict(sorted(others.items())),
                "export_max_abs_diff": diff,
                "size_bytes": len(blob),
                "sha256": digest,
                "notes": "; ".join(x for x in [arch.notes, *notes] if x),
            })
    return entries, skipped


def _load_manifest():
    if MANIFEST.exists():
        return json.loads(MANIFEST.read_text())
    return {"models": [], "skipped": []}


README = HERE / "README.md"
TABLE_BEGIN, TABLE_END = "<!-- table:begin (written by export_models.py) -->", "<!-- table:end -->"


def readme_table(manifest: dict) -> str:
    """The README's file table and skip list, generated from the manifest."""
    rows = ["| file | architecture | HF class | activation | exporter | opset | GELUs (forms) | "
            "custom / standard / ort fusions | graph Erf/Tanh/Sigmoid | KB |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for e in manifest["models"]:
        forms = ", ".join(f"{v} {k}" for k, v in e["expected_forms"].items()) or "none"
        g = e["graph_ops"]
        fx = e["expected_fusions"]
        rows.append(f"| `{e['file']}` | {e['architecture']} | {e['hf_class']} | `{e['activation']}` | {e['exporter']} "
                    f"| {e['opset']} | {e['expected_gelus']} ({forms}) | {fx['custom']} / {fx['standard']} / {fx['ort']} "
                    f"| {g.get('Erf', 0)}/{g.get('Tanh', 0)}/{g.get('Sigmoid', 0)} | {e['size_bytes'] // 1024} |")
    total = sum(e["size_bytes"] for e in manifest["models"])
    rows.append("")
    rows.append(f"{len(manifest['models'])} files, {len({e['name'] for e in manifest['models']})} architectures / "
                f"variants, {total / 1e6:.1f} MB.")
    rows.append("")
    rows.append("Combinations not kept, and why:")
    rows.append("")
    for x in manifest["skipped"]:
        rows.append(f"- {x['name']} / {x['exporter']} / opset {x['opset_requested']}: {x['reason']}")
    return "\n".join(rows)


def _write_readme(manifest: dict) -> None:
    if not README.exists():
        return
    text = README.read_text()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        return
    head, rest = text.split(TABLE_BEGIN, 1)
    _, tail = rest.split(TABLE_END, 1)
    tmp = README.with_suffix(".md.tmp")
    tmp.write_text(f"{head}{TABLE_BEGIN}\n{readme_table(manifest)}\n{TABLE_END}{tail}")
    os.replace(tmp, README)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="export only these architectures (others stay)")
    ap.add_argument("--list", action="store_true", help="list architecture names and exit")
    ap.add_argument("--readme", action="store_true", help="only rewrite README.md's table from manifest.json")
    ap.add_argument("--out", type=Path, default=HERE, help="output folder (default: models/)")
    a = ap.parse_args(argv)
    archs = _archs()
    if a.readme:
        _write_readme(_load_manifest())
        return 0
    if a.list:
        for x in archs:
            print(f"{x.name:24s} {x.hf_class:20s} {x.activation:18s} {x.kind}")
        return 0
    names = {x.name for x in archs}
    if a.only and not set(a.only) <= names:
        print(f"error: unknown architecture(s): {sorted(set(a.only) - names)}", file=sys.stderr)
        return 2
    chosen = [x for x in archs if not a.only or x.name in a.only]
    a.out.mkdir(parents=True, exist_ok=True)
    manifest = _load_manifest() if a.only else {"models": [], "skipped": []}
    redo = {x.name for x in chosen}
    models = [e for e in manifest["models"] if e["name"] not in redo]
    skipped = [e for e in manifest["skipped"] if e["name"] not in redo]
    failed = 0
    for arch in chosen:
        try:
            e, s = export_arch(arch, a.out)
        except Exception as exc:  # noqa: BLE001 - a whole architecture failed: record it
            traceback.print_exc()
            e, s = [], [{"name": arch.name, "exporter": "*", "opset_requested": None,
                         "reason": _reason(exc)}]
            failed += 1
        models += e
        skipped += s
        print(f"{arch.name:22s} kept {len(e)}  skipped {len(s)}" + "".join(f"\n    skip {x['exporter']} op{x['opset_requested']}: {x['reason']}" for x in s), flush=True)
    order = {x.name: i for i, x in enumerate(archs)}
    key = lambda e: (order.get(e["name"], 1e9), e["exporter"], e.get("opset_requested") or 0)  # noqa: E731
    manifest = {
        "generator": "models/export_models.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "onnx": onnx.__version__, "onnxscript": __import__("onnxscript").__version__},
        "seed": SEED,
        "test_input_seed": SEED,
        "models": sorted(models, key=key),
        "skipped": sorted(skipped, key=key),
    }
    tmp = MANIFEST.with_suffix(".json.tmp") if a.out == HERE else a.out / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, tmp.with_suffix(""))
    if a.out == HERE:
        _write_readme(manifest)
    total = sum(e["size_bytes"] for e in manifest["models"])
    print(f"{len(manifest['models'])} files, {total / 1e6:.1f} MB; {len(manifest['skipped'])} combos skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
