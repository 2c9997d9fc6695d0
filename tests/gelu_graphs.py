"""An independent corpus of GELU spellings, look-alikes and never-fuse traps.

Written against the op contract only, not against the fuser: every case says
what a correct fuser must do (which chains fuse, in which form, which near-miss
code a refusal carries) and the verdicts on constants come from ``function_error``
below: a float64 evaluation of the chain's formula with its constants rounded to
the dtype they are stored in, against the exact GELU of that family.

Vocabulary
  family  one exporter's spelling (node order, constants) of one GELU form
  chain   one GELU-like subgraph in a model; knows its nodes, its root tensor,
          and per target whether it must fuse (True), must not (False) or the
          contract is silent (None: recorded, not asserted)
  case    a named model + its chains + near-miss codes that must be reported

Also holds the checking helpers shared by test_gelu_graphs.py and test_fuzz.py
(parity in real ONNX Runtime sessions, the untouched-nodes and idempotence checks).
"""
from __future__ import annotations

import ctypes
import itertools
import math
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from scipy.special import erf as _erf

from gelu_onnx import contract as C
from gelu_onnx import ortinfo
from gelu_onnx.fusion.targets import TARGETS

F32, F16, BF16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE
INT64, BOOL = TensorProto.INT64, TensorProto.BOOL
H = 16  # hidden size of every frame

# --------------------------------------------------------------------------
# Independent numerics: is a chain with these constants a GELU?
# --------------------------------------------------------------------------
PROBE = np.linspace(-10.0, 10.0, 20001)


def exact_gelu(form: str, x: np.ndarray, alpha: float | None = None) -> np.ndarray:
    if form == "erf":
        return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
    if form == "tanh":
        return 0.5 * x * (1.0 + np.tanh(C.SQRT_2_OVER_PI * (x + C.TANH_CUBIC_COEFF * x**3)))
    return x / (1.0 + np.exp(-(alpha if alpha is not None else C.QUICK_GELU_ALPHA) * x))


def chain_function(form: str, k: dict[str, float], x: np.ndarray) -> np.ndarray:
    """The formula a chain computes, in float64, from its (rounded) constants."""
    half = k["half"] if "half" in k else 1.0 / k.get("two_div", 2.0)
    if form == "erf":
        if "sqrt2" in k:
            scale = 1.0 / k["sqrt2"]
        elif "inv_sqrt2" in k:
            scale = k["inv_sqrt2"]
        elif "sqrt_of" in k:
            scale = 1.0 / k["sqrt_of"]  # already sqrt(round(2)) rounded, see Builder.const
        else:
            scale = 1.0
        return half * x * (k.get("one", 1.0) + _erf(x * scale))
    if form == "tanh":
        c, kk = k["c"], k["k"]
        cube = x ** k.get("three", 3.0)
        inner = x * (k["one_inner"] + kk * x * x) if "one_inner" in k else x + kk * cube
        return half * x * (k.get("one", 1.0) + np.tanh(c * inner))
    return x / (1.0 + np.exp(-k["alpha"] * x))


def function_error(form: str, k: dict[str, float]) -> float:
    """max |f(x) - gelu(x)| / max(|x|, 1) over PROBE: the contract's matching
    metric (gelu_onnx.contract.MATCH_TOLERANCE), computed here independently."""
    x = PROBE
    with np.errstate(all="ignore"):
        err = np.abs(chain_function(form, k, x) - exact_gelu(form, x)) / np.maximum(np.abs(x), 1.0)
    return float(np.nanmax(err)) if np.all(np.isfinite(err)) else math.inf


def round_to(value: float, elem_type: int) -> float:
    return float(np.asarray(value, dtype=C.np_dtype(elem_type)).astype(np.float64))


def expected_verdict(form: str, k: dict[str, float], dtype: str) -> bool | None:
    """True: inside MATCH_TOLERANCE with margin; False: clearly outside; None: within
    4x of the threshold either side (depends on the probe grid; not judged)."""
    if form == "sigmoid":
        lo, hi = C.SIGMOID_ALPHA_RANGE
        a = k["alpha"]
        if lo + 0.02 <= a <= hi - 0.02:
            return True
        if a < lo - 0.02 or a > hi + 0.02:
            return False
        return None
    tol = C.MATCH_TOLERANCE[dtype]
    e = function_error(form, k)
    if e <= tol / 4:
        return True
    if e >= tol * 4:
        return False
    return None


# --------------------------------------------------------------------------
# Graph building
# --------------------------------------------------------------------------
DEFAULTS = {
    "half": 0.5, "two_div": 2.0, "one": 1.0, "one_inner": 1.0,
    "sqrt2": C.SQRT2, "inv_sqrt2": C.INV_SQRT2, "sqrt_of": 2.0,
    "c": C.SQRT_2_OVER_PI, "k": C.TANH_CUBIC_COEFF, "three": 3.0,
    "alpha": C.QUICK_GELU_ALPHA,
}
# Constant encodings: initializer rank 0 / shape [1]; Constant node `value`
# rank 0 / shape [1]; Constant `value_float`; a float64 Constant + Cast; an
# initializer of the outermost graph used from inside a subgraph.
STYLES = ("init", "init1", "const", "const1", "value_float", "f64cast", "outer")


class Orders:
    """Operand order of each commutative node, in creation order (True = swap)."""

    def __init__(self, bits=()):
        self.bits = [bool(b) for b in bits]
        self.used = 0

    def __call__(self) -> bool:
        v = self.bits[self.used] if self.used < len(self.bits) else False
        self.used += 1
        return v


@dataclass
class Chain:
    form: str | None            # the GELU form it spells (or imitates)
    graph: str                  # '' main graph, else 'Node/attr[/Node/attr]'
    dtype: str                  # dtype of the chain's x / y
    expect: dict[str, bool | None]  # per target + 'inspect'
    nodes: set[str] = field(default_factory=set)   # must vanish when fused
    aux: set[str] = field(default_factory=set)     # may vanish when fused (Constant, Cast, bias Add)
    roots: set[str] = field(default_factory=set)   # tensors a Fusion may name as root
    consts: dict[str, float] = field(default_factory=dict)  # as stored (rounded), float64
    bias: bool | None = False   # expected Fusion.bias on the custom target
    dtypes: set[str] = field(default_factory=set)  # other acceptable Fusion.dtype values
    family: str = ""
    intermediates: list[str] = field(default_factory=list)  # outputs of chain nodes except root


