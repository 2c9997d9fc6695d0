"""Template replay: the matcher (fusion/match/matcher.py, the one definition of what
a GELU is) runs once per distinct neighbourhood, and its answer is carried
to every other anchor that provably reads the same graph around it.

For a main graph without subgraphs (bodies read names across scopes):

1. anchors are grouped by the op types of the nodes around them;
2. the group's first anchor is matched on a TraceIndex (fusion/match/trace.py),
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
would return for it (tests/test_replay.py runs both ways on the corpus,
the bundled exports and chains). The bias search (fusion/match/bias.py)
is replayed the same way.

MatchSet: the matches carried from one representative, as arrays.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..index.shapes import carry_shapes
from ..ops import ANCHOR_OPS
from .bias import find_bias
from ..report import Match, NearMiss
from .matcher import match_anchor
from .trace import Template, TraceEscape, TraceIndex


# A group whose anchors keep failing confirmation falls back to matching each
# on its own after this many representatives.
MAX_REPRESENTATIVES = 8
# The grouping key: op types of the nodes this far before and after an anchor.
WINDOW = 6


@dataclass
class Replayed:
    """find_matches' answer for a graph: matches carried in sets, matches
    found one by one (``singles``, anchor order), near-misses (anchor order)."""

    sets: list[MatchSet] = field(default_factory=list)
    singles: list[Match] = field(default_factory=list)
    misses: list[NearMiss] = field(default_factory=list)


# --- find_matches, replayed -----------------------------------------------------------


def replay_matches(idx) -> Replayed | None:
    """find_matches(idx) for a main graph without subgraphs (the same
    matches and near-misses); None for any other graph."""
    if idx.parent is not None or idx.nested:
        return None
    t = idx.arrays
    s = t.scan
    kinds = [t.kind_ids[o] for o in ANCHOR_OPS if o in t.kind_ids]
    doms = [t.kind_ids[d] for d in ("", "ai.onnx") if d in t.kind_ids]
    anchors = np.flatnonzero(np.isin(s.node_op, kinds) & np.isin(s.node_dom, doms))
    out = Replayed()
    singles: dict[int, tuple] = {}
    for group in _groups(s, anchors):
        _match_group(idx, group, out.sets, singles)
    if _overlapping(out.sets, [m for m, _ in singles.values() if m is not None]):
        # two matches share a node: find_matches' claiming, in anchor order, on Match objects
        for ms in out.sets:
            for j in range(len(ms)):
                singles[int(ms.anchors[j])] = (ms.member(j), None)
        out.sets = []
        claimed: set[int] = set()
        for a in sorted(singles):
            m, miss = singles[a]
            if m is None or a in claimed or claimed.intersection(m.nodes):
                if m is None:
                    out.misses.append(miss)
                continue
            claimed.update(m.nodes)
            out.singles.append(m)
        return out
    for a in sorted(singles):
        m, miss = singles[a]
        if m is None:
            out.misses.append(miss)
        else:
            out.singles.append(m)
    return out


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


def _match_group(idx, group: np.ndarray, sets: list, singles: dict) -> None:
    pending = group.astype(np.int64)
    for _ in range(MAX_REPRESENTATIVES):
        if not len(pending):
            return
        a = int(pending[0])
        view = TraceIndex(idx)
        try:
            m, miss = match_anchor(view, a)
        except TraceEscape:
            singles[a] = match_anchor(idx, a)
            pending = pending[1:]
            continue
        if m is None:
            singles[a] = (None, miss)
            break  # near-misses are worded per anchor: the others go one by one
        tpl = Template(idx, a, view.trace, m.nodes)
        if any(tpl.slot(n) is None for n in (m.root, m.leaf, *m.consts)):
            singles[a] = match_anchor(idx, a)  # a name of the match in no node read: not carried
            pending = pending[1:]
            continue
        ok, S = tpl.confirm(pending)
        ok[0] = True  # the representative itself
        S[0] = tpl.slot_ids
        rep = replace(m, index=idx, anchor=a)
        sets.append(MatchSet(rep, tpl, pending[ok], S[ok]))
        pending = pending[~ok]
    for a in pending.tolist():
        singles[a] = match_anchor(idx, a)


def _overlapping(sets: list[MatchSet], singles: list[Match]) -> bool:
    parts = [ms.nodes().reshape(-1) for ms in sets] + [np.asarray(m.nodes, np.int64) for m in singles]
    if not parts:
        return False
    srt = np.sort(np.concatenate(parts))
    return bool((srt[1:] == srt[:-1]).any())


# --- find_bias, replayed -------------------------------------------------------------


def replay_bias(idx, sets: list[MatchSet]) -> tuple[list[MatchSet], list[Match]]:
    """find_bias for every member of ``sets`` (GraphIndex.region_inputs set
    for every match first, as plan sets them): the search runs once per
    representative and is carried to the members it confirms. Returns the
    sets with their bias carried, and members searched one by one (as Match
    objects, bias found or not)."""
    carry_shapes(idx, _shape_questions(idx, sets))
    done, singles = [], []
    for ms in sets:
        pending = np.arange(len(ms))
        for _ in range(MAX_REPRESENTATIVES):
            if not len(pending):
                break
            rep = ms.member(int(pending[0]))
            view = TraceIndex(idx)
            probe = replace(rep, index=view)  # the sets' bias is not searched yet: none to copy
            try:
                find_bias(probe)
            except TraceEscape:
                find_bias(rep)
                singles.append(rep)
                pending = pending[1:]
                continue
            tpl = Template(idx, rep.anchor, view.trace, rep.nodes)
            if probe.bias is not None and (tpl.slot(probe.bias) is None or tpl.slot(probe.bias_input) is None):
                find_bias(rep)
                singles.append(rep)
                pending = pending[1:]
                continue
            ok, S = tpl.confirm(ms.anchors[pending])
            ok[0] = True
            S[0] = tpl.slot_ids
            done.append(ms.subset(pending[ok], BiasSlots(probe, tpl, S[ok])))
            pending = pending[~ok]
        for j in pending.tolist():
            m = ms.member(j)
            find_bias(m)
            singles.append(m)
    return done, singles


def _shape_questions(idx, sets: list[MatchSet]) -> np.ndarray:
    """The names whose shapes the bias search asks (the inputs of the node
    that makes each x), and the roots and x's they are carried through."""
    t = idx.arrays
    s = t.scan
    parts = []
    for ms in sets:
        leaves = ms.ids(ms.match.leaf)
        parts += [ms.ids(ms.match.root), leaves]
        p = t.producer[leaves].astype(np.int64)
        p = p[p >= 0]
        lo, cnt = s.node_in_off[p].astype(np.int64), np.diff(s.node_in_off)[p].astype(np.int64)
        if len(p):
            parts.append(s.in_ids[np.repeat(lo - np.cumsum(np.r_[0, cnt[:-1]]), cnt) + np.arange(cnt.sum())])
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


