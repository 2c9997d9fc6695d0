"""What a fuse pass reports: one Fusion per GELU rewritten (or found), the
near-misses, notes; ``FuseResult.as_dict()`` is ``gelu-onnx fuse --json``."""
from __future__ import annotations

from dataclasses import dataclass, field

from onnx import ModelProto

from .. import contract as C
from .index.graph import GraphIndex
from .match.findings import Match, NearMiss
from .rewrite.emit import Emission


@dataclass(kw_only=True)
class Fusion:
    form: str
    bias: bool
    alpha: float | None
    graph: str
    root: str
    nodes: list[str]
    dtype: str
    op: str

    def as_dict(self) -> dict:
        """dataclasses.asdict(self), written out (a report can hold 100 000 of these)."""
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
        by_form: dict[str, int] = {}
        for f in self.fusions:
            by_form[f.form] = by_form.get(f.form, 0) + 1
        return {
            "target": self.target,
            "fused": len(self.fusions),
            "by_form": by_form,
            "near_misses": len(self.near_misses),
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


def record(idx: GraphIndex, mt: Match, em: Emission, use_bias: bool, compute_type: int) -> Fusion:
    names = [idx.label(i) for i in mt.nodes]
    if use_bias and mt.bias_node is not None:
        names.insert(0, idx.label(mt.bias_node))
    return Fusion(form=mt.form, bias=use_bias, alpha=mt.alpha, graph=idx.path, root=mt.root, nodes=names,
                  dtype=C.FLOAT_DTYPES.get(compute_type, str(compute_type)), op=em.qualified)
