"""The nodes a rewrite writes and the graph edits around them: one match's
replacement as node fields (emit_nodes), then the constants that only the
removed GELU spellings used dropped; nothing else is touched."""
from __future__ import annotations

import functools
from itertools import chain
from typing import NamedTuple

import numpy as np
from onnx import NodeProto, TensorProto, helper

from ... import contract as C
from ...onnxio.format import len_field
from ...onnxio.walk import iter_graphs
from ..match.bias import bias_initializer
from ..report import Match
from ..targets import Emission


class NameGen:
    """Unique node/tensor names across the whole model: none that a node,
    a node input or output, an initializer, a graph input or a typed
    value_info has (a declaration of a name no node makes is valid, and
    would give a new tensor of that name its type), read from ``indexes``
    (the plan's GraphIndex of every graph, taken before any change), nor
    one given before."""

    def __init__(self, indexes):
        self.used: set[str] = set()
        self.indexes = indexes

    def _taken(self, name: str) -> bool:
        # name_ids holds every string of its graph: a name not there is none of these
        return name in self.used or any(name in ix.name_ids and (
            name in ix.producer or bool(ix.consumers[name]) or name in ix.initializers or name in ix.graph_inputs
            or name in ix.value_types or name in ix.node_names()) for ix in self.indexes)

    def __call__(self, base: str) -> str:
        name, k = base, 0
        while self._taken(name):
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def emit_nodes(idx, m: Match, em: Emission, compute_type: int, use_bias: bool, names: NameGen,
               dead: set) -> list[Field]:
    """The replacement for the GELU ``m`` of graph ``idx``; with ``use_bias``
    its bias Add is folded in (a bias initializer that becomes unread goes to
    ``dead``). A bias inside a single-op GELU that ``em`` does not take
    becomes an Add in front."""
    if use_bias:
        return write(em, m.bias_input, _bias_1d(idx, m, names, dead), m, compute_type, names, idx.graph)
    if m.bias_inside:
        return emit_after_add(m, m.bias, em, compute_type, names, idx.graph)
    return write(em, m.leaf, None, m, compute_type, names, idx.graph)


def emit_after_add(m: Match, bias: str, em: Emission, compute_type: int, names: NameGen, graph) -> list[Field]:
    """Add(x, bias) written out, then ``em`` without a bias: for a bias the
    target's op cannot take (Gelu-20, QuickGelu) that the old node held."""
    biased = names(f"{m.leaf}_biased")
    add = node_field("Add", [m.leaf, bias], [biased], names(f"{m.root}_bias_Add"))
    return [add] + write(em, biased, None, m, compute_type, names, graph)


def write(em: Emission, x: str, bias: str | None, m: Match, compute_type: int, names: NameGen,
          graph) -> list[Field]:
    """``em`` as nodes reading ``x`` (of m's input type) and the 1-D ``bias``,
    writing m.root (of m's output type): [Cast] -> em's nodes -> [Cast], its
    constants appended to ``graph``'s initializers; every new name from
    ``names``."""
    nodes: list[Field] = []
    if m.leaf_type != compute_type:
        cx = names(f"{x}_cast")
        nodes.append(node_field("Cast", [x], [cx], names(f"{cx}_Cast"), to=compute_type))
        x = cx
    local = {"x": x, "bias": bias}
    for key, value in em.consts.items():
        v = np.asarray(value, np.float64)
        local[key] = names(f"{m.root}_{key}")
        graph.initializer.append(helper.make_tensor(local[key], compute_type, v.shape, v.ravel().tolist()))
    last = len(em.nodes) - 1
    for k, n in enumerate(em.nodes):
        if k < last:
            out = names(f"{m.root}_{n.output}")
        else:
            out = m.root if m.root_type == compute_type else names(f"{m.root}_gelu")
        nodes.append(node_field(n.op_type, [local[i] for i in n.inputs], [out], names(f"{m.root}_{n.op_type}"),
                                n.domain or None, **n.attrs))
        local[n.output] = out
    if out != m.root:
        nodes.append(node_field("Cast", [out], [m.root], names(f"{m.root}_Cast"), to=m.root_type))
    return nodes


def _bias_1d(idx, m: Match, names: NameGen, dead: set) -> str:
    """The ops take a 1-D bias: a [1, ..., 1, H] initializer gets a 1-D twin
    (same bytes, new dims) next to the region; the old one, once unread, is
    removed with the other dead constants."""
    shape = idx.shape(m.bias)
    if shape is not None and len(shape) <= 1:
        return m.bias
    t = bias_initializer(idx, m)
    if t is None or len(t.dims) <= 1:
        return m.bias
    flat = TensorProto()
    flat.CopyFrom(t)
    flat.name = names(f"{t.name}_1d")
    del flat.dims[:]
    flat.dims.append(t.dims[-1])
    idx.graph.initializer.append(flat)
    dead.add(t.name)
    return flat.name


class Field(NamedTuple):
    """A node written as a graph's node field, and the names it reads and writes."""

    inputs: list[str]
    outputs: list[str]
    data: bytes


