"""Seeded random models for the scanned-path differential fuzzer
(test_replay_fuzz.py): chains and fans of GELUs in every corpus spelling
(graph_build.FAMILIES, fp32/fp16/bf16, Cast-wrapped, bias Add in front, native
Gelu-20, com.microsoft Gelu/FastGelu/BiasGelu/QuickGelu), members repeated
so that the scanned path carries matches, then a few members made different
in ways nobody built the carry for: generated-name collisions, intermediates
read or output, value_info right or wrong, a constant one ulp off, bias
widths, bias or constants that are graph inputs, Identity in front of
constants, attributes reordered or duplicated, empty or duplicate node
names, unused initializers, node order, doc strings, metadata, extra opset
imports, model-local functions, typed-field initializers, domain "ai.onnx".

``build(seed, max_members)`` -> (ModelProto, description). Some models are
invalid on purpose: both ways must refuse them alike.
"""
from __future__ import annotations

import math
import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_build as GB
from gelu_onnx.contract import np_dtype

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
# op types the rewrite names new nodes after ("<root>_<op>"), and the suffixes of its other names
_GEN_OPS = ("GeluErf", "GeluTanh", "GeluSigmoid", "BiasGeluErf", "BiasGeluTanh", "BiasGeluSigmoid",
            "Gelu", "FastGelu", "BiasGelu", "QuickGelu", "Cast")
_MS = "com.microsoft"


class _SharedConsts(GB.Builder):
    """A Builder whose initializer constants are one tensor per value (as
    exporters write them), so members read the same names."""

    def __init__(self, *a, share=True, **k):
        super().__init__(*a, **k)
        self._cache, self._share = {}, share

    def const(self, key, *, elem=None, style=None, value=None):
        st = style or self.style or "init"
        v = value if value is not None else self._k.get(key, GB.DEFAULTS[key])
        ck = (key, self.cur_dtype if elem is None else elem, st, float(v))
        if self._share and st in ("init", "init1") and ck in self._cache:
            return self._cache[ck]
        name = super().const(key, elem=elem, style=style, value=value)
        if st in ("init", "init1"):
            self._cache[ck] = name
        return name


def build(seed: int, max_members: int = 300, dtypes=(F32, F32, F16)):
    """``dtypes``: the model dtype is drawn from these (bf16 too: fuse only, ORT runs few bf16 ops)."""
    r = random.Random(seed)
    sizes = [s for s in (2, 2, 3, 4, 5, 8, 12, 20, 30, 40) if s <= max_members] or [2]
    n = r.choice(sizes) if r.random() < 0.93 or max_members < 100 else r.choice([100, 200, max_members])
    dt, opset, W = r.choice(list(dtypes)), r.choice([17, 17, 18, 20, 20, 21]), r.choice([4, 8, 16])
    pool = []
    for _ in range(r.choice([1, 1, 2, 3])):
        k = r.random()
        if k < 0.75 or (k >= 0.85 and opset < 20):
            pool.append(("fam", r.choice(sorted(GB.FAMILIES))))
        elif k < 0.85:
            pool.append(("ms", r.choice(["Gelu", "FastGelu", "BiasGelu", "QuickGelu"])))
        else:
            pool.append(("native", r.choice(["none", "tanh"])))
    style = r.choice([None, None, "init", "init1", "const", "value_float", "f64cast"])
    b = _SharedConsts(dt, opset, style, GB.Orders([r.random() < 0.5 for _ in range(40)]), share=r.random() < 0.8)
    x0 = b.input("x", dt, ["batch", W])
    topo = r.choice(["chain", "chain", "shared", "mix"])
    bias_mode = r.choice(["none", "each", "each", "shared", "some"])
    wrap = dt != F32 and r.random() < 0.4
    members, tensors, read, shared_bias = [], [x0], set(), None
    for i in range(n):
        kind = pool[i % len(pool)] if r.random() < 0.9 else r.choice(pool)
        h = tensors[-1] if topo == "chain" else x0 if topo == "shared" else r.choice(tensors)
        read.add(h)
        bias = None
        if bias_mode == "each" or (bias_mode == "some" and r.random() < 0.5):
            bias = b.weight("bias", [W], scale=0.1)
        elif bias_mode == "shared":
            bias = shared_bias = shared_bias or b.weight("bias", [W], scale=0.1)
        if bias and kind not in (("ms", "FastGelu"), ("ms", "BiasGelu")):
            h = b.node("Add", [h, bias] if r.random() < 0.7 else [bias, h])
            bias = None
        m = {"i": i, "x": h, "inter": [], "idt": dt}
        if kind[0] == "fam":
            if wrap:
                y = b.node("Cast", [GB.gelu(b, kind[1], b.node("Cast", [h], to=F32), dtype=F32)], to=dt)
            else:
                y = GB.gelu(b, kind[1], h)
            m["inter"], m["idt"] = list(b.top.chains[-1].intermediates), F32 if wrap else dt
        elif kind[0] == "ms":
            op = kind[1]
            if op == "BiasGelu":
                y = b.node(op, [h, bias or b.weight("bias", [W], scale=0.1)], domain=_MS)
            elif op == "QuickGelu":
                y = b.node(op, [h], domain=_MS, alpha=r.choice([1.702, 1.702, 1.0]))
            else:
                y = b.node(op, [h] + ([bias] if bias else []), domain=_MS)
        else:
            y = b.node("Gelu", [h], approximate=kind[1])
        m["y"] = y
        members.append(m)
        tensors.append(y)
    for t in tensors[1:]:
        if t not in read:
            b.output(t, dt, ["batch", W])
    model = b.model()
    if any(k[0] == "ms" for k in pool):
        model.opset_import.append(helper.make_opsetid(_MS, 1))
    picks = r.sample(sorted(_PERTURB), r.choice([0, 1, 1, 2, 2, 3, 4]))
    if "shuffle" in picks and r.random() < 0.7:
        picks.remove("shuffle")
    done = [d for d in (_PERTURB[p](model, members, r, dt, W) for p in picks) if d]
    return model, dict(n=n, dt=dt, opset=opset, pool=pool, style=style, topo=topo, bias=bias_mode, wrap=wrap,
                       perturb=done)


