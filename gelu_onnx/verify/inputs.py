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
from ..contract import DIM_DEFAULT
from ..errors import InputError, UnsupportedError
from ..onnxio.walk import subgraphs, walk_graphs

INT_HIGH_DEFAULT = 100
_INTS = (TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
         TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64)
# Inputs whose name says "mask" get all ones / True: a random 0/1 attention
# mask can blank a whole row (softmax of all -inf = NaN), which compares NaN
# to NaN and proves nothing.
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
# How integer ids reach an embedding: ops whose output holds (some of) the
# values of the given inputs unchanged, only moved, selected or re-typed
# (None: every input). The ids' range must be the range of the table they end
# in (issue 23: XLNet's TorchScript export transposes input_ids before its
# embedding Gather, and ids drawn in [0, 100) overran a 64-row table).
_VALUE_INPUTS = {
    **dict.fromkeys(("Cast", "CastLike", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand",
                     "Transpose", "Slice", "Tile", "Split", "Gather", "GatherElements", "GatherND", "Compress",
                     "DepthToSpace", "SpaceToDepth", "ReverseSequence"), (0,)),
    "Concat": None,
    "Where": (1, 2),
}
# Ops that index a table: op -> [(index input, table input)]; the table's
# first dimension bounds the index (Gather: its axis attribute's).
_INDEXERS = {
    ("", "Gather"): [(1, 0)],
    # ONNX Runtime's fused embedding: word ids index input 2, segment ids input 4
    ("com.microsoft", "EmbedLayerNormalization"): [(0, 2), (1, 4)],
}


def dtype_name(elem_type: int) -> str:
    return contract.FLOAT_DTYPES.get(elem_type) or helper.tensor_dtype_to_string(elem_type).split(".")[-1].lower()


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
        dims = declared_dims(vi.type.tensor_type)
        if dims is None:
            raise InputError(f"input '{vi.name}' declares no shape (not even its rank); pass the inputs with --inputs FILE.npz")
        specs.append(InputSpec(vi.name, vi.type.tensor_type.elem_type, dims))
    return specs


def declared_dims(tt) -> list | None:
    """A tensor type's dims: int (fixed), str (named) or None (unknown); None when it declares no shape."""
    if not tt.HasField("shape"):
        return None
    return [int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]


def _graphs(nodes):
    """The If/Loop/Scan bodies under these nodes, at any depth (they read outer tensors by name)."""
    return [w for n in nodes for _, g in subgraphs(n) for w in walk_graphs(g)]


class _Scope:
    """One graph (with its subgraphs) or function body: who reads each
    tensor, who writes it, and the dims of its constant tensors. ``outer``
    resolves a function's formal inputs to the caller's tensors."""

    def __init__(self, nodes, inits=(), outer=None):
        self.consumers: dict[str, list] = {}
        self.producer: dict[str, onnx.NodeProto] = {}
        self.dims: dict[str, list] = {t.name: list(t.dims) for t in inits}
        self.outer = outer or (lambda name: None)
        for n in nodes:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
            for o in n.output:
                self.producer[o] = n
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                for a in n.attribute:
                    if a.name == "value":
                        self.dims[n.output[0]] = list(a.t.dims)

    def table_dims(self, name: str, depth: int = 0) -> list | None:
        """Dims of a constant table, also through Cast / DequantizeLinear / Identity (fp16, quantized)."""
        if name in self.dims:
            return self.dims[name]
        n = self.producer.get(name)
        if n is None:
            return self.outer(name)
        if n.op_type in ("Cast", "CastLike", "Identity", "DequantizeLinear") and n.input and depth < 8:
            return self.table_dims(n.input[0], depth + 1)
        return None


def _id_highs(model: onnx.ModelProto, names) -> dict[str, int]:
    """For each integer input that indexes a table (an embedding Gather, ORT's
    EmbedLayerNormalization) through ops that only move its values
    (_VALUE_INPUTS), the smallest such table's size along the indexed axis.
    Follows subgraphs and model-local functions."""
    g = model.graph
    funcs = {(f.domain, f.name): f for f in model.functions}
    graphs = list(walk_graphs(g))
    main = _Scope([n for x in graphs for n in x.node], [t for x in graphs for t in x.initializer])

    def highs_from(scope: _Scope, start: str, depth: int) -> list[int]:
        highs, todo, seen = [], [start], set()
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            for n in scope.consumers.get(t, []):
                dom = "" if n.domain == "ai.onnx" else n.domain
                for idx, tab in _INDEXERS.get((dom, n.op_type), []):
                    if len(n.input) > max(idx, tab) and n.input[idx] == t:
                        dims = scope.table_dims(n.input[tab])
                        axis = next((a.i for a in n.attribute if a.name == "axis"), 0) if n.op_type == "Gather" else 0
                        if dims and -len(dims) <= axis < len(dims):
                            highs.append(int(dims[axis]))
                carried = _VALUE_INPUTS.get(n.op_type, ()) if dom == "" else ()
                if carried is None or any(k < len(n.input) and n.input[k] == t for k in carried):
                    todo.extend(o for o in n.output if o)
                f = funcs.get((n.domain, n.op_type))
                if f is not None and depth < 8:
                    binding = dict(zip(f.input, n.input))
                    inner = _Scope([*f.node, *(k for x in _graphs(f.node) for k in x.node)],
                                   outer=lambda name, s=scope, b=binding: s.table_dims(b[name]) if name in b else None)
                    for formal, actual in binding.items():
                        if actual == t:
                            highs += highs_from(inner, formal, depth + 1)
        return highs

    highs = {name: highs_from(main, name, 0) for name in names}
    return {name: min(h) for name, h in highs.items() if h}


