"""A bias Add in front of a GELU: x = Add(h, b) with b a constant over the last
dim (1-D, or broadcastable to it), found after the match.

b may be an initializer or Constant, or computed from one by a
DequantizeLinear (a QDQ model's bias) or a Reshape/Unsqueeze of a 1-D
constant (``[H] -> [1, 1, H]``). h's last dim comes from the declared shapes,
a MatMul/Gemm weight, or else onnx's shape inference (``InferredShapes``: a
Reshape, a DequantizeLinear or a hand-built model without value_info in front).
"""
from __future__ import annotations

from dataclasses import fields
from operator import attrgetter

import numpy as np
from onnx import ModelProto, TensorProto, shape_inference

from ..report import Match
from ..index.graph import GraphIndex
from ..ops import DEFAULT_DOMAINS, is_default_domain
from ...onnxio.walk import walk_graphs

# Initializers larger than this are given to shape inference without their
# payload (a bias or a Reshape's shape is far smaller; weights are not read).
_INFER_PAYLOAD_LIMIT = 4096


class InferredShapes:
    """Shapes and element types onnx.shape_inference finds for the whole
    model (subgraphs included), computed once, on the first shape the graph does not declare
    (GraphIndex.shape asks it). Weight payloads are left out of the copy it runs
    on; when inference fails, nothing is known (the bias stays an Add)."""

    def __init__(self, model: ModelProto):
        self._model = model
        self._infos: dict | None = None  # name -> ValueInfoProto, decoded on demand

    def _info(self, name: str):
        if self._infos is None:
            self._infos = _infer(self._model)
        vi = self._infos.get(name)
        return vi.type.tensor_type if vi is not None and vi.type.HasField("tensor_type") else None

    def shape(self, name: str) -> tuple | None:
        tt = self._info(name)
        if tt is None or not tt.HasField("shape"):
            return None
        return tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)

    def elem_type(self, name: str) -> int | None:
        tt = self._info(name)
        return (tt.elem_type or None) if tt is not None else None


