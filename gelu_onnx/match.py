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
from onnx import TensorProto

from . import contract as C
from .graph import ANCHOR_OPS, BINARY_OPS, ELEMENTWISE, GraphIndex

# How far we look: a GELU spelling has at most ~12 elementwise nodes; the
# forward walk from the transcendental to the root is at most 4 deep.
MAX_REGION_NODES = 24
MAX_ROOT_DEPTH = 5

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
    nonscalar: list[str] = field(default_factory=list)
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


def _cone(idx: GraphIndex, root: str, stop: frozenset[str] = frozenset()) -> _Cone:
    """Backward elementwise cone of ``root``; ``stop`` tensors count as sources."""
    cone = _Cone()
    seen: set[str] = set()
    todo = [root]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in stop and t != root:
            cone.sources.append(t)
            continue
        c = idx.constant(t)
        if c is not None:
            cone.consts.add(t)
            continue
        p = idx.producer.get(t)
        if p is None or not _region_node_ok(idx, p):
            if idx.is_overridable(t):
                cone.overridable.append(t)
            cone.sources.append(t)
            continue
        node = idx.node(p)
        # A node reading a non-scalar constant (bias vector, [1,1] "scalar")
        # is a boundary: its output is a source, not part of a GELU.
        bad = [n for n in node.input if n and (cv := idx.constant(n)) is not None and not _is_scalar(cv.value)]
        if bad:
            cone.nonscalar.extend(bad)
            cone.sources.append(t)
            continue
        if len(cone.nodes) >= MAX_REGION_NODES:
            cone.truncated = True
            cone.sources.append(t)
            continue
        cone.nodes.add(p)
        todo.extend(n for n in node.input if n)
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
            if not _region_node_ok(idx, c):
                continue
            o = idx.node(c).output[0]
            if o not in seen:
                seen.add(o)
                found.append((d + 1, o))
                frontier.append((o, d + 1))
    found.sort(key=lambda p: -p[0])
    return [t for _, t in found]


def _find_leaf(idx: GraphIndex, root: str, anchor: int, cone: _Cone) -> tuple[str | None, _Cone | None]:
    """Nearest tensor (BFS back from the anchor) that dominates the cone."""
    q = deque(n for n in idx.node(anchor).input if n)
    seen = set(q)
    while q:
        t = q.popleft()
        if t not in cone.consts:
            sub = _cone(idx, root, frozenset([t]))
            if sub.sources == [t] and anchor in sub.nodes and not sub.truncated:
                return t, sub
        p = idx.producer.get(t)
        if p is not None and p in cone.nodes:
            for n in idx.node(p).input:
                if n and n not in seen:
                    seen.add(n)
                    q.append(n)
    return None, None


def _evaluate(idx: GraphIndex, nodes: list[int], leaf: str, x: np.ndarray) -> dict[str, np.ndarray]:
    vals: dict[str, np.ndarray] = {leaf: x}

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


def _precision(types: dict[str, int], names) -> str:
    names = list(names)
    prec = [C.FLOAT_DTYPES[types[n]] for n in names if types.get(n) in C.FLOAT_DTYPES]
    if not prec:
        return "float32"
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
    # Sigmoid: x*sigmoid(alpha*x) (QuickGELU), or the tanh GELU written with a
    # sigmoid, since 0.5*(1+tanh(z)) == sigmoid(2z).
    sig_in = None
    for i in nodes:
        if idx.node(i).op_type == "Sigmoid":
            sig_in = vals.get(idx.node(i).input[0])
    err_tanh = _rel_error(root_vals, gelu_reference("tanh", x), x)
    if err_tanh <= tol:
        return "tanh", None, err_tanh, ""
    if sig_in is not None:
        sel = np.abs(x) > 0.5
        alphas = sig_in[sel] / x[sel]
        alpha = float(np.median(alphas)) if alphas.size else math.nan
        if math.isfinite(alpha) and np.max(np.abs(alphas - alpha)) <= max(tol, 1e-6) * max(1.0, abs(alpha)):
            err = _rel_error(root_vals, gelu_reference("sigmoid", x, alpha), x)
            if err <= tol:
                lo, hi = C.SIGMOID_ALPHA_RANGE
                if not (lo <= alpha <= hi):
                    return "sigmoid", alpha, err, f"x*sigmoid({alpha:.6g}*x) is {'SiLU/Swish' if abs(alpha - 1) < 0.05 else 'not a GELU'}: alpha outside [{lo}, {hi}]"
                # Use the constant as the graph stores it (exact as float32).
                return "sigmoid", alpha, err, ""
    return "sigmoid", None, math.inf, ""


