"""What each ONNX schema change (op, the version that changed it) means for a
node written before it: the one table of the opset upgrade's vocabulary.

A step is one of
- type-only: the schemas at both versions have the same inputs, outputs and
  attributes (names, optionality, arity, defaults) and differ only in the
  types allowed. Decided from ``onnx.defs`` alone (``type_only``); the types
  the node uses must be allowed at both (checked per node where a type was
  dropped: Erf-13 lost the integer types).
- REVIEWED: same meaning for every node valid before, for a reason read off
  the ONNX changelog: a new optional input/attribute whose absence is the old
  behaviour (also checked mechanically: ``signature_preserved``), or a
  rewording with the same signature and types (negative axes allowed at 11,
  broadcasting at 8). An entry may carry a condition on the node.
- ADAPT (adapters.py): the node is rewritten to keep its old meaning.
- anything else is refused naming the op (``REFUSED`` lists the changes
  between opsets 7 and 20 that are known and deliberately not adapted).
"""
from __future__ import annotations

import functools

from onnx import NodeProto, defs

from .adapters import ADAPT

_NEG_AXES = "accepts negative axes/indices; every value valid before means the same"
_PADS = "rewords auto_pad SAME_UPPER/SAME_LOWER; explicit pads (auto_pad NOTSET/VALID) mean the same"


def _attr_s(n: NodeProto, name: str, default: str) -> str:
    a = next((a for a in n.attribute if a.name == name), None)
    return a.s.decode() if a is not None else default


def _explicit_pads(n: NodeProto) -> str | None:
    mode = _attr_s(n, "auto_pad", "NOTSET")
    return None if mode in ("NOTSET", "VALID") else f"auto_pad={mode}"


def _inference_bn(n: NodeProto) -> str | None:
    return None if len([o for o in n.output if o]) == 1 else "training outputs (running mean/var) are used"


