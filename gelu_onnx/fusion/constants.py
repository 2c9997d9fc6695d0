"""Constants as the matcher reads them: a tensor's value (small ones only;
external data only for scalars), a Constant node's value, and tiny
all-constant elementwise nodes folded in their own dtype."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, numpy_helper


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
            from ..onnxio import tensor_array

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
    if node.op_type == "Cast":
        for a in node.attribute:
            if a.name == "to":
                return a.i
    return fallback


def fold(node: NodeProto, vals: list[np.ndarray]) -> np.ndarray | None:
    """Evaluate a tiny all-constant elementwise node in its own dtype."""
    op = node.op_type
    try:
        with np.errstate(all="ignore"):
            if op == "Cast":
                to = next((a.i for a in node.attribute if a.name == "to"), None)
                from ..contract import np_dtype

                if to is None:
                    return None
                return vals[0].astype(np_dtype(to)) if to in (1, 10, 11, 16) else None
            if op in ("Identity",):
                return vals[0]
            if op == "Sqrt":
                return np.sqrt(vals[0])
            if op == "Neg":
                return np.negative(vals[0])
            if op == "Reciprocal":
                return (np.ones((), vals[0].dtype) / vals[0]).astype(vals[0].dtype)
            if len(vals) != 2:
                return None
            a, b = vals
            if op == "Pow":
                return np.power(a, b).astype(a.dtype)
            if a.dtype != b.dtype:
                return None
            fn = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}.get(op)
            return None if fn is None else fn(a, b).astype(a.dtype)
    except Exception:
        return None
