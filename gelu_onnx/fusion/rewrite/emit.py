"""The nodes a rewrite writes and the graph edits around them: one match's
replacement as NodeProtos (emit_nodes), then the constants that only the
removed GELU spellings used dropped; nothing else is touched."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import chain

from onnx import AttributeProto, ModelProto, NodeProto, TensorProto, helper

from ... import contract as C
from ...onnxio.walk import subgraphs, walk_graphs
from ..match.bias import bias_initializer
from ..report import Match


@dataclass
class Emission:
    """The op one match becomes (before any dtype Casts)."""

    domain: str
    op_type: str
    inputs_bias: bool  # whether the op takes the bias as its second input
    attrs: dict

    @property
    def qualified(self) -> str:
        return f"{self.domain}.{self.op_type}" if self.domain else self.op_type


class NameGen:
    """Unique node/tensor names across the whole model: none that a node,
    a node input or output, an initializer, a graph input or a typed
    value_info has (a declaration of a name no node makes is valid, and
    would give a new tensor of that name its type). ``indexes`` (the plan's
    GraphIndex of every graph, taken before any change) answer that without
    a walk over the model."""

    def __init__(self, model: ModelProto, indexes=None):
        self.used: set[str] = set()
        self.indexes = indexes
        if indexes is not None:
            return
        for g in walk_graphs(model.graph):
            nodes = list(g.node)
            self.used.update([n.name for n in nodes])
            self.used.update(chain.from_iterable([n.output for n in nodes]))
            self.used.update(chain.from_iterable([n.input for n in nodes]))
            self.used.update([t.name for t in g.initializer])
            self.used.update([i.name for i in g.input])
            self.used.update([v.name for v in g.value_info])

    def _taken(self, name: str) -> bool:
        return name in self.used or any(
            name in ix.producer or name in ix.consumers or name in ix.initializers or name in ix.graph_inputs
            or name in ix.value_types or name in ix.node_names() for ix in self.indexes or ())

    def __call__(self, base: str) -> str:
        name, k = base, 0
        while self._taken(name):
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def emit_nodes(m: Match, em: Emission, compute_type: int, use_bias: bool, names: NameGen) -> list[NodeProto]:
    """The replacement for one region: [Cast] → op → [Cast], writing m.root."""
    nodes: list[NodeProto] = []
    x = m.bias_input if use_bias else m.leaf
    if m.leaf_type != compute_type:
        cx = names(f"{x}_cast")
        nodes.append(_node("Cast", [x], [cx], names(f"{cx}_Cast"), to=compute_type))
        x = cx
    ins = [x, _bias_1d(m, names)] if use_bias else [x]
    out = m.root if m.root_type == compute_type else names(f"{m.root}_gelu")
    nodes.append(_node(em.op_type, ins, [out], names(f"{m.root}_{em.op_type}"), em.domain or None, **em.attrs))
    if out != m.root:
        nodes.append(_node("Cast", [out], [m.root], names(f"{m.root}_Cast"), to=m.root_type))
    return nodes


def emit_after_add(m: Match, bias: str, em: Emission, compute_type: int, names: NameGen) -> list[NodeProto]:
    """Add(x, bias) written out, then the op without a bias: for a bias the
    target's op cannot take (Gelu-20, QuickGelu) that the old node held."""
    biased = names(f"{m.leaf}_biased")
    add = _node("Add", [m.leaf, bias], [biased], names(f"{m.root}_bias_Add"))
    shifted = Match(index=m.index, anchor=m.anchor, root=m.root, leaf=biased, nodes=m.nodes, consts=set(), form=m.form,
                    alpha=m.alpha, leaf_type=m.leaf_type, root_type=m.root_type, precision=m.precision, error=0.0)
    return [add] + emit_nodes(shifted, em, compute_type, False, names)


def _bias_1d(m: Match, names: NameGen) -> str:
    """The ops take a 1-D bias: a [1, ..., 1, H] initializer gets a 1-D twin
    (same bytes, new dims) next to the region; the old one, once unread, is
    removed with the other dead constants."""
    shape = m.index.shape(m.bias)
    if shape is not None and len(shape) <= 1:
        return m.bias
    t = bias_initializer(m)
    if t is None or len(t.dims) <= 1:
        return m.bias
    flat = TensorProto()
    flat.CopyFrom(t)
    flat.name = names(f"{t.name}_1d")
    del flat.dims[:]
    flat.dims.append(t.dims[-1])
    m.index.graph.initializer.append(flat)
    m.consts = set(m.consts) | {t.name}
    return flat.name


def _node(op_type: str, inputs, outputs, name: str, domain: str | None = None, **attrs) -> NodeProto:
    """helper.make_node's result, without its per-attribute type sniffing
    (abc isinstance checks: most of the rewrite's time on big graphs)."""
    node = NodeProto(op_type=op_type, input=inputs, output=outputs, name=name)
    if domain is not None:
        node.domain = domain
    for key in sorted(attrs):
        v = attrs[key]
        if v is None:
            continue
        if type(v) is float:
            node.attribute.add(name=key, f=v, type=AttributeProto.FLOAT)
        elif type(v) is int:
            node.attribute.add(name=key, i=v, type=AttributeProto.INT)
        elif type(v) is str:
            node.attribute.add(name=key, s=v.encode("utf-8"), type=AttributeProto.STRING)
        else:
            node.attribute.append(helper.make_attribute(key, v))
    return node


