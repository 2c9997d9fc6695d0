"""The frames the GELU corpus (gelu_corpus.py) puts its chains in: ``Case`` (a
named model, its chains, the near-miss codes that must be reported), a bare
chain, an FFN, mixed-precision wraps, If/Loop/Scan bodies, bias variants, a deep
stack, and ``attach_extra`` (an intermediate given another reader).  How
single nodes and chains are built is graph_build.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto

from gelu_onnx import contract as C
from helpers.graph_build import Builder, Chain, manual_chain, Orders, default_expect, gelu

F32, F16, BF16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE
INT64, BOOL = TensorProto.INT64, TensorProto.BOOL
H = 16  # hidden size of every frame


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


def finish(b: Builder, name: str, near_miss=(), note="") -> Case:
    return Case(name, b.model(), list(b.chains), tuple(near_miss), note)


def plain(name, family, *, dtype=F32, opset=17, style=None, orders=(), consts=None, ok=True,
          near_miss=(), note="", shape=("N", 3, H)) -> Case:
    """x -> GELU -> y (y is the graph output)."""
    b = Builder(dtype, opset, style, Orders(orders))
    y = gelu(b, family, b.input("x", dtype, list(shape)), consts=consts, ok=ok)
    b.output(y, dtype, list(shape))
    return finish(b, name, near_miss, note)


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
    return finish(b, name)




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
    return finish(b, name, note="Cast-wrapped chain; Fusion.dtype may be the inner or outer type")


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
    manual_chain(b, ch, y)
    b.output(y, F16, ["N", 3, H])
    return finish(b, name, note="Cast pair inside an fp16 chain")


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
    manual_chain(b, ch, y)
    b.output(y, F16, ["N", 3, H])
    return finish(b, "mixed/cast-x-inner")


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
    return finish(b, name, near_miss)


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
    return finish(b, name)


def scan_case(name, family, *, style="outer") -> Case:
    b = Builder(F32, style=style)
    x = b.input("x", F32, [4, 3, H])
    sn = b.fresh("Scan")
    body = b.sub(f"{sn}/body")
    xs = body.input(b.fresh("x_slice"), F32, [3, H])
    body.output(gelu(body, family, xs), F32, [3, H])
    out = b.node("Scan", [x], name=sn, body=body.graph("body"), num_scan_inputs=1)
    b.output(out, F32, [4, 3, H])
    return finish(b, name)




def bias_case(name, *, shared=False, blen=H, bshape=None, binput=False, activations=False) -> Case:
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
    return finish(b, name)


def deep_chain(name, n) -> Case:
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
    return finish(b, name)




def attach_extra(b: Builder, ch: Chain, mode: str, which: int) -> str:
    """Give intermediate `which` of `ch` another reader: a Neg node whose output is a
    graph output ('consumer'), or list it as a graph output itself ('output')."""
    t = ch.intermediates[which % len(ch.intermediates)]
    elem = next(k for k, v in C.FLOAT_DTYPES.items() if v == ch.dtype)
    b.output(t if mode == "output" else b.node("Neg", [t]), elem, None)
    return t
