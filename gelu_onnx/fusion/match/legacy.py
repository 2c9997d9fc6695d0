"""Migration of TensorRT's removed ``CustomGeluPluginDynamic`` nodes.

Facts (TensorRT OSS plugin/geluPlugin, last shipped in 10.x, removed in
11.0; see plugins/tensorrt/README.md): one input X; INT attribute
``type_id`` (0 = float32, 1 = float16; required); optional TENSOR attribute
``bias`` (usually shaped [1,1,E], read in type_id's precision and added as
bias[i % E], i.e. along X's last dimension when that dimension is E). It
computes the tanh approximation: y = v*(0.5 + 0.5*tanh(0.79788456*v*(1 +
0.044715*v^2))), v = x + bias.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from onnx import NodeProto, TensorProto, numpy_helper

from ... import contract as C
from ..index.constants import tensor_value
from ..index.graph import GraphIndex
from .bias import last_dim
from .findings import Match, Code, NearMiss

if TYPE_CHECKING:
    from ..rewrite.emit import Emission, NameGen

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
    m = Match(index=idx, anchor=i, root=node.output[0], leaf=x, nodes=[i], consts=set(), form="tanh", alpha=None,
              leaf_type=et, root_type=et, precision=C.FLOAT_DTYPES[et], error=0.0)
    return m, bias, None


def legacy_nodes(m: Match, bias: np.ndarray | None, em: Emission, compute_type: int, names: NameGen,
                 graph) -> list[NodeProto]:
    """Replacement nodes; the bias becomes a 1-D initializer of X's type,
    the op's second input where the op takes it (em.inputs_bias)."""
    from ..rewrite.emit import emit_after_add, emit_nodes

    if bias is None:
        return emit_nodes(m, em, compute_type, False, names)
    bname = names(f"{m.root}_bias")
    graph.initializer.append(numpy_helper.from_array(bias.astype(C.np_dtype(m.leaf_type)), bname))
    m.bias, m.bias_input = bname, m.leaf
    if em.inputs_bias:
        return emit_nodes(m, em, compute_type, True, names)
    # the target's op takes no bias: Add in front, then the op
    return emit_after_add(m, bname, em, compute_type, names)
