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

How the graphs are built is graph_build.py, the frames a case
puts its chains in corpus_frames.py; how the fuser is checked on the
cases is corpus_checks.py (shared with test_fuzz.py).
"""
from __future__ import annotations

from onnx import helper

from gelu_onnx import contract as C
from helpers.graph_build import (Builder, Chain, manual_chain, FAMILIES, default_expect, gelu, n_commutative,
                                 order_variants)
from helpers.corpus_frames import (BF16, BOOL, F16, F32, F64, H, Case, attach_extra, bias_case, deep_chain, ffn,
                                   finish, if_case, loop_case, mp_cast_x_inner, mp_inside, mp_wrap, plain, scan_case)


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
    cs.append(finish(b, "shared/five-gelus-one-input"))
    # GELU root is a graph output AND feeds another node
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    y = gelu(b, "ts_erf", x)
    b.output(y, F32, None)
    b.output(b.node("MatMul", [y, b.weight("W", [H, H])]), F32, None)
    cs.append(finish(b, "shared/root-is-output-and-consumed"))
    # x is produced by a Constant: value-safe to fuse; we expect it fused.
    b = Builder()
    xc = b.weight("xconst", [2, 3, H], style="const", scale=3.0)
    b.output(gelu(b, "ts_erf", xc), F32, None)
    cs.append(finish(b, "misc/x-from-constant", note="decision: a Constant-fed x is still an x; fusing is value-safe"))
    # bias variants
    cs.append(bias_case("bias/add-shared", shared=True))
    cs.append(bias_case("bias/len1", blen=1))
    cs.append(bias_case("bias/2d", bshape=[1, H]))
    cs.append(bias_case("bias/graph-input", binput=True))
    cs.append(bias_case("bias/two-activations", activations=True))
    cs.append(deep_chain("misc/100-layers", 100))
    return cs


# --- negatives ------------------------------------------------------------
def _with_extra(name, family, mode, which, code, dtype=F32) -> Case:
    """A chain whose intermediate `which` (index into its intermediates) gets an
    extra consumer (mode 'consumer') or is listed as a graph output ('output')."""
    b = Builder(dtype)
    x = b.input("x", dtype, ["N", 3, H])
    y = gelu(b, family, x, ok=False)
    b.output(y, dtype, None)
    attach_extra(b, b.top.chains[-1], mode, which)
    return finish(b, name, (code,))


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
    cs.append(finish(b, "neg/intermediate-used/read-in-subgraph", ("intermediate-used",)))

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
    manual_chain(b, ch, y)
    b.output(y, F32, None)
    cs.append(finish(b, "neg/overridable/half-is-graph-input", ("overridable-constant",)))

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
    manual_chain(b, ch, y)
    t.output(y, F32, None)
    e = b.sub(f"{ifn}/else_branch")
    e.output(gelu(e, "ts_erf", x, style="const"), F32, None)
    b.output(b.node("If", [cond], name=ifn, then_branch=t.graph("then"), else_branch=e.graph("else")), F32, None)
    cs.append(finish(b, "neg/overridable/outer-input-in-branch", ("overridable-constant",)))

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
    manual_chain(b, ch, y)
    b.output(y, F32, None)
    cs.append(finish(b, "neg/mismatched-x/two-inputs", ("mismatched-x",)))

    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    r = b.node("Relu", [x])
    ch = Chain("erf", "", "float32", default_expect("erf", "float32", False), family="mismatched-x")
    with b.chain(ch, {}, F32):
        e = b.node("Erf", [b.node("Div", [r, b.const("sqrt2")])])
        y = b.node("Mul", [b.node("Mul", [x, b.node("Add", [e, b.const("one")])]), b.const("half")])
    manual_chain(b, ch, y)
    b.output(y, F32, None)
    cs.append(finish(b, "neg/mismatched-x/erf-of-relu", ("mismatched-x",)))

    b = Builder()
    x, x2 = b.input("x", F32, ["N", 3, H]), b.input("x2", F32, ["N", 3, H])
    ch = Chain("tanh", "", "float32", default_expect("tanh", "float32", False), family="mismatched-x")
    with b.chain(ch, {}, F32):
        cube = b.node("Pow", [x2, b.const("three")])
        inner = b.node("Mul", [b.node("Add", [x, b.node("Mul", [cube, b.const("k")])]), b.const("c")])
        t = b.node("Tanh", [inner])
        y = b.node("Mul", [b.node("Mul", [x, b.node("Add", [t, b.const("one")])]), b.const("half")])
    manual_chain(b, ch, y)
    b.output(y, F32, None)
    cs.append(finish(b, "neg/mismatched-x/tanh-cube-of-other", ("mismatched-x",)))

    b = Builder()  # the same, with both x's computed inside the graph (no graph input involved)
    x0 = b.input("x", F32, ["N", 3, H])
    x = b.node("MatMul", [x0, b.weight("W1", [H, H])])
    x2 = b.node("MatMul", [x0, b.weight("W2", [H, H])])
    ch = Chain("erf", "", "float32", default_expect("erf", "float32", False), family="mismatched-x")
    with b.chain(ch, {}, F32):
        e = b.node("Erf", [b.node("Div", [x, b.const("sqrt2")])])
        y = b.node("Mul", [b.node("Mul", [x2, b.node("Add", [e, b.const("one")])]), b.const("half")])
    manual_chain(b, ch, y)
    b.output(y, F32, None)
    cs.append(finish(b, "neg/mismatched-x/two-activations", ("mismatched-x",)))

    # look-alikes that are not GELUs
    def lookalike(name, build, codes=(), form=None):
        b = Builder()
        x = b.input("x", F32, ["N", 3, H])
        ch = Chain(form, "", "float32", default_expect(form, "float32", False), family=name)
        with b.chain(ch, {}, F32):
            y = build(b, x)
        manual_chain(b, ch, y)
        b.output(y, F32, None)
        return finish(b, name, codes)

    cs.append(lookalike("neg/silu", lambda b, x: b.node("Mul", [x, b.node("Sigmoid", [x])]), ("silu",), "sigmoid"))
    cs.append(plain("neg/silu-alpha-1.0", "quick_gelu", consts={"alpha": 1.0}, ok=False, near_miss=("silu",)))
    cs.append(plain("neg/sigmoid-alpha-2.5", "quick_gelu", consts={"alpha": 2.5}, ok=False, near_miss=("alpha-range",)))
    cs.append(lookalike("neg/mish", lambda b, x: b.node("Mul", [x, b.node("Tanh", [b.node("Softplus", [x])])])))
    cs.append(lookalike("neg/erf-unscaled", lambda b, x: b.node("Mul", [b.node("Mul", [
        x, b.node("Add", [b.node("Erf", [x]), b.const("one")])]), b.const("half")]), (), "erf"))
    cs.append(lookalike("neg/erf-of-square", lambda b, x: b.node("Mul", [b.node("Mul", [
        x, b.node("Add", [b.node("Erf", [b.node("Div", [b.node("Mul", [x, x]), b.const("sqrt2")])]),
                          b.const("one")])]), b.const("half")]), (), "erf"))
    # A [1,1] "0.5" widens a rank-1 x to [1, H]: not a scalar (contract: a
    # one-element constant is a scalar only where it cannot change the rank).
    b = Builder(F32, 17, "init")
    b.output(gelu(b, "ts_erf", b.input("x", F32, [H]), ok=False), F32, [1, H])
    cs.append(finish(b, "neg/non-scalar-constant-1x1", ("non-scalar-constant",)))
    _reshape_consts(cs[-1].model, "half", [1, 1])
    # ... while on a rank-3 x it is the scalar 0.5 (tf2onnx writes [1,1,1,1]
    # constants on NHWC tensors): fused.
    cs.append(plain("shape/one-element-constant-1x1-rank3", "ts_erf", style="init"))
    _reshape_consts(cs[-1].model, "half", [1, 1])

    # one good and one bad chain in one model
    b = Builder()
    x = b.input("x", F32, ["N", 3, H])
    b.output(gelu(b, "ts_erf", x), F32, None)
    b.output(gelu(b, "ts_erf", x, consts={"half": 0.6}, ok=False), F32, None)
    cs.append(finish(b, "neg/mixed-good-and-bad", ("tolerance",)))
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
