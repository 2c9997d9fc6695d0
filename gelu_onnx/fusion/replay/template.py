"""A traced run of the matcher or the bias search (fusion/replay/trace.py) in
offsets from its anchor, and its confirmation for other anchors with array
gathers (fusion/replay/matches.py says what is confirmed and why it suffices)."""
from __future__ import annotations

import numpy as np

from ..match.region import scalar_const
from .trace import Trace, const_key

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
    for name, et in base.value_types.declared.items():
        i = t.id_of(name)
        if i >= 0:
            vtype[i] = et
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