def _infer(model: ModelProto) -> dict:
    light = ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
    g, src = light.graph, model.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    for t in src.initializer:
        if t.data_location == TensorProto.EXTERNAL or t.ByteSize() > _INFER_PAYLOAD_LIMIT:
            g.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
        else:
            g.initializer.append(t)
    try:
        inferred = shape_inference.infer_shapes(light, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is a help, never a requirement
        return {}
    out: dict = {}
    for graph in walk_graphs(inferred.graph):  # names are unique across a model's graphs; the outermost wins
        for infos in (graph.input, graph.output, graph.value_info):
            for vi in infos:
                out.setdefault(vi.name, vi)
    return out


def bias_initializer(idx: GraphIndex, m: Match):
    """The TensorProto behind a [1, ..., 1, H] bias (find_bias accepted it)."""
    return find_initializer(idx, _through_identity(idx, m.bias))


def find_initializer(idx: GraphIndex, name: str):
    while idx is not None:
        if name in idx.initializers:
            return idx.initializers[name]
        if idx.defines(name):
            return None
        idx = idx.parent
    return None


# A biased Match's other fields, read in one call (dataclasses.replace re-reads every field's spec)
_KEPT = tuple(f.name for f in fields(Match) if f.name not in ("bias", "bias_input", "bias_node"))
_kept = attrgetter(*_KEPT)


def find_bias(idx: GraphIndex, m: Match) -> Match:
    """``m`` with its bias, when x = Add(h, b) with b a constant over x's
    last dim: 1-D, or [1, ..., 1, H] when that cannot widen h (h's rank is
    known and at least b's: a [1, 1, H] bias on a rank-3 activation, as
    exporters write it); else ``m`` itself."""
    p = idx.producer.get(m.leaf)
    if p is None or m.leaf in idx.graph_outputs:
        return m
    ins = idx.raw_ins[p]
    if idx.ops[p] != "Add" or idx.domains[p] not in DEFAULT_DOMAINS or len(ins) != 2:
        return m
    if any(c not in m.nodes for c in idx.consumers[m.leaf]):
        return m
    for b, h in ((ins[1], ins[0]), (ins[0], ins[1])):
        dims = const_dims(idx, b)
        if dims is None or const_dims(idx, h) is not None:  # h a constant too (idx.constant(h) included)
            continue
        if not dims or dims[-1] < 1 or any(d != 1 for d in dims[:-1]) or _const_type(idx, b) != m.leaf_type:
            continue
        flat = b
        if len(dims) > 1:
            shape = idx.shape(h)
            if shape is None or len(shape) < len(dims):
                continue
            if find_initializer(idx, _through_identity(idx, b)) is None:
                flat = _flat_source(idx, b)  # Reshape([H] constant): the op takes the 1-D tensor itself
                if flat is None:
                    continue
        if last_dim(idx, h) == dims[-1]:
            return Match(**dict(zip(_KEPT, _kept(m)), bias=flat, bias_input=h, bias_node=p))
    return m


def last_dim(idx: GraphIndex, name: str):
    """The last dim of ``name``: from a MatMul / Gemm with a constant weight
    first (the weight's, as ONNX's shape inference derives it: a declared
    shape that differs fails the input's check), else its shape (which may
    run onnx's shape inference over the whole model)."""
    w = _weight_dim(idx, name)
    if w is not None:
        return w
    shape = idx.shape(name)
    return shape[-1] if shape else None


def _weight_dim(idx: GraphIndex, name: str):
    p = idx.producer.get(name)
    if p is None or idx.ops[p] not in ("MatMul", "Gemm"):
        return None
    node = idx.node(p)
    if node.op_type == "MatMul" and len(node.input) == 2:
        dims = const_dims(idx, node.input[1])
        return dims[-1] if dims and len(dims) >= 2 else None
    if node.op_type == "Gemm" and len(node.input) >= 2:
        dims = const_dims(idx, node.input[1])
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        if dims and len(dims) == 2:
            return dims[0] if trans_b else dims[1]
    return None


def _through_identity(idx: GraphIndex, name: str) -> str:
    # The TorchScript exporter dedups equal initializers as Identity(other).
    for _ in range(8):
        p = idx.producer.get(name)
        if p is None or idx.ops[p] != "Identity" or idx.domains[p] not in DEFAULT_DOMAINS:
            return name
        name = idx.raw_ins[p][0]
    return name


def _const_type(idx: GraphIndex, name: str):
    name = _through_identity(idx, name)
    op = _derived(idx, name)
    if op is not None:
        node = idx.node(idx.producer[name])
        # DequantizeLinear's output has its scale's type; a reshape keeps its input's
        return _const_type(idx, node.input[1] if op == "DequantizeLinear" else node.input[0])
    if name in idx.initializers:
        return idx.initializers[name].data_type
    if idx.parent is not None and not idx.defines(name):
        return _const_type(idx.parent, name)
    c = idx.constant(name)
    return c.elem_type if c is not None else None


def const_dims(idx: GraphIndex, name: str):
    """Dims of a true constant without reading its payload; None otherwise."""
    name = _through_identity(idx, name)
    if name in idx.initializers and not idx.is_overridable(name):
        return tuple(idx.initializers[name].dims)
    if idx.parent is not None and not idx.defines(name):
        return const_dims(idx.parent, name)
    op = _derived(idx, name)
    if op is not None:
        return _derived_dims(idx, idx.node(idx.producer[name]), op)
    c = idx.constant(name)
    return c.value.shape if c is not None else None


# Ops that compute a bias from constants without the matcher folding them:
# a QDQ model's dequantized bias, a 1-D bias reshaped to [1, 1, H].
_DERIVED = ("DequantizeLinear", "Reshape", "Unsqueeze")


def _derived(idx: GraphIndex, name: str) -> str | None:
    p = idx.producer.get(name)
    if p is None or name in idx.initializers or idx.ops[p] not in _DERIVED:
        return None
    node = idx.node(p)
    if not is_default_domain(node) or len(node.output) != 1:
        return None
    # every input a true constant (not a graph input)
    if any(i and const_dims(idx, i) is None for i in node.input[:3]):
        return None
    return node.op_type


def _derived_dims(idx: GraphIndex, node, op: str):
    dims = const_dims(idx, node.input[0])
    if op == "DequantizeLinear":
        return dims
    if len(node.input) < 2:
        return None  # Unsqueeze-11's axes attribute: not written by today's exporters
    arg = idx.constant(node.input[1])
    if arg is None or dims is None:
        return None
    size = int(np.prod(dims)) if dims else 1
    vals = [int(v) for v in np.asarray(arg.value).reshape(-1)]
    if op == "Unsqueeze":
        rank = len(dims) + len(vals)
        axes = sorted(a % rank for a in vals)
        out = list(dims)
        for a in axes:
            out.insert(a, 1)
        return tuple(out)
    if any(a.name == "allowzero" and a.i for a in node.attribute):
        return None
    out = [dims[i] if v == 0 and i < len(dims) else v for i, v in enumerate(vals)]
    if out.count(-1) == 1:
        known = int(np.prod([d for d in out if d != -1])) or 1
        out[out.index(-1)] = size // known
    return tuple(out) if int(np.prod(out)) == size and all(d >= 0 for d in out) else None


def _flat_source(idx: GraphIndex, name: str) -> str | None:
    """The 1-D constant a [1, ..., 1, H] Reshape/Unsqueeze output was made from."""
    name = _through_identity(idx, name)
    if _derived(idx, name) not in ("Reshape", "Unsqueeze"):
        return None
    src = idx.node(idx.producer[name]).input[0]
    dims = const_dims(idx, src)
    return src if dims is not None and len(dims) == 1 else None
