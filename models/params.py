"""Random non-zero biases and norm parameters for every model the parity
tests and benchmarks export.

Hugging Face initialises every bias to 0 and every LayerNorm to (weight 1,
bias 0). In such a model a fused GELU that drops or doubles its bias computes
exactly what the original does, so parity cannot see the fault (issue 23).
``randomize_params`` gives every bias and every normalisation weight a
seeded random value, the way a trained model has them:

    from models.params import randomize_params
    model = BertModel(config); randomize_params(model, seed=0)

Biases (any parameter named ``bias``): N(0, 0.1^2). Normalisation layers
(LayerNorm, RMSNorm, GroupNorm, BatchNorm and the architectures' own *Norm
modules): weight 1 + N(0, 0.1^2), bias N(0, 0.1^2). Layer scales
(ConvNeXt's ``layer_scale_parameter``, initialised to 1e-6, which mutes the
whole MLP branch, GELU included): 1 + N(0, 0.1^2) too. Matrices and
embeddings keep their initialisation. The model's global torch RNG state is untouched.
"""
from __future__ import annotations

import torch

BIAS_STD = 0.1
NORM_WEIGHT_STD = 0.1


def _is_norm(module: torch.nn.Module) -> bool:
    return isinstance(module, (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.modules.batchnorm._BatchNorm)) or \
        type(module).__name__.endswith("Norm") or "LayerNorm" in type(module).__name__ or \
        "RMSNorm" in type(module).__name__


@torch.no_grad()
def randomize_params(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Give every bias and norm weight of ``module`` a seeded random value
    (in place; returns ``module``). Parameters shared between layers (ALBERT)
    are drawn once."""
    gen = torch.Generator().manual_seed(seed)
    seen: set[int] = set()

    def draw(p: torch.nn.Parameter, mean: float, std: float) -> None:
        if id(p) in seen or not p.dtype.is_floating_point:
            return
        seen.add(id(p))
        v = torch.randn(p.shape, generator=gen, dtype=torch.float32) * std + mean
        p.copy_(v.to(p.dtype))

    for _, m in module.named_modules():
        if _is_norm(m):
            w = getattr(m, "weight", None)
            if isinstance(w, torch.nn.Parameter):
                draw(w, 1.0, NORM_WEIGHT_STD)
        for name, p in m.named_parameters(recurse=False):
            if name == "bias" or name.endswith("_bias"):
                draw(p, 0.0, BIAS_STD)
            elif "layer_scale" in name:
                draw(p, 1.0, NORM_WEIGHT_STD)
    return module

