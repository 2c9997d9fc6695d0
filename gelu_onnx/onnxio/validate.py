"""Validation of a parsed model: what the rest of the package relies on
(see docs/safety.md). Every refusal is one InputError / UnsafeModelError line
naming the file.

A graph is checked once, from the native scanner's arrays of its bytes (the
file's, or its own serialization: an If/Loop/Scan body, an in-memory model):
each check vectorised, the first fault a reader meets worded from the proto.
So a graph of a million nodes is validated without one Python object per
node, and its bodies are scanned and checked together (no call per body)."""
from __future__ import annotations

import ntpath
import os
import re
import stat

import numpy as np
import onnx
from onnx import TensorProto

from ..errors import InputError, UnsafeModelError, UnsupportedError
from .arraytable import ArrayTable, any_per_node, first_repeat, first_true, node_on_cycle, same_counts, unique
from .format import DATA_FIELDS, ELEM_BITS, EXTERNAL_KEYS, KNOWN_TYPES, ONNX_DOMAINS, embedded_size_error, tensor_nbytes
from .walk import MAX_EXPANDED_NODES, attr_tensors, expanded_nodes, norm_domain, subgraphs, walk_graphs
from .wire import NF_REF, NF_SUBGRAPH, OK, SF_BAD_UTF8, declined, scan_graphs


_REFERENCE_FIELDS = frozenset({"name", "ref_attr_name", "type", "doc_string"})  # all a reference may hold


def quote(name, limit: int = 120) -> str:
    """Quote a name from a (possibly hostile) file for a one-line message."""
    s = repr(name)
    return s if len(s) <= limit else s[:limit] + "...'"


def one_line(msg: str) -> str:
    return msg.replace("\r", "\\r").replace("\n", "\\n")


def _node_label(node, i: int) -> str:
    name = node.name or f"#{i}"
    return f"{quote(name)} ({quote(node.op_type)[1:-1]})"


def _in_scope(scope, name) -> bool:
    """Whether an enclosing graph defines ``name``: ``scope`` is None (none),
    or (s, known by string id of s, graph k of s, the scope around it)."""
    while scope is not None:
        s, known, k, scope = scope
        j = s.find(name, k) if isinstance(name, str) else -1
        if j >= 0 and known[j]:
            return True
    return False


def _graph_of(off: np.ndarray, rows):  # the graph of rows of wire.scan_graphs (``off``: their starts)
    return np.searchsorted(off, rows, side="right") - 1


