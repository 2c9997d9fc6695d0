"""Which nodes of a model ONNX Runtime's CPU execution provider runs at a
higher float precision, asked of ONNX Runtime itself, not read from an error
(docs/verdict.md, "The reference run"): such a node of the retyped reference
runs as an *island*, its float inputs Cast to the island's type and its
float outputs Cast back. A node is an island only when a one-node session
of it fails in the reference's type and builds in the island's: a probe that
fails both ways (an op that needs a constant input) says nothing about
precision. Probes are cached per plan (one check: the runner factory
decides what builds).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import TensorProto, helper

from .. import contract
from ..onnxio.walk import subgraphs
from .localize import with_outputs

_FLOATS = set(contract.FLOAT_DTYPES)
_ORT_TYPES = {name.lower(): v for name, v in TensorProto.DataType.items()}  # ORT's 'tensor(float)': 'float'
_ALL_FLOAT = {"Conv", "ConvTranspose", "InstanceNormalization", "BatchNormalization", "GroupNormalization",
              "LayerNormalization", "Gemm", "MatMul"}


@dataclass(frozen=True)
class Island:
    """A node run in ``dtype``: its inputs / outputs flagged True are float."""

    dtype: int
    ins: tuple[bool, ...]
    outs: tuple[bool, ...]


@dataclass
class Plan:
    """Where the reference leaves its type: ``nodes`` main-graph node index ->
    Island; ``op_types`` (domain, op) -> island elem type, for the one-input
    and all-float nodes of subgraphs and function bodies."""

    nodes: dict[int, Island] = field(default_factory=dict)
    op_types: dict[tuple[str, str], int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def labels(self, model: onnx.ModelProto) -> list[str]:
        """'Erf', 'com.microsoft.Attention' ...: the op types that run as islands."""
        ops = {(model.graph.node[i].domain, model.graph.node[i].op_type) for i in self.nodes} | set(self.op_types)
        return sorted(f"{d}.{op}" if d not in ("", "ai.onnx") else op for d, op in ops)


def _domain(d: str) -> str:
    return "" if d == "ai.onnx" else d


def _session(model: onnx.ModelProto, make_runner):
    """The runner of ``model``, or None when ONNX Runtime does not build it."""
    try:
        return make_runner(model)
    except Exception:  # noqa: BLE001 - any refusal: no kernel for this signature
        return None


def tensor_types(skeleton: onnx.ModelProto, make_runner) -> dict[str, int] | None:
    """Every main-graph tensor's elem type as ONNX Runtime infers it on ``skeleton`` (None: it does not build)."""
    r = _session(with_outputs(skeleton, [(o, 0) for n in skeleton.graph.node for o in n.output if o]), make_runner)
    sess = getattr(r, "sess", None)
    if sess is None:
        return None
    out = {t.name: t.data_type for t in skeleton.graph.initializer}
    for a in list(sess.get_inputs()) + list(sess.get_outputs()):
        t = a.type
        if t.startswith("tensor(") and t[7:-1] in _ORT_TYPES:
            out[a.name] = _ORT_TYPES[t[7:-1]]
    return out


class _Prober:
    """One-node sessions of ``model``'s nodes, each signature built once (None type: an absent optional)."""

    def __init__(self, model: onnx.ModelProto, make_runner):
        self.model, self.make_runner = model, make_runner
        self.opsets = {_domain(o.domain): o.version for o in model.opset_import}
        self.funcs = {(f.domain, f.name) for f in model.functions}
        self.cache: dict[tuple, bool] = {}

    def builds(self, node: onnx.NodeProto, ins: list, outs: list) -> bool:
        attrs = tuple(sorted((a.name, a.SerializeToString()) for a in node.attribute))
        key = (_domain(node.domain), node.op_type, self.opsets.get(_domain(node.domain)), tuple(ins), tuple(outs),
               attrs)
        if key not in self.cache:
            probe = helper.make_node(node.op_type, [f"i{k}" if t else "" for k, t in enumerate(ins)],
                                     [f"o{k}" if t else "" for k, t in enumerate(outs)], "probe", domain=node.domain)
            probe.attribute.extend(node.attribute)
            g = helper.make_graph(
                [probe], "probe", [helper.make_tensor_value_info(f"i{k}", t, None) for k, t in enumerate(ins) if t],
                [helper.make_tensor_value_info(f"o{k}", t, None) for k, t in enumerate(outs) if t])
            m = helper.make_model(g, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version)
            m.functions.extend(self.model.functions)
            self.cache[key] = _session(m, self.make_runner) is not None
        return self.cache[key]

    def island(self, node, ins: list, outs: list, to: int, candidates) -> int | None:
        """The elem type ``node`` runs in: None when it builds in ``to`` (or
        in no candidate either), else the first candidate that builds."""
        def at(dt, ts):
            return [dt if t in _FLOATS else t for t in ts]

        if not any(t in _FLOATS for t in ins + outs) or self.builds(node, at(to, ins), at(to, outs)):
            return None
        return next((c for c in candidates if self.builds(node, at(c, ins), at(c, outs))), None)

    def by_op_type(self, n, to: int, candidates, p: Plan) -> None:
        """A node without known types: one-input and all-float ops, probed all float."""
        key = (n.domain, n.op_type)
        if key in p.op_types or key in self.funcs or any(subgraphs(n)) or not (
                len(n.input) == 1 or n.op_type in _ALL_FLOAT):
            return
        dt = self.island(n, [TensorProto.FLOAT] * len(n.input), [TensorProto.FLOAT] * len(n.output), to,
                         candidates)
        if dt is not None:
            p.op_types[key] = dt


def plan(model: onnx.ModelProto, skeleton_f32: onnx.ModelProto, to: int, candidates: tuple[int, ...],
         make_runner) -> Plan:
    """The islands of ``model``, a copy retyped to ``to`` (its attributes too:
    Cast's ``to``, Constant values; the weights may be left out), in the
    first of ``candidates`` that runs; ``skeleton_f32``: the same graph
    without its weights, 16-bit floats made float32, for the types."""
    p = Plan()
    probe = _Prober(model, make_runner)
    types = tensor_types(skeleton_f32, make_runner)
    if types is None:
        p.notes.append("ONNX Runtime does not build the original's graph in float32, so its tensors' types are "
                       "unknown: only one-input and all-float ops were probed for a higher-precision kernel")
    for k, n in enumerate(model.graph.node):
        if any(subgraphs(n)) or (n.domain, n.op_type) in probe.funcs:
            continue  # their bodies are planned by op type
        if types is None:
            probe.by_op_type(n, to, candidates, p)
            continue
        ins = [types.get(i) if i else None for i in n.input]
        outs = [types.get(o) if o else None for o in n.output]
        if any(i and t is None for i, t in zip(n.input, ins)) or any(o and t is None for o, t in zip(n.output, outs)):
            continue
        dt = probe.island(n, ins, outs, to, candidates)
        if dt is not None:
            p.nodes[k] = Island(dt, tuple(t in _FLOATS for t in ins), tuple(t in _FLOATS for t in outs))
    for body in [g for n in model.graph.node for _, g in subgraphs(n)] + list(model.functions):
        for n in _all_nodes(body.node):
            probe.by_op_type(n, to, candidates, p)
    return p


def _all_nodes(nodes):
    for n in nodes:
        yield n
        for _, g in subgraphs(n):
            yield from _all_nodes(g.node)