def _vi(name, dt, shape):
    return helper.make_tensor_value_info(name, dt, shape)


def _collide(model, members, r, dt, W):
    """A node or tensor already has a name the rewrite would generate."""
    g, m = model.graph, r.choice(members)
    root, x = m["y"], m["x"]
    name = r.choice([f"{root}_{op}" for op in _GEN_OPS] + [f"{root}_gelu", f"{x}_cast", f"{x}_cast_Cast",
                                                           f"{x}_biased", f"{root}_bias_Add"])
    how = r.choice(["rename", "node", "tensor", "value_info", "initializer"])
    if how == "rename":
        r.choice(list(g.node)).name = name
    elif how == "node":
        g.node.append(helper.make_node("Identity", [root], ["collide_out"], name=name))
        g.output.append(_vi("collide_out", dt, ["batch", W]))
    elif how == "tensor":
        g.node.append(helper.make_node("Identity", [root], [name], name="collide_node"))
        g.output.append(_vi(name, dt, ["batch", W]))
    elif how == "value_info":
        g.value_info.append(_vi(name, dt, ["batch", W]))
    else:
        g.initializer.append(numpy_helper.from_array(np.zeros([W], np_dtype(dt)), name))
    return f"collide:{how}:{name}"


def _inner_use(model, members, r, dt, W):
    """An intermediate is a graph output (declared right or wrong) or has another reader."""
    fam = [m for m in members if m["inter"]]
    if not fam:
        return None
    m = r.choice(fam)
    t, idt, g = r.choice(m["inter"]), m["idt"], model.graph
    how = r.choice(["output", "output", "wrong-output", "reader"])
    if how == "reader":
        g.node.append(helper.make_node("Neg", [t], ["extra_r"], name="extra_r"))
        g.output.append(_vi("extra_r", idt, ["batch", W]))
    elif how == "output":
        g.output.append(_vi(t, idt, ["batch", W]))
    else:
        g.output.append(_vi(t, F16 if idt == F32 else F32, [W, 1]))
    return f"inner-use:{how}:{m['i']}:{t}"


