"""The one-pass check of a graph in topological order (onnxio.validate runs
it, or arraytable.array_pass over a scan, first, and its own graph() only
when this one sees anything unusual: Recheck; the checks both passes share,
known_ops and Scope, are here), and
the graph's nodes as it read them (NodeTable: fusion.index.graph.GraphIndex
indexes those instead of reading the nodes again)."""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from .format import ONNX_DOMAINS
from .walk import attr_tensors, subgraphs


class Recheck(Exception):
    """one_pass saw something: Validator.graph() looks again and words it."""


class Scope:
    """Names visible from a subgraph: its enclosing graphs' names, innermost first."""

    def __init__(self, names, parent: "Scope | None"):
        self.names, self.parent = names, parent

    def __contains__(self, name) -> bool:
        s = self
        while s is not None:
            if name in s.names:
                return True
            s = s.parent
        return False


def norm_domain(d) -> str:
    return "" if d in ("", "ai.onnx") else d


def known_ops(v, kinds) -> None:
    """Every (op, domain) imported and, in an ONNX domain, known to onnx at
    the imported opset (or a local function); else Recheck. The answers are
    kept in ``v.schema_errors``."""
    for op, dom in kinds:
        d = norm_domain(dom)
        if d not in v.opsets:
            raise Recheck
        if d in ONNX_DOMAINS and (d, op) not in v.local_functions:
            key = (op, d, v.opsets[d])
            if key not in v.schema_errors:
                try:
                    onnx.defs.get_schema(op, v.opsets[d], d)
                except Exception:  # onnx's SchemaError
                    raise Recheck from None
                v.schema_errors[key] = None
            elif v.schema_errors[key]:
                raise Recheck


@dataclass
class NodeTable:
    """One graph's nodes as Python lists, read once while validating.
    Reading protobuf fields is most of what a pass over a big graph costs,
    so the fuse pass indexes these (fusion.index.graph.GraphIndex) rather than
    reading the nodes again. Valid while ``graph`` is unchanged."""

    graph: onnx.GraphProto
    nodes: list
    ops: list[str]
    domains: list[str]
    labels: list[str]          # node names
    ins: list[list[str]]       # as stored ("" = omitted optional input)
    outs: list[list[str]]
    with_subgraphs: list[int]  # the nodes that hold If/Loop/Scan bodies
    attributed: list[int]      # the nodes with any attribute


def one_pass(v, g, outer: Scope | None) -> set:
    """Validator.graph()'s checks of ``g`` in one pass (``v``: the
    Validator), for the common case: nodes in topological order (each input
    defined by an earlier node, an input, an initializer or an enclosing
    graph: hence acyclic) and nothing wrong. Anything else raises Recheck,
    and graph() finds the first fault and words it. Returns the outer-scope
    names the graph reads; the main graph's nodes, as read, are kept in
    ``v.table``."""
    names = {vi.name for vi in g.input}
    inits = [*g.initializer, *(st.values for st in g.sparse_initializer)]
    init_names = {t.name for t in inits}
    if len(names) != len(g.input) or len(init_names) != len(inits):
        raise Recheck
    names |= init_names  # an initializer may also be an input (overridable)
    texts = [*names, *(vi.name for vi in (*g.output, *g.value_info))]
    for t in inits:
        v.tensor(t)
    for st in g.sparse_initializer:
        v.tensor(st.indices)
    free: set = set()
    t = NodeTable(g, [], [], [], [], [], [], [], [])
    expect = len(names)
    for n in g.node:
        ins, outs = n.input[:], n.output[:]
        for x in ins:
            if x and x not in names:
                if outer is None or x not in outer:
                    raise Recheck  # never defined, or by a later node
                free.add(x)
        t.nodes.append(n)
        t.ops.append(n.op_type)
        t.domains.append(n.domain)
        t.labels.append(n.name)
        t.ins.append(ins)
        t.outs.append(outs)
        if n.attribute:
            t.attributed.append(len(t.nodes) - 1)
            texts.extend([a.name for a in n.attribute])
            if any(a.ref_attr_name for a in n.attribute):
                raise Recheck  # a function-attribute reference outside a function (node_op words it)
            for at in attr_tensors(n.attribute):
                v.tensor(at)
            for _, sg in subgraphs(n):
                free.update(x for x in one_pass(v, sg, Scope(names, outer)) if x not in names)
                if t.with_subgraphs[-1:] != [len(t.nodes) - 1]:
                    t.with_subgraphs.append(len(t.nodes) - 1)
        names.update(outs)
        expect += len(outs)
    if "" in names:  # omitted optional outputs
        names.discard("")
        expect -= sum(o == "" for outs in t.outs for o in outs)
    if len(names) != expect:
        raise Recheck  # a name assigned twice
    for o in g.output:
        if o.name not in names:
            if outer is None or o.name not in outer:
                raise Recheck
            free.add(o.name)
    kinds = set(zip(t.ops, t.domains))
    # protobuf hands back invalid UTF-8 as bytes: one look at every string
    if bytes in set(map(type, names)) | set(map(type, texts)) | set(map(type, t.labels)) or \
            any(type(op) is bytes or type(d) is bytes for op, d in kinds):
        raise Recheck
    known_ops(v, kinds)
    if outer is None:
        v.table = t
    return free
