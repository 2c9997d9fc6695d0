"""The input's check model: what onnx.checker's full check of the input sees,
with repeated GELU regions left out (docs/safety.md, "The check model").

A fused region with its x, constants and types like one seen before (the
same class) is replaced by a stand-in that infers exactly what the region
infers and fails exactly when x's type differs from the class's:

    Add(x, 0) -> root                     (0: a zero of the type the region's
    Add(x, 0) -> t; Cast(t, to) -> root    constants force on x, of their
                                           highest rank: [], [1], [1, 1] ...)

The first region of each class is kept whole, with two assertions: Add(x, 0)
(x has the class's type) and Add(root, 0') (the region infers the class's
root type). Everything else (every other node, initializer, value_info, the
bias Adds) is the input's own. So onnx.checker's strict inference over this
model meets every fault the input's check would: outside the regions the
types and shapes are the input's; each class is checked once on a real x;
and a region of a class differs from the checked one only in names and in
x, whose type the stand-in asserts and whose shape cannot change an
inference over one-element constants (all-ones shapes: broadcasting with
them widens x to their highest rank and does nothing else). Regions that declare types or shapes of
their inner tensors, or whose inner tensors something else reads, are kept
whole. A check model that fails is not trusted: the caller checks the input
file itself for the message.
"""
from __future__ import annotations

from onnx import GraphProto, ModelProto, helper

from .nodebytes import field, node_bytes
from .checkbytes import check_model_bytes
from .checkclass import MIN_SAVED_SHARE, class_key, self_contained
from .numeric import region_types

# Field numbers (from the schema, not hard-coded) of what is assembled as bytes.
_NODE = GraphProto.DESCRIPTOR.fields_by_name["node"].number
_INIT = GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
_GRAPH = ModelProto.DESCRIPTOR.fields_by_name["graph"].number


def check_model(model: ModelProto, plan) -> bytes | None:
    """The serialized check model of ``model`` (the input, before the
    rewrite) for the regions ``plan`` selected, or None when it would
    barely differ from the input (then check the input itself)."""
    if len(model.functions):
        return None  # their calls would lose their bodies here: check the input itself
    main = next(g for g in plan.graphs if g.index.parent is None)
    if main.index.arrays is not None:  # a scanned main graph: assembled from the file's bytes
        return check_model_bytes(model, main)
    idx = main.index
    classes: dict[tuple, tuple] = {}  # class key -> (x's type, root's type)
    stand: dict[int, tuple] = {}      # a member's last node -> (x, root, class key)
    gone: set[int] = set()            # the members' nodes
    asserts: dict[int, tuple] = {}    # a first region's last node -> (x, root, class key)
    for s in main.selected:
        mt = s.match
        if s.candidate.legacy or mt.single_op is not None or not self_contained(idx, mt):
            continue  # kept as in the input
        key = class_key(idx, mt)
        if key not in classes:
            types = region_types(idx, mt.nodes, mt.leaf, mt.consts)
            classes[key] = (types.get(mt.leaf), types.get(mt.root))
            if classes[key][0] is not None and classes[key][1] is not None:
                asserts[max(mt.nodes)] = (mt.leaf, mt.root, key)
            continue
        if None in classes[key]:
            continue  # a type the constants do not fix: every such region is kept whole
        stand[max(mt.nodes)] = (mt.leaf, mt.root, key)
        gone.update(mt.nodes)
    if len(gone) < MIN_SAVED_SHARE * len(idx.nodes):
        return None
    zeros: dict[tuple, str] = {}
    names = _Fresh(idx)

    def zero(elem_type: int, key) -> str:
        # broadcasting with one-element constants widens x to their highest rank, no more
        rank = max((len(c[2]) for node in key[0][0] for c in node[2] if isinstance(c, tuple)), default=0)
        z = zeros.get((elem_type, rank))
        if z is None:
            z = zeros[(elem_type, rank)] = names(f"gelu_onnx_check_zero_{elem_type}_{rank}")
        return z

    entries: list[bytes] = []
    for i, node in enumerate(idx.nodes):
        if i not in gone:
            entries.append(node.SerializeToString())
        if i in asserts:
            x, root, key = asserts[i]
            tx, troot = classes[key]
            for t, et in ((x, tx), (root, troot)):
                entries.append(node_bytes("Add", [t, zero(et, key)], [names(f"{t}_check")]))
        elif i in stand:
            x, root, key = stand[i]
            tx, troot = classes[key]
            if tx == troot:
                entries.append(node_bytes("Add", [x, zero(tx, key)], [root]))
            else:
                t = names(f"{root}_check")
                entries.append(node_bytes("Add", [x, zero(tx, key)], [t]))
                entries.append(node_bytes("Cast", [t], [root], to=troot))
    g = model.graph
    inits = [t.SerializeToString() for t in g.initializer]
    inits += [helper.make_tensor(n, et, [1] * rank, [0]).SerializeToString() for (et, rank), n in zeros.items()]
    rest = GraphProto(name=g.name, input=g.input, output=g.output, value_info=g.value_info,
                      sparse_initializer=g.sparse_initializer)
    graph = b"".join([*(field(e, _NODE) for e in entries), *(field(i, _INIT) for i in inits),
                      rest.SerializeToString()])
    head = ModelProto(ir_version=model.ir_version, opset_import=model.opset_import)
    return head.SerializeToString() + field(graph, _GRAPH)


class _Fresh:
    """Names no graph tensor or node has (the check model's own)."""

    def __init__(self, idx):
        self.idx, self.used = idx, set()

    def __call__(self, base: str) -> str:
        name, k, ix = base, 0, self.idx
        while (name in self.used or name in ix.producer or name in ix.consumers or name in ix.initializers
               or name in ix.graph_inputs):
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name
