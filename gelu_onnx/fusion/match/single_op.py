"""GELUs already written as one op: inputs like any other spelling.

Exporters and optimizers write GELU as a single node: ONNX ``Gelu`` (opset
>= 20; torch 2.13's default dynamo export), ONNX Runtime's ``com.microsoft``
``Gelu`` / ``BiasGelu`` / ``FastGelu`` / ``QuickGelu`` (its optimizers), and
our own ``ai.gelu_onnx`` ops (a model fused for another target). Each becomes
a ``Match`` of one node, so every target converts it into its own ops and a
model can move between targets. Their semantics (ORT contrib op docs,
onnxruntime/core/graph/contrib_ops/bert_defs.cc): BiasGelu(X, B) =
Gelu(X + B) with B 1-D over X's last dimension; FastGelu(X[, B]) is the tanh
form of X (+ B); QuickGelu(X) = X * Sigmoid(alpha * X), alpha 1.702 by
default.

A node that is already the target's op, with nothing to absorb, is left
alone (``already_target``): a second pass changes nothing.

Also TensorRT's legacy CustomGeluPluginDynamic nodes (find_legacy,
legacy_nodes): a GELU in one node too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from onnx import AttributeProto, NodeProto, TensorProto, numpy_helper
import numpy as np

from ... import contract as C
from ..index.graph import GraphIndex, tensor_value
from ..report import Match, Code, NearMiss
from .bias import const_dims, last_dim
from ..rewrite.emit import Field, emit_after_add, write


def _attr(node: NodeProto, name: str):
    for a in node.attribute:
        if a.name == name:
            if a.type == AttributeProto.STRING:
                return a.s.decode("utf-8", "replace")
            if a.type == AttributeProto.FLOAT:
                return a.f
            return None  # the wrong attribute type: not a GELU we can read
    return ...  # absent


# The contrib ops' schemas (onnxruntime/core/graph/contrib_ops/bert_defs.cc):
# (fewest, most inputs) and the attributes they have, with their types. ONNX
# Runtime refuses a node outside them as an invalid model (a Gelu with 2
# inputs, a FastGelu with 3, an attribute the op does not have), so such a
# node is never rewritten into a valid op: it is left as written, a
# near-miss. Checked against ONNX Runtime's verdict by tests/test_native.py.
MS_SCHEMAS = {
    "Gelu": ((1, 1), {}),
    "BiasGelu": ((2, 2), {}),
    "FastGelu": ((1, 2), {}),
    "QuickGelu": ((1, 1), {"alpha": AttributeProto.FLOAT}),
}
# ours (gelu_onnx.contract): X [, bias], alpha (sigmoid forms), plugin_namespace
_OUR_ATTRS = {C.ATTR_ALPHA: AttributeProto.FLOAT, C.ATTR_PLUGIN_NAMESPACE: AttributeProto.STRING}


def schema_fault(node: NodeProto) -> str | None:
    """Why ONNX Runtime would refuse this single-op GELU node (its schema:
    input and output counts, attributes), or None."""
    if node.domain == C.MS_DOMAIN:
        (lo, hi), attrs = MS_SCHEMAS[node.op_type]
    elif node.domain == C.DOMAIN:
        lo = hi = 2 if C.FORM_OF_OP_TYPE[node.op_type][1] else 1
        attrs = _OUR_ATTRS
    else:
        return None  # ONNX Gelu: onnx.checker holds it to its schema
    n = len(node.input)
    while n and not node.input[n - 1]:
        n -= 1  # trailing optional inputs left out
    if not lo <= n <= hi or len(node.output) != 1:
        takes = f"{lo}" if lo == hi else f"{lo} or {hi}"
        return (f"{node.domain}.{node.op_type} with {n} input(s) and {len(node.output)} output(s) (it takes {takes} "
                "and 1: ONNX Runtime refuses it as an invalid model; left as written)")
    for a in node.attribute:
        if a.name not in attrs or a.type != attrs[a.name]:
            return (f"{node.domain}.{node.op_type} has an attribute {a.name!r} of type "
                    f"{AttributeProto.AttributeType.Name(a.type)} its schema does not have (ONNX Runtime refuses "
                    "it as an invalid model; left as written)")
    return None


def describe(node: NodeProto):
    """(form, takes_bias_input, alpha) for a single-op GELU, or a reason
    string when the node is one of them but cannot be read, or None when it
    is not a single-op GELU at all."""
    dom, op = node.domain, node.op_type
    if dom in ("", "ai.onnx") and op == "Gelu":
        approx = _attr(node, "approximate")
        approx = "none" if approx is ... else approx
        if approx not in ("none", "tanh"):
            return f"Gelu approximate={approx!r} is neither 'none' nor 'tanh'"
        return ("erf" if approx == "none" else "tanh"), False, None
    if dom == C.MS_DOMAIN:
        if op == "Gelu":
            return "erf", False, None
        if op == "BiasGelu":
            return "erf", True, None
        if op == "FastGelu":
            return "tanh", len([i for i in node.input if i]) > 1, None
        if op == "QuickGelu":
            alpha = _attr(node, "alpha")
            alpha = 1.702 if alpha is ... else alpha  # the contrib op's default
            return _sigmoid(alpha)
        return None
    if dom == C.DOMAIN and op in C.FORM_OF_OP_TYPE:
        form, bias = C.FORM_OF_OP_TYPE[op]
        if form != "sigmoid":
            return form, bias, None
        alpha = _attr(node, C.ATTR_ALPHA)
        alpha = C.QUICK_GELU_ALPHA if alpha is ... else alpha
        res = _sigmoid(alpha)
        return res if isinstance(res, str) else (form, bias, res[2])
    return None


def _sigmoid(alpha):
    if alpha is None or not (C.SIGMOID_ALPHA_RANGE[0] <= alpha <= C.SIGMOID_ALPHA_RANGE[1]):
        return f"x*sigmoid(alpha*x) with alpha={alpha!r} is not a GELU (QuickGELU's alpha is near 1.702)"
    return "sigmoid", False, float(alpha)


# every op type describe() can recognise
_SINGLE_OP_NAMES = frozenset({*MS_SCHEMAS, *C.FORM_OF_OP_TYPE})  # ONNX Gelu is spelled as com.microsoft's


def find_native(idx: GraphIndex):
    """(matches, near-misses) for every single-op GELU in one graph."""
    matches: list[Match] = []
    misses: list[NearMiss] = []
    for i, op in enumerate(idx.ops):
        if op not in _SINGLE_OP_NAMES:  # most nodes: no proto field read
            continue
        node = idx.nodes[i]
        d = describe(node)
        if d is None:
            continue
        name = node.name or f"{node.op_type}#{i}"
        if isinstance(d, str):
            misses.append(NearMiss(idx.path, name, Code.NATIVE_ATTRIBUTE, d))
            continue
        fault = schema_fault(node)
        if fault is not None:
            misses.append(NearMiss(idx.path, name, Code.NATIVE_ARITY, fault, d[0]))
            continue
        form, has_bias, alpha = d
        ins = [x for x in node.input]
        if len(node.output) != 1 or not ins or not ins[0] or (has_bias and (len(ins) < 2 or not ins[1])):
            misses.append(NearMiss(idx.path, name, Code.NATIVE_ARITY, f"{node.op_type} with unexpected inputs/outputs",
                                   form))
            continue
        x, y = ins[0], node.output[0]
        misfit = _bias_misfit(idx, ins[1], x) if has_bias else None
        if misfit is not None:
            misses.append(NearMiss(idx.path, name, Code.NATIVE_ARITY, f"{node.op_type}'s bias has shape {misfit}, "
                                   f"not 1-D over X's last dimension", form))
            continue
        et = idx.type_of(x) or idx.type_of(y) or (idx.type_of(ins[1]) if has_bias else None)
        if not et:
            misses.append(NearMiss(idx.path, name, Code.UNSUPPORTED_DTYPE,
                                   f"the element type of {node.op_type}'s input is not declared "
                                   f"(run onnx.shape_inference on the model first)", form))
            continue
        bias = dict(bias=ins[1], bias_input=x, bias_inside=True) if has_bias else {}
        matches.append(Match(anchor=i, root=y, leaf=x, nodes=(i,), consts=(), form=form, alpha=alpha,
                             leaf_type=et, root_type=et, precision=C.FLOAT_DTYPES.get(et, str(et)), error=0.0,
                             single_op=node, **bias))
    return matches, misses


def _bias_misfit(idx: GraphIndex, b: str, x: str):
    """The bias's dims where they are known and provably not the contrib
    ops' 1-D bias over X's last dimension (ONNX Runtime's kernels read such
    a bias cyclically, e.g. one element for every column; our ops and an Add
    in front cannot say that), else None. A one-element bias fits only where
    X's last dimension is known to be 1."""
    dims = idx.value_shapes.get(b)
    if dims is None:
        dims = const_dims(idx, b)  # through Identity, Constant, Reshape ...
    if dims is None or any(d is None for d in dims):
        return None
    last = last_dim(idx, x)
    if len(dims) != 1 or (dims[0] != last if last is not None else dims[0] == 1):
        return list(dims)
    return None