class Builder:
    """Emits uniquely named nodes; every node built inside `chain()` is recorded."""

    def __init__(self, dtype=F32, opset=17, style=None, orders=None, ir=10, *, _parent=None, path=""):
        self.dtype, self.opset, self.style, self.ir = dtype, opset, style, ir
        self.orders = orders or Orders()
        self.parent = _parent
        self.top: Builder = _parent.top if _parent else self
        self.path = path
        self.nodes, self.inits, self.inputs, self.outputs = [], [], [], []
        if _parent is None:
            self.counter: dict[str, int] = {}
            self.chains: list[Chain] = []
            self.rng = np.random.default_rng(0)
        self._chain: Chain | None = None
        self._k: dict[str, float] = {}
        self.cur_dtype = dtype
        self.last = ""

    # names -----------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        n = self.top.counter.get(prefix, 0)
        self.top.counter[prefix] = n + 1
        return f"{prefix}_{n}"

    def sub(self, path: str) -> Builder:
        b = Builder(self.dtype, self.opset, self.style, self.orders, self.ir, _parent=self,
                    path=f"{self.path}/{path}" if self.path else path)
        b._chain, b._k, b.cur_dtype = self._chain, self._k, self.cur_dtype
        return b

    # tensors ---------------------------------------------------------------
    def input(self, name, elem=None, shape=None):
        self.inputs.append(helper.make_tensor_value_info(name, self.dtype if elem is None else elem, shape))
        return name

    def output(self, name, elem=None, shape=None):
        if shape is None and self.parent is None:
            shape = ["N", 3, H]  # the checker wants a shape on main-graph outputs
        self.outputs.append(helper.make_tensor_value_info(name, self.dtype if elem is None else elem, shape))
        return name

    def weight(self, prefix, shape, elem=None, *, scale=0.3, style="init", values=None):
        """A frame weight (never part of a chain)."""
        elem = self.dtype if elem is None else elem
        arr = values if values is not None else self.top.rng.standard_normal(shape) * scale
        arr = np.asarray(arr).astype(C.np_dtype(elem))
        name = self.fresh(prefix)
        t = numpy_helper.from_array(arr, name)
        if style == "const":
            saved, self._chain = self._chain, None
            out = self.node("Constant", [], value=t)
            self._chain = saved
            return out
        (self.top if style == "outer" else self).inits.append(t)
        return name

    def const(self, key, *, elem=None, style=None, value=None) -> str:
        """A chain constant (`key` names its role, see DEFAULTS)."""
        elem = self.cur_dtype if elem is None else elem
        style = style or self.style or "init"
        v = value if value is not None else self._k.get(key, DEFAULTS[key])
        arr = np.asarray(round(v) if elem == INT64 else v, dtype=np.int64 if elem == INT64 else C.np_dtype(elem))
        stored = float(arr.astype(np.float64))
        if key == "sqrt_of":  # feeds a Sqrt node computed (and rounded) in elem
            stored = round_to(math.sqrt(stored), elem)
        if self._chain is not None:
            self._chain.consts[key] = stored
        if style in ("init1", "const1"):
            arr = arr.reshape(1)
        name = self.fresh(key)
        if style in ("init", "init1") or (style == "outer" and self.parent is None):
            self.inits.append(numpy_helper.from_array(arr, name))
            return name
        if style == "outer":
            self.top.inits.append(numpy_helper.from_array(arr, name))
            return name
        if style == "value_float" and elem == F32:
            return self._aux("Constant", [], value_float=float(v))
        if style == "f64cast" and elem not in (F64, INT64):
            d = self._aux("Constant", [], value=numpy_helper.from_array(np.asarray(v, dtype=np.float64), name))
            return self._aux("Cast", [d], to=elem)
        return self._aux("Constant", [], value=numpy_helper.from_array(arr, name))

    def _aux(self, op, inputs, **attrs):
        out = self.node(op, inputs, **attrs)
        if self._chain is not None:
            self._chain.nodes.discard(self.last)
            self._chain.aux.add(self.last)
            self._chain.intermediates.remove(out)
        return out

    # nodes -----------------------------------------------------------------
    def node(self, op, inputs, *, name=None, n_out=1, domain="", outputs=None, **attrs):
        name = name or self.fresh(op)
        outs = outputs or ([f"{name}_out"] if n_out == 1 else [f"{name}_out{i}" for i in range(n_out)])
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, domain=domain, **attrs))
        self.last = name
        if self._chain is not None:
            self._chain.nodes.add(name)
            self._chain.intermediates.extend(outs)
        return outs[0] if n_out == 1 else outs

    def comm(self, op, a, b):
        """A commutative binary node whose operand order comes from `orders`."""
        return self.node(op, [b, a] if self.orders() else [a, b])

    @contextmanager
    def chain(self, chain: Chain, k: dict[str, float], dtype: int):
        saved = (self._chain, self._k, self.cur_dtype)
        self._chain, self._k, self.cur_dtype = chain, k, dtype
        try:
            yield chain
        finally:
            self._chain, self._k, self.cur_dtype = saved

    # assembly --------------------------------------------------------------
    def graph(self, name="g") -> onnx.GraphProto:
        return helper.make_graph(self.nodes, name, self.inputs, self.outputs, self.inits)

    def model(self) -> onnx.ModelProto:
        m = helper.make_model(self.graph("gelu_graphs"), opset_imports=[helper.make_opsetid("", self.opset)],
                              ir_version=self.ir, producer_name="gelu_graphs")
        return m


# --------------------------------------------------------------------------
# Families: (form, builder fn, constant overrides, default constant style)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    form: str
    fn: Callable[[Builder, str], str]
    consts: dict = field(default_factory=dict)
    style: str | None = None
    note: str = ""


def _ts_erf(b, x):  # torch.onnx TorchScript (HF `gelu`): x*(1+erf(x/sqrt2))*0.5
    e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2")])])
    return b.comm("Mul", b.comm("Mul", x, b.comm("Add", e, b.const("one"))), b.const("half"))


def _dynamo_erf(b, x):  # torch.onnx dynamo / torchlib: x*(0.5*(erf(x*1/sqrt2)+1))
    e = b.node("Erf", [b.comm("Mul", x, b.const("inv_sqrt2"))])
    return b.comm("Mul", x, b.comm("Mul", b.const("half"), b.comm("Add", e, b.const("one"))))


def _hf_gelu_python(b, x):  # HF gelu_python: x*0.5*(1.0+erf(x/sqrt(2)))
    hx = b.comm("Mul", x, b.const("half"))
    e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2")])])
    return b.comm("Mul", hx, b.comm("Add", b.const("one"), e))


def _tf_erf(b, x):  # tf2onnx / Keras exact: x*0.5*(1+erf(x*0.70710677))
    hx = b.comm("Mul", x, b.const("half"))
    e = b.node("Erf", [b.comm("Mul", x, b.const("inv_sqrt2"))])
    return b.comm("Mul", hx, b.comm("Add", b.const("one"), e))


def _jax_erf(b, x):  # jax.nn.gelu(approximate=False): x*(erf(x/sqrt2)+1)/2
    e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2")])])
    return b.node("Div", [b.comm("Mul", x, b.comm("Add", e, b.const("one"))), b.const("two_div")])


def _sqrt_node_erf(b, x):  # x/Sqrt(2) with the Sqrt left in the graph
    s = b._aux("Sqrt", [b.const("sqrt_of")])
    e = b.node("Erf", [b.node("Div", [x, s])])
    return b.comm("Mul", b.comm("Mul", x, b.comm("Add", e, b.const("one"))), b.const("half"))


def _ts_tanh(b, x):  # TorchScript gelu(approximate='tanh') (HF gelu_pytorch_tanh): x*x*x, constants first
    cube = b.comm("Mul", x, b.node("Mul", [x, x]))
    inner = b.comm("Mul", b.const("c"), b.comm("Add", x, b.comm("Mul", b.const("k"), cube)))
    t = b.node("Tanh", [inner])
    return b.comm("Mul", b.const("half"), b.comm("Mul", x, b.comm("Add", b.const("one"), t)))


def _dynamo_tanh(b, x):  # dynamo / torchlib tanh: Pow(x,3), 0.5 last
    cube = b.node("Pow", [x, b.const("three")])
    inner = b.comm("Mul", b.comm("Add", x, b.comm("Mul", cube, b.const("k"))), b.const("c"))
    t = b.node("Tanh", [inner])
    return b.comm("Mul", b.comm("Mul", x, b.comm("Add", t, b.const("one"))), b.const("half"))


def _pow_int_tanh(b, x):  # as dynamo, exponent an int64 constant (Pow allows integer T1)
    cube = b.node("Pow", [x, b.const("three", elem=INT64)])
    inner = b.comm("Mul", b.comm("Add", x, b.comm("Mul", cube, b.const("k"))), b.const("c"))
    t = b.node("Tanh", [inner])
    return b.comm("Mul", b.comm("Mul", x, b.comm("Add", t, b.const("one"))), b.const("half"))


