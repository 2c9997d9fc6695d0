"""What the matcher finds: a Match (a GELU region, or a GELU already written
as one op), or a NearMiss (a region that looked like a GELU and why it is
not fused).

Each reason has a code (``Code``: a str, so JSON and comparisons keep the
spelling) that the code which found the reason sets; nothing derives a code
from a message. When one anchor has several reasons, the most specific
(lowest ``priority``) is reported.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from onnx import NodeProto

from ..index.graph import GraphIndex


class Code(str, Enum):
    GRAPH_OUTPUT = "graph-output"
    INTERMEDIATE_USED = "intermediate-used"
    OVERRIDABLE_CONSTANT = "overridable-constant"
    NON_SCALAR_CONSTANT = "non-scalar-constant"
    MISMATCHED_X = "mismatched-x"
    SILU = "silu"
    ALPHA_RANGE = "alpha-range"
    TOLERANCE = "tolerance"
    NOT_GELU = "not-gelu"
    # the target cannot express a GELU that was found
    NO_STANDARD_OP = "no-standard-op"
    UNSUPPORTED_DTYPE = "unsupported-dtype"
    # single-op GELUs and the legacy TensorRT plugin (single_op.py)
    NATIVE_ATTRIBUTE = "native-attribute"
    NATIVE_ARITY = "native-arity"
    LEGACY_PLUGIN = "legacy-plugin"

    __str__ = str.__str__  # print the spelling, not "Code.SILU"
    __format__ = str.__format__

    @property
    def priority(self) -> int:
        return _PRIORITY.get(self, 9)


_PRIORITY = {
    Code.GRAPH_OUTPUT: 0, Code.INTERMEDIATE_USED: 0,
    Code.OVERRIDABLE_CONSTANT: 1, Code.NON_SCALAR_CONSTANT: 1, Code.MISMATCHED_X: 1,
    Code.SILU: 2, Code.ALPHA_RANGE: 2,
    Code.TOLERANCE: 3,
    Code.NOT_GELU: 9,
}


@dataclass
class NearMiss:
    graph: str
    anchor: str
    code: Code
    reason: str
    form: str | None = None

    def as_dict(self) -> dict:
        return {"graph": self.graph, "anchor": self.anchor, "code": self.code.value, "reason": self.reason,
                "form": self.form}


@dataclass(kw_only=True)
class Match:
    index: GraphIndex
    anchor: int
    root: str
    leaf: str
    nodes: list[int]
    consts: set[str]
    form: str
    alpha: float | None
    leaf_type: int
    root_type: int
    precision: str
    error: float
    # Bias Add in front (x = Add(h, b)): filled by find_bias.
    bias: str | None = None
    bias_input: str | None = None
    bias_node: int | None = None
    # A GELU already written as one node (gelu_onnx.native): that node, and
    # whether its own second input is the bias (BiasGelu, FastGelu(X, B)).
    single_op: NodeProto | None = None
    bias_inside: bool = False
    # The numeric check's key (fusion.match.numeric.region_key: the region's
    # structure and constants, without names), and whether a node outside
    # the region reads an inner tensor (a type-only CastLike); None: not known.
    key: tuple | None = None
    shared: bool | None = None