# Random feeds beyond this many values (about 2 GB of float32) are refused:
# a graph input may declare any dims, and a typo must not allocate terabytes.
MAX_RANDOM_ELEMENTS = 1 << 29


def make_inputs(model: onnx.ModelProto, seed: int = 0, overrides: Mapping[str, int] | None = None,
                dim_default: int = DIM_DEFAULT, scale: float = 1.0) -> dict[str, np.ndarray]:
    """Seeded random feeds for every required graph input: the same (model,
    seed, dims) always gives the same feeds. A named dim takes
    ``overrides[name]`` (``--dim name=value``) or ``dim_default``, an
    anonymous one ``dim_default``. Floats ~ N(0, 1) * ``scale``; integer and
    bool inputs whose name contains "mask" all ones / True; other integer
    inputs uniform in [0, table size) when they index a table (_id_highs: the
    smallest when several), else [0, INT_HIGH_DEFAULT); other bools fair coin flips."""
    overrides = dict(overrides or {})
    if not (math.isfinite(scale) and scale != 0):
        raise InputError(f"--scale must be a finite number other than 0, got {scale}: the random inputs would "
                         "hold no value the models could be compared on")
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
    id_highs = _id_highs(model, [s.name for s in specs if s.elem_type not in contract.FLOAT_DTYPES])
    feeds, total = {}, 0
    for s in specs:
        shape = tuple(d if isinstance(d, int) else overrides.get(d, dim_default) if isinstance(d, str)
                      else dim_default for d in s.dims)
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
        elif et in _INTS:
            dt = np_dtype_of(et)
            if _MASK_NAME.search(s.name):
                a = np.ones(shape, dt)
            else:
                high = id_highs.get(s.name) or INT_HIGH_DEFAULT
                high = max(1, min(high, int(np.iinfo(dt).max) + 1))
                a = rng.integers(0, high, size=shape).astype(dt)
        else:
            raise UnsupportedError(f"cannot make random values for input '{s.name}' of type {dtype_name(et)}; "
                                   "pass --inputs FILE.npz")
        feeds[s.name] = np.asarray(a)  # rank 0: a 0-d array, never a numpy scalar ORT cannot take
    return feeds


def check_feeds(iterations) -> list[str]:
    """Refuse feeds a check cannot rest on (InputError, exit 2): a float
    input with elements but no finite one (all NaN / inf: every output is
    NaN or inf, nothing is compared), and an iteration whose every input is
    empty. Returns notes for feeds partly non-finite. An empty input beside
    non-empty ones is kept: a first-step past key/value cache is empty."""
    notes = []
    for i, feeds in enumerate(iterations):
        where = f" (iteration {i})" if len(iterations) > 1 else ""
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        if arrays and all(a.size == 0 for a in arrays.values()):
            shapes = ", ".join(f"{k} {list(a.shape)}" for k, a in arrays.items())
            raise InputError(f"every input is empty{where} ({shapes}): nothing can be compared; give non-zero dims "
                             "(--dim, --dim-default) or other inputs")
        for k, a in arrays.items():
            if not a.size or not (a.dtype.kind == "f" or is_bf16(a)):
                continue
            finite = int(np.count_nonzero(np.isfinite(a.astype(np.float32))))
            if not finite:
                raise InputError(f"input '{k}'{where} holds no finite value (all {a.size} are NaN or inf): "
                                 "nothing could be compared on it; give finite inputs")
            if finite < a.size:
                notes.append(f"input '{k}'{where}: {a.size - finite} of {a.size} values are NaN or inf")
    return notes


def describe_inputs(feeds: Mapping[str, np.ndarray], source: str) -> list[dict]:
    return [{"name": k, "dtype": dtype_str(v), "shape": list(v.shape), "source": source} for k, v in feeds.items()]


def dtype_str(a) -> str:  # of an array or a numpy dtype
    dt = a if isinstance(a, np.dtype) else a.dtype
    return "bfloat16" if dt == contract.np_dtype(TensorProto.BFLOAT16) else ("string" if dt.kind in "OUS" else str(dt))
