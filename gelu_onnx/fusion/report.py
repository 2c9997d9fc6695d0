"""What a fuse pass finds and reports: a Match (a GELU region, or a GELU
already written as one op) or a NearMiss (a region that looked like a GELU
and why it is not fused), and one Fusion per GELU rewritten (or found), with
the notes, in a FuseResult; ``FuseResult.as_dict()`` is ``gelu-onnx fuse --json``.

Each near-miss reason has a code (``Code``: a str, so JSON and comparisons keep
the spelling) that the code which found the reason sets; nothing derives a code
from a message. When one anchor has several reasons, the most specific
(lowest ``priority``) is reported.

Not every near-miss is worth a reader's time: an anchor (Tanh, Erf, Sigmoid)
whose region computes nothing like a GELU (a BERT pooler's lone ``Tanh``) is
recorded with ``gelu_like`` False; the CLI lists those only under ``-v``, and
JSON keeps them all.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from onnx import ModelProto, NodeProto

from .. import contract as C
from .index.graph import GraphIndex


class Code(str, Enum):
    GRAPH_OUTPUT = "graph-output"
    INTERMEDIATE_USED = "intermediate-used"
    OVERRIDABLE_CONSTANT = "overridable-constant"
    NON_SCALAR_CONSTANT = "non-scalar-constant"
    MISMATCHED_X = "mismatched-x"
    SILU = "silu"
    ALPHA_RANGE = "alpha-range"
    INNER_CAST = "inner-cast"
    TOLERANCE = "tolerance"
    NOT_GELU = "not-gelu"
    # the target cannot express a GELU that was found
    NO_STANDARD_OP = "no-standard-op"
    UNSUPPORTED_DTYPE = "unsupported-dtype"
    # single-op GELUs and the legacy TensorRT plugin (match/single_op.py)
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
    Code.SILU: 2, Code.ALPHA_RANGE: 2, Code.INNER_CAST: 2,
    Code.TOLERANCE: 3,
    Code.NOT_GELU: 9,
}


# A region whose largest error against the nearest GELU, relative to max(|x|, 1)
# (fusion.match.numeric), is at most this computes something close to a GELU:
# a GELU with one wrong constant is (0.5 -> 0.6: 0.2), so are ReLU (0.17) and
# SiLU (0.12); a lone Tanh or Sigmoid is not (0.83).
NEAR_GELU = 0.25


@dataclass
class NearMiss:
    graph: str
    anchor: str
    code: Code
    reason: str
    form: str | None = None
    # how far the region's function is from the nearest GELU (Code.TOLERANCE); None: not measured
    error: float | None = None

    @property
    def gelu_like(self) -> bool:
        """The region computes something close to a GELU, or is one the target
        cannot take; False for an anchor with no GELU around it."""
        if self.code is Code.NOT_GELU:
            return False
        return self.error is None or self.error <= NEAR_GELU

    def as_dict(self) -> dict:
        return {"graph": self.graph, "anchor": self.anchor, "code": self.code.value, "reason": self.reason,
                "form": self.form, "gelu_like": self.gelu_like}


@dataclass(frozen=True, kw_only=True, slots=True)
class Match:
    """A GELU found in one graph, as names and node positions of that graph
    (the GraphPlan that holds it has the graph's GraphIndex)."""

    anchor: int
    root: str
    leaf: str
    nodes: tuple[int, ...]
    consts: tuple[str, ...]  # sorted
    form: str
    alpha: float | None
    leaf_type: int
    root_type: int
    precision: str
    error: float
    # Bias Add in front (x = Add(h, b)): a copy with these set by find_bias.
    bias: str | None = None
    bias_input: str | None = None
    bias_node: int | None = None
    # A GELU already written as one node (fusion/match/single_op.py): that node, and
    # whether its own second input is the bias (BiasGelu, FastGelu(X, B)).
    single_op: NodeProto | None = None
    bias_inside: bool = False
    # The numeric check's key (fusion.match.numeric.region_key: the region's
    # structure and constants, without names); None for a single-op GELU.
    key: tuple | None = None


@dataclass(frozen=True)
class MatchResult:
    """The matcher's answer for one anchor: the match, or the near-miss
    saying why there is none (its code, reason and distance from a GELU)."""

    match: Match | None = None
    miss: NearMiss | None = None

    def __bool__(self) -> bool:
        return self.match is not None


@dataclass(kw_only=True, slots=True)
class Fusion:
    form: str
    bias: bool
    alpha: float | None
    graph: str
    root: str
    nodes: tuple[str, ...]
    dtype: str
    op: str

    def as_dict(self) -> dict:
        """dataclasses.asdict(self), written out (a report can hold 100 000 of these), nodes as
        the list JSON gives (``fuse --json``)."""
        return {"form": self.form, "bias": self.bias, "alpha": self.alpha, "graph": self.graph, "root": self.root,
                "nodes": list(self.nodes), "dtype": self.dtype, "op": self.op}


@dataclass
class FuseResult:
    model: ModelProto
    target: str
    fusions: list[Fusion] = field(default_factory=list)
    near_misses: list[NearMiss] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # GELUs already written as the target's own op, with nothing to absorb.
    already: list[Fusion] = field(default_factory=list)
    # fuse_with_report(input_check=True): the input's check model, serialized
    # (fusion/rewrite/checkmodel.py), or None when the input itself is to be checked.
    input_check: bytes | None = field(default=None, repr=False)

    def summary(self) -> dict:
        return {
            "target": self.target,
            "fused": len(self.fusions),
            "by_form": dict(Counter(f.form for f in self.fusions)),
            "near_misses": len(self.near_misses),
            "gelu_like_near_misses": sum(n.gelu_like for n in self.near_misses),
            "already_target_ops": len(self.already),
            "notes": list(self.notes),
        }

    def as_dict(self) -> dict:
        """The report as `gelu-onnx fuse --json` prints it (same field names;
        the CLI adds ok, input and output)."""
        d = self.summary()
        d["fusions"] = [f.as_dict() for f in self.fusions]
        d["near_misses"] = [n.as_dict() for n in self.near_misses]
        d["already_target_ops"] = [f.as_dict() for f in self.already]
        return d


def record(idx: GraphIndex, mt: Match, op: str, use_bias: bool, compute_type: int) -> Fusion:
    """The Fusion a match written as ``op`` (the emission's qualified op type) reports."""
    nodes = (mt.bias_node, *mt.nodes) if use_bias and mt.bias_node is not None else mt.nodes
    names = tuple(map(idx.label, nodes))  # a tuple of strs: untracked by the cycle collector
    return Fusion(form=mt.form, bias=use_bias, alpha=mt.alpha, graph=idx.path, root=mt.root, nodes=names,
                  dtype=C.FLOAT_DTYPES.get(compute_type, str(compute_type)), op=op)
