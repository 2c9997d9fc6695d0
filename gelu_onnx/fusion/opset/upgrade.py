"""Raise the default-domain opset to 20 (for ONNX ``Gelu``) without
onnx.version_converter, op by op, from the ONNX schemas.

For every default-domain node in the model (main graph, If/Loop/Scan bodies,
model-local functions and their bodies), ``onnx.defs`` says at which versions
the op's schema changed between the scope's opset and 20. Every change
crossed is proven harmless for this node or adapted (steps.py: type
only, with the node's types allowed at both; reviewed, with its condition on
the node; or an adapter from adapters.py). Anything else is refused
with the op's name and the model is left as it was (every node is proven
before any is changed).

Model-local functions are kept (onnx.version_converter drops them): their own
default-domain import is raised too, after the same proof.
"""
from __future__ import annotations

from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, defs, helper, numpy_helper, shape_inference

from ... import contract as C
from ...errors import UnsupportedError
from ...onnxio import lowest_ir_version
from ...onnxio.walk import subgraphs, walk_graphs
from .adapters import ADAPT, Refused
from ..ops import DEFAULT_DOMAINS
from .steps import REFUSED, REVIEWED, classify, previous, signature_preserved, type_only, versions

def _function_bodies(f: FunctionProto):
    yield f
    for n in f.node:
        for _, sub in subgraphs(n):
            yield from walk_graphs(sub)


def _default_version(imports) -> int | None:
    return next((i.version for i in imports if i.domain in DEFAULT_DOMAINS), None)


class _Ctx:
    """What adapters may ask: fresh names, constants, value ranks/types
    (from ONNX shape inference of the input model, computed on first use)."""

    def __init__(self, model: ModelProto, used: set[str]):
        self._model, self._used, self._types, self._consts = model, used, None, None

    def name(self, hint: str) -> str:
        k, name = 0, hint
        while name in self._used:
            k += 1
            name = f"{hint}_{k}"
        self._used.add(name)
        return name

    def node(self, op: str, inputs, outputs, **attrs) -> NodeProto:
        return helper.make_node(op, list(inputs), list(outputs), name=self.name(f"{outputs[0]}_{op}"), **attrs)

    def ints(self, hint: str, values) -> NodeProto:
        out = self.name(hint)
        return self.node("Constant", [], [out], value=helper.make_tensor(out, TensorProto.INT64, [len(values)], values))

    def floats(self, hint: str, values, scalar: bool = False) -> NodeProto:
        out = self.name(hint)
        dims = [] if scalar else [len(values)]
        return self.node("Constant", [], [out], value=helper.make_tensor(out, TensorProto.FLOAT, dims, values))

    def _type(self, value: str):
        if self._types is None:
            self._types = {}
            inferred = _infer(self._model)
            for g in walk_graphs(inferred.graph):
                for vi in list(g.input) + list(g.value_info) + list(g.output):
                    self._types[vi.name] = vi.type
                for t in g.initializer:
                    self._types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
        return self._types.get(value)

    def const(self, value: str):
        """The value of a constant (an initializer that is not a graph input,
        or a Constant's ``value``) as a numpy array; None when ``value`` is no
        constant or the name is defined twice in the model (function bodies
        have names of their own)."""
        if self._consts is None:
            found: dict[str, list] = {}
            graphs = list(walk_graphs(self._model.graph))
            inputs = {i.name for g in graphs for i in g.input}
            for g in graphs:
                for t in g.initializer:
                    found.setdefault(t.name, []).append(None if t.name in inputs else t)
            for f in self._model.functions:
                for i in f.input:
                    found.setdefault(i, []).append(None)
            for c in graphs + [b for f in self._model.functions for b in _function_bodies(f)]:
                for n in c.node:
                    a = next((a for a in n.attribute if a.name == "value"), None) if n.op_type == "Constant" else None
                    for o in n.output:
                        found.setdefault(o, []).append(a.t if a is not None and a.HasField("t") else None)
            self._consts = {k: v[0] for k, v in found.items() if len(v) == 1 and v[0] is not None}
        t = self._consts.get(value)
        return None if t is None else numpy_helper.to_array(t)

    def rank(self, value: str) -> int | None:
        t = self._type(value)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return len(t.tensor_type.shape.dim)

    def elem_type(self, value: str) -> str | None:
        t = self._type(value)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.elem_type:
            return None
        return f"tensor({helper.tensor_dtype_to_string(t.tensor_type.elem_type).split('.')[-1].lower()})"


