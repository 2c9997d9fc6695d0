"""The rewrite of a main graph the native scanner read, at the byte level:
the output's nodes are the input's node fields that stay, copied as bytes,
with each fused region's replacement where its last node was; the graph's
node list is then replaced in one parse. Matches carried in sets
(fusion/match/replay.py) get their replacement from one run of the ordinary
emission (rewrite.emit_nodes) on the representative with placeholder
names, filled in per member. Everything a rewrite decides is decided where
it always is (plan.select, rewrite.emit_nodes, the targets); this module
only writes the same nodes, names and deletions as plan.rewrite does
(tests/test_replay.py compares them with every member matched on its own).

Generated names (NameGen) are the base names when no name anywhere in the
model, nor another generated one, is one of them; a clash anywhere sends
the whole graph the one-by-one way (every member as its own Match, in
order), which NameGen words as always.
"""
from __future__ import annotations

import numpy as np

from .emit import MARK, emit_nodes, fill, join, pieces, remove_indices, split, table_strings
from ...onnxio.arraytable import unique
from ...onnxio.format import len_field
from ..report import Fusion, Match, record
from ..match import single_op
from ..match.trace import TraceEscape
from ... import contract as C

class NameClash(Exception):
    """A generated name is taken: the graph goes the one-by-one way."""


class _Checking:
    """A NameGen that only ever hands out base names (NameClash otherwise)."""

    def __init__(self, names, reserved: set[str]):
        self._names, self._reserved = names, reserved

    def __call__(self, base: str) -> str:
        if base in self._reserved or self._names._taken(base):
            raise NameClash(base)
        self._names.used.add(base)
        return base


class _Recorder:
    """NameGen for a template: each call gets a token, its base is kept."""

    def __init__(self):
        self.bases: list[str] = []

    def __call__(self, base: str) -> str:
        self.bases.append(base)
        return f"{MARK}G{len(self.bases) - 1}{MARK}"


class _ProbeIndex:
    """The index of a template's match: the shape of a placeholder name is
    the representative's (and recorded, to be asked of every member)."""

    def __init__(self, base, real: dict):
        self._base, self._real, self.asked = base, real, []

    def shape(self, name):
        v = self._base.shape(self._real[name])
        self.asked.append((name, v))
        return v

    def __getattr__(self, attr):
        raise TraceEscape(f"a template's emission reads the index's {attr}")


def rewrite_graph(g, names, res, dead: set, tidy: bool = True) -> None:
    """Replace every selected region of ``g`` (a GraphPlan) and record the
    fusions in ``res`` in candidate order; the constants the regions read
    go to ``dead``. ``tidy``: also drop this graph's dead constants and
    stale value_info (a model without subgraphs; with them, names cross
    scopes and plan.rewrite drops them over every graph at the end)."""
    graph = g.index.graph
    before = len(graph.initializer)
    try:
        edits, read, written = _emit_all(g, names, dead)
    except (NameClash, TraceEscape, _Uneven):
        del graph.initializer[before:]  # what the first try appended (legacy biases, 1-D twins)
        names.used.clear()
        for ss in g.selected_sets:  # every member as its own match, in order
            g.selected.extend(ss.members())
        g.selected.sort(key=lambda s: s.candidate.order)
        g.selected_sets = []
        edits, read, written = _emit_all(g, names, dead, checking=False)
    _splice(g, edits, read, written, dead if tidy else set(), tidy)
    _record(g, res)


class _Uneven(Exception):
    """Members of a set would not be rewritten alike."""


