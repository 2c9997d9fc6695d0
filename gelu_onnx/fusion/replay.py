"""Template replay: the matcher (fusion/match.py, the one definition of what
a GELU is) runs once per distinct neighbourhood, and its answer is carried
to every other anchor that provably reads the same graph around it.

For a main graph the native scanner read (an array-backed GraphIndex):

1. anchors are grouped by the op types of the nodes around them;
2. the group's first anchor is matched on a TraceIndex (fusion/trace.py),
   which records every node the matcher read and every question it asked
   about a name, with the answer;
3. every other anchor of the group is confirmed with array gathers: each
   node read at the same offset from the anchor has the same op, domain,
   input/output counts and attribute bytes; the names in those nodes are
   wired alike (equal exactly where the representative's are equal); and
   every question asked has the same answer for the corresponding name
   (the same producer and readers at the same offsets, the same
   graph-input/output/initializer facts, the same declared type; the same
   constant, shape ... where the index derives the answer from the whole
   graph: asked again of that name when it is another name);
4. a confirmed anchor's match is the representative's with names and nodes
   mapped; any other anchor is matched on its own, by the matcher itself.

The matcher reads nothing but through the index, and every such read is
covered by 3, so a confirmed anchor's match is exactly what the matcher
would return for it (tests/test_scanned_path.py runs both ways on the
corpus, the bundled exports and chains). The bias search (fusion/bias.py)
is replayed the same way.
"""
from __future__ import annotations

import numpy as np

from .bias import find_bias
from .findings import Match
from .graph import ANCHOR_OPS
from .match import match_anchor
from .region import scalar_const
from .trace import Trace, TraceEscape, TraceIndex, const_key

# A group whose anchors keep failing confirmation falls back to matching each
# on its own after this many representatives.
MAX_REPRESENTATIVES = 8
# The grouping key: op types of the nodes this far before and after an anchor.
WINDOW = 6
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

    def names_of(self, S: np.ndarray, slot: int) -> list[str]:
        return self.base.arrays.names.take(S[:, slot])

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


# --- find_matches, replayed -----------------------------------------------------------


def replay_matches(idx):
    """find_matches(idx) for an array-backed main graph (the same matches and
    near-misses, in the same order); None when the graph is not one."""
    if idx.arrays is None or idx.parent is not None:
        return None
    t = idx.arrays
    s = t.scan
    kinds = [t.kind_ids[o] for o in ANCHOR_OPS if o in t.kind_ids]
    doms = [t.kind_ids[d] for d in ("", "ai.onnx") if d in t.kind_ids]
    anchors = np.flatnonzero(np.isin(s.node_op, kinds) & np.isin(s.node_dom, doms))
    results: dict[int, tuple] = {}
    for group in _groups(s, anchors):
        _match_group(idx, group, results)
    matches, misses = [], []
    claimed: set[int] = set()
    overlap = _overlapping([results[int(a)][0] for a in anchors if results[int(a)][0] is not None])
    for a in anchors.tolist():
        m, miss = results[a]
        if m is None:
            misses.append(miss)
            continue
        if overlap:  # find_matches' claiming, in anchor order
            if a in claimed or claimed.intersection(m.nodes):
                continue
            claimed.update(m.nodes)
        matches.append(m)
    return matches, misses


def _groups(s, anchors: np.ndarray):
    """Anchors with the same op types around them, in order of their first anchor."""
    if not len(anchors):
        return []
    n = len(s.node_op)
    key = np.zeros(len(anchors), np.uint64)
    for d in range(-WINDOW, WINDOW + 1):
        i = anchors + d
        op = np.where((i >= 0) & (i < n), s.node_op[np.clip(i, 0, n - 1)], -1).astype(np.int64)
        key = (key * np.uint64(0x100000001B3)) ^ op.astype(np.uint64)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    cuts = np.flatnonzero(ks[1:] != ks[:-1]) + 1
    groups = np.split(anchors[order], cuts)
    groups.sort(key=lambda g: g[0])
    return groups


