"""GELUs inside model-local functions (TorchScript's export_modules_as_functions,
onnxscript-built models).

Per function that holds a GELU anchor, one of two things happens before the
main graph is fused:
- **in the body**, when every call site gives each input the same known
  element type: the body is fused as a small graph of its own (its inputs
  typed from the call sites, intermediate types from ONNX shape inference, so
  `CastLike` constants resolve) and put back; every call runs the fused op.
- **by inlining** (onnx.inliner, only the functions that hold a GELU) when the
  call sites disagree or a type is unknown (calls inside another function's
  body: that function then holds the GELU and is handled in a next round), or when a GELU's `x` is
  `Add(h, b)` with `b` a function input: the bias is a constant only at the
  call site, so it can be folded in only there; and always for `ort`: its
  com.microsoft ops have no ONNX schema, so inside a function body they
  leave onnx's type inference (and `onnx.checker`) without output types. The main-graph pass then
  fuses the inlined copies like any other GELU.
Reports name the function and its call site(s) in the fusion's graph field.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import onnx
import onnx.inliner
from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, helper

from .. import contract as C
from ..errors import InputError
from .match.single_op import describe
from .ops import ANCHOR_OPS, DEFAULT_DOMAINS, is_default_domain
from .targets import add_functions, default_opset, ensure_opset, make_function
from ..onnxio.walk import subgraphs, walk_graphs

if TYPE_CHECKING:
    from .report import FuseResult
    from .targets import Target

@dataclass
class FunctionPlan:
    """What was done to the model's functions; labels the main pass's fusions."""

    inlined: dict[str, str] = field(default_factory=dict)  # inliner suffix "__k" -> label
    names: list[str] = field(default_factory=list)  # the functions inlined


def _holds_anchor(nodes) -> bool:
    """An Erf/Tanh/Sigmoid a spelled GELU hangs on, or a GELU already written
    as one op (the TorchScript exporter at opset 20 puts Gelu in the functions)."""
    for n in nodes:
        if (is_default_domain(n) and n.op_type in ANCHOR_OPS) or describe(n) is not None:
            return True
        for _, g in subgraphs(n):
            if _holds_anchor(g.node):
                return True
    return False


def _walk_calls(graph: GraphProto, path: str, out: list):
    """(graph path, node) for every node, in the inliner's traversal order."""
    for n in graph.node:
        out.append((path, n))
        for attr, g in subgraphs(n):
            _walk_calls(g, f"{path}/{n.name or n.op_type}/{attr}" if path else f"{n.name or n.op_type}/{attr}", out)


def _call_types(model: ModelProto, calls: list[NodeProto], inferred: list) -> list[int | None]:
    """Element type of each function input over all call sites: None where a
    call site's type is unknown or two call sites disagree."""
    if not inferred:  # the model's own declarations first; shape inference only if they fall short
        inferred.append(_declared_types(model))
    names = {x for c in calls for x in c.input if x}
    if len(inferred) == 1 and not names <= inferred[0].keys():
        try:
            inferred.append(_declared_types(onnx.shape_inference.infer_shapes(model)))
        except Exception:  # best effort (e.g. > 2 GiB): unknown types mean "inline"
            inferred.append(inferred[0])
    types = inferred[-1]
    n_in = max(len(c.input) for c in calls)
    out: list[int | None] = []
    for k in range(n_in):
        seen = {types.get(c.input[k]) if k < len(c.input) and c.input[k] else None for c in calls}
        out.append(seen.pop() if len(seen) == 1 else None)
    return out


def _declared_types(model: ModelProto) -> dict[str, int]:
    types: dict[str, int] = {}
    for g in walk_graphs(model.graph):
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types[vi.name] = vi.type.tensor_type.elem_type
        for t in g.initializer:
            types[t.name] = t.data_type
        for n in g.node:
            if n.op_type == "Constant" and is_default_domain(n):
                for a in n.attribute:
                    if a.name == "value":
                        types[n.output[0]] = a.t.data_type
    return types


def _function_graphs(f: FunctionProto):
    """The node lists of a function body and of the subgraphs inside it."""
    yield f.node
    for n in f.node:
        for _, g in subgraphs(n):
            for sub in walk_graphs(g):
                yield sub.node


