"""The matcher's op vocabulary, one row per op (OPS), read by every stage:
matcher (arity), numeric (float64 value, the anchors' GELU family, types),
index.graph (folding constants in their own dtype); graph and shapes read
the sets derived below. Each op is elementwise on one
non-constant operand plus scalar constants. Adding one: docs/design.md."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..contract import np_dtype

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class Op:
    arity: int  # operands, none omitted
    f64: Callable  # its value in float64 (the numeric check); Cast is value-preserving there
    fold: Callable | None  # fold(node, *values) in their own dtype; None: never folded
    family: str | None = None  # the GELU family an anchor of this op is checked against
    typed: int | None = None  # leading operands of the output's type (None: all; Pow's exponent need not)


def _binary(fn, same_dtype: bool = True, typed: int | None = None) -> Op:
    def fold(_, a, b):
        return None if same_dtype and a.dtype != b.dtype else fn(a, b).astype(a.dtype)
    return Op(2, fn, fold, typed=typed)


def _cast(node, a):
    to = cast_to(node)
    return a.astype(np_dtype(to)) if to in (1, 10, 11, 16) else None  # the float types


OPS: dict[str, Op] = {
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(np.divide),
    "Pow": _binary(np.power, same_dtype=False, typed=1),
    "Neg": Op(1, np.negative, lambda _, a: np.negative(a)),
    "Sqrt": Op(1, np.sqrt, lambda _, a: np.sqrt(a)),
    "Reciprocal": Op(1, lambda a: 1.0 / a, lambda _, a: (np.ones((), a.dtype) / a).astype(a.dtype)),
    "Identity": Op(1, lambda a: a, lambda _, a: a),
    "Cast": Op(1, lambda a: a, _cast),
    "Erf": Op(1, lambda a, erf=np.frompyfunc(math.erf, 1, 1): erf(a).astype(np.float64), None, "erf"),
    "Tanh": Op(1, np.tanh, None, "tanh"),
    "Sigmoid": Op(1, lambda a: 1.0 / (1.0 + np.exp(-a)), None, "sigmoid"),
}
ELEMENTWISE = frozenset(OPS)
BINARY_OPS = frozenset(k for k, op in OPS.items() if op.arity == 2)
ANCHOR_OPS = frozenset(k for k, op in OPS.items() if op.family)
FOLDABLE = frozenset(k for k, op in OPS.items() if op.fold)


def cast_to(node) -> int | None:
    """A Cast's target type (None when the attribute is missing)."""
    return next((a.i for a in node.attribute if a.name == "to"), None)


def is_default_domain(node) -> bool:
    return node.domain in DEFAULT_DOMAINS
