"""Is FUSED a fused version of ORIGINAL, and did it keep our ops?

Fusing never changes a model's interface (``interface_differences``: bench
refuses an unrelated pair). ``custom_ops_gone``: a model fused for ``custom``
whose ``ai.gelu_onnx`` nodes another optimizer inlined (ONNX Runtime's saved
optimized model, onnx.inliner) keeps the opset import but none of the ops,
so our kernels never run. ``shape_dims`` reads Polygraphy's --input-shapes.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import onnx

from .. import contract
from ..errors import InputError
from ..onnxio import iter_graphs
from .inputs import dtype_name, input_specs


def _required_inputs(m: onnx.ModelProto) -> dict[str, int]:
    inits = {t.name for t in m.graph.initializer}
    return {vi.name: vi.type.tensor_type.elem_type for vi in m.graph.input if vi.name not in inits}


def _outputs(m: onnx.ModelProto) -> dict[str, int]:
    return {vi.name: vi.type.tensor_type.elem_type for vi in m.graph.output}


def interface_differences(original: onnx.ModelProto, fused: onnx.ModelProto) -> list[str]:
    """One sentence per difference between the two models' declared interfaces."""
    out = []
    io_, if_ = _required_inputs(original), _required_inputs(fused)
    oo, of = _outputs(original), _outputs(fused)
    for extra, what in ((set(if_) - set(io_), "needs input(s) the original does not have: "),
                        (set(io_) - set(if_), "no longer takes input(s) "), (set(oo) - set(of), "lacks output(s) "),
                        (set(of) - set(oo), "has output(s) the original does not: ")):
        if extra:
            out.append("the fused model " + what + ", ".join(sorted(extra)))
    for kind, a, b in (("input", io_, if_), ("output", oo, of)):
        for name in sorted(set(a) & set(b)):
            if a[name] and b[name] and a[name] != b[name]:
                out.append(f"{kind} '{name}' is {dtype_name(a[name])} in the original but {dtype_name(b[name])} "
                           "in the fused model")
    return out


def custom_ops_gone(m: onnx.ModelProto) -> str | None:
    """A warning when the model imports ai.gelu_onnx but no node uses it."""
    if not any(o.domain == contract.DOMAIN for o in m.opset_import) or any(
            n.domain == contract.DOMAIN for g in [*(g for _, g in iter_graphs(m)), *m.functions] for n in g.node):
        return None
    return (f"the model imports the {contract.DOMAIN} opset but has none of its ops: it was fused for the custom "
            "target and another optimizer has inlined the functions, so the gelu-onnx kernels and the TensorRT "
            "plugin will not run (fuse the original again, after that optimizer)")


def shape_dims(model, shapes: Mapping[str, Sequence[int]], dims: Mapping[str, int] | None) -> dict[str, int]:
    """``dims`` with the named dims that ``shapes`` ({input: [dims]},
    Polygraphy's --input-shapes) give; a fixed dim must match, an anonymous
    one cannot be set by name (--dim-default sets those)."""
    specs = {s.name: s for s in input_specs(model)}
    out = dict(dims or {})
    for name, shape in shapes.items():
        s = specs.get(name)
        if s is None:
            raise InputError(f"--input-shapes {name}: the model has no input of that name "
                             f"(inputs: {', '.join(specs) or 'none'})")
        if len(shape) != len(s.dims):
            raise InputError(f"--input-shapes {name}:{list(shape)}: the input has rank {len(s.dims)} ({s.dims})")
        for k, (d, v) in enumerate(zip(s.dims, shape)):
            if isinstance(d, str) and out.setdefault(d, v) != v:
                raise InputError(f"--input-shapes {name}:{list(shape)}: dim '{d}' is already {out[d]}")
            if isinstance(d, int) and d != v:
                raise InputError(f"--input-shapes {name}:{list(shape)}: dim {k} is fixed at {d}")
            if d is None:
                raise InputError(f"--input-shapes {name}: dim {k} has no name; set it with --dim-default")
    return out
