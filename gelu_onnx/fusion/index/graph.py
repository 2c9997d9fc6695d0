"""A small index over one ONNX GraphProto: who produces and who reads each
tensor, which tensors are constants, and what a subgraph reads from outside;
and constants as the matcher reads them: a tensor's value (small ones only;
external data only for scalars), a Constant node's value, tiny
all-constant elementwise nodes folded in their own dtype, and which
constants a GELU spelling may hold (scalar_const).

We work on the ModelProto directly rather than through onnx-graphsurgeon:
graphsurgeon's import+export of BERT-large alone costs ~5 s, more than the
whole time budget of a fuse (1.1x a bare load+save); see docs/design.md.
The index is built once per graph in O(nodes) and never copies tensors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, numpy_helper

from ...contract import np_dtype
from ...onnxio import tensor_array
from ...onnxio.arraytable import any_per_node, unique
from ..ops import BINARY_OPS, DEFAULT_DOMAINS, ELEMENTWISE, FOLDABLE, OPS, cast_to
from .shapes import elementwise_shape


@dataclass
class ConstInfo:
    """A resolved constant: its value (as stored, original dtype) and origin."""

    value: np.ndarray
    elem_type: int
    # The node (index in this graph) that produces it, if it is a Constant or a
    # folded node; None for initializers.
    producer: int | None = None


def tensor_value(t: TensorProto, base_dir: str | None = None) -> np.ndarray | None:
    """numpy value of a small tensor; None for big ones. An external tensor is
    read only when it is a scalar (a GELU constant) and we know its folder:
    weight payloads are never read."""
    n = math.prod(t.dims)
    if n > 4096:
        return None
    try:
        if t.data_location == TensorProto.EXTERNAL:
            if n != 1 or base_dir is None:
                return None
            return tensor_array(t, base_dir)
        return numpy_helper.to_array(t)
    except Exception:  # malformed or unsafe tensors are simply not constants to us
        return None


def constant_node_value(node: NodeProto, i: int) -> ConstInfo | None:
    # ONNX requires exactly one attribute on a Constant; which one a runtime
    # reads from an invalid node with several (or a repeated one) is its own
    # business, so such a node is never a constant to us (nothing is fused).
    if len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name == "value" and attr.type == AttributeProto.TENSOR:
        v = tensor_value(attr.t)
        return None if v is None else ConstInfo(v, attr.t.data_type, producer=i)
    if attr.name in _LISTED_VALUES:  # the field as stored (a reference's, to a caller's attribute, is empty)
        field, et = _LISTED_VALUES[attr.name]
        return ConstInfo(np.array(getattr(attr, field), dtype=np_dtype(et)), et, producer=i)
    return None


_LISTED_VALUES = {"value_float": ("f", TensorProto.FLOAT), "value_floats": ("floats", TensorProto.FLOAT),
                  "value_int": ("i", TensorProto.INT64), "value_ints": ("ints", TensorProto.INT64)}


def elem_type_of(fallback: int, node: NodeProto) -> int:
    return cast_to(node) or fallback if node.op_type == "Cast" else fallback


def fold(node: NodeProto, vals: list[np.ndarray]) -> np.ndarray | None:
    """Evaluate a tiny all-constant elementwise node in its own dtype (ops.OPS' fold)."""
    op = OPS.get(node.op_type)
    if op is None or op.fold is None or (op.arity == 2 and len(vals) != 2):
        return None
    try:
        with np.errstate(all="ignore"):
            return op.fold(node, *vals[:op.arity])
    except Exception:
        return None


def is_scalar(value: np.ndarray) -> bool:
    return value.size == 1 and value.ndim <= 1


def scalar_const(idx: GraphIndex, name: str):
    """A constant a GELU spelling may contain: rank 0 or shape [1], or a
    [1, ..., 1] one that cannot widen what it is combined with (_rank_neutral).
    Any other constant (a bias vector, a weight) is just a tensor to the
    matcher: it can be the x of a GELU, never one of its constants."""
    memo = idx.scalar_consts
    if name in memo:
        return memo[name]
    if name in idx.initializers and math.prod(idx.initializers[name].dims) != 1:
        memo[name] = None  # more than one element: decided from the dims, the values unread
        return None
    c = idx.constant(name)
    if c is not None and not is_scalar(c.value) and not (c.value.size == 1 and _rank_neutral(idx, name, c.value.ndim)):
        c = None
    memo[name] = c
    return c


def _rank_neutral(idx: GraphIndex, name: str, rank: int) -> bool:
    """Every reader of a one-element constant is a binary elementwise node
    whose other operand already has at least its rank, so the constant acts
    as a scalar there (tf2onnx folds Keras' scalars into [1, 1, 1, 1] on NHWC
    tensors). Ranks unknown: not a scalar (a [1, 1] could widen a vector)."""
    readers = idx.consumers[name]
    for i in readers:
        ins = idx.raw_ins[i]
        if idx.ops[i] not in BINARY_OPS or idx.domains[i] not in DEFAULT_DOMAINS or len(ins) != 2:
            return False
        other = ins[1] if ins[0] == name else ins[0]
        shape = idx.shape(other) if other != name else None
        if shape is None or len(shape) < rank:
            return False
    return bool(readers)


class Slices:
    """``values[off[k]:off[k + 1]]`` for node k, or for the name k with
    ``ids`` (() for a name not in the graph), sliced per access from flat
    tuples: no per-node container for the cycle collector to walk (that was
    a fifth of a 100k-GELU chain's fuse), none made where few are read."""

    __slots__ = ("_values", "_off", "_ids")

    def __init__(self, values: np.ndarray, off: np.ndarray, ids: dict[str, int] | None = None):
        self._values, self._off, self._ids = tuple(values.tolist()), tuple(off.tolist()), ids

    def __getitem__(self, k) -> tuple:
        if self._ids is not None:
            k = self._ids.get(k, 0)
        off = self._off
        return self._values[off[k]:off[k + 1]]


class Initializers:
    """Name -> the graph's TensorProto, taken from the graph per access: a
    chain's 100k bias vectors keep no wrapper each for the cycle collector."""

    def __init__(self, names: list[str], protos):
        self._at, self._protos = {n: k for k, n in enumerate(names)}, protos

    def __contains__(self, name) -> bool:
        return name in self._at

    def __getitem__(self, name: str):
        return self._protos[self._at[name]]


def default_domain(table) -> np.ndarray:
    """Per node, whether its domain is the default one (ops.DEFAULT_DOMAINS)."""
    return np.isin(table.scan.node_dom, [table.kind_ids.get(d, -1) for d in DEFAULT_DOMAINS])


def region_nodes(table) -> tuple[int, ...]:
    """Per node, 1 if it may be inside a GELU region, else 0: an op of
    ops.OPS in the default domain with one output and its arity of
    operands, none omitted ("" has no value to compute with)."""
    s, ids = table.scan, table.kind_ids
    arity = np.full(len(table.names), -1, np.int64)
    for op, spec in OPS.items():
        if op in ids:
            arity[ids[op]] = spec.arity
    want = arity[s.node_op]
    omitted = any_per_node(s.in_ids == 0, s.node_in_off)
    ok = default_domain(table) & (want >= 0) & (table.out_count == 1) & (table.in_count == want) & ~omitted
    return tuple(ok.astype(np.int8).tolist())


class GraphIndex:
    """Producer/consumer maps and constant resolution for one graph.

    ``parent`` is the index of the enclosing graph (for subgraphs): names not
    defined here are looked up there, as ONNX scoping rules say.
    """

    def __init__(self, graph: GraphProto, table, parent: "GraphIndex | None" = None, path: str = "",
                 base_dir: str | None = None):
        """``table``: the graph's onnxio.ArrayTable (the native scanner's
        arrays: onnxio.arraytable.scanned_table / subgraph_table)."""
        self.graph = graph
        self.parent = parent
        self.path = path
        # Folder external data resolves against (to read small external constants).
        self.base_dir = parent.base_dir if parent is not None else base_dir
        assert table.graph is graph and table.n == len(graph.node)
        declared_types: dict[str, int] = {}
        declared_shapes: dict[str, tuple] = {}
        for vi in (*graph.input, *graph.output, *graph.value_info):
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.elem_type:
                declared_types[vi.name] = tt.elem_type
                if tt.HasField("shape"):
                    declared_shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None
                                                     for d in tt.shape.dim)
        self._from_arrays(table, declared_types, declared_shapes)
        # The matcher's per-graph caches (fusion/match/matcher.py, fusion/match/numeric.py),
        # filled lazily: scalar constants by name, numeric checks by region key.
        self.scalar_consts: dict[str, ConstInfo | None] = {}
        # shapes from onnx's shape inference, asked only where none is
        # declared (plan sets one bias.InferredShapes per model)
        self.inferred = None
        self.check_cache: dict[tuple, tuple | None] = {}
        self.const_keys: dict[str, tuple] = {}  # constant -> (elem type, dtype, stored bytes)
        self._const_cache: dict[str, ConstInfo | None] = {}
        self._names: set[str] | None = None
        self.shape_memo: dict[str, tuple | None] = dict(self.value_shapes)  # shapes.elementwise_shape's
        self.region_inputs: dict[str, tuple[str, ...]] = {}  # a matched region's root -> (x, *its constants)

    def _from_arrays(self, table, declared_types: dict, declared_shapes: dict) -> None:
        """The maps and lists from an onnxio.ArrayTable (the native scanner's
        arrays); value_types / value_shapes: what value_info, the graph's
        inputs and outputs declare, else the initializer's type and dims."""
        s = table.scan
        names = table.names.array()
        self.graph_inputs = set(names[s.input_name].tolist())
        self.graph_outputs = set(names[s.output_name].tolist())
        inits = names[s.init_name].tolist()
        self.initializers = Initializers(inits, self.graph.initializer)
        self.value_types = {**dict(zip(inits, s.init_dtype.tolist())), **declared_types}
        dims, off = tuple(s.init_dims.tolist()), s.init_dims_off.tolist()
        self.value_shapes = {**{n: dims[off[k]:off[k + 1]] for k, n in enumerate(inits)}, **declared_shapes}
        self.nodes = table.nodes
        self.ops, self.domains = table.ops, table.domains
        self.labels: tuple[str, ...] = tuple(names[s.node_name].tolist())
        self.attributed = set(table.attributed)
        # The matcher asks ~100 questions per anchor: tuples and dicts answer
        # each in one lookup (a view that made its answer per access cost
        # ~10x more per question).
        self.raw_ins = Slices(names[s.in_ids], s.node_in_off)
        given = s.in_ids != 0  # ins: without the omitted optional inputs ("")
        self.ins = self.raw_ins if given.all() else Slices(
            names[s.in_ids[given]], np.concatenate([[0], np.cumsum(given)])[s.node_in_off])
        self.outs = Slices(names[s.out_ids], s.node_out_off)
        written = np.flatnonzero(table.producer >= 0)
        self.producer = dict(zip(names[written].tolist(), table.producer[written].tolist()))
        self.name_ids: dict[str, int] = table.names.ids  # every string (names.array() filled it)
        self.consumers = Slices(table.cons_nodes, table.cons_off, self.name_ids)  # name -> its readers
        self.region_node_class = region_nodes(table)
        self.nested: list[int] = table.with_subgraphs  # nodes that hold subgraphs
        self.arrays = table
        self.maybe_const = self._maybe_constant()  # per string id, _may_be_constant's answer
        # the names that may be constants: the matcher asks scalar_const of these only
        self.const_names = frozenset(names[np.flatnonzero(self.maybe_const)].tolist())

    # -- names ---------------------------------------------------------------
    def node(self, i: int) -> NodeProto:
        return self.nodes[i]

    def has_attributes(self, i: int) -> bool:
        return i in self.attributed

    def label(self, i: int) -> str:
        """Node i's name, or "<op>#<i>" when it has none."""
        return self.labels[i] or f"{self.ops[i]}#{i}"

    def node_names(self) -> set[str]:
        if self._names is None:
            self._names = set(self.labels)
        return self._names

    def is_overridable(self, name: str) -> bool:
        """An initializer that is also a graph input can be fed at run time."""
        if name in self.initializers or name in self.graph_inputs:
            return name in self.graph_inputs
        return self.parent.is_overridable(name) if self.parent and name not in self.producer else False

    def defines(self, name: str) -> bool:
        return name in self.producer or name in self.graph_inputs or name in self.initializers

    def elem_type(self, name: str) -> int | None:
        if name in self.value_types:
            return self.value_types[name]
        if self.parent is not None and not self.defines(name):
            return self.parent.elem_type(name)
        return None

    def shape(self, name: str) -> tuple | None:
        """Declared, else carried through elementwise nodes from declared
        shapes and constants when that fixes the last dim (all a bias needs;
        onnx's inference would say the same), else onnx's shape inference
        (one run per model, ``inferred``). None dims: unknown."""
        if name in self.value_shapes:
            return self.value_shapes[name]
        if self.parent is not None and not self.defines(name):
            return self.parent.shape(name)
        s = elementwise_shape(self, name)
        if s is not None and (not s or s[-1] is not None):
            return s
        return self.inferred.shape(name) if self.inferred is not None else None

    # -- constants -----------------------------------------------------------
    def constant(self, name: str) -> ConstInfo | None:
        """The value of ``name`` if it is a true constant (never overridable).

        Initializers (not graph inputs), Constant nodes, and elementwise nodes
        whose inputs are all constants (e.g. ``Sqrt(2.0)``) count; large
        tensors are returned too, but only small ones are ever materialised
        from external storage (we never read external weight payloads).
        """
        cache = self._const_cache
        if name in cache:
            return cache[name]
        if not self._may_be_constant(name):  # most tensors: decided without reading any value
            cache[name] = None
            return None
        # Resolve what ``name`` folds from first, deepest first, with an
        # explicit stack: a sqrt(2) behind 600 Identity nodes must not hit
        # Python's recursion limit (each level below then finds its inputs cached).
        order, stack = [], [name]
        while stack:
            n = stack.pop()
            if n in cache:
                continue
            cache[n] = None  # guards against cycles
            order.append(n)
            i = self.producer.get(n)
            if i is not None and self.ops[i] in _FOLD_THROUGH:
                stack.extend(x for x in self.ins[i] if x not in cache)
        for n in reversed(order):
            cache[n] = self._resolve_constant(n)
        return cache[name]

    def _may_be_constant(self, name: str) -> bool:
        """Whether ``name`` can be a constant by structure alone: an
        initializer that is no graph input, a Constant node, or a foldable
        node whose inputs all may be (their values are not read)."""
        i = self.name_ids.get(name, -1)
        if i < 0:  # not read or written here: an outer name, or none
            return self.parent is not None and self.parent._may_be_constant(name)
        return bool(self.maybe_const[i])

    def _maybe_constant(self) -> np.ndarray:
        """_may_be_constant of every string id of the graph (the same
        definition, over the scanner's arrays: a foldable node's outputs may
        be constant once all its inputs may be; repeated until nothing
        changes, as deep as the graph folds constants)."""
        t = self.arrays
        s, n = t.scan, t.n
        ids = t.kind_ids
        default = default_domain(t)
        const = default & (s.node_op == ids.get("Constant", -1))
        fold = default & np.isin(s.node_op, [ids[o] for o in _FOLD_THROUGH if o in ids])
        gin = np.zeros(len(t.names), bool)
        gin[s.input_name] = True
        maybe = (t.init_of >= 0) & ~gin & (t.producer < 0)
        if self.parent is not None:  # names a subgraph reads from outside: as its parent says
            read = unique(s.in_ids)
            outer = read[(t.producer[read] < 0) & (t.init_of[read] < 0) & ~gin[read] & (read != 0)]
            for k, name in zip(outer.tolist(), t.names.take(outer)):
                maybe[k] = self.parent._may_be_constant(name)
        writer = np.repeat(np.arange(n), t.out_count)
        written = s.out_ids != 0
        maybe[s.out_ids[written & const[writer]]] = True
        # each fold node's inputs, "" left out (CastLike(c, like): only c)
        reader = np.repeat(np.arange(n), t.in_count)
        first = np.arange(len(s.in_ids)) == np.repeat(s.node_in_off[:-1], t.in_count)
        cast_like = s.node_op == ids.get("CastLike", -1)
        used = (s.in_ids != 0) & fold[reader] & (first | ~cast_like[reader])
        n_used = np.bincount(reader[used], minlength=n)
        live = fold & (n_used > 0)
        while True:
            blocked = np.bincount(reader[used & ~maybe[s.in_ids]], minlength=n) > 0
            new = live & ~blocked
            outs = s.out_ids[written & new[writer]]
            if maybe[outs].all():
                break
            maybe[outs] = True
        return maybe

    def _resolve_constant(self, name: str) -> ConstInfo | None:
        if name in self.graph_inputs:
            return None
        if name in self.initializers:
            t = self.initializers[name]
            value = tensor_value(t, self.base_dir)
            return None if value is None else ConstInfo(value, t.data_type)
        if name in self.producer:
            i = self.producer[name]
            op = self.ops[i]
            if self.domains[i] not in DEFAULT_DOMAINS:
                return None
            if op == "Constant":
                return constant_node_value(self.nodes[i], i)
            if op == "CastLike" and len(self.raw_ins[i]) == 2:
                return self._cast_like(self.nodes[i], i)
            if op in FOLDABLE and len(self.outs[i]) == 1:
                ins = []
                for n in self.ins[i]:  # stop at the first non-constant input (most tensors)
                    c = self.constant(n)
                    if c is None or c.value.size > 16:
                        return None
                    ins.append(c)
                if ins:
                    node = self.nodes[i]
                    folded = fold(node, [c.value for c in ins])
                    if folded is not None:
                        et = elem_type_of(ins[0].elem_type, node)
                        return ConstInfo(folded, et, producer=i)
            return None
        if self.parent is not None:
            return self.parent.constant(name)
        return None

    def _cast_like(self, node: NodeProto, i: int) -> ConstInfo | None:
        """CastLike(c, like) of a small constant (onnxscript writes every
        literal so): a constant in like's type, when that type is known."""
        c = self.constant(node.input[0])
        to = self._type_of(node.input[1], 8)
        if c is None or c.value.size > 16 or to not in _FLOAT_TYPES:
            return None
        return ConstInfo(c.value.astype(np_dtype(to)), to, producer=i)

    def type_of(self, name: str, depth: int = 6) -> int | None:
        """Element type of ``name``: declared, or followed through a few
        type-preserving producers (see _type_of), else inferred (a TorchScript
        export with functions declares no type for a Conv's output)."""
        t = self._type_of(name, depth)
        if t is None and self.inferred is not None:
            t = self.inferred.elem_type(name)
        return t

    def _type_of(self, name: str, depth: int) -> int | None:
        """Element type from value_info, else through a few type-preserving
        producers (elementwise ops, MatMul, Cast, CastLike, constants)."""
        t = self.elem_type(name)
        if t or depth == 0:
            return t
        c = self.constant(name) if name in self.producer or name in self.initializers else None
        if c is not None:
            return c.elem_type
        p = self.producer.get(name)
        if p is None:
            return None
        node = self.nodes[p]
        if node.domain not in DEFAULT_DOMAINS or not node.input:
            return None
        if node.op_type == "Cast":
            return cast_to(node)
        if node.op_type == "CastLike" and len(node.input) == 2:
            return self._type_of(node.input[1], depth - 1)
        if node.op_type in ELEMENTWISE or node.op_type == "MatMul":
            ins = node.input[:1] if node.op_type == "Pow" else node.input
            for x in ins:
                t = self._type_of(x, depth - 1) if x else None
                if t:
                    return t
        return None


_FOLD_THROUGH = frozenset(FOLDABLE) | {"CastLike"}

_FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16)