def _hf_gelu_new(b, x):  # HF gelu_new: 0.5*x*(1+tanh(c*(x+0.044715*pow(x,3)))), 0.5 first
    hx = b.comm("Mul", b.const("half"), x)
    cube = b.node("Pow", [x, b.const("three")])
    inner = b.comm("Mul", b.const("c"), b.comm("Add", x, b.comm("Mul", b.const("k"), cube)))
    return b.comm("Mul", hx, b.comm("Add", b.const("one"), b.node("Tanh", [inner])))


def _factored(b, x, half_first):  # x*c*(1+k*x*x) inside tanh
    hx = b.comm("Mul", b.const("half"), x) if half_first else b.comm("Mul", x, b.const("half"))
    cx = b.comm("Mul", x, b.const("c")) if half_first else b.comm("Mul", b.const("c"), x)
    kxx = b.comm("Mul", b.comm("Mul", b.const("k"), x), x)
    arg = b.comm("Mul", cx, b.comm("Add", b.const("one_inner"), kxx))
    return b.comm("Mul", hx, b.comm("Add", b.const("one"), b.node("Tanh", [arg])))


def _hf_gelu_fast(b, x):  # HF gelu_fast: 0.5*x*(1+tanh(x*0.7978845608*(1+0.044715*x*x)))
    return _factored(b, x, True)


def _megatron(b, x):  # Megatron / BLOOM: x*0.5*(1+tanh(0.79788456*x*(1+0.044715*x*x)))
    return _factored(b, x, False)


def _tf_tanh(b, x):  # Keras/tf2onnx approximate: Pow(x, 3.0), Constant nodes
    hx = b.comm("Mul", b.const("half"), x)
    p = b.node("Pow", [x, b.const("three")])
    arg = b.comm("Mul", b.const("c"), b.comm("Add", x, b.comm("Mul", b.const("k"), p)))
    return b.comm("Mul", hx, b.comm("Add", b.const("one"), b.node("Tanh", [arg])))


def _jax_tanh(b, x):  # jax.nn.gelu(approximate=True): x**3 as x*x*x, 0.5 on the factor
    xxx = b.comm("Mul", b.node("Mul", [x, x]), x)
    arg = b.comm("Mul", b.const("c"), b.comm("Add", x, b.comm("Mul", xxx, b.const("k"))))
    cdf = b.comm("Mul", b.const("half"), b.comm("Add", b.const("one"), b.node("Tanh", [arg])))
    return b.comm("Mul", x, cdf)


def _quick_gelu(b, x):  # QuickGELU / CLIP: x*sigmoid(1.702*x)
    return b.comm("Mul", x, b.node("Sigmoid", [b.comm("Mul", x, b.const("alpha"))]))


FAMILIES: dict[str, Family] = {
    "ts_erf": Family("erf", _ts_erf),
    "dynamo_erf": Family("erf", _dynamo_erf),
    "hf_gelu_python": Family("erf", _hf_gelu_python),
    "tf_erf": Family("erf", _tf_erf, {"inv_sqrt2": 0.70710677}, "const"),
    "jax_erf": Family("erf", _jax_erf),
    "sqrt_node_erf": Family("erf", _sqrt_node_erf),
    "ts_tanh": Family("tanh", _ts_tanh),
    "dynamo_tanh": Family("tanh", _dynamo_tanh),
    "pow_int_tanh": Family("tanh", _pow_int_tanh),
    "hf_gelu_new": Family("tanh", _hf_gelu_new),
    "hf_gelu_fast": Family("tanh", _hf_gelu_fast, {"c": 0.7978845608}),
    "megatron": Family("tanh", _megatron, {"c": 0.79788456}),
    "tf_tanh": Family("tanh", _tf_tanh, {"c": 0.7978845608028654}, "const"),
    "jax_tanh": Family("tanh", _jax_tanh),
    "quick_gelu": Family("sigmoid", _quick_gelu),
}


def n_commutative(family: str) -> int:
    o = Orders()
    b = Builder(orders=o)
    gelu(b, family, b.input("x", F32, [2, H]))
    return o.used


def order_variants(k: int) -> list[tuple[bool, ...]]:
    """Every order when there are few; else all-plain, all-swapped and every single flip
    both ways (each commutative node in both orders, against both backgrounds)."""
    if 2**k <= 32:
        return [tuple(bits) for bits in itertools.product((False, True), repeat=k)]
    out = [tuple([False] * k), tuple([True] * k)]
    for i in range(k):
        out.append(tuple(j == i for j in range(k)))
        out.append(tuple(j != i for j in range(k)))
    return out


def default_expect(form: str | None, dtype: str, ok: bool = True) -> dict[str, bool | None]:
    if not ok:
        return {t: False for t in TARGETS + ("inspect",)}
    e = {"custom": True, "standard": True, "ort": True, "inspect": True}
    if form == "sigmoid":
        e["standard"] = None  # ONNX has no x*sigmoid(a*x) op; emitting Gelu would be a false fusion
    if dtype == "float64":
        # The op contract's kernels take fp32/fp16/bf16; ONNX Gelu takes double but ORT's
        # CPU Erf does not. The contract is silent: recorded, parity-checked, not asserted.
        # inspect reports what fuse (default target) would do, so it follows.
        e.update(custom=None, standard=None, ort=None, inspect=None)
    return e