# In-place deletes move up to len(drop) * len(rep) pointers: past this, a rebuild.
_MEMMOVE_BUDGET = 20_000_000


def remove_indices(rep, drop) -> None:
    """Delete the items at indices ``drop`` from a repeated message field
    without copying the others (initializers can hold gigabytes)."""
    if not drop:
        return
    n = len(rep)
    if len(drop) * n <= _MEMMOVE_BUDGET:
        for i in sorted(drop, reverse=True):
            del rep[i]
        return
    # Many deletions: move the kept items to the front by sorting (upb moves
    # pointers; it keeps one wrapper object per element, which the ranks use)
    # and cut the tail.
    items = list(rep)
    if not all(a is b for a, b in zip(rep, items)):  # no stable wrappers: copy (small items only)
        kept = [type(w).FromString(w.SerializeToString()) for i, w in enumerate(items) if i not in drop]
        del rep[:]
        rep.extend(kept)
        return
    rank = {id(w): k for k, w in enumerate(w for i, w in enumerate(items) if i not in drop)}
    last = len(rank)
    rep.sort(key=lambda w: rank.get(id(w), last))
    del rep[last:]


def drop_dead_constants(model: ModelProto, candidates: set[str], graphs=None) -> None:
    """Delete Constant/folded nodes and initializers among ``candidates`` (the
    constants the fused regions read) that nothing reads any more, and then
    whatever only those read. One walk counts the readers of every name;
    removals update the counts. ``graphs``: every graph of the model, when
    the caller has them (the plan does), else they are walked."""
    if not candidates:
        return
    graphs = list(walk_graphs(model.graph)) if graphs is None else list(graphs)
    readers: Counter = Counter()
    for g in graphs:
        readers.update(chain.from_iterable([n.input for n in g.node]))
        readers.update([o.name for o in g.output])
    work = [c for c in candidates if not readers[c]]
    if not work:
        return
    producers: dict[int, dict[str, int]] = {}
    init_at: dict[int, dict[str, int]] = {}
    drop_nodes: dict[int, set[int]] = {}
    drop_inits: dict[int, set[int]] = {}
    seen: set[str] = set()
    while work:
        name = work.pop()
        if name in seen or readers[name]:
            continue
        seen.add(name)
        for gi, g in enumerate(graphs):
            if gi not in init_at:
                gin = {i.name for i in g.input}
                init_at[gi] = {t.name: k for k, t in enumerate(g.initializer) if t.name not in gin}
                producers[gi] = {outs[0]: k for k, outs in enumerate([n.output for n in g.node]) if len(outs) == 1}
            if name in init_at[gi]:
                drop_inits.setdefault(gi, set()).add(init_at[gi][name])
            k = producers[gi].get(name)
            if k is not None and k not in drop_nodes.setdefault(gi, set()):
                drop_nodes[gi].add(k)
                for x in g.node[k].input:
                    if x:
                        readers[x] -= 1
                        work.append(x)
    for gi, g in enumerate(graphs):
        remove_indices(g.node, drop_nodes.get(gi))
        remove_indices(g.initializer, drop_inits.get(gi))


def drop_stale_value_info(model: ModelProto, graphs=None) -> None:
    for g in walk_graphs(model.graph) if graphs is None else graphs:
        if not len(g.value_info):
            continue
        defined = set(chain.from_iterable([n.output for n in g.node]))
        defined.update([i.name for i in g.input])
        defined.update([t.name for t in g.initializer])
        remove_indices(g.value_info, {k for k, vi in enumerate(g.value_info) if vi.name not in defined})


def ensure_opset(model: ModelProto, domain: str, version: int) -> None:
    for imp in model.opset_import:
        if imp.domain == domain:
            return
    model.opset_import.append(helper.make_opsetid(domain, version))


def default_opset(model: ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return 0


def add_functions(model: ModelProto, funcs) -> None:
    have = {(f.domain, f.name) for f in model.functions}
    for f in funcs:
        if (f.domain, f.name) not in have:
            model.functions.append(f)
    if model.ir_version < C.MIN_IR_FOR_FUNCTIONS:
        model.ir_version = C.MIN_IR_FOR_FUNCTIONS



def drop_unused_functions(model) -> None:
    """Our model-local functions that no node calls any more (the model was
    moved from the custom target to another) are removed."""
    if not any(f.domain == C.DOMAIN for f in model.functions):
        return  # none of ours to drop: no walk over the model
    used: set[str] = set()

    def scan(nodes):
        for n in nodes:
            if n.domain == C.DOMAIN:
                used.add(n.op_type)
            for _, g in subgraphs(n):
                scan(g.node)

    scan(model.graph.node)
    for f in model.functions:
        if f.domain != C.DOMAIN:
            scan(f.node)
    keep = [f for f in model.functions if f.domain != C.DOMAIN or f.name in used]
    if len(keep) != len(model.functions):
        del model.functions[:]
        model.functions.extend(keep)


def node_bytes(op: str, ins: list[str], outs: list[str], **ints) -> bytes:
    """A serialized default-domain node with INT attributes (the check models' Add and Cast)."""
    n = NodeProto(op_type=op, input=ins, output=outs)
    for k, v in ints.items():
        n.attribute.add(name=k, i=v, type=AttributeProto.INT)
    return n.SerializeToString()