def node_field(op_type: str, inputs: list[str], outputs: list[str], name: str | None, domain: str | None = None,
               **attrs) -> Field:
    """helper.make_node's node as a graph's node field: its names, then its op
    type, attributes and domain serialized once per kind of node (protobuf
    writes fields in number order: input 1, output 2, name 3, then those)."""
    try:
        tail = _tail(op_type, domain, tuple(sorted(attrs.items())))
    except TypeError:  # an unhashable attribute value (a list): no cache
        tail = _tail.__wrapped__(op_type, domain, tuple(sorted(attrs.items())))
    head = NodeProto(input=inputs, output=outputs, name=name).SerializeToString()
    return Field(inputs, outputs, len_field(head + tail))


@functools.lru_cache(maxsize=1024)  # kinds of node: a few per model; bounded for a long-lived process
def _tail(op_type: str, domain: str | None, attrs: tuple) -> bytes:
    return helper.make_node(op_type, [], [], domain=domain, **dict(attrs)).SerializeToString()


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


def dead_constants(readers: np.ndarray, work: np.ndarray, init_name: np.ndarray, init_droppable: np.ndarray,
                   out1: np.ndarray, in_ids: np.ndarray, in_count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of ``work`` (name ids of the constants the fused regions read), those
    nothing reads (``readers``: reads per name id, updated here), then
    whatever only those read, as masks of the initializers (named
    ``init_name``; only the ``init_droppable`` ones) and of the nodes
    (``out1``: a node's only output; for other nodes -1, or 0: the empty
    name, never dead) that define them.
    One implementation for the main graph (its scan's arrays) and for every
    graph of a model with subgraphs (drop_dead_constants)."""
    seen = np.zeros(len(readers) + 1, bool)  # out1's -1 reads the extra slot: never seen
    gone = np.zeros(len(out1), bool)
    while len(work):
        work = np.unique(work)
        work = work[(readers[work] == 0) & ~seen[work]]
        if not len(work):
            break
        seen[work] = True
        new = seen[out1] & ~gone
        if not new.any():
            break
        gone |= new
        ins = in_ids[np.repeat(new, in_count)]
        ins = ins[ins != 0]
        np.subtract.at(readers, ins, 1)
        work = ins.astype(np.int64)
    return seen[init_name] & init_droppable, gone


def drop_dead_constants(candidates: set[str], graphs: list) -> None:
    """dead_constants over ``graphs`` (every graph of a model with
    subgraphs, as rewritten: names cross scopes), their arrays read from
    the protos; the dead nodes and initializers are deleted."""
    if not candidates:
        return
    nodes = [n for g in graphs for n in g.node]
    node_ins = [n.input for n in nodes]
    ins = list(chain.from_iterable(node_ins))
    out1 = [o[0] if len(o) == 1 else "" for o in [n.output for n in nodes]]
    inits = [t.name for g in graphs for t in g.initializer]
    outs = [o.name for g in graphs for o in g.output]
    names = dict.fromkeys(chain([""], ins, out1, inits, outs))
    ids = dict(zip(names, range(len(names))))

    def of(xs: list[str]) -> np.ndarray:
        return np.fromiter(map(ids.__getitem__, xs), np.int64, len(xs))

    in_ids = of(ins)
    readers = np.bincount(in_ids, minlength=len(ids))
    readers[of(outs)] += 1
    gin = [{i.name for i in g.input} for g in graphs]
    droppable = np.array([t.name not in gin[k] for k, g in enumerate(graphs) for t in g.initializer], bool)
    work = of([c for c in candidates if c in ids])
    gone_init, gone_node = dead_constants(readers, work, of(inits), droppable, of(out1), in_ids,
                                          np.fromiter(map(len, node_ins), np.int64, len(nodes)))
    at_node = at_init = 0
    for g in graphs:
        n, k = len(g.node), len(g.initializer)
        remove_indices(g.node, set(np.flatnonzero(gone_node[at_node:at_node + n]).tolist()))
        remove_indices(g.initializer, set(np.flatnonzero(gone_init[at_init:at_init + k]).tolist()))
        at_node, at_init = at_node + n, at_init + k


def drop_stale_value_info(graphs: list) -> None:
    """Drop the value_info of names no node, input or initializer defines any more."""
    for g in graphs:
        if not len(g.value_info):
            continue
        defined = set(chain.from_iterable([n.output for n in g.node]))
        defined.update([i.name for i in g.input])
        defined.update([t.name for t in g.initializer])
        remove_indices(g.value_info, {k for k, vi in enumerate(g.value_info) if vi.name not in defined})


def drop_unused_functions(model) -> None:
    """Our model-local functions that no node calls any more (the model was
    moved from the custom target to another) are removed."""
    if not any(f.domain == C.DOMAIN for f in model.functions):
        return  # none of ours to drop: no walk over the model
    bodies = [g.node for _, g in iter_graphs(model)] + [f.node for f in model.functions if f.domain != C.DOMAIN]
    used = {n.op_type for nodes in bodies for n in nodes if n.domain == C.DOMAIN}
    keep = [f for f in model.functions if f.domain != C.DOMAIN or f.name in used]
    if len(keep) != len(model.functions):
        del model.functions[:]
        model.functions.extend(keep)