def gelu(b: Builder, family: str, x: str, *, consts=None, ok=True, dtype=None, style=None) -> str:
    """Build one chain of `family` on x; returns its root (output) tensor."""
    fam = FAMILIES[family]
    dtype = b.cur_dtype if dtype is None else dtype
    dname = C.FLOAT_DTYPES[dtype]
    ch = Chain(fam.form, b.path, dname, default_expect(fam.form, dname, ok), family=family)
    k = {**fam.consts, **(consts or {})}
    saved_style = b.style
    b.style = style or b.style or fam.style
    with b.chain(ch, k, dtype):
        y = fam.fn(b, x)
    b.style = saved_style
    _manual(b, ch, y)
    return y


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------
@dataclass
class Case:
    name: str
    model: onnx.ModelProto
    chains: list[Chain]
    near_miss: tuple[str, ...] = ()   # codes that must be among res.near_misses
    note: str = ""

    def expected(self, target: str) -> int | None:
        """Fusions a correct fuser makes; None when a chain's outcome is unspecified."""
        vals = [ch.expect[target] for ch in self.chains]
        return None if None in vals else sum(bool(v) for v in vals)

    @property
    def expected_fusions(self) -> int | None:
        return self.expected("custom")

    @property
    def forms(self) -> list[str]:
        return sorted(ch.form for ch in self.chains if ch.expect["custom"])

    @property
    def opset(self) -> int:
        return next(o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx"))


def _finish(b: Builder, name: str, near_miss=(), note="") -> Case:
    return Case(name, b.model(), list(b.chains), tuple(near_miss), note)


def plain(name, family, *, dtype=F32, opset=17, style=None, orders=(), consts=None, ok=True,
          near_miss=(), note="", shape=("N", 3, H)) -> Case:
    """x -> GELU -> y (y is the graph output)."""
    b = Builder(dtype, opset, style, Orders(orders))
    y = gelu(b, family, b.input("x", dtype, list(shape)), consts=consts, ok=ok)
    b.output(y, dtype, list(shape))
    return _finish(b, name, near_miss, note)


def ffn(name, family, *, bias=None, dtype=F32, opset=17, style=None, bias_style="init", orders=()) -> Case:
    """x -> MatMul [-> Add bias] -> GELU -> MatMul -> out.  bias: None | 'right' | 'left'."""
    b = Builder(dtype, opset, style, Orders(orders))
    x = b.input("x", dtype, ["N", 3, H])
    h = b.node("MatMul", [x, b.weight("W1", [H, H])])
    add = None
    if bias:
        bv = b.weight("b1", [H], style=bias_style)
        h = b.node("Add", [h, bv] if bias == "right" else [bv, h])
        add = b.last
    y = gelu(b, family, h)
    if add:
        b.top.chains[-1].aux.add(add)
        b.top.chains[-1].bias = True
    o = b.node("MatMul", [y, b.weight("W2", [H, H])])
    b.output(o, dtype, ["N", 3, H])
    return _finish(b, name)


def _positive_cases() -> list[Case]:
    cases = []
    for fam, spec in FAMILIES.items():
        for bits in order_variants(n_commutative(fam)):
            tag = "".join("1" if v else "0" for v in bits)
            cases.append(plain(f"{fam}/order-{tag}", fam, orders=bits))
        styles = ["init", "init1", "const", "const1", "value_float", "f64cast"]
        for st in styles:
            if st != (spec.style or "init"):
                cases.append(plain(f"{fam}/style-{st}", fam, style=st))
        for dt in (F16, BF16, F64):
            cases.append(plain(f"{fam}/{C.FLOAT_DTYPES[dt]}", fam, dtype=dt))
        cases.append(plain(f"{fam}/float16-swapped", fam, dtype=F16, orders=[True] * 16))
        cases.append(ffn(f"{fam}/ffn", fam))
        cases.append(ffn(f"{fam}/ffn-bias", fam, bias="right"))
        cases.append(ffn(f"{fam}/ffn-bias-left", fam, bias="left", orders=[True] * 16))
    for fam in ("ts_erf", "dynamo_tanh", "hf_gelu_new", "quick_gelu", "megatron"):
        for op in (13, 14, 18, 20, 21):
            cases.append(plain(f"{fam}/opset{op}", fam, opset=op))
        cases.append(ffn(f"{fam}/ffn-bias-opset20", fam, bias="right", opset=20))
        cases.append(ffn(f"{fam}/ffn-bias-fp16", fam, bias="right", dtype=F16))
        cases.append(ffn(f"{fam}/ffn-bias-const-node", fam, bias="left", bias_style="const"))
    return cases


# --- mixed precision ------------------------------------------------------
def mp_wrap(name, family, outer=F16) -> Case:
    """x16 -> Cast(f32) -> GELU(f32) -> Cast(f16): the Casts may be absorbed."""
    b = Builder(outer)
    x = b.input("x", outer, ["N", 3, H])
    c_in = b.node("Cast", [x], to=F32)
    cin_name = b.last
    y = gelu(b, family, c_in, dtype=F32)
    out = b.node("Cast", [y], to=outer)
    ch = b.top.chains[-1]
    ch.aux |= {cin_name, b.last}
    ch.dtypes.add(C.FLOAT_DTYPES[outer])
    ch.roots.add(out)
    b.output(out, outer, ["N", 3, H])
    return _finish(b, name, note="Cast-wrapped chain; Fusion.dtype may be the inner or outer type")


def mp_inside(name, form) -> Case:
    """fp16 chain with the Erf/Tanh evaluated in fp32 (autocast / keep-fp32 op lists)."""
    b = Builder(F16)
    x = b.input("x", F16, ["N", 3, H])
    ch = Chain(form, "", "float16", default_expect(form, "float16"), family=f"mp-{form}")
    with b.chain(ch, {}, F16):
        if form == "erf":
            d = b.node("Div", [x, b.const("sqrt2")])
            e = b.node("Cast", [b.node("Erf", [b.node("Cast", [d], to=F32)])], to=F16)
            y = b.node("Mul", [b.node("Mul", [x, b.node("Add", [e, b.const("one")])]), b.const("half")])
        else:
            cube = b.node("Pow", [x, b.const("three")])
            inner = b.node("Mul", [b.node("Add", [x, b.node("Mul", [cube, b.const("k")])]), b.const("c")])
            t = b.node("Cast", [b.node("Tanh", [b.node("Cast", [inner], to=F32)])], to=F16)
            y = b.node("Mul", [b.node("Mul", [x, b.node("Add", [t, b.const("one")])]), b.const("half")])
    _manual(b, ch, y)
    b.output(y, F16, ["N", 3, H])
    return _finish(b, name, note="Cast pair inside an fp16 chain")


def mp_cast_x_inner() -> Case:
    """x16 -> Cast32 -> Div/Erf/Add in fp32 -> Cast16 -> Mul(x16) -> Mul(0.5 fp16):
    the inner x is Cast(x), the outer x is x itself; still one x."""
    b = Builder(F16)
    x = b.input("x", F16, ["N", 3, H])
    ch = Chain("erf", "", "float16", default_expect("erf", "float16"), family="mp-cast-x")
    with b.chain(ch, {}, F32):
        x32 = b.node("Cast", [x], to=F32)
        e = b.node("Erf", [b.node("Div", [x32, b.const("sqrt2")])])
        a16 = b.node("Cast", [b.node("Add", [e, b.const("one")])], to=F16)
        b.cur_dtype = F16
        y = b.node("Mul", [b.node("Mul", [x, a16]), b.const("half")])
    _manual(b, ch, y)
    b.output(y, F16, ["N", 3, H])
    return _finish(b, "mixed/cast-x-inner")


# --- subgraphs ------------------------------------------------------------
def if_case(name, then_fam, else_fam, *, style="outer", dtype=F32, then_consts=None, then_ok=True,
            near_miss=(), extra_then=None) -> Case:
    b = Builder(dtype, style=style)
    x = b.input("x", dtype, ["N", 3, H])
    cond = b.input("cond", BOOL, [])
    ifn = b.fresh("If")
    t = b.sub(f"{ifn}/then_branch")
    yt = gelu(t, then_fam, x, consts=then_consts, ok=then_ok)
    t_outs = [yt]
    if extra_then:
        t_outs.append(extra_then(t, b.top.chains[-1]))
    for o in t_outs:
        t.output(o, dtype, None)
    e = b.sub(f"{ifn}/else_branch")
    ye = gelu(e, else_fam, x)
    e.output(ye, dtype, None)
    if extra_then:
        e.output(e.node("Identity", [x]), dtype, None)
    outs = b.node("If", [cond], name=ifn, n_out=len(t_outs), then_branch=t.graph("then"), else_branch=e.graph("else"))
    for o in (outs if isinstance(outs, list) else [outs]):
        b.output(o, dtype, None)
    return _finish(b, name, near_miss)


def loop_case(name, family, *, style="outer", nested_if=None) -> Case:
    b = Builder(F32, style=style)
    x = b.input("x", F32, ["N", 3, H])
    ln = b.fresh("Loop")
    body = b.sub(f"{ln}/body")
    body.input(b.fresh("iter"), INT64, [])
    c_in = body.input(b.fresh("cond_in"), BOOL, [])
    xc = body.input(b.fresh("x_carried"), F32, None)
    y = gelu(body, family, xc)
    if nested_if:
        ifn = b.fresh("If")
        t = body.sub(f"{ifn}/then_branch")
        t.output(gelu(t, nested_if, y), F32, None)
        e = body.sub(f"{ifn}/else_branch")
        e.output(e.node("Identity", [y]), F32, None)
        flag = body.node("Greater", [body.node("ReduceSum", [y], keepdims=0), body.weight("zero", [], values=0.0, style="outer")])
        y = body.node("If", [flag], name=ifn, then_branch=t.graph("then"), else_branch=e.graph("else"))
    c_out = body.node("Identity", [c_in])
    body.output(c_out, BOOL, [])
    body.output(y, F32, None)
    trip = b.weight("trip", [], INT64, values=2)
    out = b.node("Loop", [trip, "", x], name=ln, body=body.graph("body"))
    b.output(out, F32, None)
    return _finish(b, name)


def scan_case(name, family, *, style="outer") -> Case:
    b = Builder(F32, style=style)
    x = b.input("x", F32, [4, 3, H])
    sn = b.fresh("Scan")
    body = b.sub(f"{sn}/body")
    xs = body.input(b.fresh("x_slice"), F32, [3, H])
    body.output(gelu(body, family, xs), F32, [3, H])
    out = b.node("Scan", [x], name=sn, body=body.graph("body"), num_scan_inputs=1)
    b.output(out, F32, [4, 3, H])
    return _finish(b, name)


def _structure_cases() -> list[Case]:
    cs = [mp_wrap(f"mixed/wrap-fp16/{f}", f) for f in ("ts_erf", "hf_gelu_new", "quick_gelu", "megatron", "jax_erf")]
    cs += [mp_wrap(f"mixed/wrap-bf16/{f}", f, outer=BF16) for f in ("dynamo_erf", "dynamo_tanh", "quick_gelu")]
    cs += [mp_inside("mixed/erf-inside-fp32", "erf"), mp_inside("mixed/tanh-inside-fp32", "tanh"), mp_cast_x_inner()]
    cs += [
        if_case("subgraph/if-outer-consts", "ts_erf", "hf_gelu_new"),
        if_case("subgraph/if-local-consts", "dynamo_erf", "quick_gelu", style="const"),
        if_case("subgraph/if-local-inits", "jax_tanh", "megatron", style="init"),
        if_case("subgraph/if-fp16", "hf_gelu_python", "tf_tanh", dtype=F16, style="const"),
        loop_case("subgraph/loop-body", "ts_erf"),
        loop_case("subgraph/loop-body-local", "megatron", style="const"),
        loop_case("subgraph/loop-with-nested-if", "dynamo_erf", nested_if="quick_gelu"),
        scan_case("subgraph/scan-body", "dynamo_tanh"),
        scan_case("subgraph/scan-body-local", "jax_erf", style="init"),
    ]
    # several GELUs reading one x
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    for fam in ("ts_erf", "ts_erf", "hf_gelu_new", "quick_gelu", "dynamo_erf"):
        b.output(gelu(b, fam, x), F32, None)
    cs.append(_finish(b, "shared/five-gelus-one-input"))
    # GELU root is a graph output AND feeds another node
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    y = gelu(b, "ts_erf", x)
    b.output(y, F32, None)
    b.output(b.node("MatMul", [y, b.weight("W", [H, H])]), F32, None)
    cs.append(_finish(b, "shared/root-is-output-and-consumed"))
    # x is produced by a Constant: value-safe to fuse; we expect it fused.
    b = Builder()
    xc = b.weight("xconst", [2, 3, H], style="const", scale=3.0)
    b.output(gelu(b, "ts_erf", xc), F32, None)
    cs.append(_finish(b, "misc/x-from-constant", note="decision: a Constant-fed x is still an x; fusing is value-safe"))
    # bias variants
    cs.append(_bias_case("bias/add-shared", shared=True))
    cs.append(_bias_case("bias/len1", blen=1))
    cs.append(_bias_case("bias/2d", bshape=[1, H]))
    cs.append(_bias_case("bias/graph-input", binput=True))
    cs.append(_bias_case("bias/two-activations", activations=True))
    cs.append(_deep_chain("misc/100-layers", 100))
    return cs


def _bias_case(name, *, shared=False, blen=H, bshape=None, binput=False, activations=False) -> Case:
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    mm = b.node("MatMul", [x, b.weight("W1", [H, H])])
    if activations:
        bv = b.node("MatMul", [x, b.weight("W0", [H, H])])
    elif binput:
        bv = b.input("bias", F32, [H])
    else:
        bv = b.weight("b1", bshape or [blen])
    h = b.node("Add", [mm, bv])
    add = b.last
    y = gelu(b, "ts_erf", h)
    ch = b.top.chains[-1]
    if shared:
        ch.bias = None  # folding a shared Add is value-safe (the Add stays for its other reader)
        b.output(b.node("Neg", [h]), F32, None)
    elif activations or blen != H:
        ch.bias = False  # not a bias per the op contract (1-D, length = last dim of X)
    else:
        ch.bias = None  # [1,H] / runtime bias: folding is allowed if done right; parity decides
        ch.aux.add(add)
    b.output(b.node("MatMul", [y, b.weight("W2", [H, H])]), F32, None)
    return _finish(b, name)


def _deep_chain(name, n) -> Case:
    b = Builder()
    h = b.input("x", F32, ["N", 3, H])
    fams = ["ts_erf", "dynamo_tanh", "quick_gelu", "megatron", "jax_erf"]
    eye = np.eye(H) * 0.9
    for i in range(n):
        w = eye + b.top.rng.standard_normal((H, H)) * 0.05
        h = b.node("Add", [b.node("MatMul", [h, b.weight("W", [H, H], values=w)]), b.weight("b", [H], scale=0.1)])
        add = b.last
        h = gelu(b, fams[i % len(fams)], h)
        b.top.chains[-1].aux.add(add)
        b.top.chains[-1].bias = True
    b.output(h, F32, None)
    return _finish(b, name)


# --- negatives ------------------------------------------------------------
def _with_extra(name, family, mode, which, code, dtype=F32) -> Case:
    """A chain whose intermediate `which` (index into its intermediates) gets an
    extra consumer (mode 'consumer') or is listed as a graph output ('output')."""
    b = Builder(dtype)
    x = b.input("x", dtype, ["N", 3, H])
    y = gelu(b, family, x, ok=False)
    b.output(y, dtype, None)
    attach_extra(b, b.top.chains[-1], mode, which)
    return _finish(b, name, (code,))


def attach_extra(b: Builder, ch: Chain, mode: str, which: int) -> str:
    """Give intermediate `which` of `ch` another reader: a Neg node whose output is a
    graph output ('consumer'), or list it as a graph output itself ('output')."""
    t = ch.intermediates[which % len(ch.intermediates)]
    elem = next(k for k, v in C.FLOAT_DTYPES.items() if v == ch.dtype)
    b.output(t if mode == "output" else b.node("Neg", [t]), elem, None)
    return t


def _manual(b: Builder, ch: Chain, y: str) -> str:
    ch.roots.add(y)
    ch.intermediates.remove(y)
    b.top.chains.append(ch)
    return y


def _negative_cases() -> list[Case]:
    cs = []
    for fam, which in (("ts_erf", 1), ("ts_erf", 0), ("dynamo_tanh", 4), ("hf_gelu_fast", 2), ("quick_gelu", 1),
                       ("jax_erf", 2), ("megatron", 6)):
        cs.append(_with_extra(f"neg/intermediate-used/{fam}-{which}", fam, "consumer", which, "intermediate-used"))
        cs.append(_with_extra(f"neg/graph-output/{fam}-{which}", fam, "output", which, "graph-output"))
    cs.append(_with_extra("neg/intermediate-used/fp16-ts_tanh", "ts_tanh", "consumer", 3, "intermediate-used", F16))

    # an intermediate read from inside a subgraph (implicit outer-scope input)
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    cond = b.input("cond", BOOL, [])
    y = gelu(b, "ts_erf", x, ok=False)
    erf_out = b.top.chains[-1].intermediates[1]
    ifn = b.fresh("If")
    t = b.sub(f"{ifn}/then_branch")
    t.output(t.node("Neg", [erf_out]), F32, None)
    e = b.sub(f"{ifn}/else_branch")
    e.output(e.node("Identity", [x]), F32, None)
    b.output(y, F32, None)
    b.output(b.node("If", [cond], name=ifn, then_branch=t.graph("then"), else_branch=e.graph("else")), F32, None)
    cs.append(_finish(b, "neg/intermediate-used/read-in-subgraph", ("intermediate-used",)))

    # an intermediate that is a branch output
    def branch_out(t, ch):
        return t.node("Identity", [ch.intermediates[1]])
    cs.append(if_case("neg/intermediate-used/in-branch", "ts_erf", "ts_erf", then_ok=False,
                      near_miss=("intermediate-used",), extra_then=branch_out))

    # overridable constants
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    half = b.input("half_in", F32, [])
    ch = Chain("erf", "", "float32", default_expect("erf", "float32", False), family="half-input")
    with b.chain(ch, {}, F32):
        e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2")])])
        y = b.node("Mul", [b.node("Mul", [x, b.node("Add", [e, b.const("one")])]), half])
    _manual(b, ch, y)
    b.output(y, F32, None)
    cs.append(_finish(b, "neg/overridable/half-is-graph-input", ("overridable-constant",)))

    for ir, op in ((10, 17), (3, 13)):
        c = plain(f"neg/overridable/initializer-is-input-ir{ir}", "ts_erf", opset=op, ok=False,
                  near_miss=("overridable-constant",))
        c.model.ir_version = ir
        g = c.model.graph
        names = [t.name for t in g.initializer] if ir < 4 else [g.initializer[-1].name]
        for t in g.initializer:
            if t.name in names:
                g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        cs.append(c)

    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    cond = b.input("cond", BOOL, [])
    half = b.input("half_in", F32, [])
    ifn = b.fresh("If")
    t = b.sub(f"{ifn}/then_branch")
    ch = Chain("erf", t.path, "float32", default_expect("erf", "float32", False), family="half-outer-input")
    with t.chain(ch, {}, F32):
        e = t.node("Erf", [t.node("Div", [x, t.const("sqrt2", style="const")])])
        y = t.node("Mul", [t.node("Mul", [x, t.node("Add", [e, t.const("one", style="const")])]), half])
    _manual(b, ch, y)
    t.output(y, F32, None)
    e = b.sub(f"{ifn}/else_branch")
    e.output(gelu(e, "ts_erf", x, style="const"), F32, None)
    b.output(b.node("If", [cond], name=ifn, then_branch=t.graph("then"), else_branch=e.graph("else")), F32, None)
    cs.append(_finish(b, "neg/overridable/outer-input-in-branch", ("overridable-constant",)))

    # constants out of tolerance (verdicts computed by function_error)
    tol = [("half-0.6", "ts_erf", {"half": 0.6}), ("sqrt2-1.5", "ts_erf", {"sqrt2": 1.5}),
           ("fp32-sqrt2-as-fp16", "ts_erf", {"sqrt2": 1.4140625}),
           ("inv-sqrt2-0.7", "dynamo_erf", {"inv_sqrt2": 0.7}), ("one-1.01", "jax_erf", {"one": 1.01}),
           ("k-0.05", "hf_gelu_new", {"k": 0.05}), ("c-0.8", "megatron", {"c": 0.8}),
           ("c-1e-3-off", "dynamo_tanh", {"c": C.SQRT_2_OVER_PI * 1.001}),
           ("two-div-2.1", "jax_erf", {"two_div": 2.1})]
    for tag, fam, k in tol:
        cs.append(plain(f"neg/tolerance/{tag}", fam, consts=k, ok=False, near_miss=("tolerance",)))
    cs.append(plain("neg/tolerance/fp16-half-0.6", "ts_erf", dtype=F16, consts={"half": 0.6}, ok=False,
                    near_miss=("tolerance",)))

    # two different x
    b = Builder()
    x, x2 = b.input("x", F32, ["N", 3, H]), b.input("x2", F32, ["N", 3, H])
    ch = Chain("erf", "", "float32", default_expect("erf", "float32", False), family="mismatched-x")
    with b.chain(ch, {}, F32):
        e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2")])])
        y = b.node("Mul", [b.node("Mul", [x2, b.node("Add", [e, b.const("one")])]), b.const("half")])
    _manual(b, ch, y)
    b.output(y, F32, None)
    cs.append(_finish(b, "neg/mismatched-x/two-inputs", ("mismatched-x",)))

    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    r = b.node("Relu", [x])
    ch = Chain("erf", "", "float32", default_expect("erf", "float32", False), family="mismatched-x")
    with b.chain(ch, {}, F32):
        e = b.node("Erf", [b.node("Div", [r, b.const("sqrt2")])])
        y = b.node("Mul", [b.node("Mul", [x, b.node("Add", [e, b.const("one")])]), b.const("half")])
    _manual(b, ch, y)
    b.output(y, F32, None)
    cs.append(_finish(b, "neg/mismatched-x/erf-of-relu", ("mismatched-x",)))

    b = Builder()
    x, x2 = b.input("x", F32, ["N", 3, H]), b.input("x2", F32, ["N", 3, H])
    ch = Chain("tanh", "", "float32", default_expect("tanh", "float32", False), family="mismatched-x")
    with b.chain(ch, {}, F32):
        cube = b.node("Pow", [x2, b.const("three")])
        inner = b.node("Mul", [b.node("Add", [x, b.node("Mul", [cube, b.const("k")])]), b.const("c")])
        t = b.node("Tanh", [inner])
        y = b.node("Mul", [b.node("Mul", [x, b.node("Add", [t, b.const("one")])]), b.const("half")])
    _manual(b, ch, y)
    b.output(y, F32, None)
    cs.append(_finish(b, "neg/mismatched-x/tanh-cube-of-other", ("mismatched-x",)))

    b = Builder()  # the same, with both x's computed inside the graph (no graph input involved)
    x0 = b.input("x", F32, ["N", 3, H])
    x = b.node("MatMul", [x0, b.weight("W1", [H, H])])
    x2 = b.node("MatMul", [x0, b.weight("W2", [H, H])])
    ch = Chain("erf", "", "float32", default_expect("erf", "float32", False), family="mismatched-x")
    with b.chain(ch, {}, F32):
        e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2")])])
        y = b.node("Mul", [b.node("Mul", [x2, b.node("Add", [e, b.const("one")])]), b.const("half")])
    _manual(b, ch, y)
    b.output(y, F32, None)
    cs.append(_finish(b, "neg/mismatched-x/two-activations", ("mismatched-x",)))

    # look-alikes that are not GELUs
    def lookalike(name, build, codes=(), form=None):
        b = Builder()
        x = b.input("x", F32, ["N", 3, H])
        ch = Chain(form, "", "float32", default_expect(form, "float32", False), family=name)
        with b.chain(ch, {}, F32):
            y = build(b, x)
        _manual(b, ch, y)
        b.output(y, F32, None)
        return _finish(b, name, codes)

    cs.append(lookalike("neg/silu", lambda b, x: b.node("Mul", [x, b.node("Sigmoid", [x])]), ("silu",), "sigmoid"))
    cs.append(plain("neg/silu-alpha-1.0", "quick_gelu", consts={"alpha": 1.0}, ok=False, near_miss=("silu",)))
    cs.append(plain("neg/sigmoid-alpha-2.5", "quick_gelu", consts={"alpha": 2.5}, ok=False, near_miss=("alpha-range",)))
    cs.append(lookalike("neg/mish", lambda b, x: b.node("Mul", [x, b.node("Tanh", [b.node("Softplus", [x])])])))
    cs.append(lookalike("neg/erf-unscaled", lambda b, x: b.node("Mul", [b.node("Mul", [
        x, b.node("Add", [b.node("Erf", [x]), b.const("one")])]), b.const("half")]), (), "erf"))
    cs.append(lookalike("neg/erf-of-square", lambda b, x: b.node("Mul", [b.node("Mul", [
        x, b.node("Add", [b.node("Erf", [b.node("Div", [b.node("Mul", [x, x]), b.const("sqrt2")])]),
                          b.const("one")])]), b.const("half")]), (), "erf"))
    cs.append(plain("neg/non-scalar-constant-1x1", "ts_erf", style="init", ok=False,
                    near_miss=("non-scalar-constant",)))
    _reshape_consts(cs[-1].model, "half", [1, 1])

    # one good and one bad chain in one model
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    b.output(gelu(b, "ts_erf", x), F32, None)
    b.output(gelu(b, "ts_erf", x, consts={"half": 0.6}, ok=False), F32, None)
    cs.append(_finish(b, "neg/mixed-good-and-bad", ("tolerance",)))
    return cs


def _reshape_consts(model, key, dims):
    for t in model.graph.initializer:
        if t.name.startswith(key + "_"):
            del t.dims[:]
            t.dims.extend(dims)


def all_cases() -> list[Case]:
    cases = _positive_cases() + _structure_cases() + _negative_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    return cases


# --------------------------------------------------------------------------
# Checking helpers (shared by the corpus test and the fuzz test)
# --------------------------------------------------------------------------
def iter_nodes(graph: onnx.GraphProto):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from iter_nodes(g)


def node_signature(n: onnx.NodeProto):
    attrs = sorted((a.name, a.SerializeToString()) for a in n.attribute
                   if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS))
    return (n.op_type, n.domain, tuple(n.input), tuple(n.output), tuple(attrs))


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def make_feeds(model: onnx.ModelProto, seed: int) -> list[dict[str, np.ndarray]]:
    """Seeded N(0,1)*3 inputs; one feed per value of each bool input (both If branches)."""
    rng = np.random.default_rng(seed)
    base, bools = {}, []
    # ORT rejects feeds for initializer-backed inputs of IR < 4 models (it holds them constant).
    held = {t.name for t in model.graph.initializer} if model.ir_version < 4 else set()
    for vi in model.graph.input:
        if vi.name in held:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        if tt.elem_type == BOOL:
            bools.append(vi.name)
            continue
        base[vi.name] = np.asarray(rng.standard_normal(shape) * 3.0).astype(C.np_dtype(tt.elem_type))
    feeds = []
    for vals in itertools.product((True, False), repeat=len(bools)):
        f = dict(base)
        f.update({n: np.array(v) for n, v in zip(bools, vals)})
        feeds.append(f)
    return feeds


