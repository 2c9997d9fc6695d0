"""The adapters of the opset upgrade: each rewrites one default-domain node
written for an opset before a schema change so that, read at the new
version, it means what it meant (ported from onnx.version_converter's
adapters where those are right; see docs/design.md for where they are not).

An adapter is ``fn(node, ctx) -> [nodes]``: it may change ``node`` in place
and returns the nodes that replace it (``node`` among them, or its
substitute); it raises ``Refused`` when this node's use of the op has no
exact equivalent. ``final`` adapters write a node with its opset-20 meaning
(later steps of the old op are then not crossed); one that changes the op
type leaves the new op's later steps to be proven in turn.
"""
from __future__ import annotations

import math
from typing import Callable, Protocol

from onnx import NodeProto, helper


class Refused(Exception):
    """This node's use of the op cannot be carried over exactly."""


class Ctx(Protocol):
    def name(self, hint: str) -> str: ...
    def ints(self, hint: str, values: list[int]) -> NodeProto: ...
    def floats(self, hint: str, values: list[float], scalar: bool = False) -> NodeProto: ...
    def rank(self, value: str) -> int | None: ...
    def const(self, value: str): ...
    def node(self, op: str, inputs: list[str], outputs: list[str], **attrs) -> NodeProto: ...


def _pop(node: NodeProto, name: str):
    a = _get(node, name)
    if a is not None:
        node.attribute.remove(a)
    return a


def _get(node: NodeProto, name: str):
    return next((a for a in node.attribute if a.name == name), None)


def _set_input(node: NodeProto, k: int, value: str) -> None:
    while len(node.input) <= k:
        node.input.append("")
    node.input[k] = value