def _intermediate_violation(idx: GraphIndex, nodes: list[int], root: str):
    region = set(nodes)
    for i in nodes:
        for o in idx.node(i).output:
            if o == root:
                continue
            if o in idx.graph_outputs:
                return "graph-output", f"intermediate '{o}' is a graph output"
            outside = [c for c in idx.consumers.get(o, []) if c not in region]
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

    for root in _root_candidates(idx, anchor):
        cone = _cone(idx, root)
        if anchor not in cone.nodes:
            continue
        leaf, sub = _find_leaf(idx, root, anchor, cone)
        if leaf is None:
            srcs = sorted(set(cone.sources))
            if cone.overridable:
                miss("overridable-constant",
                     f"'{cone.overridable[0]}' is a graph input (overridable at run time), not a constant")
            elif cone.nonscalar:
                miss("non-scalar-constant",
                     f"constant '{cone.nonscalar[0]}' is not a scalar or shape-[1] tensor")
            elif len(srcs) >= 2:
                miss("mismatched-x", f"reads two different tensors {srcs[0]!r} and {srcs[1]!r} where one x is required")
            continue
        nodes = sorted(sub.nodes)
        if sum(idx.node(i).op_type in ANCHOR_OPS for i in nodes) != 1:
            continue
        types = _types(idx, nodes, leaf, sub.consts)
        precision = _precision(types, list(sub.consts) + [leaf, root] +
                               [idx.node(i).output[0] for i in nodes])
        form, alpha, err, tol, note = check_function(idx, anchor, nodes, leaf, root, precision)
        if err > tol:
            if math.isfinite(err):
                miss("tolerance", f"computes a function {err:.3g} away from the {form} GELU "
                                  f"(tolerance {tol:g} for {precision})")
            continue
        if note:
            miss("silu" if "SiLU" in note else "alpha-range", note)
            continue
        v = _intermediate_violation(idx, nodes, root)
        if v:
            miss(*v)
            continue
        leaf_type = types.get(leaf) or TensorProto.FLOAT
        root_type = types.get(root) or leaf_type
        return Match(idx, anchor, root, leaf, nodes, set(sub.consts), form, alpha,
                     leaf_type, root_type, precision, err), None
    if not reasons:
        reasons.append((_PRIORITY["not-gelu"], "not-gelu",
                        f"{anode.op_type} is not part of an elementwise x*f(x) GELU spelling"))
    reasons.sort(key=lambda r: r[0])
    _, code, reason = reasons[0]
    return None, NearMiss(idx.path, aname, code, reason, guess)


_PRIORITY = {
    "graph-output": 0,
    "intermediate-used": 0,
    "overridable-constant": 1,
    "silu": 2,
    "alpha-range": 2,
    "tolerance": 3,
    "non-scalar-constant": 4,
    "mismatched-x": 5,
    "not-gelu": 9,
}


def find_bias(m: Match) -> None:
    """x = Add(h, b) with b a constant 1-D vector over x's last dim → bias."""
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
        if len(dims) != 1 or dims[0] < 1 or _const_type(idx, b) != m.leaf_type:
            continue
        if _last_dim(idx, h) == dims[0]:
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


def _const_type(idx: GraphIndex, name: str):
    if name in idx.initializers:
        return idx.initializers[name].data_type
    if idx.parent is not None and not idx.defines(name):
        return _const_type(idx.parent, name)
    c = idx.constant(name)
    return c.elem_type if c is not None else None


def _const_dims(idx: GraphIndex, name: str):
    """Dims of a true constant without reading its payload; None otherwise."""
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