def already_target(m: Match, em: Emission, use_bias: bool) -> bool:
    """The node is exactly what the target would write for it."""
    n = m.single_op
    if n is None or len(em.nodes) != 1 or use_bias != m.bias_inside:
        return False
    op = em.nodes[0]
    if (n.domain or "") != op.domain or n.op_type != op.op_type:
        return False
    return m.form != "sigmoid" or _attr(n, "alpha") in (..., m.alpha)


if TYPE_CHECKING:
    from ..rewrite.emit import NameGen
    from ..targets import Emission

OP_TYPE = "CustomGeluPluginDynamic"
_TYPE_IDS = {0: TensorProto.FLOAT, 1: TensorProto.FLOAT16}


def find_legacy(idx: GraphIndex):
    """(matches, near-misses) for every CustomGeluPluginDynamic node."""
    matches: list[tuple[Match, np.ndarray | None]] = []
    misses: list[NearMiss] = []
    for i, op in enumerate(idx.ops):
        if op != OP_TYPE:
            continue
        node = idx.nodes[i]
        name = node.name or f"{OP_TYPE}#{i}"
        m, bias, why = _legacy_match(idx, i, node)
        if why:
            misses.append(NearMiss(idx.path, name, Code.LEGACY_PLUGIN, why, "tanh"))
        else:
            matches.append((m, bias))
    return matches, misses


