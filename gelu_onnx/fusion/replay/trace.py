"""A recording view of a GraphIndex: what one run of the matcher (or of the
bias search) read about the graph, so that fusion/replay/matches.py can confirm,
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
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...onnxio.arraytable import LookupMapping
from ..match.region import region_node_ok


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
        from ..match.region import scalar_const

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
