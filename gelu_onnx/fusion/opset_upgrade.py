"""Raise the default-domain opset to 20 (for ONNX ``Gelu``) without
onnx.version_converter, op by op, from the ONNX schemas.

For every default-domain node in the model (main graph, If/Loop/Scan bodies,
model-local functions and their bodies), ``onnx.defs.get_schema(op, v,
"").since_version`` at the model's opset and at 20 say whether the op's
definition changed in between. Unchanged: nothing to prove. Changed: every
version step crossed must be in the reviewed table below, either as
"same meaning for every model valid before" (only new types, or new optional
inputs/attributes whose defaults are the old behaviour) or with an adapter
that rewrites the node to keep its old meaning. The "same" entries are also
checked mechanically (``signature_preserved``: every old input, output and
attribute default still there) — by the tests for every entry, and here for
the schemas actually crossed. Anything else is refused with the op's name,
before the model is touched.

Model-local functions are kept (the version converter dropped them): their
own default-domain import is raised too, after the same proof.
"""
from __future__ import annotations

from onnx import FunctionProto, GraphProto, ModelProto, NodeProto, TensorProto, defs, helper

from .. import contract as C
from ..errors import UnsupportedError
from ..onnxio.walk import subgraphs

_DEFAULT = ("", "ai.onnx")

# (op, version that changed it): why an old-opset node means the same there.
SAME: dict[tuple[str, int], str] = {
    **{(op, 14): "adds int8/uint8/int16/uint16 types" for op in ("Add", "Sub", "Mul", "Div")},
    ("Relu", 14): "adds signed integer types",
    ("CumSum", 14): "adds float16/bfloat16",
    **{(op, 14): "adds attribute layout (default 0 = the old layout)" for op in ("GRU", "LSTM", "RNN")},
    ("BatchNormalization", 15): "input types may differ (scale/bias vs X)",
    ("Pow", 15): "adds bfloat16 exponents",
    ("Shape", 15): "adds start/end (default: the whole shape)",
    ("Reshape", 14): "adds allowzero (default 0 = the old rule); adds bfloat16",
    **{(op, 16): "adds bfloat16" for op in ("LeakyRelu", "PRelu", "Where", "GreaterOrEqual", "LessOrEqual")},
    **{(op, 16): "adds optional/sequence types" for op in ("Identity", "If", "Loop", "Scan")},
    **{(op, 16): "adds reduction (default none = overwrite)" for op in ("ScatterElements", "ScatterND")},
    **{(op, 18): "adds reduction max/min" for op in ("ScatterElements", "ScatterND")},
    ("Pad", 18): "adds the optional axes input (absent: all axes)",
    ("Pad", 19): "adds mode wrap",
    ("Resize", 18): "adds antialias/axes/keep_aspect_ratio_policy (defaults: the old behaviour)",
    ("Resize", 19): "adds coordinate_transformation_mode half_pixel_symmetric",
    ("LpPool", 18): "adds ceil_mode/dilations (defaults: the old behaviour)",
    ("AveragePool", 19): "adds dilations (default 1)",
    ("OptionalGetElement", 18): "accepts plain tensors too",
    ("OptionalHasElement", 18): "accepts plain tensors too",
    **{(op, 19): "adds float8 types" for op in ("Constant", "Identity", "If", "Loop", "Scan", "Reshape",
                                                "Shape", "Size", "CastLike", "DequantizeLinear")},
    ("Cast", 19): "adds float8 types and saturate (only for float8 outputs)",
    ("QuantizeLinear", 19): "adds float8 types and saturate (only for float8 outputs)",
    ("Equal", 19): "adds string",
    ("ConstantOfShape", 20): "adds bfloat16/float8 types",
    ("IsInf", 20): "adds float16/bfloat16/float8",
    ("IsNaN", 20): "adds float8",
    ("ReduceMax", 20): "adds bool",
    ("ReduceMin", 20): "adds bool",
}

_REDUCE_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
              "ReduceMin", "ReduceProd", "ReduceSumSquare")