def _value_info(model, members, r, dt, W):
    out = []
    for m in r.sample(members, min(len(members), r.choice([1, 2, 5]))):
        t = r.choice(m["inter"] + [m["y"], m["x"]])
        sh = r.choice([["batch", W], ["batch", W], [W], [1, W], None, ["batch", W + 1]])
        et = r.choice([dt, dt, F32, F16, TensorProto.DOUBLE])
        vi = onnx.ValueInfoProto(name=t) if r.random() < 0.1 else _vi(t, et, sh)
        model.graph.value_info.append(vi)
        out.append((m["i"], t, et, sh))
    return f"value_info:{out}"


def _scalar_uses(g):
    scalars = {t.name: t for t in g.initializer if len(t.dims) == 0 or list(t.dims) == [1]}
    return [(nd, k) for nd in g.node for k, nm in enumerate(nd.input) if nm in scalars], scalars


def _const_bit(model, members, r, dt, W):
    """One node reads a constant of its own: the same value, one ulp off or 5% off; maybe a graph input."""
    g = model.graph
    uses, scalars = _scalar_uses(g)
    if not uses:
        return None
    nd, k = r.choice(uses)
    t = scalars[nd.input[k]]
    arr = numpy_helper.to_array(t).copy()
    if arr.dtype.kind != "f":
        return None
    how = r.choice(["ulp", "ulp", "big", "same", "input"])
    if how == "ulp":
        arr = np.nextafter(arr, np.array(np.inf, arr.dtype))
    elif how == "big":
        arr = (arr * 1.05).astype(arr.dtype)
    alt = numpy_helper.from_array(arr, f"{t.name}_alt")
    g.initializer.append(alt)
    if how == "input":
        g.input.append(_vi(alt.name, alt.data_type, list(alt.dims)))
    nd.input[k] = alt.name
    return f"const-bit:{nd.name}:{t.name}:{how}"


def _bias(model, members, r, dt, W):
    """A bias of another width or rank, or one that is also a graph input."""
    g = model.graph
    bs = [t for t in g.initializer if t.name.startswith("bias")]
    if not bs:
        return None
    t = r.choice(bs)
    how = r.choice(["1xW", "1", "1x1xW", "2W", "input", "input"])
    if how == "1xW":
        t.dims[:] = [1, W]
    elif how == "1x1xW":
        t.dims[:] = [1, 1, W]
    elif how == "input":
        g.input.append(_vi(t.name, t.data_type, list(t.dims)))
    else:
        arr = (np.random.default_rng(0).standard_normal(1 if how == "1" else 2 * W) * 0.1).astype(np_dtype(dt))
        t.CopyFrom(numpy_helper.from_array(arr, t.name))
    return f"bias:{t.name}:{how}"


def _identity_const(model, members, r, dt, W):
    g = model.graph
    inits = {t.name for t in g.initializer}
    uses = [(nd, k) for nd in g.node for k, nm in enumerate(nd.input) if nm in inits]
    if not uses:
        return None
    for j, (nd, k) in enumerate(r.sample(uses, min(len(uses), r.choice([1, 3])))):
        prev = nd.input[k]
        for d in range(r.choice([1, 1, 2])):
            g.node.insert(d, helper.make_node("Identity", [prev], [f"idc{j}_{d}"], name=f"idc{j}_{d}"))
            prev = f"idc{j}_{d}"
        nd.input[k] = prev
    return "identity-const"


def _attrs(model, members, r, dt, W):
    nodes = [nd for nd in model.graph.node if len(nd.attribute)]
    if not nodes:
        return None
    nd = r.choice(nodes)
    how = r.choice(["dup", "reverse", "unknown"])
    if how == "dup":
        nd.attribute.append(nd.attribute[0])
    elif how == "reverse":
        a = list(nd.attribute) + [helper.make_attribute("zz_extra", 1)]
        del nd.attribute[:]
        nd.attribute.extend(reversed(a))
    else:
        nd.attribute.append(helper.make_attribute("unknown_attr", 2.0))
    return f"attrs:{nd.name}:{how}"


def _node_names(model, members, r, dt, W):
    nodes = list(model.graph.node)
    how = r.choice(["empty", "dup", "empty-all"])
    for nd in nodes if how == "empty-all" else r.sample(nodes, min(len(nodes), r.choice([1, 3, 10]))):
        nd.name = nodes[0].name if how == "dup" else ""
    return f"node-names:{how}"