class NotRunnable(Exception):
    """ONNX Runtime's CPU provider has no kernel for this dtype (e.g. bfloat16 Mul)."""


def run_ort(model: onnx.ModelProto, feed, so=None, optimize=True) -> list[np.ndarray]:
    import onnxruntime as ort

    so = so or ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            raise NotRunnable(str(e).splitlines()[0]) from e
        raise
    bf16 = np.dtype(C.np_dtype(BF16))
    if not any(v.dtype == bf16 for v in feed.values()) and not any(
            "bfloat16" in o.type for o in sess.get_outputs()):
        return sess.run(None, feed)
    # The Python binding has no numpy type for bfloat16: pass bit patterns in
    # OrtValues and copy the output buffers back out.
    vals = {k: (ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(v).view(np.uint16), BF16)
                if v.dtype == bf16 else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)))
            for k, v in feed.items()}
    outs = []
    for v in sess.run_with_ort_values(None, vals):
        if v.data_type() == "tensor(bfloat16)":
            a = np.empty(v.shape(), np.uint16)
            if a.nbytes:
                ctypes.memmove(a.ctypes.data, v.data_ptr(), a.nbytes)
            outs.append(a.view(bf16))
        else:
            outs.append(v.numpy())
    return outs


def run_reference(model: onnx.ModelProto, feed) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feed))


