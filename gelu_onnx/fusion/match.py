"""Finding GELUs: match (structure) and check (numbers), kept apart.

*Match.* Every Erf/Tanh/Sigmoid node is an anchor. From it we walk forward
through elementwise consumers to get candidate roots, and for each root we
take the backward elementwise cone (stopping at non-elementwise producers,
graph inputs and non-scalar constants). The leaf ``x`` is the nearest tensor
that every path from the root back to a non-constant source goes through
(its dominator). This is order-free: it does not care how the exporter
arranged Mul/Add operands, where the 0.5 sits, or whether x^3 is Pow or
x*x*x.

*Check.* The candidate region is evaluated in float64 on a probe grid, with
its constants exactly as stored (so an fp16 sqrt(2) is 1.4140625), and
compared with the GELU family its transcendental implies, with a per-dtype
tolerance (contract.MATCH_TOLERANCE). Structure then decides the never-fuse
rules: no intermediate may be read outside the region or be a graph output,
no "constant" may be overridable at run time.

The rewrite lives in rewrite.py.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from onnx import NodeProto, TensorProto

from .. import contract as C
from .graph import ANCHOR_OPS, BINARY_OPS, ELEMENTWISE, GraphIndex, tensor_value

# How far we look: a GELU spelling has at most ~12 elementwise nodes; the
# forward walk from the transcendental to the root is at most 4 deep.
MAX_REGION_NODES = 24
MAX_ROOT_DEPTH = 5
MAX_LEAF_DEPTH = 6

# Probe grid: dense where GELU bends, sparse tails, tiny magnitudes.
_PROBE = np.unique(
    np.concatenate(
        [
            np.linspace(-8.0, 8.0, 321),
            [-100.0, -50.0, -20.0, -12.0, 12.0, 20.0, 50.0, 100.0],
            [-1e-3, -1e-6, 1e-6, 1e-3],
        ]
    )
)
_PROBE = _PROBE[_PROBE != 0.0]
_erf = np.frompyfunc(math.erf, 1, 1)

PRECISION_ORDER = ["bfloat16", "float16", "float32", "float64"]


def gelu_reference(form: str, x: np.ndarray, alpha: float | None = None) -> np.ndarray:
    """The exact GELU family functions in float64."""
    x = np.asarray(x, dtype=np.float64)
    if form == "erf":
        return 0.5 * x * (1.0 + _erf(x * C.INV_SQRT2).astype(np.float64))
    if form == "tanh":
        return 0.5 * x * (1.0 + np.tanh(C.SQRT_2_OVER_PI * (x + C.TANH_CUBIC_COEFF * x**3)))
    if form == "sigmoid":
        with np.errstate(over="ignore"):
            return x / (1.0 + np.exp(-alpha * x))
    raise ValueError(form)


@dataclass
class Match:
    index: GraphIndex
    anchor: int
    root: str
    leaf: str
    nodes: list[int]
    consts: set[str]
    form: str
    alpha: float | None
    leaf_type: int
    root_type: int
    precision: str
    error: float
    # Bias Add in front (x = Add(h, b)): filled by find_bias.
    bias: str | None = None
    bias_input: str | None = None
    bias_node: int | None = None
    # A GELU already written as one node (gelu_onnx.native): that node, and
    # whether its own second input is the bias (BiasGelu, FastGelu(X, B)).
    single_op: NodeProto | None = None
    bias_inside: bool = False


@dataclass
class NearMiss:
    graph: str
    anchor: str
    code: str
    reason: str
    form: str | None = None

    def as_dict(self) -> dict:
        return {"graph": self.graph, "anchor": self.anchor, "code": self.code, "reason": self.reason,
                "form": self.form}


@dataclass
class _Cone:
    nodes: set[int] = field(default_factory=set)
    sources: list[str] = field(default_factory=list)
    consts: set[str] = field(default_factory=set)
    overridable: list[str] = field(default_factory=list)
    truncated: bool = False


def _is_default_domain(node) -> bool:
    return node.domain in ("", "ai.onnx")


def _region_node_ok(idx: GraphIndex, i: int) -> bool:
    node = idx.node(i)
    return (
        node.op_type in ELEMENTWISE
        and _is_default_domain(node)
        and len(node.output) == 1
        and (node.op_type not in BINARY_OPS or len(node.input) == 2)
    )


def _is_scalar(value: np.ndarray) -> bool:
    return value.size == 1 and value.ndim <= 1


def _scalar_const(idx: GraphIndex, name: str):
    """A constant a GELU spelling may contain: rank 0 or shape [1]. Any other
    constant (a bias vector, a weight, a [1,1] tensor) is just a tensor to the
    matcher: it can be the x of a GELU, never one of its constants."""
    memo = idx.__dict__.get("_scalar")
    if memo is None:
        memo = idx.__dict__["_scalar"] = {}
    if name in memo:
        return memo[name]
    c = idx.constant(name)
    memo[name] = c = c if c is not None and _is_scalar(c.value) else None
    return c


def _node_class(idx: GraphIndex, i: int) -> int:
    """Cached per node: 1 = may be inside a GELU region, 0 = not."""
    cache = idx.__dict__.get("_node_class")
    if cache is None:
        cache = idx.__dict__["_node_class"] = [-1] * len(idx.nodes)
    k = cache[i]
    if k < 0:
        k = cache[i] = int(_region_node_ok(idx, i))
    return k


def _cone(idx: GraphIndex, root: str, stop: frozenset[str] = frozenset(), anchor: int | None = None,
          fail_fast: bool = False) -> _Cone:
    """Backward elementwise cone of ``root``; ``stop`` tensors count as sources.

    Transcendentals other than ``anchor`` are boundaries too: a GELU has
    exactly one. With ``fail_fast`` the walk ends at the first source that is
    not in ``stop`` (the caller only wants to know whether ``stop`` dominates),
    which keeps the cost per GELU constant even where GELUs are chained."""
    cone = _Cone()
    seen: set[str] = set()
    todo = [root]
    scalar = idx.__dict__.get("_scalar") or {}
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in stop and t != root:
            cone.sources.append(t)
            continue
        c = scalar[t] if t in scalar else _scalar_const(idx, t)
        if c is not None:
            cone.consts.add(t)
            continue
        p = idx.producer.get(t)
        k = 0 if p is None else _node_class(idx, p)
        if k == 0 or (anchor is not None and p != anchor and idx.ops[p] in ANCHOR_OPS):
            if idx.is_overridable(t):
                cone.overridable.append(t)
            cone.sources.append(t)
            if fail_fast:
                return cone
            continue
        if len(cone.nodes) >= MAX_REGION_NODES:
            cone.truncated = True
            cone.sources.append(t)
            if fail_fast:
                return cone
            continue
        cone.nodes.add(p)
        todo.extend(idx.ins[p])
    return cone


def _root_candidates(idx: GraphIndex, anchor: int) -> list[str]:
    """Tensors reachable forward from the anchor through elementwise nodes,
    farthest first (the largest region that checks out wins)."""
    out = idx.node(anchor).output[0]
    found: list[tuple[int, str]] = []
    frontier = [(out, 0)]
    seen = {out}
    while frontier:
        t, d = frontier.pop()
        if d >= MAX_ROOT_DEPTH:
            continue
        for c in idx.consumers.get(t, []):
            if not _node_class(idx, c) or idx.ops[c] in ANCHOR_OPS:
                continue
            o = idx.nodes[c].output[0]
            if o not in seen:
                seen.add(o)
                found.append((d + 1, o))
                frontier.append((o, d + 1))
    found.sort(key=lambda p: -p[0])
    return [t for _, t in found]


def _leaf_candidates(idx: GraphIndex, anchor: int) -> list[str]:
    """Non-constant tensors upstream of the anchor, nearest first. x sits at
    most a few elementwise hops above the transcendental in every spelling."""
    out: list[str] = []
    q = deque((n, 0) for n in idx.ins[anchor])
    seen = {n for n, _ in q}
    while q:
        t, d = q.popleft()
        if _scalar_const(idx, t) is not None:
            continue
        out.append(t)
        p = idx.producer.get(t)
        if d >= MAX_LEAF_DEPTH or p is None or _node_class(idx, p) != 1 or idx.ops[p] in ANCHOR_OPS:
            continue
        for n in idx.ins[p]:
            if n not in seen:
                seen.add(n)
                q.append((n, d + 1))
    return out


def _find_leaf(idx: GraphIndex, root: str, anchor: int, candidates: list[str]):
    """The nearest candidate that dominates the root's cone, with that cone."""
    for t in candidates:
        sub = _cone(idx, root, frozenset([t]), anchor, fail_fast=True)
        if sub.sources == [t] and anchor in sub.nodes and not sub.truncated:
            return t, sub
    return None, None