class Validator:
    def __init__(self, where: str, base_dir: str | None):
        self.where = where
        self.base_dir = base_dir
        self.opsets: dict[str, int] = {}
        self.local_functions: set[tuple[str, str]] = set()
        self.data_files: dict[str, int] = {}  # real path -> size
        self.schema_errors: dict[tuple, str | None] = {}

    def fail(self, msg: str, cls=InputError):
        raise cls(one_line(f"{self.where}: {msg}"))

    def text(self, *values, what: str = "a name"):
        for v in values:  # protobuf hands back bytes for a string field holding invalid UTF-8
            if isinstance(v, bytes):
                self.fail(f"{what} {quote(v)} is not valid UTF-8 (the file is damaged)")

    # -- model ------------------------------------------------------------
    def model(self, m: onnx.ModelProto, scan=None) -> ArrayTable | None:
        """Check ``m``; ``scan``: onnxio.wire.scan of the bytes it was parsed
        from, if any. Returns the main graph's ArrayTable of ``scan`` when the fuse
        pass can index it as it is (no subgraph or sparse initializer, nodes in order)."""
        if m.ir_version <= 0:
            self.fail("not an ONNX model: ir_version is missing or invalid "
                      "(the file is damaged or not ONNX)")
        if m.ir_version > onnx.IR_VERSION:
            self.fail(f"IR version {m.ir_version} is newer than onnx "
                      f"{onnx.__version__} supports (at most {onnx.IR_VERSION})")
        if not m.HasField("graph"):
            self.fail("not an ONNX model: it has no graph (the file is damaged or not ONNX)")
        if not m.opset_import:
            self.fail("the model declares no opset_import (the file is damaged, "
                      "or a pre-2017 IR<3 model this tool does not support)")
        self.opsets = self._opsets(m.opset_import, "the model")
        for f in m.functions:
            self.text(f.domain, f.name, f.overload, what="function name")
            key = (norm_domain(f.domain), f.name, f.overload)
            if key[:2] in self.local_functions and not f.overload:
                self.fail(f"model-local function {quote(f.domain)}.{quote(f.name)} is defined twice")
            self.local_functions.add(key[:2])
        g = m.graph
        if not g.node and not g.output:
            self.fail("the graph is empty (no nodes and no outputs)")
        if not g.output:
            self.fail("the graph has no outputs")
        scan = scan if scan is not None and same_counts(g, scan) else None  # else its own bytes are read
        s = self.scan_of([g]) if scan is None else scan
        in_order = self.graph([g], s, [""], [None])[1]
        for f in m.functions:
            self.function(f)
        plain = in_order and not len(g.sparse_initializer) and not (s.node_flags & NF_SUBGRAPH).any()
        return ArrayTable(g, s) if plain and scan is not None and declined(s) is None else None

    def scan_of(self, graphs: list):
        """The scanner's arrays of ``graphs``' own serializations, whatever their names."""
        s = scan_graphs(graphs)
        if s is None or s.status != OK:
            self.fail(declined(s), UnsupportedError)
        return s

    def _opsets(self, imports, owner: str) -> dict[str, int]:
        last = onnx.helper.VERSION_TABLE[-1]  # (release, ir, ai.onnx, ml, training)
        maxes = {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": last[3], "ai.onnx.preview.training": last[4]}
        out: dict[str, int] = {}
        for op in imports:
            self.text(op.domain, what="opset domain")
            d = norm_domain(op.domain)
            shown = d or "ai.onnx"
            if d in out:
                self.fail(f"{owner} imports domain {quote(shown)} twice")
            if op.version <= 0:
                self.fail(f"{owner} imports domain {quote(shown)} at invalid opset version {op.version}")
            if d in maxes and op.version > maxes[d]:
                self.fail(f"opset {op.version} of domain {quote(shown)} is newer than onnx "
                          f"{onnx.__version__} supports (at most {maxes[d]})")
            out[d] = op.version
        return out

    def function(self, f):
        opsets = dict(self.opsets)
        opsets.update(self._opsets(f.opset_import, f"function {quote(f.name)}"))
        for i, n in enumerate(f.node):
            self.node_op(n, i, opsets, f"function {quote(f.name)}", in_function=True)
            for t in attr_tensors(n.attribute):
                self.tensor(t)
            for attr, sg in subgraphs(n):
                # Function bodies may use attribute references and their own
                # inputs inside subgraphs; only tensors and ops are checked.
                for sub in walk_graphs(sg):
                    for t in sub.initializer:
                        self.tensor(t)
                    for j, sn in enumerate(sub.node):
                        self.node_op(sn, j, opsets, f"function {quote(f.name)}", in_function=True)
                        for t in attr_tensors(sn.attribute):
                            self.tensor(t)
        for t in attr_tensors(f.attribute_proto):
            self.tensor(t)

    # -- ops --------------------------------------------------------------
    def node_op(self, n, i: int, opsets: dict[str, int], where: str, in_function: bool = False):
        """A node's names, attribute references and op (graph() finds the node, this words it)."""
        self.text(n.op_type, n.domain, n.name, *n.input, *n.output, what="node name")
        self.text(*(a.name for a in n.attribute), what="attribute name")
        for a in n.attribute:
            if a.ref_attr_name:
                self._reference(n, i, a, where, in_function)
        fault = self.op_fault(n.op_type, n.domain, opsets)
        if fault:
            self.fail(f"node {_node_label(n, i)} in {where}{fault}")

    def op_fault(self, op: str, domain: str, opsets: dict[str, int]) -> str | None:
        """Why a node of ``op`` in ``domain`` is refused at ``opsets`` (the end
        of its line), else None: its domain must be imported and, in an ONNX
        domain, onnx must know the op at that opset (or a local function be it)."""
        d = norm_domain(domain)
        if d not in opsets:
            return f" uses domain {quote(domain)}, which the model does not import (no opset_import entry)"
        if d not in ONNX_DOMAINS or (d, op) in self.local_functions:
            return None  # custom / contrib domains are passed through
        key = (op, d, opsets[d])
        if key not in self.schema_errors:
            err = None
            try:
                onnx.defs.get_schema(op, opsets[d], d)
            except Exception:  # onnx's SchemaError
                shown = d or "ai.onnx"
                if onnx.defs.has(op, d):
                    err = (f": op {quote(op)} does not exist in {shown} opset "
                           f"{opsets[d]} (it was added in a later opset)")
                else:
                    err = f": unknown op {quote(op)} in domain {quote(shown)}"
            self.schema_errors[key] = err
        return self.schema_errors[key]

    def _reference(self, n, i: int, a, where: str, in_function: bool):
        """A reference to a function attribute (ref_attr_name) holds no data
        and exists only in functions (the IR spec): with a value too, ONNX
        Runtime takes the reference, a literal reading the value."""
        if not in_function:
            self.fail(f"node {_node_label(n, i)} in {where}: attribute {quote(a.name)} refers to a function "
                      f"attribute ({quote(a.ref_attr_name)}) outside any function")
        if any(f.name not in _REFERENCE_FIELDS for f, _ in a.ListFields()):
            self.fail(f"node {_node_label(n, i)} in {where}: attribute {quote(a.name)} refers to function "
                      f"attribute {quote(a.ref_attr_name)} and also holds a value of its own")

    # -- graphs -----------------------------------------------------------
    def graph(self, gs: list, s, paths: list, outers: list) -> tuple[list[set], bool]:
        """Check graphs ``gs`` (recursively) from ``s``, the scanner's arrays of
        their bytes, in the order a reader meets their faults: value names,
        inputs, initializers, node outputs, node by node (names, op, attribute
        tensors, reads, subgraphs), graph outputs, cycles. Returns the outer
        names each reads (``outers``: each one's _in_scope), and whether each node
        reads only names written before it. Several graphs (_bodies) are
        one graph of disjoint names, a fault worded as if in the first."""
        where, n, names = f"graph {quote(paths[0])}" if paths[0] else "the main graph", s.n_nodes, s.names
        nodes = gs[0].node if len(gs) == 1 else [x for g in gs for x in g.node]
        frees: list[set] = [set() for _ in gs]
        bad = (s.str_flags & SF_BAD_UTF8) != 0
        any_bad = bool(bad.any())
        inputs, inits = s.input_name, s.init_name
        if any_bad:
            self._utf8(s, np.concatenate([inputs, s.output_name, s.vi_name]), "value name")
        k = first_repeat(inputs)
        if k >= 0:
            self.fail(f"{where} declares input {quote(names[int(inputs[k])])} twice")
        k_text = first_true(bad[inits]) if any_bad else -1
        k_dup = first_repeat(inits)
        stop = min(k for k in (k_text, k_dup, len(inits)) if k >= 0)
        for k in np.flatnonzero(~s.tensors("init_").plain()[:stop]).tolist() if stop else ():
            self.tensor(gs[j := int(_graph_of(s.graph_inits, k))].initializer[k - s.graph_inits[j]])
        if k_text == stop:
            self._utf8(s, inits[stop:], "initializer name")
        if k_dup == stop:
            self.fail(f"{where} has two initializers named {quote(names[int(inits[stop])])}")
        given = np.zeros(len(names), bool)
        given[inputs] = given[inits] = True
        if len(gs[0].sparse_initializer):  # (never in a batch: _bodies)
            given[self._sparse(gs[0], s, where)] = True
        # node outputs: each name written once, never over an input or initializer
        named = np.diff(s.str_off) > 1  # each graph's "" (an omitted optional name) is a NUL alone
        written = named[s.out_ids]
        outs, out_node = s.out_ids[written], np.repeat(np.arange(n), np.diff(s.node_out_off))[written]
        k_twice = -1 if len(unique(outs)) == len(outs) else first_repeat(outs)
        k_over = first_true(given[outs])
        if max(k_twice, k_over) >= 0:
            k = min(k for k in (k_twice, k_over) if k >= 0)
            o, i = int(outs[k]), int(out_node[k])
            if k == k_twice:
                j = int(out_node[np.argmax(outs == o)])
                self.fail(f"tensor {quote(names[o])} in {where} is produced twice (by node "
                          f"{_node_label(nodes[j], j)} and node {_node_label(nodes[i], i)}); "
                          "an ONNX graph must assign each name once")
            self.fail(f"node {_node_label(nodes[i], i)} in {where} overwrites graph "
                      f"input/initializer {quote(names[o])}; an ONNX graph must assign each name once")
        producer = np.full(len(names), -1, np.int64)
        producer[outs] = out_node
        known = given | (producer >= 0)
        # node by node: the first node with each kind of fault (node_op's order, then its reads)
        faults = [n] * 5  # names, attribute names, references, op, reads
        if any_bad:
            faults[0] = first_true(bad[s.node_op] | bad[s.node_dom] | bad[s.node_name]
                               | any_per_node(bad[s.in_ids], s.node_in_off)
                               | any_per_node(bad[s.out_ids], s.node_out_off), n)
            faults[1] = first_true(any_per_node(bad[s.attr_name], s.node_attr_off), n)
        faults[2] = first_true((s.node_flags & NF_REF) != 0, n)
        faults[3] = self._first_bad_op(s, bad, n)
        reader = np.repeat(np.arange(n), np.diff(s.node_in_off))
        unknown = np.flatnonzero(~known[s.in_ids] & named[s.in_ids])
        for p, k in zip(unknown.tolist(), _graph_of(s.graph_nodes, reader[unknown]).tolist()):
            name = s.parsed(int(s.in_ids[p]))
            if not _in_scope(outers[k], name):
                faults[4], unread = int(reader[p]), name
                break
            frees[k].add(name)
        first = min(faults)
        # attribute tensors and subgraphs of the nodes before the first fault
        # (a node's tensors come before its reads, its subgraphs after)
        odd = s.odd_attributes()
        holders = np.flatnonzero(s.node_flags[:first] & NF_SUBGRAPH).tolist()
        scopes = [(s, known, k, outers[k]) for k in range(len(gs))]
        sub_reads, lo = self._bodies(nodes, s, odd, holders, paths, scopes, given, producer, frees)
        self._attr_tensors(nodes, s, odd, lo, first + (faults[4] == first < min(faults[:4])))
        if first < n:
            node = nodes[first]
            if min(faults[:4]) == first:
                self.node_op(node, first, self.opsets, where)
                raise AssertionError("node_op found no fault where the arrays showed one")
            self.fail(f"node {_node_label(node, first)} in {where} reads {quote(unread)}, "
                      "which is never defined (no graph input, initializer or node output has that name)")
        for p in np.flatnonzero(~known[s.output_name]).tolist():
            name, k = s.parsed(int(s.output_name[p])), int(_graph_of(s.graph_outputs, p))
            if not _in_scope(outers[k], name):
                self.fail(f"graph output {quote(name)} of {where} is never defined "
                          "(no input, initializer or node output has that name)")
            frees[k].add(name)
        c = node_on_cycle(n, reader, producer[s.in_ids], sub_reads)
        if c is not None and c >= 0:
            self.fail(f"{where} contains a cycle (through node {_node_label(nodes[c], c)})")
        return frees, c is None

    def _bodies(self, nodes, s, odd, holders: list, paths, scopes, given, producer, frees):
        """The bodies of the nodes ``holders`` (after each node's attribute tensors), scanned and
        checked together; after a fault (in one graph's bodies) one by one, as are bodies with sparse
        initializers. Returns (node, node writing an outer name its body reads) pairs, and the node
        after the last holder."""
        bodies = [(i, attr, sg) for i in holders for attr, sg in subgraphs(nodes[i])]
        singly = [[b] for b in bodies]
        together = len(bodies) > 1 and not any(len(sg.sparse_initializer) for _, _, sg in bodies)
        for groups in ([bodies], singly) if together else (singly,):
            try:
                sub_reads, lo = [], 0  # (node, node writing an outer name its body reads)
                for group in groups:
                    self._attr_tensors(nodes, s, odd, lo, group[-1][0] + 1)
                    lo = group[-1][0] + 1
                    ks = _graph_of(s.graph_nodes, [i for i, _, _ in group]).tolist()
                    at = [f"{paths[k]}/{nodes[i].name or f'#{i - s.graph_nodes[k]}'}/{attr}".lstrip("/")
                          for (i, attr, _), k in zip(group, ks)]
                    gs = [sg for _, _, sg in group]
                    for (i, _, _), k, free in zip(group, ks, self.graph(gs, self.scan_of(gs), at,
                                                                        [scopes[k] for k in ks])[0]):
                        for x in free:
                            j = s.find(x, k)
                            if j >= 0 and producer[j] >= 0:
                                sub_reads.append((i, int(producer[j])))
                            elif not (j >= 0 and given[j]):  # the body found it in an outer graph
                                frees[k].add(x)
                return sub_reads, lo
            except (InputError, UnsupportedError):
                if groups is singly or len(paths) > 1:
                    raise

    def _utf8(self, s, ids: np.ndarray, what: str):
        """Refuse the first of the string ids ``ids`` that is not UTF-8, if any."""
        self.text(*(s.names.raw(i) for i in ids[(s.str_flags[ids] & SF_BAD_UTF8) != 0][:1].tolist()), what=what)

    def _sparse(self, g, s, where: str) -> list[int]:
        """The sparse initializers' checks (the scan leaves them out); their names' string ids."""
        inits = set(s.names.take(s.init_name))
        for st in g.sparse_initializer:
            name = st.values.name
            self.text(name, what="initializer name")
            if name in inits:
                self.fail(f"{where} has two initializers named {quote(name)}")
            inits.add(name)
            self.tensor(st.values)
            self.tensor(st.indices)
        ids = s.find_many([st.values.name for st in g.sparse_initializer])
        return ids[ids >= 0].tolist()

    def _first_bad_op(self, s, bad: np.ndarray, n: int) -> int:
        """The first node whose (op, domain) op_fault refuses, else n."""
        kind = s.node_op.astype(np.int64) << 32 | s.node_dom.astype(np.int64)
        wrong = [k for k in unique(kind).tolist() if not (bad[k >> 32] or bad[k & 0xFFFFFFFF])
                 and self.op_fault(s.names[k >> 32], s.names[k & 0xFFFFFFFF], self.opsets)]
        return first_true(np.isin(kind, wrong), n) if wrong else n

    def _attr_tensors(self, nodes, s, odd: np.ndarray, lo: int, hi: int):
        """Validator.tensor for the attribute tensors of nodes lo..hi-1 the
        vectorised check leaves (``odd``: wire.Scan.odd_attributes)."""
        if hi <= lo or not len(odd):
            return
        first, last = s.node_attr_off[lo], s.node_attr_off[min(hi, s.n_nodes)]
        for a in odd[(odd >= first) & (odd < last)].tolist():
            i = int(np.searchsorted(s.node_attr_off, a, side="right")) - 1
            for t in attr_tensors([nodes[i].attribute[a - int(s.node_attr_off[i])]]):
                self.tensor(t)

    # -- tensors and external data ---------------------------------------
    def tensor(self, t: TensorProto):
        if t.data_type not in KNOWN_TYPES:  # the checker lets these through; runtimes refuse them
            self.fail(f"tensor {quote(t.name)} has an unknown element type {t.data_type}")
        loc = t.data_location
        if loc not in (TensorProto.DEFAULT, TensorProto.EXTERNAL):
            self.fail(f"tensor {quote(t.name)} has an invalid data_location {loc}")
        if loc == TensorProto.DEFAULT:
            if len(t.external_data):
                self.fail(f"tensor {quote(t.name)} has external_data entries but is not "
                          "marked as external (data_location)", UnsafeModelError)
            err = embedded_size_error(t)
            if err:
                self.fail(f"tensor {quote(t.name)}: {err}")
            return
        info: dict = {}
        for e in t.external_data:
            self.text(e.key, e.value, what="external_data entry")
            if e.key in info:
                self.fail(f"tensor {quote(t.name)} repeats external_data key {quote(e.key)}",
                          UnsafeModelError)
            if e.key not in EXTERNAL_KEYS:
                self.fail(f"tensor {quote(t.name)} has unknown external_data key {quote(e.key)} "
                          f"(allowed: {', '.join(sorted(EXTERNAL_KEYS))})", UnsafeModelError)
            info[e.key] = e.value
        for f in DATA_FIELDS:
            if (t.HasField(f) if f == "raw_data" else len(getattr(t, f))):
                self.fail(f"tensor {quote(t.name)} is marked external but also holds "
                          "embedded data")
        if t.data_type == TensorProto.STRING:
            self.fail(f"string tensor {quote(t.name)} cannot use external data")
        location = info.get("location")
        if not location:
            self.fail(f"tensor {quote(t.name)} is marked external but has no location")
        offset = self._int(info.get("offset", "0"), "offset", t)
        length = info.get("length")
        length = None if length is None else self._int(length, "length", t)
        nbytes = tensor_nbytes(t)
        if any(d < 0 for d in t.dims):
            self.fail(f"tensor {quote(t.name)} has a negative dimension")
        if nbytes is None:
            self.fail(f"tensor {quote(t.name)} has data_type {t.data_type}, "
                      "which cannot be stored as external data")
        if length is not None and length != nbytes and ELEM_BITS[t.data_type] % 8 == 0:
            self.fail(f"tensor {quote(t.name)}: external length {length} does not match its "
                      f"shape and type ({nbytes} bytes)")
        real = self.resolve(location, t.name)
        size = self.data_files[real]
        need = nbytes if length is None else max(length, nbytes)
        if offset + need > size:
            self.fail(f"tensor {quote(t.name)}: external data {quote(location)} is {size} bytes, "
                      f"but the tensor needs bytes {offset}..{offset + need}")

    def _int(self, value, key, t) -> int:
        if not isinstance(value, str) or not re.fullmatch(r"[0-9]{1,19}", value):
            self.fail(f"tensor {quote(t.name)} has an invalid external_data {key} {quote(value)}")
        return int(value)

    def resolve(self, location, tensor_name) -> str:
        """Real path of an external-data location, refused unless it is a
        regular file inside the model folder.  Never opens anything."""
        what = f"external data {quote(location)} of tensor {quote(tensor_name)}"
        if not isinstance(location, str) or "\x00" in location:
            self.fail(f"{what} is not a valid file name", UnsafeModelError)
        if (os.path.isabs(location) or location.startswith(("/", "\\"))
                or ntpath.splitdrive(location)[0]):
            self.fail(f"{what} is an absolute path; only paths relative to the "
                      "model's folder are allowed", UnsafeModelError)
        if ".." in re.split(r"[\\/]", location):
            self.fail(f"{what} contains '..'; only paths inside the model's folder "
                      "are allowed", UnsafeModelError)
        if self.base_dir is None:
            self.fail(f"{what}: the model uses external data but no model folder is "
                      "known (load it from a file, or pass base_dir)")
        real = os.path.realpath(os.path.join(self.base_dir, location))
        if real in self.data_files:
            return real
        if real == self.base_dir or os.path.commonpath([real, self.base_dir]) != self.base_dir:
            self.fail(f"{what} resolves to {quote(real)}, outside the model's folder "
                      f"{quote(self.base_dir)} (through a symlink)", UnsafeModelError)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            self.fail(f"{what}: file not found in {quote(self.base_dir)}")
        except OSError as e:
            self.fail(f"{what}: cannot access it ({e.strerror})")
        if not stat.S_ISREG(st.st_mode):
            self.fail(f"{what} is not a regular file", UnsafeModelError)
        if st.st_nlink > 1:  # onnx >= 1.23 refuses these too ("potential hardlink attack")
            self.fail(f"{what} has {st.st_nlink} hard links; onnx refuses such external data files "
                      "(copy it: cp --no-preserve=links)", UnsafeModelError)
        self.data_files[real] = st.st_size
        return real


def validate_model(model: onnx.ModelProto, *, base_dir: str | None = None, where: str = "model",
                   scan=None) -> tuple[tuple[str, ...], ArrayTable | None]:
    """Validate a parsed model (see module doc; InputError / UnsafeModelError):
    the real paths of the external data files it uses, and the main graph's
    ArrayTable (Validator.model) when ``scan`` (onnxio.wire.scan of the bytes
    ``model`` was parsed from) is given."""
    v = Validator(where, os.path.realpath(base_dir) if base_dir is not None else None)
    try:
        table = v.model(model, scan)
    except RecursionError:
        v.fail("subgraphs are nested too deeply")
    if model.functions and expanded_nodes(model) > MAX_EXPANDED_NODES:
        v.fail(f"its model-local functions expand to over {MAX_EXPANDED_NODES:,} nodes at their calls "
               "(functions calling functions several times, nested: a call bomb)")
    return tuple(sorted(v.data_files)), table
