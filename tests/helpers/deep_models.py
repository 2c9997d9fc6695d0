"""12-layer BERT-like and ViT-like models for the parity verdict's tests,
exported at test time the way a user exports them (torch + transformers,
TorchScript or dynamo exporter, fp32 or fp16), with a small hidden size so
that CI can run them.

Every parameter is random and non-zero: Hugging Face initialises biases to 0
and LayerNorm to (1, 0), and a dropped or doubled bias in such a model
changes nothing. Weights ~ N(0, 0.05), biases ~ N(0, 0.1), LayerNorm scale ~
1 + N(0, 0.1), shift ~ N(0, 0.1). Exports are cached per process.
"""
from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: models/params.py

LAYERS, HIDDEN, HEADS, FFN, VOCAB, SEQ = 12, 64, 4, 256, 96, 16
_CACHE: dict = {}
# The verdict tests' whole matrix (every target, dtype and planted fault of the 12-layer exports) runs with
# GELU_ONNX_FULL_VERDICT=1; by default one case of each class runs (tests/README.md).
FULL_ONLY = pytest.mark.skipif(os.environ.get("GELU_ONNX_FULL_VERDICT") != "1",
                               reason="one of the full verdict matrix: GELU_ONNX_FULL_VERDICT=1 runs it")


def opt_in(cases: list, keep: list) -> list:
    """``cases`` for pytest.mark.parametrize, all but those in ``keep`` run only with GELU_ONNX_FULL_VERDICT=1."""
    return [c if c in keep else pytest.param(*(c if isinstance(c, tuple) else (c,)), marks=FULL_ONLY)
            for c in cases]


def _randomize(model, seed: int) -> None:
    """models/params.py's biases and norms, and matrices drawn wider than
    Hugging Face's 0.02 so every GELU sees inputs of order 1 (where erf and
    tanh differ) through twelve layers."""
    import torch

    from models.params import randomize_params

    randomize_params(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))


def build(arch: str, act: str = "gelu", seed: int = 0):
    """(torch model, example inputs {name: ndarray}) for 'bert' or 'vit'."""
    import transformers as T

    common = dict(hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=FFN,
                  hidden_act=act, attn_implementation="eager")
    rng = np.random.default_rng(seed)
    if arch == "bert":
        model = T.BertModel(T.BertConfig(vocab_size=VOCAB, max_position_embeddings=64, **common))
        inputs = {"input_ids": rng.integers(0, VOCAB, size=(2, SEQ)).astype(np.int64)}
    elif arch == "vit":
        model = T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, **common))
        inputs = {"pixel_values": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
    else:
        raise ValueError(arch)
    _randomize(model, seed)
    return model.eval(), inputs


def export(arch: str, exporter: str, dtype: str, folder: Path, act: str = "gelu") -> tuple[Path, dict]:
    """(the .onnx path, inputs) of one export; ``exporter`` 'torchscript'
    (opset 17), 'dynamo' (opset 18) or 'dynamo-default' (torch's default
    opset: ONNX Gelu), ``dtype`` 'fp32' or 'fp16'."""
    import torch
    from models.export_models import Positional

    key = (arch, exporter, dtype, act)
    if key in _CACHE and _CACHE[key][0].exists():
        return _CACHE[key]
    model, inputs = build(arch, act)
    if dtype == "fp16":
        model = model.half()
        inputs = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in inputs.items()}
    names = list(inputs)
    path = Path(folder) / f"{arch}_{act}_{exporter}_{dtype}.onnx"
    args = tuple(torch.from_numpy(inputs[n]) for n in names)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(Positional(model, names).eval(), args, str(path), dynamo=False, opset_version=17,
                              input_names=names, dynamic_axes={n: {0: "batch"} for n in names})
        else:
            opset = {"opset_version": 18} if exporter == "dynamo" else {}
            torch.onnx.export(Positional(model, names).eval(), args, str(path), dynamo=True, input_names=names,
                              external_data=False, **opset)
    onnx.checker.check_model(str(path))
    _CACHE[key] = (path, inputs)
    return _CACHE[key]


