"""``check --localize``: which fused GELU diverged (``--localize all``: which
tensor of the whole graph diverged first, Polygraphy's ``mark all``).

A fused GELU keeps the original's output tensor name (its ``root``), so every
GELU ``inspect`` finds in the original's main graph becomes a graph output of
both models, compared like a model output (GELUs in If/Loop/Scan bodies
cannot be outputs: a note says so). ``every_tensor``: every float tensor of
the original's main graph the fused graph has too, in node order: the first
that fails is where the models part (cost: docs/cli.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import onnx
from onnx import helper, shape_inference

from .. import contract
from ..errors import InputError
from ..files import inspect
from .weights import skeleton


@dataclass
class Site:
    """One GELU of the original: its tensor and its ``inspect`` record."""

    tensor: str
    description: dict
    summary: str  # one line, as inspect would say it
    in_fused: bool = True  # the fused model has a tensor of this name
    fused_op: str | None = None  # the op that writes it in the fused model (e.g. ai.gelu_onnx.BiasGeluErf)


@dataclass
class Exposed:
    original: onnx.ModelProto
    fused: onnx.ModelProto
    sites: list[Site] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def mode(value) -> str | None:
    """``check(localize_gelus=...)``: False/None, True/"gelus" or "all"."""
    if value in (None, False):
        return None
    if value is True:
        return "gelus"
    if value in contract.LOCALIZE_MODES:
        return value
    raise InputError(f"--localize: expected one of {', '.join(contract.LOCALIZE_MODES)}, got {value!r}")


def _summary(f: dict) -> str:
    """One line as inspect says it (the node names are in the description)."""
    alpha = f" alpha={f['alpha']:g}" if f.get("alpha") is not None else ""
    bias = " with bias" if f.get("bias") else ""
    where = f" in {f['graph']}" if f.get("graph") else ""
    return f"{f['form']} GELU{bias}{alpha}, {f['dtype']}, {len(f.get('nodes') or [])} nodes{where}"


def _elem_type(g: onnx.GraphProto, name: str) -> int:
    """The tensor's declared type; 0 (left to ONNX Runtime's inference) when none is declared: a
    GELU chain that ends in a Cast (a bf16 stack's float32 GELU) has not the root's dtype."""
    for vi in list(g.value_info) + list(g.output):
        if vi.name == name and vi.type.tensor_type.elem_type:
            return vi.type.tensor_type.elem_type
    return 0


def with_outputs(m: onnx.ModelProto, outputs: list[tuple[str, int]]) -> onnx.ModelProto:
    """A copy of ``m`` whose main graph also outputs these tensors (elem type 0: undeclared)."""
    out = onnx.ModelProto()
    out.CopyFrom(m)
    have = {o.name for o in out.graph.output}
    for name, et in outputs:
        if name not in have:
            have.add(name)
            vi = helper.make_tensor_value_info(name, et, None) if et else onnx.ValueInfoProto(name=name)
            out.graph.output.append(vi)
    return out


def expose(original, fused, every_tensor: bool = False) -> Exposed:
    """Both models (onnxio.LoadedModel: the copies keep their external data references) with every
    main-graph GELU tensor of the original as an output (``every_tensor``: every float tensor both compute)."""
    if every_tensor:
        return _expose_all(original, fused)

    rep = inspect(original)
    records = [f.as_dict() if hasattr(f, "as_dict") else dict(vars(f)) for f in rep.fusions]
    main = [f for f in records if not f.get("graph")]
    notes = []
    if len(main) < len(records):
        notes.append(f"{len(records) - len(main)} GELU(s) inside subgraphs (If/Loop/Scan bodies) cannot be "
                     "made graph outputs and are not localized")
    if not records:
        notes.append("no GELU found in the original: nothing to localize")
    og, fg = original.model.graph, fused.model.graph
    order = {o: i for i, n in enumerate(og.node) for o in n.output}
    main.sort(key=lambda f: order.get(f["root"], len(order)))
    produced = {o: (f"{n.domain}.{n.op_type}" if n.domain else n.op_type) for n in fg.node for o in n.output}
    sites = [Site(f["root"], f, _summary(f), f["root"] in produced, produced.get(f["root"])) for f in main]
    o_out = [(s.tensor, _elem_type(og, s.tensor)) for s in sites]
    f_out = [(s.tensor, _elem_type(fg, s.tensor)) for s in sites if s.in_fused]
    return Exposed(with_outputs(original.model, o_out), with_outputs(fused.model, f_out), sites, notes)


def _float_types(g: onnx.GraphProto) -> dict[str, int]:
    """{tensor: float elem type} of what ONNX Runtime's shape inference knows."""
    floats = set(contract.FLOAT_DTYPES)
    return {vi.name: vi.type.tensor_type.elem_type for vi in list(g.value_info) + list(g.output) + list(g.input)
            if vi.type.tensor_type.elem_type in floats}


def _expose_all(original, fused) -> Exposed:
    """Every float tensor a main-graph node of both models writes, as an output of both."""
    og, fg = original.model.graph, fused.model.graph
    produced = {o: (f"{n.domain}.{n.op_type}" if n.domain else n.op_type) for n in fg.node for o in n.output if o}
    try:  # the types, from the graph only (the weights stay in their file)
        typed = _float_types(shape_inference.infer_shapes(skeleton(original.model)).graph)
    except Exception:  # noqa: BLE001 - what shape inference could not type is not compared
        typed = _float_types(og)
    sites, out = [], []
    for n in og.node:
        op = f"{n.domain}.{n.op_type}" if n.domain else n.op_type
        for o in n.output:
            if o and o in produced and o in typed:
                where = f"{op} {n.name}" if n.name else op
                sites.append(Site(o, {"op": op, "node": n.name}, where, True, produced[o]))
                out.append((o, typed[o]))
    notes = [f"--localize all: {len(sites)} float tensors both graphs compute are compared (GELUs' inner tensors "
             "are not in the fused graph)"]
    if not sites:
        notes.append("no tensor of the original's main graph has a typed counterpart in the fused model: "
                     "nothing to localize")
    return Exposed(with_outputs(original.model, out), with_outputs(fused.model, out), sites, notes)


def split(outputs: dict, sites: list[Site], model_outputs: list[str]) -> tuple[dict, dict]:
    """(model outputs, GELU tensors) from one run of an exposed model."""
    gelus = {s.tensor for s in sites}
    keep = set(model_outputs)
    return ({k: v for k, v in outputs.items() if k in keep or k not in gelus},
            {k: v for k, v in outputs.items() if k in gelus})


def fusion_record(site: Site, row) -> dict:
    """The JSON record of one localized GELU (``row``: its parity row, or None)."""
    rec = {"tensor": site.tensor, "pass": False, "description": site.description, "summary": site.summary,
           "fused_op": site.fused_op}
    if row is None:
        rec["message"] = "the fused model has no tensor of this name (the GELU's output was renamed or removed)"
        return rec
    rec.update({k: v for k, v in vars(row).items() if not k.startswith("_") and k not in ("name", "passed")})
    rec["pass"] = bool(row.passed)
    return rec
