"""A bias Add in front of a GELU: x = Add(h, b) with b a constant over the last
dim (1-D, or broadcastable to it), found after the match."""
from __future__ import annotations

from .findings import Match
from .graph import GraphIndex
from .region import is_default_domain


def bias_initializer(m: Match):
    """The TensorProto behind a [1, ..., 1, H] bias (find_bias accepted it)."""
    return find_initializer(m.index, _through_identity(m.index, m.bias))


def find_initializer(idx: GraphIndex, name: str):
    while idx is not None:
        if name in idx.initializers:
            return idx.initializers[name]
        if idx.defines(name):
            return None
        idx = idx.parent
    return None


def find_bias(m: Match) -> None:
    """x = Add(h, b) with b a constant over x's last dim → bias: 1-D, or
    [1, ..., 1, H] when that cannot widen h (h's rank is known and at least
    b's: a [1, 1, H] bias on a rank-3 activation, as exporters write it)."""
    idx = m.index
    p = idx.producer.get(m.leaf)
    if p is None or m.leaf in idx.graph_outputs:
        return
    node = idx.node(p)
    if node.op_type != "Add" or not is_default_domain(node) or len(node.input) != 2:
        return
    if any(c not in m.nodes for c in idx.consumers.get(m.leaf, [])):
        return
    for b, h in ((node.input[1], node.input[0]), (node.input[0], node.input[1])):
        dims = _const_dims(idx, b)
        if dims is None or idx.constant(h) is not None or _const_dims(idx, h) is not None:
            continue
        if not dims or dims[-1] < 1 or any(d != 1 for d in dims[:-1]) or _const_type(idx, b) != m.leaf_type:
            continue
        if len(dims) > 1:
            shape = idx.shape(h)
            if shape is None or len(shape) < len(dims) or find_initializer(idx, _through_identity(idx, b)) is None:
                continue
        if last_dim(idx, h) == dims[-1]:
            m.bias, m.bias_input, m.bias_node = b, h, p
            return


def last_dim(idx: GraphIndex, name: str):
    shape = idx.shape(name)
    if shape:
        return shape[-1]
    # MatMul / Gemm with a constant weight: the last dim is the weight's.
    p = idx.producer.get(name)
    if p is None:
        return None
    node = idx.node(p)
    if node.op_type == "MatMul" and len(node.input) == 2:
        w = node.input[1]
        dims = _const_dims(idx, w)
        return dims[-1] if dims and len(dims) >= 2 else None
    if node.op_type == "Gemm" and len(node.input) >= 2:
        dims = _const_dims(idx, node.input[1])
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        if dims and len(dims) == 2:
            return dims[0] if trans_b else dims[1]
    return None


def _through_identity(idx: GraphIndex, name: str) -> str:
    # The TorchScript exporter dedups equal initializers as Identity(other).
    for _ in range(8):
        p = idx.producer.get(name)
        if p is None or idx.node(p).op_type != "Identity" or not is_default_domain(idx.node(p)):
            return name
        name = idx.node(p).input[0]
    return name


def _const_type(idx: GraphIndex, name: str):
    name = _through_identity(idx, name)
    if name in idx.initializers:
        return idx.initializers[name].data_type
    if idx.parent is not None and not idx.defines(name):
        return _const_type(idx.parent, name)
    c = idx.constant(name)
    return c.elem_type if c is not None else None


def _const_dims(idx: GraphIndex, name: str):
    """Dims of a true constant without reading its payload; None otherwise."""
    name = _through_identity(idx, name)
    if name in idx.initializers and not idx.is_overridable(name):
        return list(idx.initializers[name].dims)
    if idx.parent is not None and not idx.defines(name):
        return _const_dims(idx.parent, name)
    c = idx.constant(name)
    return list(c.value.shape) if c is not None else None