def mlp_bf16(folder: Path, act: str = "gelu", seed: int = 0, bias_std: float = 0.1) -> tuple[Path, dict]:
    """A 12-layer bf16 MLP stack as ONNX Runtime's CPU EP runs one: it has
    bf16 kernels for Cast, LayerNormalization and data movement only (no
    MatMul, Add, Erf), so the weights, biases, norms and the activations
    between layers are bf16 and the math runs in float32 between Casts.
    Per layer (a post-norm residual FFN): h (bf16) -> Cast f32 -> MatMul
    Cast(W) -> Add Cast(b) -> GELU (TorchScript's erf chain; QuickGELU
    x*Sigmoid(1.702x) for 'quick_gelu') -> + the layer's input, in f32 ->
    Cast bf16 -> LayerNormalization (bf16). x: [batch, SEQ, HIDDEN]
    bf16. W ~ N(0, 1/HIDDEN), biases N(0, bias_std^2) (default 0.1, as
    models/params.py draws them), norm shifts N(0, 0.1^2), norm scales
    1 + N(0, 0.1^2)."""
    import ml_dtypes
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    key = ("mlp", "onnx", "bf16", act, bias_std)
    if key in _CACHE and _CACHE[key][0].exists():
        return _CACHE[key]
    rng = np.random.default_rng(seed)
    bf = ml_dtypes.bfloat16

    def init(name, a):
        inits.append(nh.from_array(np.asarray(a, np.float32).astype(bf), name))
        return name

    inits, nodes = [], []
    f32 = [nh.from_array(np.array(v, np.float32), n) for n, v in
           (("sqrt2", 2**0.5), ("one", 1.0), ("half", 0.5), ("alpha", 1.702))]
    cur = "x"
    for i in range(LAYERS):
        w = init(f"W{i}", rng.standard_normal((HIDDEN, HIDDEN)) / HIDDEN**0.5)
        b = init(f"b{i}", rng.standard_normal(HIDDEN) * bias_std)
        gam = init(f"gamma{i}", 1 + rng.standard_normal(HIDDEN) * 0.1)
        bet = init(f"beta{i}", rng.standard_normal(HIDDEN) * 0.1)
        t = f"l{i}_"
        nodes += [h.make_node("Cast", [cur], [t + "hf"], to=T.FLOAT), h.make_node("Cast", [w], [t + "wf"], to=T.FLOAT),
                  h.make_node("MatMul", [t + "hf", t + "wf"], [t + "mm"]),
                  h.make_node("Cast", [b], [t + "bf"], to=T.FLOAT), h.make_node("Add", [t + "mm", t + "bf"], [t + "pre"])]
        x = t + "pre"
        if act == "quick_gelu":
            nodes += [h.make_node("Mul", [x, "alpha"], [t + "ax"]), h.make_node("Sigmoid", [t + "ax"], [t + "sg"]),
                      h.make_node("Mul", [x, t + "sg"], [t + "g"])]
        else:
            nodes += [h.make_node("Div", [x, "sqrt2"], [t + "d"]), h.make_node("Erf", [t + "d"], [t + "e"]),
                      h.make_node("Add", [t + "e", "one"], [t + "p"]), h.make_node("Mul", [x, t + "p"], [t + "m"]),
                      h.make_node("Mul", [t + "m", "half"], [t + "g"])]
        nodes += [h.make_node("Add", [t + "hf", t + "g"], [t + "res"]),
                  h.make_node("Cast", [t + "res"], [t + "rb"], to=T.BFLOAT16),
                  h.make_node("LayerNormalization", [t + "rb", gam, bet], [t + "out"], axis=-1, epsilon=1e-5)]
        cur = t + "out"
    nodes[-1].output[0] = "y"
    g = h.make_graph(nodes, "mlp_bf16", [h.make_tensor_value_info("x", T.BFLOAT16, ["batch", SEQ, HIDDEN])],
                     [h.make_tensor_value_info("y", T.BFLOAT16, ["batch", SEQ, HIDDEN])], inits + f32)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    path = Path(folder) / f"mlp_{act}_onnx_bf16{'' if bias_std == 0.1 else f'_b{bias_std:g}'}.onnx"
    onnx.save(m, str(path))
    inputs = {"x": rng.standard_normal((2, SEQ, HIDDEN)).astype(bf)}
    _CACHE[key] = (path, inputs)
    return _CACHE[key]


_FUSED: dict = {}


def fused(arch: str, exporter: str, dtype: str, target: str, folder: Path, act: str = "gelu") -> tuple[Path, Path]:
    """(the export, the export fused for ``target`` by gelu_onnx.fuse_file)."""
    import gelu_onnx

    key = (arch, exporter, dtype, target, act)
    if key not in _FUSED or not _FUSED[key][1].exists():
        path, _ = mlp_bf16(folder, act) if arch == "mlp" else export(arch, exporter, dtype, folder, act)
        out = Path(folder) / f"{path.stem}.{target}.onnx"
        gelu_onnx.fuse_file(str(path), str(out), target=target)
        _FUSED[key] = (path, out)
    return _FUSED[key]


def assert_correct_passes(arch: str, exporter: str, dtype: str, folder: Path, act: str = "gelu"):
    """Every target's correct fusion passes check with its defaults, judged
    against the precise reference, and is about as accurate as the original
    (mean deviation within 1.5x of the original's)."""
    from gelu_onnx import verify

    islands = "Conv, Erf" if arch == "vit" else "Erf"  # no float64 kernel in ONNX Runtime's CPU EP
    want = "float32" if dtype == "fp16" else f"float64 ({islands} in float32)"
    for target in ("custom", "standard", "ort"):
        orig, fused_path = fused(arch, exporter, dtype, target, folder, act)
        rep = verify.check(orig, fused_path, iterations=2)
        assert rep.ok, (target, [(r.name, r.message) for r in rep.outputs])
        assert rep.precise_reference == f"the original in {want} (CPU, optimizations off)"
        for r in rep.outputs:
            assert r.verdict == "reference" and r.fused_mean_dev <= 1.5 * r.original_mean_dev, (target, r)


def assert_caught(orig: Path, fused_path: Path, kind: str, **check_kw):
    """Plant ``kind`` in the middle GELU of the fused model (tests/helpers/parity_faults.py):
    check must fail every float output with its defaults and --localize must
    name that GELU first, every GELU before it passing. Returns the report."""
    from helpers import parity_faults as PF

    from gelu_onnx import verify

    bad = PF.plant(onnx.load(str(fused_path)), kind)
    tensor = next(n.output[0] for n in bad.model.graph.node if n.name == bad.node)
    # a Cast-wrapped GELU's tensor is the Cast's output (the original chain's root)
    tensor = next((n.output[0] for n in bad.model.graph.node if n.op_type == "Cast" and list(n.input) == [tensor]),
                  tensor)
    rep = verify.check(orig, bad.model, localize_gelus=True, **check_kw)
    assert not rep.ok and not any(r.passed for r in rep.outputs if r.verdict != "exact"), kind
    assert rep.first_failure == tensor, (kind, rep.first_failure, tensor)
    names = [f["tensor"] for f in rep.fusions]
    assert names.index(tensor) == bad.index and all(f["pass"] for f in rep.fusions[: bad.index])
    return rep
