"""Counting GELUs in a torch model, independently of the ONNX graph and of
gelu_onnx's matcher: a forward pass with hooks on every GELU activation module
(and a torch-function mode for bare ``F.gelu`` calls). Used by
export_models.py to fill the manifest's ``expected_gelus``."""
from __future__ import annotations

from collections import Counter

import onnx
import torch
from torch.overrides import TorchFunctionMode
from transformers import activations as hf_act

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
