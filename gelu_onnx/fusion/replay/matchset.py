"""Matches carried from one traced run (fusion/replay/matches.py) to many anchors,
kept as arrays: the representative's Match and, per anchor, the string ids
of the names in the template's slots. A member becomes a Match object only
when something needs one (``member``); the fuse pass otherwise works on a
set as a whole (fusion/rewrite/setrewrite.py)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..match.findings import Match


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
