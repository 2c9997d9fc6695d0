"""The tiny Hugging Face architectures export_models.py exports: each with its
config, test inputs and the GELU count its construction implies."""
from __future__ import annotations

import dataclasses
import json
from typing import Callable

import torch
import transformers

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


def archs() -> list[Arch]:
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