def _match_group(idx, group: np.ndarray, results: dict) -> None:
    pending = group
    for _ in range(MAX_REPRESENTATIVES):
        if not len(pending):
            return
        a = int(pending[0])
        view = TraceIndex(idx)
        try:
            m, miss = match_anchor(view, a)
        except TraceEscape:
            results[a] = match_anchor(idx, a)
            pending = pending[1:]
            continue
        if m is None:
            results[a] = (None, miss)
            break  # near-misses are worded per anchor: the others go one by one
        tpl = Template(idx, a, view.trace, m.nodes)
        mine = _mapped(idx, tpl, m, tpl.slot_ids[None, :], np.array([a]))
        if mine is None:  # a name of the match in no node read: not carried
            results[a] = match_anchor(idx, a)
            pending = pending[1:]
            continue
        results[a] = (mine[0], None)
        rest = pending[1:]
        ok, S = tpl.confirm(rest)
        for mm in _mapped(idx, tpl, m, S[ok], rest[ok]):
            results[mm.anchor] = (mm, None)
        pending = rest[~ok]
    for a in pending.tolist():
        results[a] = match_anchor(idx, a)


def _mapped(idx, tpl: Template, m: Match, S: np.ndarray, anchors: np.ndarray) -> list[Match] | None:
    """The template's match carried to each anchor (row of S); None when
    one of its names is in no node the matcher read."""
    names = idx.arrays.names
    a = tpl.anchor
    root, leaf = tpl.slot(m.root), tpl.slot(m.leaf)
    consts = [tpl.slot(c) for c in sorted(m.consts)]
    if root is None or leaf is None or None in consts:
        return None
    if not len(anchors):
        return []
    roots, leaves = names.take(S[:, root]), names.take(S[:, leaf])
    cols = [names.take(S[:, k]) for k in consts]
    rel = [i - a for i in m.nodes]
    out = []
    for j, b in enumerate(anchors.tolist()):
        out.append(Match(idx, b, roots[j], leaves[j], [b + d for d in rel], {c[j] for c in cols}, m.form,
                         m.alpha, m.leaf_type, m.root_type, m.precision, m.error, key=m.key, shared=m.shared))
    return out


def _overlapping(matches: list[Match]) -> bool:
    if not matches:
        return False
    nodes = np.concatenate([np.asarray(m.nodes) for m in matches])
    srt = np.sort(nodes)
    return bool((srt[1:] == srt[:-1]).any())


# --- find_bias, replayed -------------------------------------------------------------


def replay_bias(idx, matches: list[Match]) -> None:
    """find_bias for every match of an array-backed main graph (region
    inputs already set, as plan sets them), replayed per group of matches
    that came from one template."""
    groups: dict[tuple, list[Match]] = {}
    for m in matches:
        if m.single_op is None and not m.bias_inside:
            groups.setdefault((m.key, tuple(i - m.anchor for i in m.nodes), m.form), []).append(m)
    for ms in groups.values():
        pending = ms
        for _ in range(MAX_REPRESENTATIVES):
            if not pending:
                break
            rep = pending[0]
            view = TraceIndex(idx)
            probe = Match(view, rep.anchor, rep.root, rep.leaf, rep.nodes, rep.consts, rep.form, rep.alpha,
                          rep.leaf_type, rep.root_type, rep.precision, rep.error, key=rep.key, shared=rep.shared)
            try:
                find_bias(probe)
            except TraceEscape:
                find_bias(rep)
                pending = pending[1:]
                continue
            tpl = Template(idx, rep.anchor, view.trace, rep.nodes)
            if not _set_bias(tpl, probe, rep, tpl.slot_ids[None, :], 0):
                find_bias(rep)
                pending = pending[1:]
                continue
            rest = pending[1:]
            ok, S = tpl.confirm(np.array([m.anchor for m in rest], np.int64))
            for j in np.flatnonzero(ok).tolist():
                _set_bias(tpl, probe, rest[j], S, j)
            pending = [m for m, good in zip(rest, ok.tolist()) if not good]
        for m in pending:
            find_bias(m)


def _set_bias(tpl: Template, probe: Match, m: Match, S: np.ndarray, row: int) -> bool:
    """probe's bias carried to m (row of S); False when it names a tensor of no node read."""
    if probe.bias is None:
        return True
    names = tpl.base.arrays.names
    b, h = tpl.slot(probe.bias), tpl.slot(probe.bias_input)
    if b is None or h is None:
        return False
    m.bias, m.bias_input = names[int(S[row, b])], names[int(S[row, h])]
    m.bias_node = m.anchor + (probe.bias_node - tpl.anchor)
    return True