def _emit_all(g, names, dead: set, checking: bool = True) -> list:
    """(anchor position, node bytes, removed node indices) per replacement,
    and the string ids of the names the replacements read and write that
    the model already had (new names have none)."""
    idx = g.index
    t = idx.arrays
    edits = []
    read, written = [], []
    tpls = [_SetTemplate(idx, ss) for ss in g.selected_sets]
    reserved = _Reserved(tpls)
    if checking and tpls:
        blobs, offs, at = [], [], 0
        for tpl in tpls:
            for blob, off in tpl.generated_names():
                blobs.append(blob)
                offs.append(off[:-1] + at)
                at += len(blob)
        blob, off = b"".join(blobs), np.concatenate(offs + [np.array([at], np.int64)])
        if (t.scan.find_blob(blob, off) >= 0).any() or not t.scan.distinct_blob(blob, off):
            raise NameClash("a generated name of a set")
    gen = _Checking(names, reserved) if checking else names
    for s in g.selected:
        mt, c = s.match, s.candidate
        if c.legacy:
            nodes = single_op.legacy_nodes(mt, c.legacy_bias, s.emission, s.compute_type, gen, idx.graph)
            removed = list(mt.nodes)
        else:
            emit = single_op.emit if mt.single_op is not None else emit_nodes
            nodes = emit(mt, s.emission, s.compute_type, s.use_bias, gen)
            removed = list(mt.nodes) + ([mt.bias_node] if s.use_bias and mt.bias_node is not None else [])
            dead.update(mt.consts)
        edits.append((max(mt.nodes), b"".join(len_field(n.SerializeToString()) for n in nodes), removed))
        read.append(t.scan.find_many([x for n in nodes for x in n.input if x]))
        written.append(t.scan.find_many([x for n in nodes for x in n.output if x]))
    for tpl in tpls:
        edits.extend(tpl.edits())
        dead.update(t.names.take(unique(tpl.const_ids())))
        read.append(tpl.names_in(1))
        written.append(tpl.names_in(2))
    ids = [np.concatenate(x).astype(np.int64) if x else np.zeros(0, np.int64) for x in (read, written)]
    return edits, ids[0][ids[0] >= 0], ids[1][ids[1] >= 0]


class _Reserved:
    """The sets' generated names, as a set of str made only when a single
    match's emission asks (a chain of identical GELUs has none)."""

    def __init__(self, tpls):
        self._tpls, self._names = tpls, None

    def __contains__(self, name) -> bool:
        if self._names is None:
            self._names = set()
            for tpl in self._tpls:
                for blob, off in tpl.generated_names():
                    self._names.update(blob[off[k]:off[k + 1]].decode("utf-8") for k in range(len(off) - 1))
        return name in self._names


class _SetTemplate:
    """One set's replacement: the representative's emission with
    placeholders for the names that differ per member."""

    def __init__(self, idx, ss):
        self.idx, self.ss = idx, ss
        ms = ss.set
        rep = ms.member(0)
        self.use_bias = ss.use_bias
        slots = {"L": rep.leaf, "R": rep.root}
        if rep.bias is not None:
            slots.update(B=rep.bias, H=rep.bias_input)
        tok = {k: f"{MARK}{k}{MARK}" for k in slots}
        probe = Match(index=_ProbeIndex(idx, {tok[k]: v for k, v in slots.items()}), anchor=rep.anchor, root=tok["R"],
                      leaf=tok["L"], nodes=rep.nodes, consts=set(rep.consts), form=rep.form, alpha=rep.alpha,
                      leaf_type=rep.leaf_type, root_type=rep.root_type, precision=rep.precision, error=rep.error)
        if rep.bias is not None:
            probe.bias, probe.bias_input, probe.bias_node = tok["B"], tok["H"], rep.bias_node
        rec = _Recorder()
        nodes = emit_nodes(probe, ss.emission, ss.compute_type, ss.use_bias, rec)
        if probe.consts != set(rep.consts):
            raise TraceEscape("a template's emission changed its constants (a 1-D bias twin)")
        # generated names are their bases (no clash, checked): spelled in placeholders only
        self.bases = [_flat(split(b), rec.bases) for b in rec.bases]
        self.nodes = [[p if isinstance(p, bytes) else (p[0], _flat(p[1], rec.bases)) for p in pieces(n)]
                      for n in (x.SerializeToString() for x in nodes)]
        # each member's names for the placeholders, as string ids
        self.ids = {"L": ms.ids(ms.match.leaf), "R": ms.ids(ms.match.root)}
        if rep.bias is not None:
            b = ms.bias
            self.ids.update(B=b.ids(b.probe.bias), H=b.ids(b.probe.bias_input))
        # the shapes the emission asked (of the bias: is it 1-D?), asked of every member
        for name, want in probe.index.asked:
            ids = self.ids[name.strip(MARK)]
            known = idx.carried.ids(ids) if idx.carried is not None else np.full(len(ids), -2)
            same = known == (idx.carried.id(want) if idx.carried is not None else -3)
            got = [idx.shape(n) for n in idx.arrays.names.take(ids[~same])]  # the rest one by one
            if any(_rank1(v) != _rank1(want) for v in got):
                raise _Uneven(name)
        self.bias_rel = None if rep.bias_node is None else rep.bias_node - rep.anchor  # the bias Add, from the anchor

    def generated_names(self) -> list[tuple[bytes, np.ndarray]]:
        """The names each NameGen call gets, for every member: per call,
        (the names one after another, their start offsets; one more at the end)."""
        st, m = table_strings(self.idx.arrays), len(self.ss.set)
        return [join(parts, self.ids, st, m) for parts in self.bases]

    def names_in(self, field: int) -> np.ndarray:
        """String ids of the members' names that fill a whole name field
        (1: inputs, 2: outputs) of the replacement (the model's names; a
        generated name, a placeholder with text around it, is new)."""
        keys = {p[1][0][1:] for node in self.nodes for p in node
                if not isinstance(p, bytes) and p[0] == field and len(p[1]) == 1 and p[1][0].startswith(MARK)}
        return np.concatenate([self.ids[k] for k in sorted(keys)]) if keys else np.zeros(0, np.int64)

    def const_ids(self) -> np.ndarray:
        ms = self.ss.set
        return np.concatenate([ms.ids(c) for c in ms.match.consts]) if ms.match.consts else np.zeros(0, np.int64)

    def edits(self) -> list:
        ms = self.ss.set
        t = self.idx.arrays
        buf, off = fill(self.nodes, self.ids, table_strings(t))
        body = buf.tobytes()
        nodes = ms.nodes()
        last = nodes.max(axis=1).tolist()
        use_bias = self.use_bias and self.bias_rel is not None
        removed = np.concatenate([nodes, ms.anchors[:, None] + self.bias_rel], axis=1) if use_bias else nodes
        off = off.tolist()
        return [(last[j], body[off[j]:off[j + 1]], removed[j]) for j in range(len(ms))]