def _attrs_to_inputs(*names: str, first: int = 1) -> Callable:
    """int-list attributes -> int64 1-D constant inputs at positions first,
    first+1, ... (an absent attribute: an empty input name, or none at the end)."""
    def adapt(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
        out = []
        for k, name in enumerate(names):
            a = _pop(node, name)
            if a is None:
                continue
            c = ctx.ints(f"{node.name or node.op_type}_{name}", list(a.ints))
            out.append(c)
            _set_input(node, first + k, c.output[0])
        return out + [node]
    return adapt


def _typed_scalar(node: NodeProto, ctx: Ctx, hint: str, value: float, like: str) -> tuple[list[NodeProto], str]:
    """A scalar ``value`` in the type of ``like`` (float attribute -> T input)."""
    f = ctx.floats(hint, [value], scalar=True)
    c = ctx.node("CastLike", [f.output[0], like], [ctx.name(hint + "_cast")])
    return [f, c], c.output[0]


def clip_11(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Clip-11: min/max move from float attributes to inputs of type T."""
    out = []
    for k, name in ((1, "min"), (2, "max")):
        a = _pop(node, name)
        if a is None:
            continue  # absent: no bound, at 11 as before
        extra, v = _typed_scalar(node, ctx, f"{node.name or 'Clip'}_{name}", a.f, node.input[0])
        out += extra
        _set_input(node, k, v)
    return out + [node]


def pad_11(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Pad-11: pads (int64) and value (T) move to inputs."""
    pads = _pop(node, "pads")
    value = _pop(node, "value")
    c = ctx.ints(f"{node.name or 'Pad'}_pads", list(pads.ints))
    out = [c]
    _set_input(node, 1, c.output[0])
    if value is not None and (value.f != 0.0 or math.copysign(1.0, value.f) < 0):  # -0.0 keeps its sign
        extra, v = _typed_scalar(node, ctx, f"{node.name or 'Pad'}_value", value.f, node.input[0])
        out += extra
        _set_input(node, 2, v)
    return out + [node]


def topk_10(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """TopK-10: k moves to a 1-element int64 input."""
    k = _pop(node, "k")
    c = ctx.ints(f"{node.name or 'TopK'}_k", [k.i])
    _set_input(node, 1, c.output[0])
    return [c, node]


def _no_mask(node: NodeProto) -> None:
    # Before 12 the spec leaves the inference mask open (ONNX Runtime writes
    # all false); from 12 it is all true: a model that reads it has no exact form.
    if len(node.output) > 1 and node.output[1]:
        raise Refused("the mask output's inference value changed (unspecified before 12, all true from 12)")


def dropout_10(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Dropout-10: the mask output became bool (it had the data's type)."""
    _no_mask(node)
    return [node]


def dropout_12(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Dropout-12: ratio moves to an optional input (training_mode absent =
    inference, as every earlier Dropout in an inference graph)."""
    _no_mask(node)
    ratio = _pop(node, "ratio")
    if ratio is None:
        return [node]
    f = ctx.floats(f"{node.name or 'Dropout'}_ratio", [ratio.f], scalar=True)
    _set_input(node, 1, f.output[0])
    return [f, node]


def batchnorm_9(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """BatchNormalization-9 dropped ``spatial`` (always per-channel, i.e. spatial=1)."""
    a = _pop(node, "spatial")
    if a is not None and a.i != 1:
        raise Refused("spatial=0 (statistics per element) has no opset-9 form")
    return [node]


def softmax_13(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Softmax/LogSoftmax/Hardmax-13 normalise along ``axis`` alone; before,
    the input was flattened to 2-D at ``axis`` (default 1) and normalised
    along the second dimension. The same where axis is the last dimension;
    elsewhere: Flatten(axis) -> op(axis=-1) -> Reshape to the input's shape."""
    a = _pop(node, "axis")
    axis = a.i if a is not None else 1
    rank = ctx.rank(node.input[0])
    if axis == -1 or (rank is not None and axis == rank - 1):
        node.attribute.append(helper.make_attribute("axis", -1))
        return [node]
    x, y = node.input[0], node.output[0]
    shape = ctx.node("Shape", [x], [ctx.name(f"{x}_shape")])
    flat = ctx.node("Flatten", [x], [ctx.name(f"{x}_2d")], axis=axis)
    node.input[0] = flat.output[0]
    node.output[0] = ctx.name(f"{y}_2d")
    node.attribute.append(helper.make_attribute("axis", -1))
    back = ctx.node("Reshape", [node.output[0], shape.output[0]], [y], allowzero=1)
    return [shape, flat, node, back]


def split_18(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Split-18 needs num_outputs when no split sizes are given (13: implied)."""
    if len(node.input) < 2 or not node.input[1]:
        node.attribute.append(helper.make_attribute("num_outputs", len(node.output)))
    return [node]


def roi_align_16(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """RoiAlign-16 changed coordinate_transformation_mode's default."""
    if _get(node, "coordinate_transformation_mode") is None:
        node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "output_half_pixel"))
    return [node]


def _resize_old(node: NodeProto, mode: str, nearest: str = "floor") -> None:
    """Resize-10 / Upsample: asymmetric coordinates; nearest rounds as ``nearest``."""
    if mode not in ("nearest", "linear"):
        raise Refused(f"mode {mode!r}")
    for name in ("coordinate_transformation_mode", "nearest_mode"):
        _pop(node, name)
    node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "asymmetric"))
    if mode == "nearest":
        node.attribute.append(helper.make_attribute("nearest_mode", nearest))


def resize_11(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Resize-11 adds roi and defaults to half_pixel coordinates (and
    round_prefer_floor for nearest); Resize-10 meant asymmetric coordinates,
    and ONNX Runtime's nearest rounds down on an axis it upsamples and up on
    one it downsamples (its upsample.h, nearest mode SIMPLE): an axis's
    direction comes from the constant scales, and a Resize that does both is
    written as two (downsampled axes with ceil, then upsampled ones with
    floor; nearest is separable by axis). onnx.version_converter only adds
    the roi (tests/test_opset_adapters.py)."""
    a = _get(node, "mode")
    mode = a.s.decode() if a is not None else "nearest"
    if mode != "nearest":
        _resize_old(node, mode)
        node.input.insert(1, "")  # roi: unused outside tf_crop_and_resize (optional from 13)
        return [node]
    scales = ctx.const(node.input[1]) if len(node.input) > 1 else None
    if scales is None:
        raise Refused("nearest with scales that are not a constant: ONNX Runtime rounds down where it upsamples "
                      "and up where it downsamples, which the scales decide at run time")
    scales = [float(v) for v in scales.reshape(-1)]
    down = [s if s < 1 else 1.0 for s in scales]
    if down == [1.0] * len(scales):
        _resize_old(node, mode)
        node.input.insert(1, "")
        return [node]
    _resize_old(node, mode, "ceil")
    if all(s <= 1 for s in scales):
        node.input.insert(1, "")
        return [node]
    first = ctx.floats(f"{node.name or 'Resize'}_down", down)
    y = node.output[0]
    x = node.input[0]
    del node.input[:]
    node.input.extend([x, "", first.output[0]])
    node.output[0] = ctx.name(f"{y}_down")
    up = ctx.floats(f"{node.name or 'Resize'}_up", [s if s > 1 else 1.0 for s in scales])
    second = ctx.node("Resize", [node.output[0], "", up.output[0]], [y], mode="nearest",
                      coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return [first, node, up, second]
resize_11.final = True  # type: ignore[attr-defined]


def upsample_resize(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Upsample (deprecated at 10; scales an attribute before 9) -> Resize with
    Upsample's coordinates (asymmetric, nearest rounding down)."""
    scales = _pop(node, "scales")
    mode = _get(node, "mode")
    node.op_type = "Resize"
    _resize_old(node, mode.s.decode() if mode is not None else "nearest")
    if scales is not None:
        f = ctx.floats(f"{node.name or 'Upsample'}_scales", list(scales.floats))
        node.input.append(f.output[0])
        node.input.insert(1, "")
        return [f, node]
    node.input.insert(1, "")
    return [node]
upsample_resize.final = True  # type: ignore[attr-defined]


def scatter_elements(node: NodeProto, ctx: Ctx) -> list[NodeProto]:
    """Scatter (deprecated at 11) is ScatterElements-11 under its old name."""
    node.op_type = "ScatterElements"
    return [node]


_REDUCE_18 = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
              "ReduceMin", "ReduceProd", "ReduceSumSquare")

# (op, version that changed it): the adapter that keeps an older node's meaning.
ADAPT: dict[tuple[str, int], Callable] = {
    ("Clip", 11): clip_11,
    ("Pad", 11): pad_11,
    ("Slice", 10): _attrs_to_inputs("starts", "ends", "axes"),
    ("TopK", 10): topk_10,
    ("Dropout", 10): dropout_10,
    ("Dropout", 12): dropout_12,
    ("BatchNormalization", 9): batchnorm_9,
    **{(op, 13): softmax_13 for op in ("Softmax", "LogSoftmax", "Hardmax")},
    **{(op, 13): _attrs_to_inputs("axes") for op in ("Squeeze", "Unsqueeze", "ReduceSum")},
    ("Split", 13): _attrs_to_inputs("split"),
    ("Split", 18): split_18,
    **{(op, 18): _attrs_to_inputs("axes") for op in _REDUCE_18},
    ("RoiAlign", 16): roi_align_16,
    ("Resize", 11): resize_11,
    ("Upsample", 9): upsample_resize,
    ("Upsample", 10): upsample_resize,
    ("Scatter", 11): scatter_elements,
}