def tolerance(dname: str, via_reference: bool = False) -> dict[str, float]:
    """PARITY_TOLERANCE for dname; onnx.reference evaluates Erf in float32
    (np.vectorize(math.erf, otypes=['f'])), so float64 runs through it get fp32's."""
    tol = C.PARITY_TOLERANCE[dname]
    if via_reference and dname == "float64":
        tol = C.PARITY_TOLERANCE["float32"]
    return tol


def compare(orig: list[np.ndarray], fused: list[np.ndarray], names: list[str], what: str,
            via_reference: bool = False) -> None:
    assert len(orig) == len(fused), f"{what}: {len(fused)} outputs, original has {len(orig)}"
    for name, a, b in zip(names, orig, fused):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: output {name} shape {b.shape} != {a.shape}"
        assert a.dtype == b.dtype, f"{what}: output {name} dtype {b.dtype} != {a.dtype}"
        dname = {np.dtype(C.np_dtype(k)): v for k, v in C.FLOAT_DTYPES.items()}.get(a.dtype)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if dname is None:
            assert np.array_equal(a64, b64), f"{what}: output {name} differs"
            continue
        tol = tolerance(dname, via_reference)
        bad = np.abs(b64 - a64) > tol["atol"] + tol["rtol"] * np.abs(a64)
        if np.isnan(a64).any() or np.isnan(b64).any():
            bad |= np.isnan(a64) != np.isnan(b64)
        if bad.any():
            i = np.unravel_index(np.argmax(np.where(bad, np.abs(b64 - a64), -1)), a.shape)
            raise AssertionError(
                f"{what}: output {name} ({dname}) {int(bad.sum())}/{bad.size} elements out of "
                f"rtol={tol['rtol']} atol={tol['atol']}; worst at {tuple(int(v) for v in i)}: "
                f"original {a64[i]!r} fused {b64[i]!r}")


