"""onepass.one_pass for a main graph the native scanner read (onnxio.wire):
the same checks, vectorised over its arrays, so a graph of a million nodes
is validated without one Python object per node.

Like one_pass it only ever accepts: anything it does not see to be fine
(a subgraph, a function-attribute reference, a name used before it is
written, a name written twice, a domain not imported, an op onnx does not
know, a tensor outside the plain case it checks itself ...) raises Recheck,
and Validator.graph() then finds the first fault and words it, exactly as
for a graph one_pass declined. Tensors outside the plain case are checked
one by one by Validator.tensor, as one_pass checks every tensor.
"""
from __future__ import annotations

import numpy as np

from .arraytable import ArrayTable, unique
from .onepass import Recheck, known_ops
from .format import ELEM_BITS, KNOWN_TYPES
from .walk import attr_tensors
from .wire import IF_RAW, IF_RAW_TWICE, NF_REF, NF_SUBGRAPH, NF_TENSOR

# Element types whose size is a whole number of bytes: a raw_data length is
# checked here against dims for these (Validator.tensor checks the rest).
_BYTE_TYPES = np.array(sorted(t for t, bits in ELEM_BITS.items() if bits % 8 == 0 and t in KNOWN_TYPES))
_BITS = np.zeros(int(max(ELEM_BITS)) + 1, np.int64)
for _t, _b in ELEM_BITS.items():
    _BITS[_t] = _b
_DIM_LIMIT = 1 << 31  # larger dims: products could overflow int64; those tensors go one by one


def _plain_structure(g, s) -> bool:
    """Whether ``s`` (a scan of ``g``'s bytes) is a graph the arrays cover
    whole: no subgraph, no function-attribute reference, no sparse
    initializer; every name written once, read after it is written."""
    if len(g.sparse_initializer) or (s.node_flags & (NF_SUBGRAPH | NF_REF)).any():
        return False  # subgraphs: one_pass walks them; references: node_op words them
    return _same_counts(g, s) and _written_once_in_order(s, [], outer=False)


def _same_counts(g, s) -> bool:
    """Whether ``s`` lists as many of each thing as ``g`` (it always does
    for one parse of one buffer)."""
    return (s.n_nodes == len(g.node) and len(s.init_name) == len(g.initializer)
            and len(s.input_name) == len(g.input) and len(s.output_name) == len(g.output)
            and len(s.vi_name) == len(g.value_info))


def _written_once_in_order(s, more_given, outer: bool) -> bool:
    """Every name written once (the graph's inputs, initializers, the
    string ids ``more_given`` and node outputs), read after it is written;
    ``outer``: a subgraph, whose names written nowhere in it are the
    enclosing graphs'."""
    n = s.n_nodes
    inputs, inits = s.input_name, s.init_name
    if not (inputs.all() and inits.all()) or len(unique(inputs)) != len(inputs) \
            or len(unique(inits)) != len(inits):
        return False  # an empty or repeated input / initializer name
    outs = s.out_ids[s.out_ids != 0]
    given = unique(np.concatenate([inputs, inits, np.asarray(more_given, inputs.dtype)]))
    written = np.concatenate([given, outs])
    if len(unique(written)) != len(written):
        return False
    # every input read after it is written (so the nodes are in order, and acyclic)
    when = np.full(len(s.names), -1 if outer else n, np.int64)  # never written here: outer, or an error
    when[given] = -1
    when[outs] = np.repeat(np.arange(n), np.diff(s.node_out_off))[s.out_ids != 0]
    reader = np.repeat(np.arange(n), np.diff(s.node_in_off))
    read = s.in_ids != 0
    if (when[s.in_ids[read]] >= reader[read]).any():
        return False
    return bool(s.output_name.all()) and not (when[s.output_name] >= n).any()


