"""Differential fuzzing of the fuser on generated GELU-like graphs (hypothesis).

Each example: a random family, operand orders, constant encoding, dtype (fp32,
fp16, or an fp32 chain Cast-wrapped from fp16/bf16), optional bias Add in front,
optional wrapping in an If branch or a Loop body, optionally one constant perturbed
(a little or a lot) and optionally one intermediate given an extra reader or made a
graph output. Whether the chain must fuse is decided independently
(graph_build.expected_verdict: float64 function error of the rounded constants vs
the exact GELU, same per-dtype thresholds as the contract; examples within 4x of a
threshold are discarded as grid-dependent). Then the corpus checks run:
fusion count/form, never-fuse rules, near-miss codes, onnx.checker, IR <= 13,
untouched nodes, idempotence, parity in ORT.

CI runs a bounded, derandomized number of examples; a long run:
    GELU_ONNX_FUZZ_EXAMPLES=2000 python -m pytest tests/test_fuzz.py -q
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

from helpers import corpus_checks as checks
from helpers import corpus_frames as frames
from helpers import graph_build as GB
import onnx
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from gelu_onnx import contract as C

EXAMPLES = int(os.environ.get("GELU_ONNX_FUZZ_EXAMPLES", "150"))
OUTCOMES: dict[str, list[str]] = defaultdict(list)
_DTYPE_MODES = {"float32": (GB.F32, False), "float16": (GB.F16, False),
                "wrap-fp16": (GB.F16, True), "wrap-bf16": (GB.BF16, True)}
_CONST_KEYS = {}  # family -> float constant keys it uses (perturbation targets)


def _const_keys(family):
    if family not in _CONST_KEYS:
        b = GB.Builder()
        GB.gelu(b, family, b.input("x", GB.F32, [2, GB.H]))
        _CONST_KEYS[family] = sorted(k for k in b.top.chains[0].consts if k != "three")
    return _CONST_KEYS[family]


@dataclass(frozen=True)
class Spec:
    family: str
    bits: tuple[bool, ...]
    dtype_mode: str
    style: str
    bias: bool
    wrapper: str | None          # None | 'if' | 'loop'
    perturb: tuple | None        # (key, value)
    extra: tuple | None          # ('consumer'|'output', index)
    target: str
    opset: int


@st.composite
def specs(draw):
    family = draw(st.sampled_from(sorted(GB.FAMILIES)))
    form = GB.FAMILIES[family].form
    bits = tuple(draw(st.lists(st.booleans(), min_size=GB.n_commutative(family), max_size=GB.n_commutative(family))))
    perturb = None
    if draw(st.integers(0, 2)) == 0:
        if form == "sigmoid":
            alpha = draw(st.one_of(st.just(1.0), st.floats(0.5, 3.0), st.floats(*C.SIGMOID_ALPHA_RANGE)))
            perturb = ("alpha", alpha)
        else:
            key = draw(st.sampled_from(_const_keys(family)))
            base = {**GB.DEFAULTS, **GB.FAMILIES[family].consts}[key]
            rel = draw(st.sampled_from((-1, 1))) * 10 ** draw(st.floats(-9.0, -0.5))
            perturb = (key, base * (1 + rel))
    extra = None
    if draw(st.integers(0, 3)) == 0:
        extra = (draw(st.sampled_from(("consumer", "output"))), draw(st.integers(0, 30)))
    return Spec(family, bits, draw(st.sampled_from(sorted(_DTYPE_MODES))),
                draw(st.sampled_from(("init", "init1", "const", "const1", "value_float", "f64cast"))),
                draw(st.booleans()), draw(st.sampled_from((None, "if", "loop"))), perturb, extra,
                draw(st.sampled_from(GB.TARGETS)), draw(st.sampled_from((17, 17, 20))))


def _gelu_in(g: GB.Builder, s: Spec, x: str, outer: int, wrap: bool, ok: bool):
    """[MatMul+Add bias ->] [Cast f32 ->] GELU [-> Cast back]; returns (y, extra tensor | None)."""
    h, add = x, None
    if s.bias and outer != GB.BF16:  # ORT CPU has no bfloat16 MatMul/Add: keep every example runnable
        h = g.node("MatMul", [h, g.weight("W", [GB.H, GB.H], outer, style="outer")])
        h = g.node("Add", [h, g.weight("bias", [GB.H], outer, style="outer")])
        add = g.last
    cin = None
    if wrap:
        h, cin = g.node("Cast", [h], to=GB.F32), g.last
    consts = {s.perturb[0]: s.perturb[1]} if s.perturb else None
    y = GB.gelu(g, s.family, h, consts=consts, ok=ok, dtype=GB.F32 if wrap else outer)
    ch = g.top.chains[-1]
    if add and ok:
        ch.aux.add(add)
        # with a Cast between the Add and the chain, folding the bias is optional
        ch.bias = None if wrap else True
    if wrap:
        y = g.node("Cast", [y], to=outer)
        ch.aux |= {cin, g.last}
        ch.roots.add(y)
        ch.dtypes.add(C.FLOAT_DTYPES[outer])
    extra = None
    if s.extra:
        t = ch.intermediates[s.extra[1] % len(ch.intermediates)]
        extra = t if s.extra[0] == "output" else g.node("Neg", [t])
    return y, extra


def build(s: Spec) -> frames.Case:
    outer, wrap = _DTYPE_MODES[s.dtype_mode]
    inner = GB.F32 if wrap else outer
    # The independent verdict on the (rounded) constants of this chain.
    probe = GB.Builder(inner)
    GB.gelu(probe, s.family, probe.input("x", inner, [2, GB.H]),
           consts={s.perturb[0]: s.perturb[1]} if s.perturb else None)
    pch = probe.top.chains[0]
    verdict = GB.expected_verdict(pch.form, pch.consts, C.FLOAT_DTYPES[inner])
    assume(verdict is not None)
    ok = verdict and s.extra is None

    b = GB.Builder(outer, opset=s.opset, style=s.style, orders=GB.Orders(s.bits))
    x = b.input("x", outer, ["N", 3, GB.H])
    xtype = {True: GB.F32, False: outer}[wrap]
    if s.wrapper is None:
        y, extra = _gelu_in(b, s, x, outer, wrap, ok)
        outs = [(y, outer)] + ([(extra, xtype)] if extra else [])
    elif s.wrapper == "if":
        cond = b.input("cond", GB.BOOL, [])
        ifn = b.fresh("If")
        t = b.sub(f"{ifn}/then_branch")
        y, extra = _gelu_in(t, s, x, outer, wrap, ok)
        e = b.sub(f"{ifn}/else_branch")
        e.output(e.node("Identity", [x]), outer, None)
        t.output(y, outer, None)
        outs = [(None, outer)]
        if extra:
            t.output(extra, xtype, None)
            e.output(e.node("Cast", [x], to=xtype), xtype, None)
            outs.append((None, xtype))
        names = b.node("If", [cond], name=ifn, n_out=len(outs), then_branch=t.graph("then"),
                       else_branch=e.graph("else"))
        names = names if isinstance(names, list) else [names]
        outs = [(n, tp) for n, (_, tp) in zip(names, outs)]
    else:
        ln = b.fresh("Loop")
        body = b.sub(f"{ln}/body")
        body.input(b.fresh("iter"), GB.INT64, [])
        c_in = body.input(b.fresh("cond_in"), GB.BOOL, [])
        xc = body.input(b.fresh("x_carried"), outer, None)
        y, extra = _gelu_in(body, s, xc, outer, wrap, ok)
        body.output(body.node("Identity", [c_in]), GB.BOOL, [])
        body.output(y, outer, None)
        outs = [(None, outer)]
        if extra:
            body.output(extra, xtype, None)
            outs.append((None, xtype))
        trip = b.weight("trip", [], GB.INT64, values=2)
        names = b.node("Loop", [trip, "", x], name=ln, n_out=len(outs), body=body.graph("body"))
        names = names if isinstance(names, list) else [names]
        outs = [(n, tp) for n, (_, tp) in zip(names, outs)]
        if extra:  # scan outputs stack one more leading axis
            b.output(outs[0][0], outer, ["N", 3, GB.H])
            b.output(outs[1][0], xtype, [2, "N", 3, GB.H])
            outs = []
    for name, tp in outs:
        b.output(name, tp, None)
    codes: tuple[str, ...] = ()
    if s.extra and verdict:
        codes = ("intermediate-used",) if s.extra[0] == "consumer" else ("graph-output",)
    elif not verdict and s.extra is None:
        a = pch.consts.get("alpha")
        codes = (("silu",) if a == 1.0 else ("alpha-range",)) if pch.form == "sigmoid" else ("tolerance",)
    return frames.Case(f"fuzz/{s.family}", b.model(), list(b.chains), codes, f"verdict={verdict}")


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(specs())
def test_fuzz_fuse(s):
    case = build(s)
    note(f"expected fusions: {case.expected(s.target)}; near-miss codes required: {case.near_miss}")
    note(onnx.printer.to_text(case.model))
    onnx.checker.check_model(case.model, full_check=True)
    res = checks.fuse_and_check(case, s.target, OUTCOMES)
    if res is not None:
        note("fusions: " + checks.describe_fusions(res.fusions))
        note("near-misses: " + "; ".join(f"{m.code}: {m.reason}" for m in res.near_misses))
        if s.extra:  # the never-fuse rule, stated directly as well
            assert not res.fusions, "an intermediate with another reader was fused away"