def _body_model(f: FunctionProto, in_types: list[int | None], ir_version: int) -> ModelProto:
    g = helper.make_graph(
        f.node, f.name,
        [helper.make_tensor_value_info(x, t or 0, None) for x, t in zip(f.input, in_types)],
        [onnx.ValueInfoProto(name=y) for y in f.output])
    m = helper.make_model(g, opset_imports=list(f.opset_import), ir_version=max(ir_version, C.MIN_IR_FOR_FUNCTIONS))
    try:
        m = onnx.shape_inference.infer_shapes(m)
    except Exception:  # best effort: without types CastLike constants stay unresolved (no fusion)
        pass
    return m


def _bias_only_at_call_site(f: FunctionProto, res: FuseResult, target: Target) -> bool:
    """A fused GELU whose x is Add(h, b) with b a function input: b is a
    constant only at the call sites, so inlining lets the bias be folded in."""
    inputs = set(f.input)
    nodes = list(f.node)
    producer = {o: n for n in nodes for o in n.output}
    by_name = {n.name: n for n in nodes if n.name}
    for fu in res.fusions:
        if fu.bias or not target.takes_bias(fu.form):
            continue
        region = [by_name.get(nm) or _nth(nodes, nm) for nm in fu.nodes]
        region = [n for n in region if n is not None]
        outs = {o for n in region for o in n.output}
        for x in {i for n in region for i in n.input} - outs:
            p = producer.get(x)
            if p is not None and p.op_type == "Add" and is_default_domain(p) and inputs.intersection(p.input):
                return True
    return False


def _nth(nodes, label: str):
    """The node an unnamed-node label 'Op#k' points at."""
    k = label.rpartition("#")[2]
    return nodes[int(k)] if k.isdigit() and int(k) < len(nodes) else None


def holds_gelu(model: ModelProto) -> bool:
    """Whether a model-local function (not ours) holds a GELU anchor."""
    return any(f.domain != C.DOMAIN and _holds_anchor(f.node) for f in model.functions)


def _label(f: FunctionProto, sites: list[str]) -> str:
    shown = ", ".join(sites[:3]) + (f" +{len(sites) - 3} more" if len(sites) > 3 else "")
    return f"function {f.domain}.{f.name} (called by {shown})"


def refuse_foreign_functions(model: ModelProto) -> None:
    """A model-local function in our domain must be one gelu-onnx writes,
    exactly: with our library registered, ONNX Runtime runs our kernel for
    every ai.gelu_onnx node, never the model's body, and `fuse` would count
    the node as already fused. *Decision*: "ours" is byte equality with
    targets.make_function(op, the function's opset, a dtype it types
    constants for, or None), the body the custom target writes; anything
    else in the domain is one line, exit 2 (docs/safety.md)."""
    for f in model.functions:
        if f.domain != C.DOMAIN:
            continue
        name = f"{C.DOMAIN}.{f.name}"
        if f.name not in C.FORM_OF_OP_TYPE:
            raise InputError(f"the model defines a function {name}, in gelu-onnx's domain but not one of its ops; "
                             "refusing it: rename its domain")
        imports = [i.version for i in f.opset_import if i.domain in DEFAULT_DOMAINS]
        got = f.SerializeToString()
        if len(imports) != 1 or not any(make_function(f.name, imports[0], et).SerializeToString() == got
                                        for et in (None, *C.FLOAT_DTYPES)):
            raise InputError(f"the model defines its own function {name}, whose body is not the one gelu-onnx "
                             "writes: ONNX Runtime with the gelu-onnx library would run our kernel instead of it; "
                             "refusing it: rename its domain")


_MAX_ROUNDS = 4  # functions inlined into functions inlined into ...


