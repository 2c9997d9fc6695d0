"""Inputs for a parity run: the model's declared inputs and seeded random
feeds built from them (see make_inputs for the rules)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from .. import contract
from ..errors import InputError, UnsupportedError

from ..contract import DIM_DEFAULT  # noqa: E402 (re-exported)
INT_HIGH_DEFAULT = 100
# Inputs whose name says "mask" get all ones / True: a random 0/1 attention
# mask can blank a whole row (softmax of all -inf = NaN), which compares NaN
# to NaN and proves nothing.
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
# Ops that carry integer ids through unchanged on the way to a Gather.
_ID_PASSTHROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}


def dtype_name(elem_type: int) -> str:
    return contract.FLOAT_DTYPES.get(elem_type) or helper.tensor_dtype_to_string(elem_type).replace(
        "TensorProto.", ""
    ).lower()


def np_dtype_of(elem_type: int) -> np.dtype:
    if elem_type == TensorProto.STRING:
        return np.dtype(object)
    try:
        return contract.np_dtype(elem_type)
    except Exception as e:  # e.g. float8 / int4 without a numpy spelling here
        raise UnsupportedError(f"tensor type {dtype_name(elem_type)} is not supported by the parity checker") from e


def is_bf16(a: np.ndarray) -> bool:
    return a.dtype == contract.np_dtype(TensorProto.BFLOAT16)


@dataclass
class InputSpec:
    name: str
    elem_type: int
    dims: list  # int for fixed, str for named, None for unknown


def input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """The inputs a caller must feed: graph inputs that are not initializers."""
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            kind = vi.type.WhichOneof("value") or "unknown"
            raise UnsupportedError(f"input '{vi.name}' is a {kind}, not a tensor; the parity checker feeds tensors only")
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise InputError(f"input '{vi.name}' declares no shape (not even its rank); pass the inputs with --inputs FILE.npz")
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        specs.append(InputSpec(vi.name, tt.elem_type, dims))
    return specs


def _id_high(model: onnx.ModelProto, name: str) -> int | None:
    """Size of the table a Gather indexes with this input (through casts/reshapes)."""
    g = model.graph
    sizes = {t.name: list(t.dims) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t is not None:
                    sizes[n.output[0]] = list(a.t.dims)
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    highs, todo, seen = [], [name], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for n in consumers.get(t, []):
            if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == t and n.input[0] in sizes:
                axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                table = sizes[n.input[0]]
                if -len(table) <= axis < len(table):
                    highs.append(table[axis])
            elif n.op_type in _ID_PASSTHROUGH and n.input and n.input[0] == t:
                todo.extend(n.output)
    return min(highs) if highs else None


def _resolve_shape(spec: InputSpec, dims: Mapping[str, int], dim_default: int) -> tuple:
    return tuple(
        d if isinstance(d, int) else (dims.get(d, dim_default) if isinstance(d, str) else dim_default)
        for d in spec.dims
    )


# Random feeds beyond this many values (about 2 GB of float32) are refused:
# a graph input may declare any dims, and a typo must not allocate terabytes.
MAX_RANDOM_ELEMENTS = 1 << 29


def make_inputs(
    model: onnx.ModelProto,
    seed: int = 0,
    overrides: Mapping[str, int] | None = None,
    dim_default: int = DIM_DEFAULT,
    scale: float = 1.0,
) -> dict[str, np.ndarray]:
    """Seeded random feeds for every required graph input.

    Shapes: fixed dims as declared; a named dim takes ``overrides[name]``
    (CLI ``--dim name=value``) or ``dim_default``; an anonymous dim takes
    ``dim_default``. Values: floats ~ N(0, 1) * ``scale``; integer inputs whose
    name contains "mask" are all ones (bool: True); other integer inputs are
    uniform in [0, table size) when they index a Gather over an initializer
    (token / position / type ids), else [0, 100); other bool inputs are fair
    coin flips. The same (model, seed, dims) always gives the same feeds.
    """
    overrides = dict(overrides or {})
    if dim_default < 0:
        raise InputError(f"--dim-default must be >= 0, got {dim_default}")
    specs = input_specs(model)
    named = {d for s in specs for d in s.dims if isinstance(d, str)}
    unknown = sorted(set(overrides) - named)
    if unknown:
        have = ", ".join(sorted(named)) or "none"
        raise InputError(f"--dim {unknown[0]}: no input has a dimension named '{unknown[0]}' (named dims: {have})")
    for k, v in overrides.items():
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise InputError(f"--dim {k}={v}: a dimension must be an integer >= 0")
    rng = np.random.default_rng(seed)
    feeds = {}
    total = 0
    for s in specs:
        shape = _resolve_shape(s, overrides, dim_default)
        if any(d < 0 for d in shape):
            raise InputError(f"input '{s.name}' declares shape {list(shape)}, with a negative dimension")
        total += math.prod(shape)
        if total > MAX_RANDOM_ELEMENTS:  # before any allocation: the model's dims are not trusted
            raise InputError(
                f"input '{s.name}' declares shape {list(shape)}: the random inputs would hold over "
                f"{MAX_RANDOM_ELEMENTS:.0e} values; set smaller named dims with --dim or pass --inputs FILE")
        et = s.elem_type
        if et in contract.FLOAT_DTYPES:
            a = (rng.standard_normal(shape) * scale).astype(np_dtype_of(et))
        elif et == TensorProto.BOOL:
            a = np.ones(shape, bool) if _MASK_NAME.search(s.name) else rng.random(shape) < 0.5
        elif et in (
            TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
            TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
        ):
            dt = np_dtype_of(et)
            if _MASK_NAME.search(s.name):
                a = np.ones(shape, dt)
            else:
                high = _id_high(model, s.name) or INT_HIGH_DEFAULT
                high = max(1, min(high, int(np.iinfo(dt).max) + 1))
                a = rng.integers(0, high, size=shape).astype(dt)
        else:
            raise UnsupportedError(
                f"cannot make random values for input '{s.name}' of type {dtype_name(et)}; pass --inputs FILE.npz"
            )
        feeds[s.name] = np.asarray(a)  # rank 0: a 0-d array, never a numpy scalar ORT cannot take
    return feeds


def describe_inputs(feeds: Mapping[str, np.ndarray], source: str) -> list[dict]:
    return [
        {"name": k, "dtype": dtype_str(v), "shape": list(v.shape), "source": source} for k, v in feeds.items()
    ]


def dtype_str(a: np.ndarray) -> str:
    return "bfloat16" if is_bf16(a) else ("string" if a.dtype.kind in "OUS" else str(a.dtype))


def _show_dims(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
