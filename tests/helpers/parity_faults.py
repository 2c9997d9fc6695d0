"""Plant one fault into one GELU of a fused model, to prove that `check`
fails wrong fusions (and that --localize names the GELU it was planted in).

    from helpers.parity_faults import KINDS, gelu_nodes, plant
    bad = plant(fused, "drop_bias")          # the middle GELU (index len // 2)
    bad = plant(fused, "erf_as_tanh", index=3)
    bad.model, bad.node, bad.tensor          # the faulty copy, the changed node's name and output

ModelProto in, ModelProto out: the input is never modified and no file is
touched. The faults are the ones a wrong fuser would write (issue 23):

  wrong_input      the GELU reads the input of the GELU before it (same
                   shape and dtype in a transformer stack: the previous
                   layer's pre-activation)
  drop_bias        the bias is lost: BiasGelu* -> Gelu*, FastGelu(X, B) ->
                   FastGelu(X); a bias-less op reading Add(h, b) reads h
  double_bias      the bias is added twice: a new Add(X, b) feeds the GELU
  erf_as_tanh      an erf GELU emitted as its tanh approximation
  quick_alpha_one  a QuickGELU emitted with alpha = 1 (that is SiLU)

The GELUs are the single-op GELUs of the main graph (our ai.gelu_onnx ops,
ONNX Gelu, com.microsoft Gelu/BiasGelu/FastGelu/QuickGelu), in graph order,
as gelu_onnx.fusion.match.single_op reads them. A fault that does not apply to the
chosen GELU (erf_as_tanh on a tanh GELU, a bias-less GELU without a bias
Add before it, ...) raises ValueError. Exactly one existing node changes;
double_bias adds one Add node and custom-op faults add the model-local
function of the new op type when the model ships functions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from gelu_onnx import contract as C
from gelu_onnx.fusion.match import single_op as native
from gelu_onnx.fusion.targets import default_opset, make_function

KINDS = ("wrong_input", "drop_bias", "double_bias", "erf_as_tanh", "quick_alpha_one")
MS = C.MS_DOMAIN


@dataclass
class Planted:
    model: onnx.ModelProto  # the faulty copy
    kind: str
    index: int  # which GELU, in graph order
    node: str  # the changed node's name (what --localize should name)
    op: str  # the node's op before the fault, "domain::OpType"
    tensor: str  # its output: the GELU tensor --localize compares


def gelu_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The main graph's single-op GELUs, in graph order."""
    return [n for n in model.graph.node if isinstance(native.describe(n), tuple)]


def plant(model: onnx.ModelProto, kind: str, index: int | None = None) -> Planted:
    """A copy of ``model`` with fault ``kind`` planted in GELU ``index``
    (default: the middle one, len // 2)."""
    if kind not in KINDS:
        raise ValueError(f"unknown fault {kind!r}: one of {', '.join(KINDS)}")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    gelus = gelu_nodes(m)
    if not gelus:
        raise ValueError("the model has no single-op GELU to plant a fault in")
    index = len(gelus) // 2 if index is None else index
    if not -len(gelus) <= index < len(gelus):
        raise ValueError(f"GELU index {index} out of range: the model has {len(gelus)}")
    index %= len(gelus)
    node = gelus[index]
    op = f"{node.domain or 'ai.onnx'}::{node.op_type}"
    if not node.name:  # --localize reports nodes by name
        node.name = f"gelu_{index}"
    _FAULTS[kind](m, node, gelus[:index])
    return Planted(m, kind, index, node.name, op, node.output[0])


# --- the faults --------------------------------------------------------------

def _wrong_input(m, node, before):
    if not before:
        raise ValueError("wrong_input needs an earlier GELU whose input to read (index >= 1)")
    node.input[0] = before[-1].input[0]


def _drop_bias(m, node, before):
    form, has_bias, _ = native.describe(node)
    if has_bias:
        if node.domain == C.DOMAIN:
            _retype(m, node, C.OP_TYPES[(form, False)])
        elif node.op_type == "BiasGelu":
            node.op_type = "Gelu"
        del node.input[1:]
        return
    add, bias = _bias_add(m, node)
    node.input[0] = next(i for i in add.input if i != bias)