def fuse_functions(model: ModelProto, target: Target, res: FuseResult, fuse_body,
                   depth: int = 0) -> tuple[ModelProto, FunctionPlan]:
    """Fuse GELUs inside ``model``'s functions (in place) or inline the
    functions that need it (a new model is returned then). ``fuse_body(m,
    target)`` is the library's fuse_with_report; fusions and near-misses go
    into ``res`` labelled with the function and its call sites."""
    plan = FunctionPlan()
    cands = [f for f in model.functions if f.domain != C.DOMAIN and _holds_anchor(f.node)]
    if not cands:
        return model, plan
    calls: list[tuple[str, NodeProto]] = []
    _walk_calls(model.graph, "", calls)
    nested = {(n.domain, n.op_type) for fn in model.functions for body in _function_graphs(fn) for n in body}
    inferred: list = []
    inline: list[FunctionProto] = []
    for f in cands:
        sites = [(p, n) for p, n in calls if n.domain == f.domain and n.op_type == f.name]
        if (f.domain, f.name) in nested:  # called from another function too: types unknown there
            inline.append(f)
            continue
        if not sites:
            continue  # an unused function: nothing runs it
        names = [(f"{p}/" if p else "") + (n.name or n.op_type) for p, n in sites]
        if not target.fuses_function_bodies:
            inline.append(f)
            continue
        types = _call_types(model, [n for _, n in sites], inferred)
        if any(t is None for t in types[:len(f.input)]):
            inline.append(f)
            continue
        body = _body_model(f, types, model.ir_version)
        got = fuse_body(body, target)
        if _bias_only_at_call_site(f, got, target):
            inline.append(f)
            continue
        if got.fusions:  # a raised opset: proven on the body; the rest by files.fuse_with_report
            _put_back(model, f, got.model)
        found = [(fu, res.fusions) for fu in got.fusions] + [(nm, res.near_misses) for nm in got.near_misses]
        for item, into in found:
            item.graph = _label(f, names) + (f"/{item.graph}" if item.graph else "")
            into.append(item)
    if not inline:
        return model, plan
    for f in inline:  # the inliner names copies "<node name>__k": give every body node a name to carry
        for i, n in enumerate(f.node):
            if not n.name:
                n.name = f"{f.name}_{n.op_type}_{i}"
    ids = [(f.domain, f.name) for f in inline]
    selected = set(ids)
    k = 0
    # Calls nested in inlined bodies shift the inliner's numbering: name no call sites then.
    labelled = not any((n.domain, n.op_type) in selected for f in inline for body in _function_graphs(f)
                       for n in body)
    for p, n in calls:  # the inliner numbers the calls it expands in this order: "<node>__k"
        if (n.domain, n.op_type) in selected:
            k += 1
            if labelled:
                site = f"{p}/{n.name or n.op_type}" if p else (n.name or n.op_type)
                plan.inlined[f"__{k}"] = f"{site} -> function {n.domain}.{n.op_type}"
    plan.names = [f"{d}.{n}" for d, n in ids]
    out = onnx.inliner.inline_selected_functions(model, ids)
    res.notes.append(f"inlined the calls of {', '.join(f'{d}.{n}' for d, n in ids)} to fuse the GELUs inside "
                     f"(call sites differ in type or are inside another function, or the bias is a call-site "
                     f"constant)")
    if depth < _MAX_ROUNDS and holds_gelu(out):  # a GELU inlined into another function's body
        out, again = fuse_functions(out, target, res, fuse_body, depth + 1)
        plan.inlined = {}  # two numberings: call sites no longer known by suffix
        plan.names += again.names
    return out, plan


def label_inlined(res, plan: FunctionPlan) -> None:
    """Name the call site (and function) of fusions made in inlined copies."""
    if not plan.names:
        return
    for fu in res.fusions:
        for nm in fu.nodes:
            head, sep, k = nm.rpartition("__")
            if not (sep and k.isdigit()):
                continue
            site = plan.inlined.get(f"__{k}") or f"an inlined call of function {' or '.join(plan.names)}"
            fu.graph = site + (f" [{fu.graph}]" if fu.graph else "")
            break


def _put_back(model: ModelProto, f: FunctionProto, fused: ModelProto) -> None:
    """The fused body becomes f's body; its new opset imports and model-local
    functions (our op's math) go to f and to the model. A function has no
    initializers: those the rewrite added (an Emission's constants) become
    Constant nodes."""
    del f.node[:]
    f.node.extend(helper.make_node("Constant", [], [t.name], value=t) for t in fused.graph.initializer)
    f.node.extend(fused.graph.node)
    have = {i.domain for i in f.opset_import}
    for imp in f.opset_import:  # `standard` may have raised the body's default opset (proven there)
        if imp.domain in DEFAULT_DOMAINS:
            imp.version = max(imp.version, default_opset(fused))
    for imp in fused.opset_import:
        if imp.domain not in have and imp.domain not in DEFAULT_DOMAINS:
            f.opset_import.append(helper.make_opsetid(imp.domain, imp.version))
        if imp.domain not in DEFAULT_DOMAINS:
            ensure_opset(model, imp.domain, imp.version)
    produced = {o for n in f.node for o in n.output} | set(f.input)
    keep = [vi for vi in getattr(f, "value_info", ()) if vi.name in produced]
    if len(getattr(f, "value_info", ())) != len(keep):
        del f.value_info[:]
        f.value_info.extend(keep)
    add_functions(model, list(fused.functions))
