"""Building GELU-like graphs for the hand-built corpus: the independent
numerics (is a chain with these constants a GELU?), the graph Builder, and
the exporters' families of spellings. Written against the op contract only."""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from scipy.special import erf as _erf

from gelu_onnx import contract as C
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
    manual_chain(b, ch, y)
    return y


def manual_chain(b: Builder, ch: Chain, y: str) -> str:
    ch.roots.add(y)
    ch.intermediates.remove(y)
    b.top.chains.append(ch)
    return y
