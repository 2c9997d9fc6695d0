"""The targets: what a matched GELU is rewritten into (an Emission: nodes
and constants), how a model is prepared and finished for it, and the one
table of targets (get, register).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

from onnx import AttributeProto, FunctionProto, ModelProto, NodeProto, TensorProto, helper

from .. import contract as C
from ..errors import InputError
from .ops import DEFAULT_DOMAINS
from .report import Code

TargetName = Literal["custom", "standard", "ort"]

_FLOAT = TensorProto.FLOAT


@dataclass(frozen=True)
class Node:
    """One node of an Emission: ``inputs`` name ``x`` (the GELU's input),
    ``bias`` (its 1-D bias), one of the Emission's constants or an earlier
    node's ``output``."""

    op_type: str
    inputs: tuple[str, ...]
    output: str = "y"
    domain: str = ""
    attrs: dict = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type


@dataclass(frozen=True)
class Emission:
    """What a target writes for one GELU, in the GELU's compute type
    (rewrite.emit Casts x in and the result out where the model's types
    differ): ``nodes`` in order, the last one's output is the GELU's output;
    ``consts``: name -> value, each written as an initializer of the compute
    type."""

    nodes: tuple[Node, ...]
    consts: dict = field(default_factory=dict)

    def __post_init__(self):
        known = {"x", "bias", *self.consts}
        for n in self.nodes:
            if not known.issuperset(n.inputs) or n.output in known:
                raise ValueError(f"{n.qualified} reads a name not defined before it, or writes one twice")
            known.add(n.output)

    @functools.cached_property  # asked per GELU of an Emission made once (Target.emission)
    def inputs_bias(self) -> bool:
        """Whether the bias Add is folded into the nodes (they read ``bias``)."""
        return any("bias" in n.inputs for n in self.nodes)

    @functools.cached_property
    def qualified(self) -> str:
        """The op(s) the report names."""
        return "+".join(n.qualified for n in self.nodes)


def one_op(domain: str, op_type: str, bias: bool, attrs: dict) -> Emission:
    """The Emission of a single op reading x (and the bias)."""
    return Emission((Node(op_type, ("x", "bias") if bias else ("x",), domain=domain, attrs=attrs),))


@dataclass(frozen=True)
class Unsupported:
    """Why a target cannot express a GELU (it becomes a near-miss)."""

    code: Code
    reason: str


class Target:
    """One rewrite target: which GELUs it can express, what a match becomes
    (an Emission), whether it takes the bias, and how the model is prepared
    (opset) and finished (opset imports, model-local functions). Everything
    that differs between targets is here: adding a target is one subclass."""

    name: str
    # one line for the CLI's --target help
    summary: str
    # default-domain opset the target's op needs (prepare() raises it)
    min_opset: int | None = None
    # whether GELUs inside model-local function bodies are fused in place
    # (else the calls are inlined)
    fuses_function_bodies: bool = True
    # whether each op type of its emissions outside the default domain gets
    # a model-local function with its math (finish writes them)
    writes_functions: bool = False
    # who lacks a kernel for a dtype, in unsupported()'s message
    _owner: str = "the target's ops"

    def __init_subclass__(cls, **kw):
        # an Emission is a frozen value, asked for once per GELU: one per
        # (form, bias, alpha) is built (8 us each; 100k GELUs in a chain)
        super().__init_subclass__(**kw)
        if "emission" in cls.__dict__:
            cls.emission = functools.cache(cls.emission)

    def __repr__(self) -> str:
        return f"<target {self.name}>"

    def unsupported(self, form: str, elem_type: int) -> Unsupported | None:
        """None if the target can express this GELU in this dtype, else why not."""
        if elem_type not in C.KERNEL_DTYPES:
            dt = C.FLOAT_DTYPES.get(elem_type, str(elem_type))
            return Unsupported(Code.UNSUPPORTED_DTYPE, f"{self._owner} support float32/float16/bfloat16, not {dt}")
        return None

    def takes_bias(self, form: str) -> bool:
        """Whether the emission can fold a bias Add in front in (read ``bias``)."""
        raise NotImplementedError

    def emission(self, form: str, bias: bool, alpha: float | None) -> Emission:
        """What a GELU of ``form`` becomes (``alpha``: QuickGELU's); with
        ``bias`` it reads the 1-D bias."""
        raise NotImplementedError

    def typed_functions(self, opset: int) -> bool:
        """Whether the function bodies must be typed (no CastLike below opset 15)."""
        return False

    def needs_upgrade(self, model: ModelProto) -> bool:
        return self.min_opset is not None and default_opset(model) < self.min_opset

    def prepare(self, model: ModelProto, notes: list[str], replaced: frozenset[str] = frozenset()) -> dict[str, str]:
        """Raise the default-domain opset to min_opset, after proving op by op
        from the ONNX schemas that every op keeps its meaning (opset.upgrade;
        it refuses naming the op otherwise). Nodes writing ``replaced`` (the
        fusion replaces them) are not refused: {output: refusal} of those
        left unproven is returned, for plan.refuse_unfused."""
        from .opset import upgrade as opset_upgrade
        old = default_opset(model)
        adapted, left = opset_upgrade.upgrade(model, self.min_opset, replaced)
        notes.append(opset_upgrade.note(old, adapted))
        return left

    def finish(self, model: ModelProto, opset: int, fn_dtype: dict[str, int | None]) -> None:
        """After the rewrite: the opset imports (and functions) the new ops need."""


class Custom(Target):
    """ai.gelu_onnx.{Bias}Gelu{Erf,Tanh,Sigmoid}, plus a model-local function
    per op type so the model runs without our library."""

    name = "custom"
    summary = "ai.gelu_onnx ops with model-local functions"
    writes_functions = True
    _owner = "the custom op"

    def takes_bias(self, form: str) -> bool:
        return True

    def emission(self, form, bias, alpha) -> Emission:
        attrs = {C.ATTR_ALPHA: float(alpha)} if form == "sigmoid" else {}
        attrs[C.ATTR_PLUGIN_NAMESPACE] = C.DOMAIN
        return one_op(C.DOMAIN, C.OP_TYPES[(form, bias)], bias, attrs)

    def typed_functions(self, opset: int) -> bool:
        return opset < 15

    def finish(self, model, opset, fn_dtype) -> None:
        ensure_opset(model, C.DOMAIN, C.OPSET_VERSION)
        add_functions(model, [make_function(op, opset, fn_dtype[op]) for op in sorted(fn_dtype)])


class Standard(Target):
    """ONNX Gelu-20 (approximate none|tanh). No standard op exists for
    x*sigmoid(a*x): those are reported and left as they are."""

    name = "standard"
    summary = "ONNX Gelu-20"
    min_opset = C.STANDARD_GELU_OPSET

    def unsupported(self, form, elem_type):
        if form == "sigmoid":
            return Unsupported(Code.NO_STANDARD_OP,
                               "ONNX has no standard op for x*sigmoid(alpha*x) (QuickGELU); left as is")
        if elem_type not in C.FLOAT_DTYPES:
            return Unsupported(Code.UNSUPPORTED_DTYPE,
                               f"Gelu-20 has no {C.FLOAT_DTYPES.get(elem_type, str(elem_type))} kernel type")
        return None

    def takes_bias(self, form: str) -> bool:
        return False

    def emission(self, form, bias, alpha) -> Emission:
        return one_op("", "Gelu", False, {"approximate": "none" if form == "erf" else "tanh"})


class Ort(Target):
    """com.microsoft Gelu / BiasGelu / FastGelu (optional bias) / QuickGelu."""

    name = "ort"
    summary = "com.microsoft contrib ops"
    # com.microsoft ops have no ONNX schema: a function body holding them
    # defeats onnx's type inference, so such calls are inlined
    fuses_function_bodies = False
    _owner = "com.microsoft GELU ops"

    def takes_bias(self, form: str) -> bool:
        return form in ("erf", "tanh")

    def emission(self, form, bias, alpha) -> Emission:
        if form == "erf":
            return one_op(C.MS_DOMAIN, "BiasGelu" if bias else "Gelu", bias, {})
        if form == "tanh":
            return one_op(C.MS_DOMAIN, "FastGelu", bias, {})
        return one_op(C.MS_DOMAIN, "QuickGelu", False, {"alpha": float(alpha)})

    def finish(self, model, opset, fn_dtype) -> None:
        ensure_opset(model, C.MS_DOMAIN, 1)


# The one table of targets: name -> Target, in the CLI's order.
_REGISTRY: dict[str, Target] = {t.name: t for t in (Custom(), Standard(), Ort())}
# The target names (the CLI's --target choices).
TARGETS: tuple[str, ...] = tuple(_REGISTRY)
_OWN = frozenset(TARGETS)
# The target of fuse/inspect/bench when none is named.
DEFAULT: TargetName = "custom"


def describe() -> str:
    """Each target and what it writes, for the CLI's --target help."""
    return "; ".join(f"{t.name}: {t.summary}" + (" (default)" if t.name == DEFAULT else "")
                     for t in _REGISTRY.values())


def register(target: Target) -> None:
    """Add ``target`` to the table (for get(), the CLI, the report) under a
    name not taken; a target of the package itself is written in the table."""
    global TARGETS
    if target.name in _REGISTRY:
        raise ValueError(f"a target named {target.name!r} exists")
    _REGISTRY[target.name] = target
    TARGETS = tuple(_REGISTRY)


def unregister(name: str) -> None:
    """Remove a target register() added."""
    global TARGETS
    if name in _OWN:
        raise ValueError(f"{name!r} is one of the package's own targets")
    del _REGISTRY[name]
    TARGETS = tuple(_REGISTRY)


def get(target: "str | Target") -> Target:
    """The Target for a name (or the Target itself); one line for a bad name."""
    if isinstance(target, Target):
        return target
    t = _REGISTRY.get(target) if isinstance(target, str) else None
    if t is None:
        raise InputError(f"unknown target {target!r}: choose one of {', '.join(TARGETS)}")
    return t


def ensure_opset(model: ModelProto, domain: str, version: int) -> None:
    if not any(imp.domain == domain for imp in model.opset_import):
        model.opset_import.append(helper.make_opsetid(domain, version))


def default_opset(model: ModelProto) -> int:
    return next((imp.version for imp in model.opset_import if imp.domain in DEFAULT_DOMAINS), 0)


def add_functions(model: ModelProto, funcs) -> None:
    have = {(f.domain, f.name) for f in model.functions}
    for f in funcs:
        if (f.domain, f.name) not in have:
            model.functions.append(f)
    if model.ir_version < C.MIN_IR_FOR_FUNCTIONS:
        model.ir_version = C.MIN_IR_FOR_FUNCTIONS


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
    return helper.make_function(C.DOMAIN, op_type, ["X", "bias"] if bias else ["X"], ["Y"], nodes,
                                [helper.make_opsetid("", opset)], [C.ATTR_ALPHA] if form == "sigmoid" else [])