def _evaluate(idx: GraphIndex, nodes: list[int], leaf: str, x: np.ndarray,
              extra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Values of every region tensor for leaf = x (float64). ``extra`` maps
    further names to values (diagnostics: other sources, overridable or
    [1,1]-shaped constants)."""
    vals: dict[str, np.ndarray] = {leaf: x}
    if extra:
        vals.update(extra)

    def get(n: str) -> np.ndarray:
        if n in vals:
            return vals[n]
        return np.asarray(idx.constant(n).value, dtype=np.float64).reshape(())

    with np.errstate(all="ignore"):
        for i in nodes:
            node = idx.node(i)
            a = get(node.input[0])
            op = node.op_type
            if op in BINARY_OPS:
                b = get(node.input[1])
                r = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
                     "Pow": np.power}[op](a, b)
            elif op == "Erf":
                r = _erf(a).astype(np.float64)
            elif op == "Tanh":
                r = np.tanh(a)
            elif op == "Sigmoid":
                r = 1.0 / (1.0 + np.exp(-a))
            elif op == "Neg":
                r = -a
            elif op == "Sqrt":
                r = np.sqrt(a)
            elif op == "Reciprocal":
                r = 1.0 / a
            else:  # Cast, Identity: value-preserving in float64
                r = a
            vals[node.output[0]] = np.asarray(r, dtype=np.float64)
    return vals


_QUICK_X = np.array([-3.0, 0.5, 3.0])
_QUICK_REF = gelu_reference("erf", _QUICK_X)


def _roughly_gelu(idx: GraphIndex, nodes: list[int], leaf: str, root: str) -> bool:
    """Three-point pre-check shared by every erf/tanh spelling (they differ by
    < 1e-3 there); rejects partial regions like 1+erf(x/sqrt2) at once."""
    f = _evaluate(idx, nodes, leaf, _QUICK_X)[root]
    return bool(np.all(np.abs(f - _QUICK_REF) < 0.05))


def _types(idx: GraphIndex, nodes: list[int], leaf: str, consts: set[str]) -> dict[str, int]:
    """Propagate element types through the region (constants and Casts pin them)."""
    types: dict[str, int] = {}
    for n in consts:
        types[n] = idx.constant(n).elem_type
    lt = idx.elem_type(leaf)
    if lt:
        types[leaf] = lt
    for _ in range(3):
        for i in nodes:
            node = idx.node(i)
            out = node.output[0]
            if node.op_type == "Cast":
                types[out] = next(a.i for a in node.attribute if a.name == "to")
                continue
            ins = [n for n in node.input if n]
            if node.op_type == "Pow":
                ins = ins[:1]  # the exponent may have another type
            known = [types[n] for n in ins if n in types]
            if known:
                types.setdefault(out, known[0])
                for n in ins:
                    types.setdefault(n, known[0])
            elif out in types:
                for n in ins:
                    types.setdefault(n, types[out])
    return types


def _precision(types: dict[str, int], consts, fallback: int | None = None) -> str:
    """The tolerance key: the lowest precision the region's float constants
    are stored in (a Cast-wrapped fp32 chain inside an fp16 model is judged
    as fp32: its constants were never rounded to fp16)."""
    prec = [C.FLOAT_DTYPES[types[n]] for n in consts if types.get(n) in C.FLOAT_DTYPES]
    if not prec:
        return C.FLOAT_DTYPES.get(fallback, "float32")
    return min(prec, key=PRECISION_ORDER.index)


def _rel_error(f: np.ndarray, g: np.ndarray, x: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        e = np.abs(f - g) / np.maximum(np.abs(x), 1.0)
    if not np.all(np.isfinite(f)):
        return math.inf
    return float(np.max(e))


def check_function(idx: GraphIndex, anchor: int, nodes: list[int], leaf: str, root: str, precision: str):
    """Numeric check. Returns (form, alpha, error, tolerance, note)."""
    x = _PROBE
    vals = _evaluate(idx, nodes, leaf, x)
    tol = C.MATCH_TOLERANCE[precision]
    form, alpha, err, note = _classify(idx.node(anchor).op_type, vals, vals[root], x, nodes, idx, tol)
    return form, alpha, err, tol, note


def _classify(op: str, vals, root_vals, x, nodes, idx, tol):
    if op == "Erf":
        return "erf", None, _rel_error(root_vals, gelu_reference("erf", x), x), ""
    if op == "Tanh":
        return "tanh", None, _rel_error(root_vals, gelu_reference("tanh", x), x), ""
    # Sigmoid: x*sigmoid(alpha*x) (QuickGELU) when the sigmoid's argument is
    # linear in x — decided by structure, never by closeness, since in bf16
    # QuickGELU is within tolerance of the tanh GELU — else the tanh GELU
    # written with a sigmoid (0.5*(1+tanh(z)) == sigmoid(2z)).
    sig_in = None
    for i in nodes:
        if idx.node(i).op_type == "Sigmoid":
            sig_in = vals.get(idx.node(i).input[0])
    if sig_in is not None:
        sel = np.abs(x) > 0.5
        alphas = sig_in[sel] / x[sel]
        alpha = float(np.median(alphas))
        if math.isfinite(alpha) and np.max(np.abs(alphas - alpha)) <= 1e-6 * max(1.0, abs(alpha)):
            err = _rel_error(root_vals, gelu_reference("sigmoid", x, alpha), x)
            lo, hi = C.SIGMOID_ALPHA_RANGE
            if err <= tol and not (lo <= alpha <= hi):
                kind = "SiLU/Swish" if abs(alpha - 1) < 0.05 else "not a GELU"
                return "sigmoid", alpha, err, f"x*sigmoid({alpha:.6g}*x) is {kind}: alpha outside [{lo}, {hi}]"
            return "sigmoid", alpha, err, ""
    return "tanh", None, _rel_error(root_vals, gelu_reference("tanh", x), x), ""


def _type_only_reader(idx: GraphIndex, c: int, o: str, region: set[int], consts) -> bool:
    """CastLike(k, o) reads only o's type; when its output is one of the
    region's constants and only the region reads it, it goes with the region
    (onnxscript writes every literal as CastLike(literal, neighbour))."""
    n = idx.node(c)
    if n.op_type != "CastLike" or n.domain not in ("", "ai.onnx") or list(n.input[1:]) != [o] or n.input[0] == o:
        return False
    out = n.output[0]
    return out in consts and out not in idx.graph_outputs and all(r in region for r in idx.consumers.get(out, []))


def _region_key(idx: GraphIndex, anchor: int, nodes: list[int], leaf: str, root: str, consts) -> tuple:
    """Everything the numeric check reads, without names: per node its op,
    Cast target and inputs (x, another region node by position, or a
    constant by dtype and stored bytes), which node is the anchor and which
    the root, and x's declared type. Equal keys = equal checks."""
    pos = {}
    for k, i in enumerate(nodes):
        for o in idx.node(i).output:
            pos[o] = k
    parts = []
    for i in nodes:
        n = idx.node(i)
        ins = []
        for t in n.input:
            if t == leaf:
                ins.append(0)
            elif t in pos:
                ins.append(pos[t] + 1)
            elif t in consts:
                c = idx.constant(t)
                ins.append((c.elem_type, c.value.dtype.str, c.value.tobytes()))
            else:
                ins.append(("?", t))  # never shared: no key collision with another region
        to = next((a.i for a in n.attribute if a.name == "to"), None) if n.op_type == "Cast" else None
        parts.append((n.op_type, to, tuple(ins)))
    return tuple(parts), nodes.index(anchor), pos.get(root), idx.elem_type(leaf)


def _checked(idx: GraphIndex, anchor: int, nodes: list[int], leaf: str, root: str, consts):
    """The numeric check of one region, cached per graph by _region_key
    (a chain of N identical GELUs is checked once). None when the 3-point
    pre-check rejects it; else (form, alpha, err, tol, note, precision,
    leaf_type, root_type)."""
    cache = idx.__dict__.setdefault("_check_cache", {})
    key = _region_key(idx, anchor, nodes, leaf, root, consts)
    if key in cache:
        return cache[key]
    if idx.node(anchor).op_type != "Sigmoid" and not _roughly_gelu(idx, nodes, leaf, root):
        cache[key] = None
        return None
    types = _types(idx, nodes, leaf, consts)
    precision = _precision(types, consts, fallback=types.get(leaf))
    form, alpha, err, tol, note = check_function(idx, anchor, nodes, leaf, root, precision)
    leaf_type = types.get(leaf) or TensorProto.FLOAT
    root_type = types.get(root) or leaf_type
    cache[key] = (form, alpha, err, tol, note, precision, leaf_type, root_type)
    return cache[key]


def _intermediate_violation(idx: GraphIndex, nodes: list[int], root: str, consts=frozenset()):
    region = set(nodes)
    for i in nodes:
        for o in idx.node(i).output:
            if o == root:
                continue
            if o in idx.graph_outputs:
                return "graph-output", f"intermediate '{o}' is a graph output"
            outside = [c for c in idx.consumers.get(o, [])
                       if c not in region and not _type_only_reader(idx, c, o, region, consts)]
            if outside:
                who = idx.node(outside[0])
                return "intermediate-used", (
                    f"intermediate '{o}' is also read by {who.op_type} node '{who.name or '#' + str(outside[0])}'"
                )
    return None


def match_anchor(idx: GraphIndex, anchor: int):
    """Match one anchor. Returns (Match, None) or (None, NearMiss)."""
    anode = idx.node(anchor)
    aname = anode.name or f"{anode.op_type}#{anchor}"
    guess = {"Erf": "erf", "Tanh": "tanh", "Sigmoid": "sigmoid"}[anode.op_type]
    reasons: list[tuple[int, str, str]] = []  # (priority, code, reason)

    def miss(code, reason):
        reasons.append((_PRIORITY[code], code, reason))

    candidates = _leaf_candidates(idx, anchor)
    cand_set = frozenset(candidates)
    unexplained: list[str] = []
    rough: list = []  # regions that failed the 3-point pre-check
    for root in _root_candidates(idx, anchor):
        # Cheap filter: a root whose cone reaches a source outside the
        # anchor's upstream can have no leaf.
        pre = _cone(idx, root, cand_set, anchor, fail_fast=True)
        leaf = sub = None
        if not pre.truncated and anchor in pre.nodes and set(pre.sources) <= cand_set:
            leaf, sub = _find_leaf(idx, root, anchor, candidates)
        if leaf is None:
            unexplained.append(root)
            continue
        nodes = sorted(sub.nodes)
        if sum(idx.node(i).op_type in ANCHOR_OPS for i in nodes) != 1:
            continue
        chk = _checked(idx, anchor, nodes, leaf, root, sub.consts)
        if chk is None:
            rough.append((root, leaf, nodes, sub))
            continue
        form, alpha, err, tol, note, precision, leaf_type, root_type = chk
        if err > tol:
            if math.isfinite(err):
                miss("tolerance", f"computes a function {err:.3g} away from the {form} GELU "
                                  f"(tolerance {tol:g} for {precision})")
            continue
        if note:
            miss("silu" if "SiLU" in note else "alpha-range", note)
            continue
        v = _intermediate_violation(idx, nodes, root, sub.consts)
        if v:
            miss(*v)
            continue
        return Match(idx, anchor, root, leaf, nodes, set(sub.consts), form, alpha,
                     leaf_type, root_type, precision, err), None
    if not reasons and rough:
        # Say how far the closest candidate region is from a GELU.
        best = None
        for root, leaf, nodes, sub in rough:
            types = _types(idx, nodes, leaf, sub.consts)
            precision = _precision(types, sub.consts, fallback=types.get(leaf))
            form, _, err, tol, _ = check_function(idx, anchor, nodes, leaf, root, precision)
            if math.isfinite(err) and (best is None or err < best[0]):
                best = (err, form, tol, precision)
        if best is not None:
            err, form, tol, precision = best
            miss("tolerance", f"computes a function {err:.3g} away from the {form} GELU "
                              f"(tolerance {tol:g} for {precision})")
    # Would a root be a GELU if its other sources were x, or if its
    # overridable / [1,1]-shaped constants were plain scalars? Then that is
    # exactly why it was not fused. Only near-misses pay for this.
    for root in unexplained:
        d = _diagnose(idx, anchor, root)
        if d:
            miss(*d)
    if not reasons:
        reasons.append((_PRIORITY["not-gelu"], "not-gelu",
                        f"{anode.op_type} is not part of an elementwise x*f(x) GELU spelling"))
    reasons.sort(key=lambda r: r[0])
    _, code, reason = reasons[0]
    return None, NearMiss(idx.path, aname, code, reason, guess)


def _diagnose(idx: GraphIndex, anchor: int, root: str):
    nodes: set[int] = set()
    sources: list[str] = []
    extra: dict[str, np.ndarray] = {}
    overridable: list[str] = []
    nonscalar: list[str] = []
    unknown: list[str] = []  # overridable scalars without a default value
    seen: set[str] = set()
    todo = [root]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        c = idx.constant(t)
        if c is not None and (_is_scalar(c.value) or c.value.size == 1):
            if not _is_scalar(c.value):
                nonscalar.append(t)
                extra[t] = np.asarray(c.value, dtype=np.float64).reshape(())
            continue
        if idx.is_overridable(t):
            init = _find_initializer(idx, t)
            value = tensor_value(init) if init is not None else None
            if value is not None and value.size == 1:
                overridable.append(t)
                extra[t] = np.asarray(value, dtype=np.float64).reshape(())
                continue
            shape = idx.shape(t)
            if shape is not None and int(np.prod([d or 0 for d in shape])) == 1:
                unknown.append(t)
                continue
        p = idx.producer.get(t)
        if p is None or not _region_node_ok(idx, p) or (p != anchor and idx.node(p).op_type in ANCHOR_OPS) \
                or len(nodes) >= MAX_REGION_NODES:
            sources.append(t)
            continue
        nodes.add(p)
        todo.extend(n for n in idx.node(p).input if n)
    if anchor not in nodes or not sources:
        return None
    srcs = sorted(set(sources))
    if unknown:
        if len(srcs) == 1:
            return "overridable-constant", f"'{unknown[0]}' is a graph input (overridable at run time), not a constant"
        return None
    if len(srcs) == 1 and not overridable and not nonscalar:
        return None  # a plain single-x region: the numeric check already spoke
    x = _PROBE
    order = sorted(nodes)
    vals = _evaluate(idx, order, srcs[0], x, {**extra, **{s_: x for s_ in srcs[1:]}})
    form, alpha, err, _ = _classify(idx.node(anchor).op_type, vals, vals[root], x, order, idx,
                                    C.MATCH_TOLERANCE["bfloat16"])
    if err > C.MATCH_TOLERANCE["bfloat16"]:
        return None
    if overridable:
        return "overridable-constant", f"'{overridable[0]}' is an initializer that is also a graph input (overridable at run time), not a constant"
    if nonscalar:
        shape = list(idx.constant(nonscalar[0]).value.shape)
        return "non-scalar-constant", f"constant '{nonscalar[0]}' has shape {shape}; only scalars or shape-[1] constants are fused"
    return "mismatched-x", f"reads two different tensors {srcs[0]!r} and {srcs[1]!r} where one x is required"


def bias_initializer(m: Match):
    """The TensorProto behind a [1, ..., 1, H] bias (find_bias accepted it)."""
    return _find_initializer(m.index, _through_identity(m.index, m.bias))


def _find_initializer(idx: GraphIndex, name: str):
    while idx is not None:
        if name in idx.initializers:
            return idx.initializers[name]
        if idx.defines(name):
            return None
        idx = idx.parent
    return None


_PRIORITY = {
    "graph-output": 0,
    "intermediate-used": 0,
    "overridable-constant": 1,
    "non-scalar-constant": 1,
    "mismatched-x": 1,
    "silu": 2,
    "alpha-range": 2,
    "tolerance": 3,
    "not-gelu": 9,
}


def find_bias(m: Match) -> None:
    """x = Add(h, b) with b a constant over x's last dim → bias: 1-D, or
    [1, ..., 1, H] when that cannot widen h (h's rank is known and at least
    b's: a [1, 1, H] bias on a rank-3 activation, as exporters write it)."""
    idx = m.index
    p = idx.producer.get(m.leaf)
    if p is None or m.leaf in idx.graph_outputs:
        return
    node = idx.node(p)
    if node.op_type != "Add" or not _is_default_domain(node) or len(node.input) != 2:
        return
    if any(c not in m.nodes for c in idx.consumers.get(m.leaf, [])):
        return
    for b, h in ((node.input[1], node.input[0]), (node.input[0], node.input[1])):
        dims = _const_dims(idx, b)
        if dims is None or idx.constant(h) is not None or _const_dims(idx, h) is not None:
            continue
        if not dims or dims[-1] < 1 or any(d != 1 for d in dims[:-1]) or _const_type(idx, b) != m.leaf_type:
            continue
        if len(dims) > 1:
            shape = idx.shape(h)
            if shape is None or len(shape) < len(dims) or _find_initializer(idx, _through_identity(idx, b)) is None:
                continue
        if _last_dim(idx, h) == dims[-1]:
            m.bias, m.bias_input, m.bias_node = b, h, p
            return


def _last_dim(idx: GraphIndex, name: str):
    shape = idx.shape(name)
    if shape:
        return shape[-1]
    # MatMul / Gemm with a constant weight: the last dim is the weight's.
    p = idx.producer.get(name)
    if p is None:
        return None
    node = idx.node(p)
    if node.op_type == "MatMul" and len(node.input) == 2:
        w = node.input[1]
        dims = _const_dims(idx, w)
        return dims[-1] if dims and len(dims) >= 2 else None
    if node.op_type == "Gemm" and len(node.input) >= 2:
        dims = _const_dims(idx, node.input[1])
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        if dims and len(dims) == 2:
            return dims[0] if trans_b else dims[1]
    return None


def _through_identity(idx: GraphIndex, name: str) -> str:
    # The TorchScript exporter dedups equal initializers as Identity(other).
    for _ in range(8):
        p = idx.producer.get(name)
        if p is None or idx.node(p).op_type != "Identity" or not _is_default_domain(idx.node(p)):
            return name
        name = idx.node(p).input[0]
    return name


def _const_type(idx: GraphIndex, name: str):
    name = _through_identity(idx, name)
    if name in idx.initializers:
        return idx.initializers[name].data_type
    if idx.parent is not None and not idx.defines(name):
        return _const_type(idx.parent, name)
    c = idx.constant(name)
    return c.elem_type if c is not None else None


def _const_dims(idx: GraphIndex, name: str):
    """Dims of a true constant without reading its payload; None otherwise."""
    name = _through_identity(idx, name)
    if name in idx.initializers and not idx.is_overridable(name):
        return list(idx.initializers[name].dims)
    if idx.parent is not None and not idx.defines(name):
        return _const_dims(idx.parent, name)
    c = idx.constant(name)
    return list(c.value.shape) if c is not None else None


def find_matches(idx: GraphIndex):
    """All GELU matches and near-misses in one graph (not its subgraphs)."""
    matches: list[Match] = []
    misses: list[NearMiss] = []
    claimed: set[int] = set()
    for i, node in enumerate(idx.graph.node):
        if node.op_type not in ANCHOR_OPS or not _is_default_domain(node) or i in claimed:
            continue
        m, miss = match_anchor(idx, i)
        if m is None:
            misses.append(miss)
            continue
        if claimed.intersection(m.nodes):
            continue
        claimed.update(m.nodes)
        matches.append(m)
    return matches, misses