def _flat(parts: list[str], bases: list[str]) -> list[str]:
    """Placeholder parts with each generated name (G<k>) spelled out as its base."""
    out = []
    for p in parts:
        if p.startswith(MARK + "G"):
            out.extend(_flat(split(bases[int(p[2:])]), bases))
        else:
            out.append(p)
    return out


def _rank1(shape) -> bool:
    return shape is not None and len(shape) <= 1


def _splice(g, edits: list, read: np.ndarray, written: np.ndarray, dead: set, tidy: bool) -> None:
    """The graph's node list from the kept node fields and the replacements
    (a node holding subgraphs as it is now: its bodies may have been
    rewritten, inner graphs first); then the dead constants and (``tidy``)
    the value_info no node defines any more."""
    idx = g.index
    t = idx.arrays
    s = t.scan
    graph = idx.graph
    n = t.n
    keep = np.ones(n, bool)
    at: dict[int, bytes] = {}
    for pos, body, removed in edits:
        keep[removed] = False
        at[pos] = body
    drop_init, drop_node = _dead(t, keep, read, dead)
    keep[drop_node] = False
    # runs of kept nodes whose fields lie next to each other in the file,
    # copied as one slice each; the replacements in between, by position
    kept = np.flatnonzero(keep)
    start, end = s.node_start, s.node_end
    nested = set(t.with_subgraphs)  # each such node a run of its own, as it is now (its bodies may have changed)
    if len(kept):
        brk = (np.diff(kept) != 1) | (start[kept[1:]] != end[kept[:-1]])
        if nested:
            own = np.isin(kept, t.with_subgraphs)
            brk |= own[1:] | own[:-1]
        brk = np.flatnonzero(brk) + 1
        firsts, lasts = kept[np.r_[0, brk]], kept[np.r_[brk - 1, len(kept) - 1]]
    else:
        firsts = lasts = kept
    data = s.data
    items = [(f, 1, len_field(graph.node[f].SerializeToString()) if f in nested else data[start[f]:end[la]])
             for f, la in zip(firsts.tolist(), lasts.tolist())]
    items += [(p, 0, body) for p, body in at.items()]
    items.sort(key=lambda it: (it[0], it[1]))
    chunks = [body for _, _, body in items]
    del graph.node[:]
    graph.MergeFromString(b"".join(chunks))
    remove_indices(graph.initializer, set(drop_init))
    if tidy and len(s.vi_name):
        defined = np.zeros(len(t.names), bool)
        defined[s.out_ids[np.repeat(keep, t.out_count)]] = True
        defined[written] = True
        defined[s.input_name] = True
        alive = np.ones(len(s.init_name), bool)
        alive[drop_init] = False
        defined[s.init_name[alive]] = True
        if len(graph.sparse_initializer):
            sparse = s.find_many([x.values.name for x in graph.sparse_initializer])
            defined[sparse[sparse >= 0]] = True
        defined[0] = False
        kept = np.flatnonzero(defined[s.vi_name])
        assert len(graph.value_info) == len(s.vi_name)  # as scanned: nothing before this edits them
        if len(kept) < len(s.vi_name):
            # the kept declarations' fields as written (a dynamo export
            # declares every tensor: thousands of messages not copied one by one)
            data = s.data
            del graph.value_info[:]
            graph.MergeFromString(b"".join(data[a:b] for a, b in zip(s.vi_start[kept].tolist(),
                                                                        s.vi_end[kept].tolist())))