def library_session_options():
    """gelu_onnx.session_options() when the custom-op library is built, else None."""
    try:
        from gelu_onnx import ortlib
    except ImportError:
        return None
    avail = getattr(ortlib, "available", None)
    if avail is not None and not avail():
        return None
    return ortlib.session_options()


def _ort_optimizer_breaks(model, feed) -> bool:
    try:
        run_ort(model, feed, optimize=True)
    except NotRunnable:
        return False
    except Exception:  # noqa: BLE001 - any failure of the original counts
        return True
    return False


def parity(original: onnx.ModelProto, fused: onnx.ModelProto, seed: int, with_library: bool) -> list[str]:
    """Run both models on the same seeded inputs; raise on any difference beyond
    PARITY_TOLERANCE. Returns notes on what could not be run (and why)."""
    notes: list[str] = []
    names = [o.name for o in original.graph.output]
    for feed in make_feeds(original, seed):
        via_ref = False
        try:
            ref = run_ort(original, feed, optimize=False)
            ref_how = "ort"
        except NotRunnable as e:
            via_ref = True
            ref = run_reference(original, feed)
            ref_how = f"onnx.reference (ORT CPU: {e})"
        variants = [("fused, no library", None)]
        if with_library:
            so = library_session_options()
            if so is None:
                notes.append("custom-op library not available: only the function fallback was run")
            else:
                variants.append(("fused, with library", so))
        for what, so in variants:
            try:
                try:
                    out = run_ort(fused, feed, so=so)
                except NotRunnable:
                    raise
                except Exception as e:
                    if not _ort_optimizer_breaks(original, feed):
                        raise
                    # ORT's own graph optimizer breaks the unfused original as well:
                    # not the fuser's doing; compare with optimizations off.
                    notes.append(f"{what}: ORT's optimizer also fails on the original "
                                 f"({str(e).splitlines()[0][:120]}); ran with optimizations off")
                    out = run_ort(fused, feed, so=so, optimize=False)
            except NotRunnable as e:
                if ref_how == "ort":
                    raise AssertionError(f"{what}: ORT cannot run the fused model although it runs the original: {e}")
                if so is not None:
                    notes.append(f"{what}: not runnable on ORT CPU ({e})")
                    continue
                try:
                    via_ref = True
                    out = run_reference(fused, feed)
                except Exception as e2:  # noqa: BLE001
                    notes.append(f"{what}: neither ORT CPU nor onnx.reference can run it ({type(e2).__name__}: {e2})")
                    continue
            compare(ref, out, names, f"{what} vs original [{ref_how}]", via_ref)
    return notes


