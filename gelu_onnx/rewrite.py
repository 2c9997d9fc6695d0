"""Graph edits: replace matched regions by one node, then drop the constants
that only the removed GELU spellings used. Nothing else is touched."""
from __future__ import annotations

from onnx import GraphProto, ModelProto, NodeProto, TensorProto, helper

from . import contract as C
from .graph import subgraphs
from .match import Match
from .targets import Emission


class NameGen:
    """Unique node/tensor names across the whole model."""

    def __init__(self, model: ModelProto):
        self.used: set[str] = set()
        for g in walk_graphs(model.graph):
            self.used.update(n.name for n in g.node)
            for n in g.node:
                self.used.update(n.output)
                self.used.update(n.input)
            self.used.update(t.name for t in g.initializer)
            self.used.update(i.name for i in g.input)

    def __call__(self, base: str) -> str:
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def walk_graphs(graph: GraphProto):
    yield graph
    for node in graph.node:
        for _, g in subgraphs(node):
            yield from walk_graphs(g)


def wider(a: int, b: int) -> int:
    """The compute type for a chain that goes from type a to type b."""
    if a == b:
        return a
    if TensorProto.DOUBLE in (a, b):
        return TensorProto.DOUBLE
    return TensorProto.FLOAT


def emit_nodes(m: Match, em: Emission, compute_type: int, use_bias: bool, names: NameGen) -> list[NodeProto]:
    """The replacement for one region: [Cast] → op → [Cast], writing m.root."""
    nodes: list[NodeProto] = []
    x = m.bias_input if use_bias else m.leaf
    if m.leaf_type != compute_type:
        cx = names(f"{x}_cast")
        nodes.append(helper.make_node("Cast", [x], [cx], to=compute_type, name=names(f"{cx}_Cast")))
        x = cx
    ins = [x, m.bias] if use_bias else [x]
    out = m.root if m.root_type == compute_type else names(f"{m.root}_gelu")
    node = helper.make_node(em.op_type, ins, [out], name=names(f"{m.root}_{em.op_type}"),
                            domain=em.domain or None, **em.attrs)
    if not em.domain:
        node.ClearField("domain")
    nodes.append(node)
    if out != m.root:
        nodes.append(helper.make_node("Cast", [out], [m.root], to=m.root_type, name=names(f"{m.root}_Cast")))
    return nodes


def replace_regions(graph: GraphProto, plans: list[tuple[Match, list[NodeProto], bool]]) -> None:
    """Remove each region (and its bias Add) and put the new nodes where the
    root was; the graph stays topologically sorted because every input of
    the new nodes (x, bias) was available before the region's first node."""
    remove: set[int] = set()
    insert: dict[int, list[NodeProto]] = {}
    for m, new_nodes, use_bias in plans:
        remove.update(m.nodes)
        if use_bias and m.bias_node is not None:
            remove.add(m.bias_node)
        insert[max(m.nodes)] = new_nodes
    kept: list[NodeProto] = []
    for i, n in enumerate(graph.node):
        if i in insert:
            kept.extend(insert[i])
        if i not in remove:
            kept.append(n)
    # Copy out before clearing: the kept messages are children of graph.node.
    kept = [_detach(n) for n in kept]
    del graph.node[:]
    graph.node.extend(kept)


def _detach(n: NodeProto) -> NodeProto:
    c = NodeProto()
    c.CopyFrom(n)
    return c


def referenced_names(model: ModelProto) -> set[str]:
    refs: set[str] = set()
    for g in walk_graphs(model.graph):
        for n in g.node:
            refs.update(n.input)
        refs.update(o.name for o in g.output)
    return refs


def drop_dead_constants(model: ModelProto, candidates: set[str]) -> None:
    """Delete Constant/folded nodes and initializers among ``candidates`` (the
    constants the fused regions read) that nothing reads any more."""
    while candidates:
        refs = referenced_names(model)
        dead = {c for c in candidates if c not in refs}
        if not dead:
            return
        nxt: set[str] = set()
        for g in walk_graphs(model.graph):
            gin = {i.name for i in g.input}
            keep_nodes = [n for n in g.node if not (len(n.output) == 1 and n.output[0] in dead)]
            if len(keep_nodes) != len(g.node):
                for n in g.node:
                    if len(n.output) == 1 and n.output[0] in dead:
                        nxt.update(x for x in n.input if x)
                keep_nodes = [_detach(n) for n in keep_nodes]
                del g.node[:]
                g.node.extend(keep_nodes)
            if any(t.name in dead and t.name not in gin for t in g.initializer):
                keep = [_detach_t(t) for t in g.initializer if not (t.name in dead and t.name not in gin)]
                del g.initializer[:]
                g.initializer.extend(keep)
        candidates = nxt


def _detach_t(t: TensorProto) -> TensorProto:
    c = TensorProto()
    c.CopyFrom(t)
    return c


def drop_stale_value_info(model: ModelProto) -> None:
    for g in walk_graphs(model.graph):
        defined = {o for n in g.node for o in n.output}
        defined.update(i.name for i in g.input)
        defined.update(t.name for t in g.initializer)
        stale = [vi for vi in g.value_info if vi.name not in defined]
        if stale:
            keep = [vi for vi in g.value_info if vi.name in defined]
            copies = []
            for vi in keep:
                c = type(vi)()
                c.CopyFrom(vi)
                copies.append(c)
            del g.value_info[:]
            g.value_info.extend(copies)


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