def _unused(model, members, r, dt, W):
    model.graph.initializer.extend([numpy_helper.from_array(np.array(0.5, np_dtype(dt)), "unused_half"),
                                    numpy_helper.from_array(np.ones([W], np_dtype(dt)), "unused_vec")])
    return "unused-init"


def _shuffle(model, members, r, dt, W):
    ns = list(model.graph.node)
    i, j = r.randrange(len(ns)), r.randrange(len(ns))
    ns[i], ns[j] = ns[j], ns[i]
    del model.graph.node[:]
    model.graph.node.extend(ns)
    return "shuffle"


def _docs(model, members, r, dt, W):
    for nd in r.sample(list(model.graph.node), min(len(model.graph.node), 3)):
        nd.doc_string = "a doc"
    model.graph.doc_string = "graph doc"
    helper.set_model_props(model, {"k": "v"})
    if r.random() < 0.5:
        e = r.choice(list(model.graph.node)).metadata_props.add()
        e.key, e.value = "k", "v"
    return "docs"


def _opsets(model, members, r, dt, W):
    if not any(o.domain == _MS for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(_MS, 1))
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    return "opsets"


def _function(model, members, r, dt, W):
    """A model-local function, a GELU inside or not, called on a member's output."""
    op = model.opset_import[0].version
    if r.random() < 0.5:
        c = [helper.make_node("Constant", [], [n_], value_float=v) for n_, v in
             (("c2", math.sqrt(2)), ("c1", 1.0), ("ch", 0.5))]
        body = c + [helper.make_node("Div", ["X", "c2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                    helper.make_node("Add", ["e", "c1"], ["p"]), helper.make_node("Mul", ["X", "p"], ["q"]),
                    helper.make_node("Mul", ["q", "ch"], ["Y"])]
        fn = helper.make_function("local", "MyGelu", ["X"], ["Y"], body, [helper.make_opsetid("", op)])
    else:
        fn = helper.make_function("local", "MyNeg", ["X"], ["Y"], [helper.make_node("Neg", ["X"], ["Y"])],
                                  [helper.make_opsetid("", op)])
    model.functions.append(fn)
    model.opset_import.append(helper.make_opsetid("local", 1))
    if dt == F32 or fn.name == "MyNeg":
        model.graph.node.append(helper.make_node(fn.name, [r.choice(members)["y"]], ["fn_out"], name="fn_call",
                                                 domain="local"))
        model.graph.output.append(_vi("fn_out", dt, ["batch", W]))
    return f"function:{fn.name}"


def _typed(model, members, r, dt, W):
    """Initializers in their typed fields instead of raw_data."""
    for t in model.graph.initializer:
        if r.random() < 0.5 and t.raw_data:
            a = numpy_helper.to_array(t).ravel()
            if t.data_type == F32:
                t.float_data[:] = a.tolist()
            elif t.data_type == F16:
                t.int32_data[:] = a.view(np.uint16).tolist()
            elif t.data_type == TensorProto.DOUBLE:
                t.double_data[:] = a.tolist()
            elif t.data_type == TensorProto.INT64:
                t.int64_data[:] = a.tolist()
            else:
                continue
            t.ClearField("raw_data")
    return "typed-data"


def _domain_alias(model, members, r, dt, W):
    for nd in r.sample(list(model.graph.node), min(len(model.graph.node), 3)):
        if nd.domain == "":
            nd.domain = "ai.onnx"
    return "domain-alias"


def _arity(model, members, r, dt, W):
    """A node given an omitted ("") input or a second output its op does not have."""
    nd = r.choice(list(model.graph.node))
    how = r.choice(["empty-first", "empty-last", "output"])
    if how == "output":
        nd.output.append(r.choice(["", "spare_out"]))
    else:
        nd.input.insert(0 if how == "empty-first" else len(nd.input), "")
    return f"arity:{nd.name}:{how}"


_PERTURB = {"collide": _collide, "collide2": _collide, "inner-use": _inner_use, "value_info": _value_info,
            "const-bit": _const_bit, "bias": _bias, "identity-const": _identity_const, "attrs": _attrs,
            "node-names": _node_names, "unused": _unused, "shuffle": _shuffle, "docs": _docs, "opsets": _opsets,
            "function": _function, "typed": _typed, "domain-alias": _domain_alias, "arity": _arity}