def _dead(t, keep: np.ndarray, emitted_ins: np.ndarray, dead: set) -> tuple[list[int], list[int]]:
    """rewrite.drop_dead_constants on the arrays: of ``dead`` (constants the
    fused regions read), the initializers and single-output producers
    nothing reads any more, then whatever only those read."""
    s = t.scan
    nstr = len(t.names)
    reads = np.repeat(keep, t.in_count)
    readers = np.bincount(s.in_ids[reads], minlength=nstr)
    # every read of an emitted node's input counts once per occurrence
    readers += np.bincount(emitted_ins, minlength=nstr)  # (a name read once is enough to keep it)
    readers[s.output_name] += 1
    gin = np.zeros(nstr, bool)
    gin[s.input_name] = True
    work = t.scan.find_many(sorted(dead)).astype(np.int64)
    work = work[work >= 0]
    seen = np.zeros(nstr, bool)
    drop_init: list[int] = []
    drop_node: list[int] = []
    single = t.out_count == 1
    while len(work):
        work = np.unique(work)
        work = work[(readers[work] == 0) & ~seen[work]]
        if not len(work):
            break
        seen[work] = True
        k = t.init_of[work]
        drop_init.extend(k[(k >= 0) & ~gin[work]].tolist())
        p = t.producer[work]
        p = p[(p >= 0)]
        p = p[keep[p] & single[p]]
        drop_node.extend(p.tolist())
        keep = keep.copy()
        keep[p] = False
        if not len(p):
            break
        mask = np.zeros(t.n, bool)
        mask[p] = True
        ins = s.in_ids[np.repeat(mask, t.in_count)]
        ins = ins[ins != 0]
        np.subtract.at(readers, ins, 1)
        work = ins.astype(np.int64)
    return drop_init, drop_node


def _record(g, res) -> None:
    """The fusions of ``g`` in candidate order: single matches and set members by anchor."""
    idx = g.index
    recs = [record(idx, s.match, s.emission.qualified, s.use_bias, s.compute_type) for s in g.selected]
    keys = [np.array([_key(s.candidate.order, idx.arrays.n) for s in g.selected], np.int64)]
    for ss in g.selected_sets:
        recs.extend(set_records(idx, ss))
        keys.append(ss.set.anchors.astype(np.int64))
    order = np.argsort(np.concatenate(keys), kind="stable").tolist()
    res.fusions.extend([recs[k] for k in order])


def _key(order: tuple, n: int) -> int:
    """A candidate's order (section, position) as one integer."""
    return order[0] * (n + 1) + order[1]


def set_records(idx, ss) -> list[Fusion]:
    """report.record for every member of a SelectedSet."""
    ms, em = ss.set, ss.emission
    t = idx.arrays
    nodes = ms.nodes()
    if ss.use_bias and ms.bias is not None and ms.bias.found:
        probe = ms.bias.probe
        nodes = np.concatenate([ms.anchors[:, None] + (probe.bias_node - probe.anchor), nodes], axis=1)
    labels = t.names.take(t.scan.node_name[nodes.reshape(-1)])
    width = nodes.shape[1]
    flat = nodes.reshape(-1).tolist()
    for k, lab in enumerate(labels):
        if not lab:
            labels[k] = idx.label(flat[k])
    roots = t.names.take(ms.ids(ms.match.root))
    m = ms.match
    dtype = C.FLOAT_DTYPES.get(ss.compute_type, str(ss.compute_type))
    use_bias = ss.use_bias
    return [Fusion(form=m.form, bias=use_bias, alpha=m.alpha, graph=idx.path, root=roots[j],
                   nodes=labels[j * width:(j + 1) * width], dtype=dtype, op=em.qualified) for j in range(len(ms))]
