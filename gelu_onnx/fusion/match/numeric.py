"""The value-based check: a candidate region evaluated in float64 on a probe
grid, constants exactly as stored, against the GELU family its
transcendental implies (contract.MATCH_TOLERANCE); regions with the same
structure and constants share one check (the region cache)."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from onnx import TensorProto

from ... import contract as C
from ..report import Code
from ..index.graph import GraphIndex
from ..ops import DEFAULT_DOMAINS, OPS, cast_to


# Probe grid: dense where GELU bends, sparse tails, tiny magnitudes (0 left out).
PROBE = np.unique(np.concatenate([np.linspace(-8.0, 8.0, 321), [-100.0, -50.0, -20.0, -12.0, 12.0, 20.0, 50.0, 100.0],
                                  [-1e-3, -1e-6, 1e-6, 1e-3]]))
PROBE = PROBE[PROBE != 0.0]
PRECISION_ORDER = ["bfloat16", "float16", "float32", "float64"]


def gelu_reference(form: str, x: np.ndarray, alpha: float | None = None) -> np.ndarray:
    """The exact GELU family functions in float64."""
    x = np.asarray(x, dtype=np.float64)
    if form == "erf":
        return 0.5 * x * (1.0 + OPS["Erf"].f64(x * C.INV_SQRT2))
    if form == "tanh":
        return 0.5 * x * (1.0 + np.tanh(C.SQRT_2_OVER_PI * (x + C.TANH_CUBIC_COEFF * x**3)))
    if form == "sigmoid":
        with np.errstate(over="ignore"):
            return x / (1.0 + np.exp(-alpha * x))
    raise ValueError(form)


def evaluate(idx: GraphIndex, nodes: list[int], leaf: str, x: np.ndarray,
              extra: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Values of every region tensor for leaf = x (float64). ``nodes`` in
    graph order, which computes them (plan sorts every graph it indexes).
    ``extra`` maps further names to values (diagnostics: other sources,
    overridable or [1,1]-shaped constants)."""
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
            op = OPS[node.op_type]
            vals[node.output[0]] = np.asarray(op.f64(*map(get, node.input[:op.arity])), dtype=np.float64)
    return vals


_QUICK_X = np.array([-3.0, 0.5, 3.0])
_QUICK_REF = gelu_reference("erf", _QUICK_X)


def _roughly_gelu(idx: GraphIndex, nodes: list[int], leaf: str, root: str) -> bool:
    """Three-point pre-check shared by every erf/tanh spelling (they differ by
    < 1e-3 there); rejects partial regions like 1+erf(x/sqrt2) at once."""
    f = evaluate(idx, nodes, leaf, _QUICK_X)[root]
    return bool(np.all(np.abs(f - _QUICK_REF) < 0.05))


def region_types(idx: GraphIndex, nodes: list[int], leaf: str, consts: set[str]) -> dict[str, int]:
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
            ins = [n for n in node.input if n][:OPS[node.op_type].typed]
            known = [types[n] for n in ins if n in types]
            if known:
                types.setdefault(out, known[0])
                for n in ins:
                    types.setdefault(n, known[0])
            elif out in types:
                for n in ins:
                    types.setdefault(n, types[out])
    return types


def wider(a: int, b: int) -> int:
    """The compute type for a chain that goes from type a to type b."""
    if a == b:
        return a
    if TensorProto.DOUBLE in (a, b):
        return TensorProto.DOUBLE
    return TensorProto.FLOAT


_KEEPS = {TensorProto.DOUBLE: 3, TensorProto.FLOAT: 2, TensorProto.FLOAT16: 1, TensorProto.BFLOAT16: 1}


def inner_rounding(idx: GraphIndex, nodes: list[int], root: str, compute_type: int) -> int | None:
    """The target of a Cast inside the region (not the one writing the root,
    whose type the fused op's output keeps) that rounds what ``compute_type``
    keeps (float32 -> bfloat16 -> float32 between GELUs): the check takes
    Casts as value-preserving, so such a region is no GELU to fuse."""
    keep = _KEEPS.get(compute_type, 0)
    for i in nodes:
        node = idx.node(i)
        if node.op_type != "Cast" or node.output[0] == root:
            continue
        t = cast_to(node)
        if t != compute_type and _KEEPS.get(t, 0) <= keep:
            return t
    return None


def region_precision(types: dict[str, int], consts, fallback: int | None = None) -> str:
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
    x = PROBE
    vals = evaluate(idx, nodes, leaf, x)
    tol = C.MATCH_TOLERANCE[precision]
    form, alpha, err, note = classify(idx.node(anchor).op_type, vals, vals[root], x, nodes, idx, tol)
    return form, alpha, err, tol, note


def classify(op: str, vals, root_vals, x, nodes, idx, tol):
    family = OPS[op].family
    if family != "sigmoid":
        return family, None, _rel_error(root_vals, gelu_reference(family, x), x), None
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
                silu = abs(alpha - 1) < 0.05
                return "sigmoid", alpha, err, (Code.SILU if silu else Code.ALPHA_RANGE,
                                               f"x*sigmoid({alpha:.6g}*x) is {'SiLU/Swish' if silu else 'not a GELU'}: "
                                               f"alpha outside [{lo}, {hi}]")
            return "sigmoid", alpha, err, None
    return "tanh", None, _rel_error(root_vals, gelu_reference("tanh", x), x), None


