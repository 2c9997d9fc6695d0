"""Constants as the matcher reads them: a tensor's value (small ones only;
external data only for scalars), a Constant node's value, and tiny
all-constant elementwise nodes folded in their own dtype."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, numpy_helper

from ..ops import OPS, cast_to


@dataclass
class ConstInfo:
    """A resolved constant: its value (as stored, original dtype) and origin."""

    value: np.ndarray
    elem_type: int
    # The node (index in this graph) that produces it, if it is a Constant or a
    # folded node; None for initializers.
    producer: int | None = None



def tensor_value(t: TensorProto, base_dir: str | None = None) -> np.ndarray | None:
    """numpy value of a small tensor; None for big ones. An external tensor is
    read only when it is a scalar (a GELU constant) and we know its folder:
    weight payloads are never read."""
    n = 1
    for d in t.dims:
        n *= d
    if n > 4096:
        return None
    try:
        if t.data_location == TensorProto.EXTERNAL:
            if n != 1 or base_dir is None:
                return None
            from ...onnxio import tensor_array

            return tensor_array(t, base_dir)
        return numpy_helper.to_array(t)
    except Exception:  # malformed or unsafe tensors are simply not constants to us
        return None


def constant_node_value(node: NodeProto, i: int) -> ConstInfo | None:
    # ONNX requires exactly one attribute on a Constant; which one a runtime
    # reads from an invalid node with several (or a repeated one) is its own
    # business, so such a node is never a constant to us (nothing is fused).
    if len(node.attribute) != 1:
        return None
    for attr in node.attribute:
        if attr.name == "value" and attr.type == AttributeProto.TENSOR:
            v = tensor_value(attr.t)
            return None if v is None else ConstInfo(v, attr.t.data_type, producer=i)
        if attr.name == "value_float":
            return ConstInfo(np.array(attr.f, dtype=np.float32), TensorProto.FLOAT, producer=i)
        if attr.name == "value_floats":
            return ConstInfo(np.array(attr.floats, dtype=np.float32), TensorProto.FLOAT, producer=i)
        if attr.name == "value_int":
            return ConstInfo(np.array(attr.i, dtype=np.int64), TensorProto.INT64, producer=i)
        if attr.name == "value_ints":
            return ConstInfo(np.array(attr.ints, dtype=np.int64), TensorProto.INT64, producer=i)
    return None


def elem_type_of(value: np.ndarray, fallback: int, node: NodeProto) -> int:
    return cast_to(node) or fallback if node.op_type == "Cast" else fallback


def fold(node: NodeProto, vals: list[np.ndarray]) -> np.ndarray | None:
    """Evaluate a tiny all-constant elementwise node in its own dtype (ops.OPS' fold)."""
    op = OPS.get(node.op_type)
    if op is None or op.fold is None or (op.arity == 2 and len(vals) != 2):
        return None
    try:
        with np.errstate(all="ignore"):
            return op.fold(node, *vals[:op.arity])
    except Exception:
        return None