def _infer(model: ModelProto) -> ModelProto:
    """ONNX shape inference, plus the rank of a Reshape whose shape input has
    a known length (ONNX leaves it unknown unless the shape is a constant:
    every attention Softmax of a TorchScript export sits below such a Reshape)."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - no inference: adapters take their general form
        return model
    known = {v.name: v.type.tensor_type for v in list(inferred.graph.value_info) + list(inferred.graph.input)}
    known.update({t.name: helper.make_tensor_type_proto(t.data_type, list(t.dims)).tensor_type
                  for t in inferred.graph.initializer})
    hints = []
    for n in inferred.graph.node:
        if n.op_type != "Reshape" or len(n.input) < 2 or not n.output[0]:
            continue
        out, shape = known.get(n.output[0]), known.get(n.input[1])
        if out is None or out.HasField("shape") or shape is None or len(shape.shape.dim) != 1:
            continue
        length = shape.shape.dim[0]
        if length.HasField("dim_value"):
            hints.append(helper.make_tensor_value_info(n.output[0], out.elem_type, [None] * length.dim_value))
    if not hints:
        return inferred
    names = {h.name for h in hints}
    kept = [v for v in inferred.graph.value_info if v.name not in names]
    del inferred.graph.value_info[:]
    inferred.graph.value_info.extend(kept + hints)
    try:
        return shape_inference.infer_shapes(inferred)
    except Exception:  # noqa: BLE001 - keep what the first pass knew
        return inferred


def _label(n: NodeProto, where: str) -> str:
    return f"{n.op_type} (node '{n.name}' in {where})" if n.name else f"{n.op_type} (in {where})"


def _prove(n: NodeProto, old: int, to: int, where: str, ctx: _Ctx, adapted: list[str]) -> list[NodeProto]:
    """The nodes that mean at opset ``to`` what ``n`` meant at ``old``."""
    op = n.op_type
    if not any(v <= to for v in versions(op)):
        return [n]  # not an ONNX op (e.g. TensorRT's legacy plugin node): no opset governs it
    if not any(v <= old for v in versions(op)):
        raise UnsupportedError(_refusal(old, f"{_label(n, where)} is no ONNX op at opset {old} but one at {to}"))
    since = defs.get_schema(op, old, "").since_version
    out = [n]
    steps = [v for v in versions(op) if since < v <= to]
    while steps:
        v = steps.pop(0)
        kind = classify(op, v)
        if kind == "adapt":
            fn = ADAPT[(op, v)]
            try:
                out = [m for x in out for m in (fn(x, ctx) if x is n else [x])]
            except Refused as e:
                raise UnsupportedError(_refusal(old, f"{_label(n, where)} changed meaning at opset {v} and its "
                                                     f"use here cannot be carried over ({e})")) from None
            adapted.append(op)
            if getattr(fn, "final", False):
                break
            if n.op_type != op:  # renamed (Scatter -> ScatterElements): the new op's later changes
                op = n.op_type
                steps = [s for s in versions(op) if v < s <= to]
            continue
        if kind == "reviewed":
            why, cond = REVIEWED[(op, v)]
            bad = cond(n) if cond else signature_preserved(op, previous(op, v), v)
            if bad:
                raise UnsupportedError(_refusal(old, f"{_label(n, where)} changed at opset {v} ({why}): {bad}"))
            continue
        if kind == "type-only":
            lost = type_only(op, previous(op, v), v)
            for (io, k), gone in lost.items():
                names = n.input if io == "input" else n.output
                t = ctx.elem_type(names[k]) if k < len(names) and names[k] else None
                if k < len(names) and names[k] and (t is None or t in gone):
                    raise UnsupportedError(_refusal(old, f"{_label(n, where)} no longer takes "
                                                         f"{t or 'some types'} from opset {v}"))
            continue
        why = REFUSED.get((op, v), "gelu-onnx has no proven adaptation")
        raise UnsupportedError(_refusal(old, f"{_label(n, where)} changed meaning at opset {v}: {why}"))
    return out


def _refusal(old: int, what: str) -> str:
    return (f"--target standard needs opset {C.STANDARD_GELU_OPSET} (this model has {old}): {what}; "
            f"use --target custom or --target ort")


def _replacements(model: ModelProto, to: int, replaced: frozenset[str] = frozenset()) -> tuple[list, list[str], dict]:
    """Proves every node without changing the model: [(container, {index:
    the nodes replacing that node})] with bodies before the graphs holding
    them, the adapted ops, and {output name: refusal} of the nodes in
    ``replaced`` (outputs of main-graph nodes the fusion replaces) that could
    not be proven: they are left as they are, for the fusion to remove.
    Raises UnsupportedError on the first other refusal."""
    local = {(f.domain, f.name) for f in model.functions}
    ctx = _Ctx(model, _names(model))
    scopes = [(_default_version(model.opset_import), "the model", list(walk_graphs(model.graph)), replaced)]
    scopes += [(_default_version(f.opset_import), f"function {f.domain}.{f.name}", list(_function_bodies(f)),
                frozenset()) for f in model.functions]
    todo, adapted, left = [], [], {}
    for old, where, containers, fused in scopes:
        if old is None or old >= to:
            continue
        for c in reversed(containers):  # bodies first: a parent's rebuild then copies them adapted
            reps = {}
            for k, n in enumerate(c.node):
                if n.domain not in DEFAULT_DOMAINS or (n.domain, n.op_type) in local:
                    continue
                before = len(adapted)
                try:
                    out = _prove(_copy(n), old, to, where, ctx, adapted)
                except UnsupportedError as e:
                    if not n.output or not all(o in fused for o in n.output):
                        raise
                    del adapted[before:]
                    left.update((o, str(e)) for o in n.output)
                    continue
                if len(adapted) > before:
                    reps[k] = out
            todo.append((c, reps))
    return todo, sorted(set(adapted)), left


def plan(model: ModelProto, to_opset: int = C.STANDARD_GELU_OPSET) -> list[str]:
    """The ops an upgrade would adapt, or UnsupportedError naming the first
    op that would change meaning. Changes nothing."""
    return _replacements(model, to_opset)[1]


def upgrade(model: ModelProto, to_opset: int = C.STANDARD_GELU_OPSET,
            replaced: frozenset[str] = frozenset()) -> tuple[list[str], dict[str, str]]:
    """Raise the default-domain opset of ``model`` (in place) and of its
    functions to ``to_opset`` after the proof; returns the adapted ops and
    {output: refusal} of the nodes among ``replaced`` left unproven (the
    caller's fusion must remove them: an op is refused only for what remains
    after fusion). On refusal the model is left as it was (nothing changes
    before every node is proven; no copy of the model is made)."""
    todo, adapted, left = _replacements(model, to_opset, replaced)
    for c, reps in todo:
        if not reps:
            continue
        rebuilt = [_copy(m) for k, n in enumerate(c.node) for m in reps.get(k, [n])]
        del c.node[:]
        c.node.extend(rebuilt)
    for imports in [model.opset_import] + [f.opset_import for f in model.functions]:
        for imp in imports:
            if imp.domain in DEFAULT_DOMAINS and imp.version < to_opset:
                imp.version = to_opset
    model.ir_version = max(model.ir_version, lowest_ir_version(model) or model.ir_version)
    return adapted, left


def note(old: int, adapted: list[str]) -> str:
    """The report line for an upgrade."""
    return (f"raised the default opset {old} -> {C.STANDARD_GELU_OPSET}: every op proven unchanged from the ONNX "
            f"schemas" + (f", adapted {', '.join(adapted)}" if adapted else "") + "; model-local functions kept")


def _copy(n: NodeProto) -> NodeProto:
    c = NodeProto()
    c.CopyFrom(n)
    return c


def _names(model: ModelProto) -> set[str]:
    used: set[str] = set()
    containers = list(walk_graphs(model.graph))
    for f in model.functions:
        containers.extend(_function_bodies(f))
        used.update(f.input)
    for c in containers:
        for n in c.node:
            used.add(n.name)
            used.update(n.input)
            used.update(n.output)
        if isinstance(c, GraphProto):
            used.update(t.name for t in c.initializer)
            used.update(i.name for i in c.input)
    return used