def _type_only_reader(idx: GraphIndex, c: int, o: str, region: set[int], consts) -> bool:
    """CastLike(k, o) reads only o's type; when its output is one of the
    region's constants and only the region reads it, it goes with the region
    (onnxscript writes every literal as CastLike(literal, neighbour))."""
    n = idx.node(c)
    if n.op_type != "CastLike" or n.domain not in DEFAULT_DOMAINS or list(n.input[1:]) != [o] or n.input[0] == o:
        return False
    out = n.output[0]
    return out in consts and out not in idx.graph_outputs and all(r in region for r in idx.consumers[out])


def region_key(idx: GraphIndex, anchor: int, nodes: list[int], leaf: str, root: str, consts) -> tuple:
    """Everything the numeric check reads, without names: per node its op,
    Cast target and inputs (x, another region node by position, or a
    constant by dtype, shape and stored bytes), which node is the anchor and
    which the root, and x's declared type. Equal keys = equal checks."""
    pos = {}
    for k, i in enumerate(nodes):
        for o in idx.outs[i]:
            pos[o] = k
    ckeys = idx.const_keys
    parts = []
    for i in nodes:
        ins = []
        for t in idx.raw_ins[i]:
            if t == leaf:
                ins.append(0)
            elif t in pos:
                ins.append(pos[t] + 1)
            elif t in consts:
                key = ckeys.get(t)
                if key is None:
                    c = idx.constant(t)
                    key = ckeys[t] = (c.elem_type, c.value.dtype.str, c.value.shape, c.value.tobytes())
                ins.append(key)
            else:
                ins.append(("?", t))  # never shared: no key collision with another region
        op = idx.ops[i]
        parts.append((op, cast_to(idx.node(i)) if op == "Cast" else None, tuple(ins)))
    return tuple(parts), nodes.index(anchor), pos.get(root), idx.elem_type(leaf)


class Check(NamedTuple):
    """The numeric check of one region (checked_region)."""

    form: str
    alpha: float | None
    error: float
    tolerance: float
    note: tuple | None  # (Code, reason): numerically a GELU of this family, yet not fused
    precision: str
    leaf_type: int
    root_type: int


def checked_region(idx: GraphIndex, anchor: int, nodes: list[int], leaf: str, root: str, consts, key=None):
    """The numeric check of one region, cached per graph by region_key
    (a chain of N identical GELUs is checked once; ``key``: that key, when
    the caller has it). None when the 3-point pre-check rejects it; else a Check."""
    cache = idx.check_cache
    if key is None:
        key = region_key(idx, anchor, nodes, leaf, root, consts)
    if key in cache:
        return cache[key]
    if OPS[idx.node(anchor).op_type].family != "sigmoid" and not _roughly_gelu(idx, nodes, leaf, root):
        cache[key] = None
        return None
    types = region_types(idx, nodes, leaf, consts)
    precision = region_precision(types, consts, fallback=types.get(leaf))
    form, alpha, err, tol, note = check_function(idx, anchor, nodes, leaf, root, precision)
    leaf_type = types.get(leaf) or TensorProto.FLOAT
    root_type = types.get(root) or leaf_type
    rounds = inner_rounding(idx, nodes, root, wider(leaf_type, root_type))
    if rounds is not None and note is None:
        dt = C.FLOAT_DTYPES.get(rounds, str(rounds))
        note = (Code.INNER_CAST, f"a Cast inside rounds to {dt}, which the fused op computing in "
                                 f"{C.FLOAT_DTYPES.get(wider(leaf_type, root_type))} would not")
    cache[key] = Check(form, alpha, err, tol, note, precision, leaf_type, root_type)
    return cache[key]


def intermediate_violation(idx: GraphIndex, nodes: list[int], root: str, consts=frozenset(), readers=None):
    """Why the region cannot be fused (a Code and a reason), or None. Type-only
    readers of its inner tensors (allowed) are added to ``readers``."""
    region = set(nodes)
    outs, consumers, graph_outputs = idx.outs, idx.consumers, idx.graph_outputs
    for i in nodes:
        for o in outs[i]:
            if o == root:
                continue
            if o in graph_outputs:
                return Code.GRAPH_OUTPUT, f"intermediate '{o}' is a graph output"
            cs = consumers[o]
            if region.issuperset(cs):
                continue
            if readers is not None:
                readers.extend(c for c in cs if c not in region)
            outside = [c for c in cs if c not in region and not _type_only_reader(idx, c, o, region, consts)]
            if outside:
                who = idx.node(outside[0])
                return Code.INTERMEDIATE_USED, (
                    f"intermediate '{o}' is also read by {who.op_type} node '{who.name or '#' + str(outside[0])}'"
                )
    return None
