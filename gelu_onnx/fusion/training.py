"""Models with training_info: its initialization and algorithm graphs and
their bindings name main-graph tensors, and a tensor that fusion removes (a
GELU's 0.5, an inner tensor of the chain) would leave the training state
bound to nothing. *Decision* (docs/safety.md): such a model is refused with
one line (exit 3), not rewritten; training_info that reads only what stays
is kept as it is."""
from __future__ import annotations

from ..errors import UnsupportedError
from ..onnxio.walk import subgraphs


def main_graph_names(g) -> set[str]:
    """Every tensor name the graph defines (inputs, initializers, node outputs)."""
    return ({v.name for v in g.input} | {t.name for t in g.initializer}
            | {t.values.name for t in g.sparse_initializer} | {o for n in g.node for o in n.output})


def refuse_unbound(m, removed: set[str]) -> None:
    """UnsupportedError when ``m``'s training_info (graphs at any depth,
    bindings) names a tensor of ``removed``."""
    for ti in m.training_info:
        names = {kv for b in (ti.initialization_binding, ti.update_binding) for e in b for kv in (e.key, e.value)}
        todo = [ti.initialization, ti.algorithm]
        while todo:
            g = todo.pop()
            names.update(v.name for v in (*g.input, *g.output))
            for n in g.node:
                names.update(n.input)
                todo.extend(sg for _, sg in subgraphs(n))
        gone = sorted(names & removed)
        if gone:
            raise UnsupportedError(f"the model's training_info reads {' '.join(gone[0].split())[:120]!r}, a tensor "
                                   "fusing removes; refusing to write a model whose training state would be "
                                   "bound to nothing (fuse a copy without training_info)")
