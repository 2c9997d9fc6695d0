"""What a matched GELU is rewritten into, per target.

custom   : ai.gelu_onnx.{Bias}Gelu{Erf,Tanh,Sigmoid}, plus a model-local
           function per op type so the model runs without our library.
standard : ONNX Gelu-20 (approximate none|tanh). No standard op exists for
           x*sigmoid(a*x): those are reported and left as they are.
ort      : com.microsoft Gelu / BiasGelu / FastGelu (optional bias) / QuickGelu.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from onnx import AttributeProto, FunctionProto, NodeProto, TensorProto, helper

from .. import contract as C

Target = Literal["custom", "standard", "ort"]
TARGETS: tuple[str, ...] = get_args(Target)

_FLOAT = TensorProto.FLOAT


@dataclass
class Emission:
    """The op one match becomes (before any dtype Casts)."""

    domain: str
    op_type: str
    inputs_bias: bool  # whether the op takes the bias as its second input
    attrs: dict

    @property
    def qualified(self) -> str:
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type


def supported(target: str, form: str, elem_type: int) -> str | None:
    """None if the target can express this GELU in this dtype, else why not."""
    dt = C.FLOAT_DTYPES.get(elem_type, str(elem_type))
    if target == "standard":
        if form == "sigmoid":
            return "ONNX has no standard op for x*sigmoid(alpha*x) (QuickGELU); left as is"
        if elem_type not in C.FLOAT_DTYPES:
            return f"Gelu-20 has no {dt} kernel type"
        return None
    if elem_type not in C.KERNEL_DTYPES:
        owner = "the custom op" if target == "custom" else "com.microsoft GELU ops"
        return f"{owner} support float32/float16/bfloat16, not {dt}"
    return None


def emission(target: str, form: str, bias: bool, alpha: float | None) -> Emission:
    if target == "custom":
        attrs = {C.ATTR_ALPHA: float(alpha)} if form == "sigmoid" else {}
        attrs[C.ATTR_PLUGIN_NAMESPACE] = C.DOMAIN
        return Emission(C.DOMAIN, C.OP_TYPES[(form, bias)], bias, attrs)
    if target == "standard":
        return Emission("", "Gelu", False, {"approximate": "none" if form == "erf" else "tanh"})
    if target == "ort":
        if form == "erf":
            return Emission(C.MS_DOMAIN, "BiasGelu" if bias else "Gelu", bias, {})
        if form == "tanh":
            return Emission(C.MS_DOMAIN, "FastGelu", bias, {})
        return Emission(C.MS_DOMAIN, "QuickGelu", False, {"alpha": float(alpha)})
    raise ValueError(f"unknown target {target!r}")


def target_takes_bias(target: str, form: str) -> bool:
    return target == "custom" or (target == "ort" and form in ("erf", "tanh"))


# --- model-local functions for the custom op --------------------------------

def make_function(op_type: str, opset: int, elem_type: int | None) -> FunctionProto:
    """The op's math as an ONNX function.

    ``elem_type`` None → dtype-polymorphic body via CastLike (opset >= 15);
    otherwise constants are typed for that dtype (older opsets). The body is
    written in the order ONNX Runtime's own Gelu/FastGelu fusions recognise,
    so an ORT without our library still fuses the inlined body.
    """
    form, bias = C.FORM_OF_OP_TYPE[op_type]
    nodes: list[NodeProto] = []

    def const(name: str, value: float) -> str:
        if elem_type is None:
            nodes.append(helper.make_node("Constant", [], [name + "_f"],
                                          value=helper.make_tensor(name + "_t", _FLOAT, [], [value])))
            nodes.append(helper.make_node("CastLike", [name + "_f", "X"], [name]))
        else:
            nodes.append(helper.make_node("Constant", [], [name],
                                          value=helper.make_tensor(name + "_t", elem_type, [], [value])))
        return name

    def op(op_type_: str, ins: list[str], out: str) -> str:
        nodes.append(helper.make_node(op_type_, ins, [out]))
        return out

    x = op("Add", ["X", "bias"], "xb") if bias else "X"
    if form == "erf":
        t = op("Div", [x, const("sqrt2", C.SQRT2)], "t0")
        t = op("Erf", [t], "t1")
        t = op("Add", [t, const("one", 1.0)], "t2")
        t = op("Mul", [x, t], "t3")
        op("Mul", [t, const("half", 0.5)], "Y")
    elif form == "tanh":
        t = op("Mul", [x, x], "x2")
        t = op("Mul", [t, x], "x3")
        t = op("Mul", [t, const("k", C.TANH_CUBIC_COEFF)], "t0")
        t = op("Add", [x, t], "t1")
        t = op("Mul", [t, const("c", C.SQRT_2_OVER_PI)], "t2")
        t = op("Tanh", [t], "t3")
        t = op("Add", [t, const("one", 1.0)], "t4")
        t = op("Mul", [x, t], "t5")
        op("Mul", [t, const("half", 0.5)], "Y")
    else:
        # Constant(value_float = <the node's alpha attribute>)
        a_attr = AttributeProto(name="value_float", ref_attr_name=C.ATTR_ALPHA, type=AttributeProto.FLOAT)
        cnode = helper.make_node("Constant", [], ["alpha_f"])
        cnode.attribute.append(a_attr)
        nodes.append(cnode)
        if elem_type is None:
            op("CastLike", ["alpha_f", "X"], "alpha")
        else:
            nodes.append(helper.make_node("Cast", ["alpha_f"], ["alpha"], to=elem_type))
        t = op("Mul", [x, "alpha"], "t0")
        t = op("Sigmoid", [t], "t1")
        op("Mul", [x, t], "Y")
    return helper.make_function(
        C.DOMAIN,
        op_type,
        ["X", "bias"] if bias else ["X"],
        ["Y"],
        nodes,
        [helper.make_opsetid("", opset)],
        [C.ATTR_ALPHA] if form == "sigmoid" else [],
    )