# (op, version that changed it): (why a node valid before means the same,
# a condition on the node: None when it holds, else why not)
REVIEWED: dict[tuple[str, int], tuple[str, object]] = {
    **{(op, 11): (_NEG_AXES, None) for op in (
        "ArgMax", "ArgMin", "Compress", "Concat", "Flatten", "Gather", "Hardmax", "LogSoftmax", "Softmax", "OneHot",
        "Split", "Squeeze", "Unsqueeze", "Slice", "Scan", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare")},
    **{(op, 11): (_PADS, _explicit_pads) for op in (
        "Conv", "ConvTranspose", "AveragePool", "MaxPool", "LpPool", "MaxUnpool")},
    **{(op, 8): ("adds multidirectional broadcasting (same shapes mean the same)", None)
       for op in ("Max", "Min", "Mean", "Sum")},
    ("If", 11): ("branches may produce different shapes; same values", None),
    ("Loop", 11): ("rewords the optional M/cond inputs; same signature", None),
    **{(op, 12): ("adds select_last_index (default 0 = first index, as before)", None)
       for op in ("ArgMax", "ArgMin")},
    ("AveragePool", 10): ("adds ceil_mode (default 0 = floor, as before)", None),
    ("AveragePool", 19): ("adds dilations (default 1)", None),
    ("MaxPool", 8): ("adds storage_order and the optional Indices output", None),
    ("MaxPool", 10): ("adds ceil_mode and dilations (defaults: the old behaviour)", None),
    ("LpPool", 18): ("adds ceil_mode/dilations (defaults: the old behaviour)", None),
    ("BatchNormalization", 14): ("adds training_mode (default 0 = inference, as before); the training outputs "
                                 "change", _inference_bn),
    ("BatchNormalization", 15): ("scale/bias may have another type than X", None),
    ("Constant", 11): ("adds sparse_value", None),
    ("Constant", 12): ("adds value_float(s)/value_int(s)/value_string(s)", None),
    ("DepthToSpace", 11): ("adds mode (default DCR, the old order)", None),
    **{(op, 13): ("adds axis; per-tensor scales (all opset 10 allows) ignore it", None)
       for op in ("DequantizeLinear", "QuantizeLinear")},
    ("DequantizeLinear", 19): ("adds float8 types", None),
    **{(op, 19): ("adds float8 types and saturate (only for float8 outputs)", None)
       for op in ("QuantizeLinear", "Cast", "CastLike")},
    ("GatherND", 12): ("adds batch_dims (default 0 = the old rule)", None),
    ("Gemm", 11): ("C becomes optional", None),
    **{(op, 14): ("adds layout (default 0 = the old layout)", None) for op in ("GRU", "LSTM", "RNN")},
    ("Pow", 12): ("the exponent may have its own type", None),
    ("Reshape", 14): ("adds allowzero (default 0 = the old rule)", None),
    ("Shape", 15): ("adds start/end (default: the whole shape)", None),
    ("Identity", 14): ("adds sequence types", None),
    **{(op, 18): ("accepts plain tensors too", None) for op in ("OptionalHasElement", "OptionalGetElement")},
    **{(op, 16): ("adds reduction (default none = overwrite)", None) for op in ("ScatterElements", "ScatterND")},
    **{(op, 18): ("adds reduction max/min", None) for op in ("ScatterElements", "ScatterND")},
    ("Pad", 18): ("adds the optional axes input (absent: all axes)", None),
    ("Pad", 19): ("adds mode wrap", None),
    ("Resize", 13): ("roi and scales become optional; drops coordinate_transformation_mode tf_half_pixel_for_nn",
                     lambda n: "tf_half_pixel_for_nn" if _attr_s(n, "coordinate_transformation_mode", "")
                     == "tf_half_pixel_for_nn" else None),
    ("Resize", 18): ("adds antialias/axes/keep_aspect_ratio_policy (defaults: the old behaviour)", None),
    ("Resize", 19): ("adds coordinate_transformation_mode half_pixel_symmetric", None),
    ("TopK", 11): ("adds largest/sorted (defaults 1: the old behaviour)", None),
}

# Known changes between opsets 7 and 20 that gelu-onnx does not adapt
# (no exporter we test writes them in an inference graph): refused by name.
REFUSED: dict[tuple[str, int], str] = {
    ("Scan", 9): "Scan-8's batch axis and sequence_lens input were removed",
    ("DFT", 20): "the axis attribute became an input with another default",
    ("GridSample", 20): "modes renamed (bilinear -> linear) and N-D added",
    ("NegativeLogLikelihoodLoss", 13): "training loss: not an inference op",
    ("NonMaxSuppression", 11): "the box-coordinate rules were reworded",
}


@functools.cache
def versions(op: str) -> list[int]:
    """The opsets at which the default-domain ``op`` got a new schema."""
    return sorted({s.since_version for s in defs.get_all_schemas_with_history()
                   if s.name == op and s.domain == ""})


def previous(op: str, v: int) -> int:
    return max(s for s in versions(op) if s < v)


def _types(s, p) -> frozenset[str]:
    by = {c.type_param_str: c.allowed_type_strs for c in s.type_constraints}
    return frozenset(by.get(p.type_str, [p.type_str]))


def _signature(s):
    """Everything of a schema but the types allowed."""
    ps = lambda xs: [(p.name, p.option, p.is_homogeneous) for p in xs]  # noqa: E731
    attrs = {n: (a.required, a.type, a.default_value.SerializeToString()) for n, a in s.attributes.items()}
    return ps(s.inputs), ps(s.outputs), attrs, s.min_input, s.max_input, s.min_output, s.max_output


def type_only(op: str, old_since: int, new_since: int) -> dict[tuple[str, int], frozenset[str]] | None:
    """None when the two schemas differ in more than their types; else the
    types each (kind, position) no longer takes (empty when only added)."""
    a, b = defs.get_schema(op, old_since, ""), defs.get_schema(op, new_since, "")
    if _signature(a) != _signature(b):
        return None
    lost = {}
    for kind, xs, ys in (("input", a.inputs, b.inputs), ("output", a.outputs, b.outputs)):
        for k, (x, y) in enumerate(zip(xs, ys)):
            gone = _types(a, x) - _types(b, y)
            if gone:
                lost[(kind, k)] = gone
    return lost


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
            lost = _types(a, x) - _types(b, ys[k])
            if lost:
                return f"{x.name} no longer takes {sorted(lost)[0]}"
    for name, attr in a.attributes.items():
        if name not in b.attributes:
            return f"attribute {name} removed"
        if attr.default_value.SerializeToString() != b.attributes[name].default_value.SerializeToString():
            return f"attribute {name}'s default changed"
    for name, new_attr in b.attributes.items():
        if name not in a.attributes and new_attr.required:
            return f"attribute {name} added as required"
    return None


def classify(op: str, v: int) -> str:
    """'type-only', 'reviewed', 'adapt', 'refused' or 'unknown' for the step
    of ``op`` at version ``v``."""
    if (op, v) in ADAPT:
        return "adapt"
    if (op, v) in REVIEWED:
        return "reviewed"
    if (op, v) in REFUSED:
        return "refused"
    if type_only(op, previous(op, v), v) is not None:
        return "type-only"
    return "unknown"
