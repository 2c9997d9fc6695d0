"""A recording view of a GraphIndex: what one run of the matcher (or of the
bias search) read about the graph, so that fusion/match/replay.py can confirm,
with array gathers, that another anchor would read the same things and so
get the same answer.

``TraceIndex(base)`` answers every question exactly as ``base`` (an
array-backed GraphIndex of a main graph) does and writes down each question
asked, in the terms replay can map onto another anchor:

- ``nodes``: every node read (its op, domain, inputs, outputs, attributes,
  its class as a region node);
- ``asked``: (kind, name) for every question about a name: who writes it
  (``producer``), who reads it (``consumers``), whether it is a graph
  input / output / an initializer (and the initializer's type and dims),
  its declared type / shape, and the derived answers the index computes
  from the whole graph (``constant``, ``const_key``, ``scalar``, ``shape``,
  ``type_of``, ``elem_type``, ``overridable``, ``defines``), with their answers.

Derived answers are recorded as answers, not as what computing them read:
replay asks the same question of the other anchor's names (they may depend
on the whole graph: a chain's shapes). The per-graph caches answer through
the base index (they are pure functions of the graph). Anything else the
matcher would touch (the GraphProto, the inferred shapes, a tensor's
payload, a node's name) raises TraceEscape: the caller then takes the
ordinary path for that anchor. TraceEscape is a BaseException, so no
``except Exception`` in the matcher swallows it.

``Template``: a traced run in offsets from its anchor, and its confirmation
for other anchors with array gathers (fusion/match/replay.py says what is
confirmed and why it suffices).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ...onnxio.arraytable import LookupMapping
from ..index.graph import scalar_const
from .matcher import region_node_ok


class TraceEscape(BaseException):
    """The traced run touched something a trace cannot map (see the module doc)."""


class Trace:
    def __init__(self):
        self.nodes: set[int] = set()
        self.asked: dict[tuple[str, str], object] = {}  # (kind, name) -> the answer

    def node(self, i: int) -> None:
        self.nodes.add(i)

    def ask(self, kind: str, name, answer):
        self.asked.setdefault((kind, name), answer)
        return answer


class _NodeList(Sequence):
    """ops / domains / ins / raw_ins / outs / nodes: node i read."""

    def __init__(self, items, trace: Trace):
        self._items, self._trace = items, trace

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i):
        if not isinstance(i, int):
            raise TraceEscape(f"a node list read with {type(i).__name__}")
        self._trace.node(i if i >= 0 else i + len(self._items))
        return self._items[i]

    def __iter__(self):
        raise TraceEscape("a walk over every node")


class _ClassList(_NodeList):
    """region_node_class: answered from the node (its class is a fact of the node)."""

    def __init__(self, base, trace: Trace):
        super().__init__(base.region_node_class, trace)
        self._base = base

    def __getitem__(self, i):
        k = super().__getitem__(i)
        if k < 0:
            k = self._base.region_node_class[i] = int(region_node_ok(self._base, i))
        return k

    def __setitem__(self, i, k) -> None:
        self._trace.node(i)
        self._base.region_node_class[i] = k


class _NameMap(LookupMapping):
    """producer / consumers / initializers / value_types / value_shapes: ``kind`` of a name asked."""

    def __init__(self, items, kind: str, trace: Trace, wrap=None):
        self._items, self._kind, self._trace, self._wrap = items, kind, trace, wrap

    def _lookup(self, name, default):
        v = self._items.get(name, _ABSENT)
        self._trace.ask(self._kind, name, None if v is _ABSENT else _answer(v))
        if v is _ABSENT:
            return default
        return self._wrap(v) if self._wrap is not None else v

    def __iter__(self):
        raise TraceEscape(f"a walk over every {self._kind}")

    def __len__(self) -> int:
        raise TraceEscape(f"the number of {self._kind}")


class _NameSet:
    """graph_inputs / graph_outputs: membership asked."""

    def __init__(self, items, kind: str, trace: Trace):
        self._items, self._kind, self._trace = items, kind, trace

    def __contains__(self, name) -> bool:
        return self._trace.ask(self._kind, name, name in self._items)

    def __iter__(self):
        raise TraceEscape(f"a walk over the {self._kind}")


class _Derived(Mapping):
    """scalar_consts / const_keys (caches of derived answers): ``ask(name)`` answers through the base."""

    def __init__(self, kind: str, trace: Trace, ask):
        self._kind, self._trace, self._ask = kind, trace, ask

    def __getitem__(self, name):
        return self._trace.ask(self._kind, name, self._ask(name))

    def get(self, name, default=None):
        return self[name]

    def __contains__(self, name) -> bool:
        return True

    def __setitem__(self, name, value) -> None:
        pass  # the base computed and cached it already

    def __iter__(self):
        raise TraceEscape(f"a walk over {self._kind}")

    def __len__(self) -> int:
        raise TraceEscape(f"the size of {self._kind}")


class _Tensor:
    """An initializer as the matcher may read it: name, type, dims (recorded
    with the ``init`` question); its payload only through ``constant``."""

    __slots__ = ("name", "data_type", "dims", "data_location")

    def __init__(self, t):
        self.name, self.data_type, self.dims, self.data_location = t.name, t.data_type, list(t.dims), t.data_location

    def __getattr__(self, attr):
        raise TraceEscape(f"an initializer's {attr}")


def _answer(v):
    """A recordable answer (TensorProtos by what the matcher may read of them)."""
    if hasattr(v, "raw_data"):
        return (v.data_type, tuple(v.dims), v.data_location)
    return tuple(v) if isinstance(v, list) else v


_ABSENT = object()


class TraceIndex:
    """``base`` (a main graph's array-backed GraphIndex) as the matcher sees
    it, with every question written into ``trace`` (see the module doc)."""

    def __init__(self, base, trace: Trace | None = None):
        if base.parent is not None or base.nested:
            raise TraceEscape("only a main graph without subgraphs is traced")
        t = self.trace = trace if trace is not None else Trace()
        self._base = base
        self.parent, self.path, self.base_dir, self.nested = None, base.path, base.base_dir, []
        self.check_cache = base.check_cache  # keyed by everything the check reads
        for name in ("ops", "domains", "ins", "raw_ins", "outs", "nodes"):
            setattr(self, name, _NodeList(getattr(base, name), t))
        self.region_node_class = _ClassList(base, t)
        self.producer = _NameMap(base.producer, "producer", t)
        self.consumers = _NameMap(base.consumers, "consumers", t)
        self.initializers = _NameMap(base.initializers, "init", t, _Tensor)
        self.value_types = _NameMap(base.value_types, "vtype", t)
        self.value_shapes = _NameMap(base.value_shapes, "vshape", t)
        self.graph_inputs = _NameSet(base.graph_inputs, "gin", t)
        self.graph_outputs = _NameSet(base.graph_outputs, "gout", t)
        self.scalar_consts = _Derived("scalar", t, lambda n: scalar_const(base, n))
        self.const_keys = _Derived("const_key", t, lambda n: const_key(base, n))

    def __getattr__(self, name):
        # graph, labels, inferred, shape_memo, region_inputs, attributed, arrays ...
        raise TraceEscape(f"the index's {name}")

    # -- what GraphIndex's methods answer ---------------------------------------
    def node(self, i: int):
        return self.nodes[i]

    def has_attributes(self, i: int) -> bool:
        self.trace.node(i)
        return self._base.has_attributes(i)

    def label(self, i: int) -> str:
        raise TraceEscape("a node's name")

    def _derived(self, kind: str, name, fn):
        return self.trace.ask(kind, name, fn(name))

    def constant(self, name):
        return self._derived("constant", name, self._base.constant)

    def shape(self, name):
        return self._derived("shape", name, self._base.shape)

    def type_of(self, name, depth: int = 6):
        if depth != 6:
            raise TraceEscape("type_of at another depth")
        return self._derived("type_of", name, self._base.type_of)

    def elem_type(self, name):
        return self._derived("elem_type", name, self._base.elem_type)

    def is_overridable(self, name) -> bool:
        return self._derived("overridable", name, self._base.is_overridable)

    def defines(self, name) -> bool:
        return self._derived("defines", name, self._base.defines)


def const_key(base, name):
    """numeric.region_key's key of a constant (what const_keys caches)."""
    key = base.const_keys.get(name)
    if key is None:
        c = base.constant(name)
        key = base.const_keys[name] = (c.elem_type, c.value.dtype.str, c.value.shape, c.value.tobytes())
    return key

# A name read by more nodes than this is not compared reader by reader.
MAX_READERS = 64


class Template:
    """A traced run of one anchor, in offsets from that anchor."""

    def __init__(self, base, anchor: int, trace: Trace, extra_nodes=()):
        t = base.arrays
        s = t.scan
        self.base, self.anchor, self.trace = base, anchor, trace
        self.offsets = np.array(sorted(set(trace.nodes) | set(extra_nodes)), np.int64) - anchor
        slot_node, slot_arr, slot_pos, ids = [], [], [], []
        for d in self.offsets.tolist():
            i = anchor + d
            for arr, off in ((s.in_ids, s.node_in_off), (s.out_ids, s.node_out_off)):
                for p in range(int(off[i + 1] - off[i])):
                    slot_node.append(d)
                    slot_arr.append(arr is s.out_ids)
                    slot_pos.append(p)
                    ids.append(int(arr[off[i] + p]))
        self.slot_node = np.array(slot_node, np.int64)
        self.slot_out = np.array(slot_arr, bool)
        self.slot_pos = np.array(slot_pos, np.int64)
        self.slot_ids = np.array(ids, np.int64)
        self.slot_of: dict[int, int] = {}  # rep string id -> its first slot
        for k, i in enumerate(ids):
            self.slot_of.setdefault(i, k)

    def slot(self, name) -> int | None:
        i = self.base.arrays.id_of(name)
        return self.slot_of.get(i) if i >= 0 else None

    def confirm(self, anchors: np.ndarray):
        """(mask of the anchors confirmed, their slot names: one row each)."""
        base, a = self.base, self.anchor
        t = base.arrays
        s = t.scan
        A = anchors.astype(np.int64)
        ok = np.ones(len(A), bool)
        n = t.n
        attr_n = np.diff(s.node_attr_off)
        for d in self.offsets.tolist():
            i = np.clip(A + d, 0, n - 1)
            r = a + d
            ok &= (A + d >= 0) & (A + d < n)
            ok &= (s.node_op[i] == s.node_op[r]) & (s.node_dom[i] == s.node_dom[r])
            ok &= (t.in_count[i] == t.in_count[r]) & (t.out_count[i] == t.out_count[r]) & (attr_n[i] == attr_n[r])
            if attr_n[r]:
                ok &= _same_attributes(s, i, r, ok)
        A_safe = np.where(ok, A, a)
        S = np.empty((len(A), len(self.slot_ids)), np.int64)
        for k in range(len(self.slot_ids)):
            node = A_safe + self.slot_node[k]
            if self.slot_out[k]:
                S[:, k] = s.out_ids[s.node_out_off[node] + self.slot_pos[k]]
            else:
                S[:, k] = s.in_ids[s.node_in_off[node] + self.slot_pos[k]]
        ok &= _wired_alike(S, self.slot_ids, self.slot_of)
        for (kind, name), answer in self.trace.asked.items():
            k = self.slot(name)
            if k is None:
                return np.zeros(len(A), bool), S  # a name from no node read: not mapped
            ok &= self._same_answer(kind, name, answer, S[:, k], int(self.slot_ids[k]), A, ok)
            if not ok.any():
                break
        return ok, S

    def _same_answer(self, kind: str, name, answer, ids, rid: int, A, ok) -> np.ndarray:
        base, a = self.base, self.anchor
        t = base.arrays
        if kind == "producer":
            p, rp = t.producer[ids].astype(np.int64), int(t.producer[rid])
            return p < 0 if rp < 0 else (p >= 0) & (p - A == rp - a)
        if kind == "consumers":
            lst = t.consumers_of(rid)
            if len(lst) > MAX_READERS:
                return np.zeros(len(ids), bool)
            first, count = t.cons_off[ids], t.cons_off[ids + 1] - t.cons_off[ids]
            good = count == len(lst)
            last = len(t.cons_nodes) - 1
            for q, c in enumerate(lst):
                good &= t.cons_nodes[np.minimum(first + q, last)] - A == c - a
            return good
        facts = _facts(base)
        if kind in ("gin", "gout", "init", "vtype", "elem_type", "overridable", "defines"):
            f = facts[kind]
            good = f[ids] == f[rid]
            if kind == "init" and f[rid]:
                good &= _same_initializer_meta(t, ids, rid)
            return good
        if kind == "vshape":
            return ids == rid  # a declared shape: only the same name is the same answer here
        # answers the index derives from the whole graph: shortcuts where the
        # arrays decide them, else asked again of the other name
        good = ids == rid
        if kind == "shape" and base.carried is not None:
            good |= base.carried.ids(ids) == base.carried.id(answer)
        if answer is None and kind in ("constant", "scalar"):
            maybe = base.maybe_constant()
            good |= ~maybe[ids]
            if kind == "scalar":
                good |= facts["many"][ids]
        ask = _DERIVED[kind]
        want = _norm(answer)
        for j in np.flatnonzero(ok & ~good).tolist():
            good[j] = _norm(ask(base, t.names[int(ids[j])])) == want
        return good


def _same_attributes(s, nodes, rep: int, ok) -> np.ndarray:
    """Byte-equal attribute fields (counts already equal)."""
    data = _bytes(s)
    good = np.ones(len(nodes), bool)
    first, rfirst = s.node_attr_off[nodes], int(s.node_attr_off[rep])
    for q in range(int(s.node_attr_off[rep + 1] - rfirst)):
        rs, re = int(s.attr_start[rfirst + q]), int(s.attr_end[rfirst + q])
        k = np.where(ok, first + q, rfirst + q)
        st, en = s.attr_start[k].astype(np.int64), s.attr_end[k].astype(np.int64)
        good &= en - st == re - rs
        cols = st[:, None] + np.arange(re - rs)
        good &= (data[np.where(good[:, None], cols, rs + np.arange(re - rs))] == data[rs:re]).all(axis=1)
    return good


def _bytes(s) -> np.ndarray:
    arr = getattr(s, "_u8", None)
    if arr is None:
        arr = s._u8 = np.frombuffer(s.data, np.uint8)
    return arr


def _wired_alike(S: np.ndarray, rep: np.ndarray, slot_of: dict) -> np.ndarray:
    """Names equal exactly where the representative's are: each slot equals
    its name's first slot, the first slots differ from one another, and
    omitted names ("", id 0) sit where the representative's do."""
    good = np.ones(len(S), bool)
    firsts = sorted(slot_of.values())
    for k in range(S.shape[1]):
        f = slot_of[int(rep[k])]
        if f != k:
            good &= S[:, k] == S[:, f]
    F = S[:, firsts]
    good &= ((F == 0) == (rep[firsts] == 0)[None, :]).all(axis=1)
    if len(firsts) > 1:
        srt = np.sort(F, axis=1)
        good &= (srt[:, 1:] != srt[:, :-1]).all(axis=1)
    return good


def _same_initializer_meta(t, ids, rid: int) -> np.ndarray:
    """Same element type, storage and dims (what trace._Tensor exposes)."""
    s = t.scan
    k, rk = t.init_of[ids].astype(np.int64), int(t.init_of[rid])
    k = np.where(k >= 0, k, rk)
    good = (s.init_dtype[k] == s.init_dtype[rk]) & (s.init_loc[k] == s.init_loc[rk])
    off = s.init_dims_off
    rdims = s.init_dims[off[rk]:off[rk + 1]]
    good &= off[k + 1] - off[k] == len(rdims)
    for q, dim in enumerate(rdims.tolist()):
        good &= s.init_dims[np.minimum(off[k] + q, len(s.init_dims) - 1)] == dim
    return good


def _facts(base) -> dict:
    """Per string id, the answers the index gives from its own tables (main
    graph: no enclosing scope): graph input / output, initializer, declared
    or initializer element type, overridable (an initializer that is a graph
    input: here just "is a graph input"), defined; and "many": an
    initializer of other than one element (never a GELU's constant)."""
    f = getattr(base, "_replay_facts", None)
    if f is not None:
        return f
    t = base.arrays
    s = t.scan
    nstr = len(t.names)
    gin, gout = np.zeros(nstr, np.int8), np.zeros(nstr, np.int8)
    gin[s.input_name] = 1
    gout[s.output_name] = 1
    vtype = np.full(nstr, -1, np.int64)
    has = t.init_of >= 0
    vtype[has] = s.init_dtype[t.init_of[has]]
    declared = base.value_types.by_id
    vtype[np.fromiter(declared, np.int64, len(declared))] = np.fromiter(declared.values(), np.int64, len(declared))
    sizes = np.ones(len(s.init_name), np.float64)
    if len(s.init_dims):
        np.multiply.at(sizes, np.repeat(np.arange(len(s.init_name)), np.diff(s.init_dims_off)),
                       s.init_dims.astype(np.float64))
    many = np.zeros(nstr, bool)
    many[s.init_name] = sizes != 1
    f = base._replay_facts = {
        "gin": gin, "gout": gout, "init": has.astype(np.int8), "vtype": vtype, "elem_type": vtype, "overridable": gin,
        "defines": ((t.producer >= 0) | (gin > 0) | has).astype(np.int8), "many": many}
    return f


_DERIVED = {
    "constant": lambda b, n: b.constant(n), "const_key": const_key, "scalar": scalar_const, "shape": lambda b, n: b.shape(n),
    "type_of": lambda b, n: b.type_of(n), "elem_type": lambda b, n: b.elem_type(n),
    "overridable": lambda b, n: b.is_overridable(n), "defines": lambda b, n: b.defines(n),
}


def _norm(v):
    """An answer in a comparable form (a constant by type, shape and bytes)."""
    if v is None or isinstance(v, (bool, int, float, str, tuple)):
        return v
    if isinstance(v, list):
        return tuple(v)
    value = getattr(v, "value", None)
    if value is not None:
        return v.elem_type, value.dtype.str, value.shape, value.tobytes()
    return v