def scanned_table(model) -> ArrayTable | None:
    """The main graph of ``model`` (a ModelProto, not validated here) as an
    ArrayTable of its own serialization (onnxio.wire.scan_model); None as
    for graph_table."""
    from .wire import scan_model

    return graph_table(model.graph, scan_model(model), outer=False)


def subgraph_table(graph) -> ArrayTable | None:
    """An If/Loop/Scan body as an ArrayTable (onnxio.wire.scan_graph); None as for graph_table."""
    from .wire import scan_graph

    return graph_table(graph, scan_graph(graph), outer=True)


def graph_table(g, s, outer: bool) -> ArrayTable | None:
    """``g`` as the ArrayTable of ``s`` (a scan of its bytes), or None when
    a name is written twice or read before it is written (a graph out of
    topological order: fusion/plan.py sorts one); InputError when the
    scanner declined the bytes (a name that is not UTF-8 or holds a NUL:
    one line, exit 2). Subgraphs,
    function-attribute references and sparse initializers are covered (a
    sparse initializer is a name the graph writes, never a constant)."""
    if s is None:  # protobuf's own serialization: only a name the scanner declines
        from ..errors import InputError

        raise InputError(f"graph {g.name!r}: a name that is not UTF-8 or holds a NUL byte; the fuse pass "
                         "reads UTF-8 names only (docs/safety.md, names)")
    if not _same_counts(g, s):
        return None
    sparse = s.find_many([t.values.name for t in g.sparse_initializer]) if len(g.sparse_initializer) else []
    sparse = [i for i in np.asarray(sparse).tolist() if i > 0]
    return ArrayTable(g, s) if _written_once_in_order(s, sparse, outer) else None


def array_pass(v, g, scan) -> ArrayTable:
    """Validator.graph()'s checks of the main graph ``g``, from ``scan``
    (its bytes, scanned); the graph's ArrayTable, or Recheck."""
    s = scan
    if not _plain_structure(g, s):
        raise Recheck  # onepass finds and words what is wrong, or walks the subgraphs
    _tensors(v, g, s)
    for i in np.flatnonzero(s.node_flags & NF_TENSOR).tolist():
        for t in attr_tensors(g.node[i].attribute):
            v.tensor(t)
    # every (op, domain) imported and known
    kinds = unique(s.node_op.astype(np.int64) << 32 | s.node_dom.astype(np.int64))
    known_ops(v, ((s.names[k >> 32], s.names[k & 0xFFFFFFFF]) for k in kinds.tolist()))
    return ArrayTable(g, s)


def _tensors(v, g, s) -> None:
    """Validator.tensor for every initializer: the plain case here (a known
    type, stored inside the file, raw_data no longer than its dims need, no
    other data field), every other one by Validator.tensor itself."""
    m = len(s.init_name)
    if not m:
        return
    dims_n = np.diff(s.init_dims_off)
    dims = s.init_dims
    bad_dim = np.zeros(m, bool)
    if len(dims):
        owner = np.repeat(np.arange(m), dims_n)
        np.logical_or.at(bad_dim, owner, (dims < 0) | (dims >= _DIM_LIMIT))
    safe = np.where(bad_dim[np.repeat(np.arange(m), dims_n)], 1, dims) if len(dims) else dims
    count = np.ones(m, np.float64)
    if len(dims):
        np.multiply.at(count, np.repeat(np.arange(m), dims_n), safe.astype(np.float64))
    dtype = s.init_dtype
    typed = s.init_typed.reshape(m, 6)
    plain = (np.isin(dtype, _BYTE_TYPES) & (s.init_loc == 0) & (s.init_ext == 0) & ~bad_dim
             & (count < 2.0 ** 52) & ((s.init_flags & (IF_RAW | IF_RAW_TWICE)) == IF_RAW) & (typed == 0).all(axis=1))
    want = count * (_BITS[np.clip(dtype, 0, len(_BITS) - 1)] // 8)
    plain &= s.init_raw_len <= want
    for k in np.flatnonzero(~plain).tolist():
        v.tensor(g.initializer[k])