def _axes_to_input(node: NodeProto, const) -> list[NodeProto]:
    """Reduce*-18 reads axes from an input instead of an attribute."""
    axes = next((a for a in node.attribute if a.name == "axes"), None)
    if axes is None:
        return []  # no axes: reduce over all, at 18 as before
    c = const(node, list(axes.ints))
    node.attribute.remove(axes)
    node.input.insert(1, c.output[0]) if len(node.input) > 1 else node.input.append(c.output[0])
    return [c]


def _split_num_outputs(node: NodeProto, const) -> list[NodeProto]:
    """Split-18 needs num_outputs when no split sizes are given (13: implied)."""
    if len(node.input) < 2 or not node.input[1]:
        node.attribute.append(helper.make_attribute("num_outputs", len(node.output)))
    return []


def _roi_align_mode(node: NodeProto, const) -> list[NodeProto]:
    """RoiAlign-16 changed coordinate_transformation_mode's default."""
    if not any(a.name == "coordinate_transformation_mode" for a in node.attribute):
        node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "output_half_pixel"))
    return []


# (op, version that changed it): rewrites the node (in place) to keep its old
# meaning; returns the Constant nodes to put in front of it.
ADAPT = {
    **{(op, 18): _axes_to_input for op in _REDUCE_18},
    ("Split", 18): _split_num_outputs,
    ("RoiAlign", 16): _roi_align_mode,
}


def _versions(op: str) -> list[int]:
    cache = _versions.__dict__.setdefault("cache", {})
    if op not in cache:
        cache[op] = sorted({s.since_version for s in defs.get_all_schemas_with_history()
                            if s.name == op and s.domain == ""})
    return cache[op]


def signature_preserved(op: str, old_since: int, new_since: int) -> str | None:
    """None when every input, output and attribute (with its default) of the
    old schema is still there at the new one, and every old type is still
    allowed; else what differs."""
    a, b = defs.get_schema(op, old_since, ""), defs.get_schema(op, new_since, "")
    for kind, xs, ys in (("input", a.inputs, b.inputs), ("output", a.outputs, b.outputs)):
        for k, x in enumerate(xs):
            if k >= len(ys):
                return f"{kind} {x.name} removed"
            if x.option != ys[k].option and ys[k].option != defs.OpSchema.FormalParameterOption.Optional:
                return f"{kind} {x.name} became required"
    for name, attr in a.attributes.items():
        if name not in b.attributes:
            return f"attribute {name} removed"
        nb = b.attributes[name]
        if attr.default_value.SerializeToString() != nb.default_value.SerializeToString():
            return f"attribute {name}'s default changed"
    for name, new_attr in b.attributes.items():
        if name not in a.attributes and new_attr.required:
            return f"attribute {name} added as required"
    old_types = {c.type_param_str: set(c.allowed_type_strs) for c in a.type_constraints}
    new_types = {c.type_param_str: set(c.allowed_type_strs) for c in b.type_constraints}
    for x in list(a.inputs) + list(a.outputs):
        y = next((p for p in list(b.inputs) + list(b.outputs) if p.name == x.name), None)
        lost = old_types.get(x.type_str, {x.type_str}) - new_types.get(y.type_str if y else "", {y.type_str if y else ""})
        if lost:
            return f"{x.name} no longer takes {sorted(lost)[0]}"
    return None


def _steps(op: str, old: int, new: int) -> list[int]:
    """The versions at which op changed after opset ``old`` up to ``new``."""
    s_old = defs.get_schema(op, old, "").since_version
    return [v for v in _versions(op) if s_old < v <= new]


def _graphs_of(g: GraphProto):
    yield g
    for n in g.node:
        for _, sub in subgraphs(n):
            yield from _graphs_of(sub)


def _function_bodies(f: FunctionProto):
    yield f
    for n in f.node:
        for _, sub in subgraphs(n):
            yield from _graphs_of(sub)


def _default_version(imports) -> int | None:
    return next((i.version for i in imports if i.domain in _DEFAULT), None)