def _legacy_match(idx: GraphIndex, i: int, node: NodeProto):
    attrs = {a.name: a for a in node.attribute}
    if len(node.input) != 1 or len(node.output) != 1:
        return None, None, f"{OP_TYPE} must have one input and one output"
    if "type_id" not in attrs:
        return None, None, f"{OP_TYPE} without its required type_id attribute"
    et = _TYPE_IDS.get(attrs["type_id"].i)
    if et is None:
        return None, None, f"type_id={attrs['type_id'].i} is not one the plugin could run (0 = float32, 1 = float16)"
    x = node.input[0]
    xt = idx.elem_type(x)
    if xt is not None and xt != et:
        return None, None, f"type_id={attrs['type_id'].i} does not match the input's type"
    bias = None
    if "bias" in attrs:
        t = attrs["bias"].t
        if t.data_type != et:
            return None, None, ("the bias tensor's type differs from type_id (the removed plugin misread such "
                                "bytes); refusing to guess")
        bias = tensor_value(t)
        if bias is None:
            return None, None, "the bias tensor is too large or stored externally"
        bias = bias.reshape(-1)
        if last_dim(idx, x) != bias.size:
            return None, None, (f"bias has {bias.size} values but the input's last dimension is not known to be "
                                f"{bias.size} (the plugin added bias[i % {bias.size}] over the flat tensor)")
    m = Match(anchor=i, root=node.output[0], leaf=x, nodes=(i,), consts=(), form="tanh", alpha=None,
              leaf_type=et, root_type=et, precision=C.FLOAT_DTYPES[et], error=0.0)
    return m, bias, None


def legacy_nodes(m: Match, bias: np.ndarray | None, em: Emission, compute_type: int, names: NameGen,
                 graph) -> list[Field]:
    """Replacement node fields (emit.write); the bias becomes a 1-D initializer of X's type,
    read by the emission where it takes the bias (em.inputs_bias), else
    added in front."""
    if bias is None:
        return write(em, m.leaf, None, m, compute_type, names, graph)
    bname = names(f"{m.root}_bias")
    graph.initializer.append(numpy_helper.from_array(bias.astype(C.np_dtype(m.leaf_type)), bname))
    if em.inputs_bias:
        return write(em, m.leaf, bname, m, compute_type, names, graph)
    return emit_after_add(m, bname, em, compute_type, names, graph)