@dataclass
class MatchSet:
    """``match``: the representative's Match (anchor ``anchors[0]``);
    ``tpl``: its replay.Template; row j of ``S``: anchor j's names in the
    template's slots. ``bias``: the bias search's template when it was
    carried too (replay_bias), else None (not searched yet)."""

    match: Match
    tpl: object
    anchors: np.ndarray
    S: np.ndarray
    bias: "BiasSlots | None" = None

    def __len__(self) -> int:
        return len(self.anchors)

    def subset(self, rows: np.ndarray, bias: "BiasSlots | None" = None) -> "MatchSet":
        return MatchSet(self.match, self.tpl, self.anchors[rows], self.S[rows], bias)

    def ids(self, name) -> np.ndarray | None:
        """Each member's string id for the representative's ``name`` (None: no slot)."""
        k = self.tpl.slot(name)
        return None if k is None else self.S[:, k]

    def offsets(self) -> np.ndarray:
        """The region's nodes, as offsets from the anchor."""
        return np.asarray(self.match.nodes, np.int64) - self.match.anchor

    def nodes(self) -> np.ndarray:
        """Every member's region nodes (one row each)."""
        return self.anchors[:, None] + self.offsets()[None, :]

    def member(self, j: int) -> Match:
        """Member j as a Match object (bias fields included when carried)."""
        m, names = self.match, self.tpl.base.arrays.names
        a = int(self.anchors[j])
        row = self.S[j]
        name = lambda n: names[int(row[self.tpl.slot(n)])]  # noqa: E731
        out = Match(index=m.index, anchor=a, root=name(m.root), leaf=name(m.leaf),
                    nodes=[a + d for d in self.offsets().tolist()], consts={name(c) for c in m.consts}, form=m.form,
                    alpha=m.alpha, leaf_type=m.leaf_type, root_type=m.root_type, precision=m.precision,
                    error=m.error, key=m.key, shared=m.shared)
        if self.bias is not None:
            self.bias.apply(out, j)
        return out


@dataclass
class BiasSlots:
    """The bias search carried to a set: ``probe`` holds the
    representative's answer (bias, bias_input, bias_node, or none found);
    row j of ``S``: member j's names in the bias template's slots."""

    probe: Match
    tpl: object
    S: np.ndarray

    @property
    def found(self) -> bool:
        return self.probe.bias is not None

    def ids(self, name) -> np.ndarray:
        return self.S[:, self.tpl.slot(name)]

    def apply(self, m: Match, j: int) -> None:
        if self.probe.bias is None:
            return
        names = self.tpl.base.arrays.names
        m.bias = names[int(self.S[j, self.tpl.slot(self.probe.bias)])]
        m.bias_input = names[int(self.S[j, self.tpl.slot(self.probe.bias_input)])]
        m.bias_node = m.anchor + (self.probe.bias_node - self.tpl.anchor)

    def subset(self, rows: np.ndarray) -> "BiasSlots":
        return BiasSlots(self.probe, self.tpl, self.S[rows])


class RegionInputs(dict):
    """GraphIndex.region_inputs (a matched root -> [x, *its constants,
    sorted]) for single matches (as a dict) and for the members of
    MatchSets, answered from their arrays when asked."""

    def __init__(self, idx, sets: list[MatchSet]):
        super().__init__()
        t = idx.arrays
        self._t, self.sets = t, sets
        self._set = np.full(len(t.names), -1, np.int32)
        self._row = np.zeros(len(t.names), np.int64)
        for k, ms in enumerate(sets):
            roots = ms.ids(ms.match.root)
            self._set[roots] = k
            self._row[roots] = np.arange(len(ms))

    def get(self, name, default=None):
        v = super().get(name)
        if v is not None:
            return v
        i = self._t.id_of(name)
        if i < 0 or self._set[i] < 0:
            return default
        ms = self.sets[int(self._set[i])]
        j = int(self._row[i])
        names = self._t.names
        row = ms.S[j]
        leaf = names[int(row[ms.tpl.slot(ms.match.leaf)])]
        v = [leaf, *sorted(names[int(row[ms.tpl.slot(c)])] for c in ms.match.consts)]
        self[name] = v
        return v
