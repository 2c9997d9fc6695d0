"""What the two builders of the input's check model share (fusion/standin.py
over a GraphIndex, fusion/checkbytes.py over the file's bytes): which fused
regions may be stood in for, and when two of them are the same class."""
from __future__ import annotations

from .numeric import region_key

# A stand-in saves nodes only where many regions repeat: below this share of
# the graph's nodes the input itself is checked (no bytes assembled).
MIN_SAVED_SHARE = 0.25


def self_contained(idx, mt) -> bool:
    """Nothing outside the region reads or declares its inner tensors."""
    region = set(mt.nodes)
    inner = [o for i in mt.nodes for o in idx.outs[i] if o != mt.root]
    if len(idx.graph.value_info) and any(o in idx.value_types for o in inner):
        return False
    if mt.shared is not None:
        return not mt.shared
    return all(c in region for o in inner for c in idx.consumers.get(o, ()))


def class_key(idx, mt) -> tuple:
    """What the region's check depends on besides x: the numeric check's key
    (ops, Cast targets, wiring, constants' types, shapes and bytes, x's
    declared type), every node's attributes and its domain ("" and "ai.onnx"
    match alike, but the checker wants an opset import for the one written)."""
    key = mt.key if mt.key is not None else region_key(idx, mt.anchor, mt.nodes, mt.leaf, mt.root, mt.consts)
    attrs = tuple((k, b"".join(a.SerializeToString() for a in idx.nodes[i].attribute))
                  for k, i in enumerate(mt.nodes) if idx.has_attributes(i))
    return key, attrs, tuple(idx.domains[i] for i in mt.nodes)
