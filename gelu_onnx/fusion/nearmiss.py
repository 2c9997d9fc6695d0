"""Near-misses: a region that looked like a GELU and why it is not fused.

Each reason has a code (``Code``: a str, so JSON and comparisons keep the
spelling) that the code which found the reason sets; nothing derives a code
from a message. When one anchor has several reasons, the most specific
(lowest ``priority``) is reported.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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
    # single-op GELUs (native.py) and the legacy TensorRT plugin (legacy.py)
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