def plan(model: ModelProto, to_opset: int = C.STANDARD_GELU_OPSET):
    """Prove every default-domain node; returns [(container, node, adapter)]
    for the nodes that need rewriting, or raises UnsupportedError naming the
    first op that would change meaning. Changes nothing."""
    local = {(f.domain, f.name) for f in model.functions}
    scopes = [(_default_version(model.opset_import), "the model", list(_graphs_of(model.graph)))]
    for f in model.functions:
        scopes.append((_default_version(f.opset_import), f"function {f.domain}.{f.name}",
                       list(_function_bodies(f))))
    todo = []
    for old, where, containers in scopes:
        if old is None or old >= to_opset:
            continue
        for c in containers:
            for n in c.node:
                if n.domain not in _DEFAULT or (n.domain, n.op_type) in local:
                    continue
                for step in _proof(n, old, to_opset, where):
                    todo.append((c, n, ADAPT[(n.op_type, step)]))
    return todo


def _proof(n: NodeProto, old: int, to_opset: int, where: str) -> list[int]:
    label = f"{n.op_type} (node '{n.name}' in {where})" if n.name else f"{n.op_type} (in {where})"
    if not any(v <= to_opset for v in _versions(n.op_type)):
        return []  # not an ONNX op (e.g. TensorRT's legacy plugin node): no opset governs it
    if not any(v <= old for v in _versions(n.op_type)):
        raise UnsupportedError(_refusal(old, f"{label} is no ONNX op at opset {old} but one at {to_opset}"))
    steps = _steps(n.op_type, old, to_opset)
    adapt = []
    for v in steps:
        if (n.op_type, v) in ADAPT:
            adapt.append(v)
            continue
        if (n.op_type, v) not in SAME:
            raise UnsupportedError(_refusal(old, f"{label} changed meaning at opset {v} and gelu-onnx has no "
                                                 f"proven adaptation"))
        prev = max(s for s in _versions(n.op_type) if s < v)
        why = signature_preserved(n.op_type, prev, v)
        if why:  # the reviewed table disagrees with this onnx's schemas
            raise UnsupportedError(_refusal(old, f"{label} changed at opset {v}: {why}"))
    return adapt


def _refusal(old: int, what: str) -> str:
    return (f"--target standard needs opset {C.STANDARD_GELU_OPSET} (this model has {old}): {what}; "
            f"use --target custom or --target ort")


def upgrade(model: ModelProto, to_opset: int = C.STANDARD_GELU_OPSET) -> list[str]:
    """Raise the default-domain opset of ``model`` (in place) and of its
    functions to ``to_opset`` after plan()'s proof; returns the adapted ops.
    On refusal the model is left as it was."""
    todo = plan(model, to_opset)
    used = _names(model)
    counter = [0]

    def const(node: NodeProto, ints: list[int]) -> NodeProto:
        while True:
            counter[0] += 1
            name = f"{node.name or node.op_type}_axes_{counter[0]}"
            if name not in used:
                used.add(name)
                break
        return helper.make_node("Constant", [], [name], name=name,
                                value=helper.make_tensor(name, TensorProto.INT64, [len(ints)], ints))

    inserts: dict[int, list[tuple[NodeProto, list[NodeProto]]]] = {}
    containers: dict[int, object] = {}
    adapted: list[str] = []
    for c, n, fn in todo:
        new = fn(n, const)
        adapted.append(n.op_type)
        if new:
            inserts.setdefault(id(c), []).append((n, new))
            containers[id(c)] = c
    for key, items in inserts.items():
        c = containers[key]
        before = {id(n): new for n, new in items}
        nodes = []
        for n in c.node:
            nodes.extend(before.get(id(n), ()))
            nodes.append(n)
        rebuilt = [_copy(n) for n in nodes]
        del c.node[:]
        c.node.extend(rebuilt)
    for imports in [model.opset_import] + [f.opset_import for f in model.functions]:
        for imp in imports:
            if imp.domain in _DEFAULT and imp.version < to_opset:
                imp.version = to_opset
    from ..onnxio import lowest_ir_version

    model.ir_version = max(model.ir_version, lowest_ir_version(model) or model.ir_version)
    return sorted(set(adapted))


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
    containers = list(_graphs_of(model.graph))
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