def _double_bias(m, node, before):
    _, has_bias, _ = native.describe(node)
    bias = node.input[1] if has_bias else _bias_add(m, node)[1]
    out = node.name + "_fault_x_plus_bias"
    add = helper.make_node("Add", [node.input[0], bias], [out], name=node.name + "_fault_add")
    node.input[0] = out
    nodes = list(m.graph.node)
    pos = next(i for i, n in enumerate(nodes) if n is node)
    m.graph.node.insert(pos, add)


def _erf_as_tanh(m, node, before):
    form, has_bias, _ = native.describe(node)
    if form != "erf":
        raise ValueError(f"erf_as_tanh needs an erf GELU, {node.op_type} is {form}")
    if node.domain == C.DOMAIN:
        _retype(m, node, C.OP_TYPES[("tanh", has_bias)])
    elif node.domain == MS:  # Gelu / BiasGelu -> FastGelu (X[, B])
        node.op_type = "FastGelu"
    else:
        _set_attr(node, helper.make_attribute("approximate", "tanh"))


def _quick_alpha_one(m, node, before):
    form, _, _ = native.describe(node)
    if form != "sigmoid":
        raise ValueError(f"quick_alpha_one needs a QuickGELU, {node.op_type} is {form}")
    _set_attr(node, helper.make_attribute("alpha", 1.0))


_FAULTS = {"wrong_input": _wrong_input, "drop_bias": _drop_bias, "double_bias": _double_bias,
           "erf_as_tanh": _erf_as_tanh, "quick_alpha_one": _quick_alpha_one}


# --- helpers -----------------------------------------------------------------

def _constants(m) -> set[str]:
    """Initializers and Constant outputs, and a Cast of one (a bf16 bias read
    in float32: tests/helpers/deep_models.mlp_bf16)."""
    out = {t.name for t in m.graph.initializer} | {o for n in m.graph.node if n.op_type == "Constant"
                                                    for o in n.output}
    out |= {n.output[0] for n in m.graph.node if n.op_type == "Cast" and n.input[0] in out}
    return out


def _bias_add(m, node):
    """(the Add that writes the GELU's input, its constant operand): the bias a
    bias-less GELU op reads through (the standard target, QuickGelu)."""
    consts = _constants(m)
    for n in m.graph.node:
        if n.op_type == "Add" and node.input[0] in n.output:
            b = [i for i in n.input if i in consts]
            if len(b) == 1 and len(n.input) == 2:
                return n, b[0]
    raise ValueError(f"GELU {node.name} ({node.op_type}) takes no bias input and reads no bias Add")


def _set_attr(node, attr: AttributeProto) -> None:
    for a in node.attribute:
        if a.name == attr.name:
            a.CopyFrom(attr)
            return
    node.attribute.append(attr)


def _retype(m, node, op_type: str) -> None:
    """Change a custom op's type, adding the new op's model-local function
    (typed like the old one's) when the model ships functions."""
    old = next((f for f in m.functions if f.domain == C.DOMAIN and f.name == node.op_type), None)
    node.op_type = op_type
    if old is None or any(f.domain == C.DOMAIN and f.name == op_type for f in m.functions):
        return
    m.functions.append(make_function(op_type, default_opset(m), _function_dtype(old)))


def _function_dtype(f) -> int | None:
    """None for a dtype-polymorphic body (CastLike), else its constants' type."""
    if any(n.op_type == "CastLike" for n in f.node):
        return None
    for n in f.node:
        if n.op_type == "Cast":
            return next(a.i for a in n.attribute if a.name == "to")
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    return a.t.data_type
    return None


def bias_arrays(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The bias each GELU reads (by GELU node name), where it is a constant:
    lets a test assert the planted model had non-zero biases to lose."""
    vals = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    out = {}
    for n in gelu_nodes(model):
        _, has_bias, _ = native.describe(n)
        try:
            b = n.input[1] if has_bias else _bias_add(model, n)[1]
        except ValueError:
            continue
        if b in vals:
            out[n.name] = vals[b]
    return out