def assert_untouched(case_chains: list[Chain], original: onnx.ModelProto, fused: onnx.ModelProto,
                     fused_roots: set[str]) -> None:
    """Every node outside a fused chain is still there, identical; fused chains' nodes are gone."""
    fused_sigs = {}
    for n in iter_nodes(fused.graph):
        fused_sigs.setdefault(n.name, set()).add(node_signature(n))
    may_go, must_go = set(), set()
    for ch in case_chains:
        if ch.roots & fused_roots:
            may_go |= ch.aux | ch.nodes
            must_go |= ch.nodes
    for n in iter_nodes(original.graph):
        present = node_signature(n) in fused_sigs.get(n.name, ())
        if n.name in must_go:
            assert not present, f"node {n.name} ({n.op_type}) of a fused chain is still in the graph"
        elif n.name not in may_go:
            # node_signature leaves out subgraph bodies: their nodes are checked one by one
            assert present, f"node {n.name} ({n.op_type}) outside any fused chain was changed or removed"
    for a, b in ((original.graph.input, fused.graph.input), (original.graph.output, fused.graph.output)):
        assert [v.name for v in a] == [v.name for v in b], "graph inputs/outputs changed"
        for va, vb in zip(a, b):
            assert va.type.tensor_type.elem_type == vb.type.tensor_type.elem_type, f"type of {va.name} changed"


def model_key(m: onnx.ModelProto) -> bytes:
    parts = [m.graph.SerializeToString()] + [f.SerializeToString() for f in m.functions]
    parts += [o.SerializeToString() for o in m.opset_import]
    return b"\0".join(parts)


ORT_OPS = {"erf": {"com.microsoft.Gelu", "com.microsoft.BiasGelu"},
           "tanh": {"com.microsoft.FastGelu"}, "sigmoid": {"com.microsoft.QuickGelu"}}


def describe_fusions(fusions) -> str:
    return "; ".join(f"{f.op}@{f.graph or 'main'}:{f.root}(form={f.form},bias={f.bias},dtype={f.dtype})"
                     for f in fusions) or "none"


def check_fusions(case, key: str, fusions, outcomes=None) -> set[str]:
    """Fusions vs the case's chains for `key` (a target or 'inspect'); returns fused roots."""
    where = f"[{case.name} / {key}] fusions: {describe_fusions(fusions)}"
    seen: dict[int, object] = {}
    for f in fusions:
        ch = next((c for c in case.chains if f.root in c.roots), None)
        assert ch is not None, f"false fusion: root {f.root!r} is not the root of any GELU chain {where}"
        assert ch.expect[key] is not False, f"false fusion of the {ch.family} chain at {f.root!r} {where}"
        assert id(ch) not in seen, f"chain at {f.root!r} reported twice {where}"
        seen[id(ch)] = f
        assert f.form == ch.form, f"form {f.form} != {ch.form} {where}"
        assert f.graph == ch.graph, f"graph {f.graph!r} != {ch.graph!r} {where}"
        assert f.dtype in {ch.dtype} | ch.dtypes, f"dtype {f.dtype} != {ch.dtype} {where}"
        if ch.form == "sigmoid":
            assert f.alpha is not None and math.isclose(f.alpha, ch.consts["alpha"], rel_tol=1e-6), \
                f"alpha {f.alpha} != graph's {ch.consts['alpha']} {where}"
        if key == "custom":
            if ch.bias is not None:
                assert f.bias == ch.bias, f"bias {f.bias}, expected {ch.bias} {where}"
            assert f.op == f"{C.DOMAIN}.{C.OP_TYPES[(ch.form, f.bias)]}", f"op {f.op} {where}"
        elif key == "standard":
            assert ch.form != "sigmoid" and f.op == "Gelu", f"op {f.op} for a {ch.form} GELU {where}"
        elif key == "ort":
            assert f.op in ORT_OPS[ch.form], f"op {f.op} for a {ch.form} GELU {where}"
    missing = [c.family + "@" + (c.graph or "main") for c in case.chains if c.expect[key] and id(c) not in seen]
    assert not missing, f"GELU chains not fused: {missing} {where}"
    for c in case.chains:
        if c.expect[key] is None and outcomes is not None:
            outcomes[f"unspecified ({key})"].append(f"{case.name}: {'fused' if id(c) in seen else 'not fused'}")
    return {f.root for f in fusions}


def check_near_misses(case, near_misses, key):
    codes = {nm.code for nm in near_misses}
    for code in case.near_miss:
        assert code in codes, (f"[{case.name} / {key}] near-miss {code!r} not reported; got "
                               + "; ".join(f"{nm.code}: {nm.reason}" for nm in near_misses))
    for nm in near_misses:
        assert nm.reason and "\n" not in nm.reason, f"near-miss reason must be one sentence: {nm.reason!r}"


def _standard_refusal(case, target, err, outcomes) -> bool:
    if target != "standard" or case.opset >= C.STANDARD_GELU_OPSET:
        return False
    msg = str(err)
    assert msg and "\n" not in msg.strip(), f"refusal must be one clear line: {msg!r}"
    assert "opset" in msg.lower(), f"refusal must say it is about the opset: {msg!r}"
    outcomes["standard target below opset 20: refused"].append(f"{case.name}: {msg}")
    return True

def fuse_and_check(case, target: str, outcomes) -> object:
    """fuse_with_report(case.model, target) and every check of the corpus; returns the result
    (None when the standard target refused a model below opset 20, which is allowed)."""
    import gelu_onnx
    from gelu_onnx.errors import UnsupportedError

    before = case.model.SerializeToString()
    try:
        res = gelu_onnx.fuse_with_report(case.model, target=target)
    except UnsupportedError as e:
        if _standard_refusal(case, target, e, outcomes):
            return None
        raise
    assert case.model.SerializeToString() == before, "fuse_with_report modified its input model"
    if target == "standard" and case.opset < C.STANDARD_GELU_OPSET:
        outcomes["standard target below opset 20: upgraded"].append(case.name)
    roots = check_fusions(case, target, res.fusions, outcomes)
    check_near_misses(case, res.near_misses, target)
    m = res.model
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version <= ortinfo.max_ir_version(), f"IR {m.ir_version}: the installed ORT cannot load it"
    assert_untouched(case.chains, case.model, m, roots)
    again = gelu_onnx.fuse_with_report(m, target=target)
    assert not again.fusions, f"second pass fused again: {describe_fusions(again.fusions)}"
    assert model_key(again.model) == model_key(m), "fuse(fuse(m)) differs from fuse(m)"
    for n in parity(case.model, m, seed_of(case.name), with_library=target == "custom"):
        outcomes["parity runs skipped"].append(f"{case.name} / {target}: {n}")
    return res
