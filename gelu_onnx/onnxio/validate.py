"""Validation of a parsed model: what the rest of the package relies on
(see docs/safety.md). Every refusal is one InputError / UnsafeModelError line
naming the file."""
from __future__ import annotations

import ntpath
import os
import re
import stat

import onnx
from onnx import TensorProto

from ..errors import InputError, UnsafeModelError
from .format import (DATA_FIELDS, ELEM_BITS, EXTERNAL_KEYS, KNOWN_TYPES, ONNX_DOMAINS, embedded_size_error,
                      tensor_nbytes)
from .arraytable import array_pass
from .onepass import Recheck, Scope, known_ops, norm_domain, one_pass
from .walk import MAX_EXPANDED_NODES, attr_tensors, expanded_nodes, subgraphs, walk_graphs


# What an attribute that refers to a function attribute may hold.
_REFERENCE_FIELDS = frozenset({"name", "ref_attr_name", "type", "doc_string"})


def max_opsets() -> dict[str, int]:
    last = onnx.helper.VERSION_TABLE[-1]  # (release, ir, ai.onnx, ml, training)
    return {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": last[3],
            "ai.onnx.preview.training": last[4]}


def quote(name, limit: int = 120) -> str:
    """Quote a name from a (possibly hostile) file for a one-line message."""
    s = repr(name)
    return s if len(s) <= limit else s[:limit] + "...'"


def one_line(msg: str) -> str:
    return msg.replace("\r", "\\r").replace("\n", "\\n")


def _node_label(node, i: int) -> str:
    name = node.name or f"#{i}"
    return f"{quote(name)} ({quote(node.op_type)[1:-1]})"


class Validator:
    def __init__(self, where: str, base_dir: str | None, scan=None):
        self.where = where
        self.scan = scan  # the model's bytes as the native scanner read them (onnxio.wire), if any
        self.base_dir = base_dir
        self.opsets: dict[str, int] = {}
        self.local_functions: set[tuple[str, str]] = set()
        self.data_files: dict[str, int] = {}  # real path -> size
        self.schema_errors: dict[tuple, str | None] = {}
        # the main graph's nodes as one_pass (NodeTable) or the scanner (ArrayTable) read them
        self.table = None

    def fail(self, msg: str, cls=InputError):
        raise cls(one_line(f"{self.where}: {msg}"))

    def text(self, *values, what: str = "a name"):
        # protobuf hands back bytes for a string field holding invalid UTF-8
        for v in values:
            if isinstance(v, bytes):
                self.fail(f"{what} {quote(v)} is not valid UTF-8 (the file is damaged)")

    # -- model ------------------------------------------------------------
    def model(self, m: onnx.ModelProto):
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
        try:
            if self.scan is not None:
                self.table = array_pass(self, g, self.scan)
            else:  # the in-memory API, a big file's skeleton
                one_pass(self, g, None)
        except (Recheck, InputError):
            self.table = None
            self.graph(g, "", None)  # finds the first fault in graph() order and words it
        for f in m.functions:
            self.function(f)

    def _opsets(self, imports, owner: str) -> dict[str, int]:
        maxes = max_opsets()
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
        # onepass.one_pass checks graphs without calling this: a check added
        # here needs its trigger there too (it raises Recheck, graph() words it).
        self.text(n.op_type, n.domain, n.name, *n.input, *n.output, what="node name")
        self.text(*(a.name for a in n.attribute), what="attribute name")
        for a in n.attribute:
            if a.ref_attr_name:
                self._reference(n, i, a, where, in_function)
        d = norm_domain(n.domain)
        if d not in opsets:
            self.fail(f"node {_node_label(n, i)} in {where} uses domain {quote(n.domain)}, "
                      "which the model does not import (no opset_import entry)")
        if d not in ONNX_DOMAINS or (d, n.op_type) in self.local_functions:
            return  # custom / contrib domains are passed through
        key = (n.op_type, d, opsets[d])
        if key not in self.schema_errors:
            err = None
            try:
                onnx.defs.get_schema(n.op_type, opsets[d], d)
            except Exception:  # onnx's SchemaError
                shown = d or "ai.onnx"
                if onnx.defs.has(n.op_type, d):
                    err = (f"op {quote(n.op_type)} does not exist in {shown} opset "
                           f"{opsets[d]} (it was added in a later opset)")
                else:
                    err = f"unknown op {quote(n.op_type)} in domain {quote(shown)}"
            self.schema_errors[key] = err
        if self.schema_errors[key]:
            self.fail(f"node {_node_label(n, i)} in {where}: {self.schema_errors[key]}")

    def _reference(self, n, i: int, a, where: str, in_function: bool):
        """An attribute naming a function attribute (ref_attr_name) holds no
        data of its own, and exists only in functions (the IR spec): with
        both, one reader takes the reference and another the value (ONNX
        Runtime does one thing, a literal reading the other)."""
        if not in_function:
            self.fail(f"node {_node_label(n, i)} in {where}: attribute {quote(a.name)} refers to a function "
                      f"attribute ({quote(a.ref_attr_name)}) outside any function")
        if any(f.name not in _REFERENCE_FIELDS for f, _ in a.ListFields()):
            self.fail(f"node {_node_label(n, i)} in {where}: attribute {quote(a.name)} refers to function "
                      f"attribute {quote(a.ref_attr_name)} and also holds a value of its own")

    # -- graphs -----------------------------------------------------------
    def graph(self, g, gpath: str, outer: Scope | None) -> set:
        """Check one graph (recursively); return the outer-scope names it reads."""
        where = f"graph {quote(gpath)}" if gpath else "the main graph"
        inputs = set()
        self.text(*(vi.name for vi in (*g.input, *g.output, *g.value_info)),
                  what="value name")
        for vi in g.input:
            if vi.name in inputs:
                self.fail(f"{where} declares input {quote(vi.name)} twice")
            inputs.add(vi.name)
        inits = set()
        for t in g.initializer:
            self.text(t.name, what="initializer name")
            if t.name in inits:
                self.fail(f"{where} has two initializers named {quote(t.name)}")
            inits.add(t.name)
            self.tensor(t)
        for st in g.sparse_initializer:
            name = st.values.name
            self.text(name, what="initializer name")
            if name in inits:
                self.fail(f"{where} has two initializers named {quote(name)}")
            inits.add(name)
            self.tensor(st.values)
            self.tensor(st.indices)
        defined = inputs | inits
        producer: dict = {}
        nodes = g.node
        for i, n in enumerate(nodes):
            for o in n.output:
                if not o:
                    continue  # omitted optional output
                if o in producer:
                    j = producer[o]
                    self.fail(f"tensor {quote(o)} in {where} is produced twice (by node "
                              f"{_node_label(nodes[j], j)} and node {_node_label(n, i)}); "
                              "an ONNX graph must assign each name once")
                if o in defined:
                    self.fail(f"node {_node_label(n, i)} in {where} overwrites graph "
                              f"input/initializer {quote(o)}; an ONNX graph must assign each name once")
                producer[o] = i
        here = Scope(defined | producer.keys(), outer)
        free: set = set()
        deps: list[set] = [set() for _ in nodes]

        def use(name, i, n, via_subgraph=False):
            # the reader's label is built only for the message (most reads are fine)
            if name in producer:
                deps[i].add(producer[name])
            elif name in defined:
                pass
            elif outer is not None and name in outer:
                free.add(name)
            else:
                what = ("a subgraph of node " if via_subgraph else "node ") + _node_label(n, i)
                self.fail(f"{what} in {where} reads {quote(name)}, which is never defined "
                          "(no graph input, initializer or node output has that name)")

        for i, n in enumerate(nodes):
            self.node_op(n, i, self.opsets, where)
            for t in attr_tensors(n.attribute):
                self.tensor(t)
            for x in n.input:
                if x:
                    use(x, i, n)
            for attr, sg in subgraphs(n):
                sub_path = f"{gpath}/{n.name or f'#{i}'}/{attr}".lstrip("/")
                for x in self.graph(sg, sub_path, here):
                    use(x, i, n, via_subgraph=True)
        for o in g.output:
            if o.name in producer or o.name in defined:
                continue
            if outer is not None and o.name in outer:
                free.add(o.name)
                continue
            self.fail(f"graph output {quote(o.name)} of {where} is never defined "
                      "(no input, initializer or node output has that name)")
        self._acyclic(nodes, deps, where)
        return free

    def _acyclic(self, nodes, deps: list[set], where: str):
        users: list[list[int]] = [[] for _ in nodes]
        indeg = [0] * len(nodes)
        for i, ds in enumerate(deps):
            for d in ds:
                users[d].append(i)
                indeg[i] += 1
        ready = [i for i, k in enumerate(indeg) if k == 0]
        done = 0
        while ready:
            i = ready.pop()
            done += 1
            for u in users[i]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    ready.append(u)
        if done == len(nodes):
            return
        # Every node left has an unprocessed dependency: following those must
        # revisit a node, which lies on a cycle.
        i = next(k for k, v in enumerate(indeg) if v > 0)
        seen = set()
        while i not in seen:
            seen.add(i)
            i = next(d for d in deps[i] if indeg[d] > 0)
        self.fail(f"{where} contains a cycle (through node {_node_label(nodes[i], i)})")

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


def validate_model(model: onnx.ModelProto, *, base_dir: str | None = None,
                   where: str = "model") -> tuple[str, ...]:
    """Validate a parsed model (see module doc); return the real paths of the
    external data files it uses.  Raises InputError / UnsafeModelError."""
    return validate_model_table(model, base_dir=base_dir, where=where)[0]


def validate_model_table(model: onnx.ModelProto, *, base_dir: str | None = None, where: str = "model",
                         scan=None) -> tuple[tuple[str, ...], object]:
    """validate_model, and the main graph's nodes as read in one pass: a
    NodeTable, or an ArrayTable when ``scan`` (onnxio.wire.scan of the bytes
    ``model`` was parsed from) was given; None when graph() read them."""
    v = Validator(where, os.path.realpath(base_dir) if base_dir is not None else None, scan)
    try:
        v.model(model)
    except RecursionError:
        v.fail("subgraphs are nested too deeply")
    if model.functions and expanded_nodes(model) > MAX_EXPANDED_NODES:
        v.fail(f"its model-local functions expand to over {MAX_EXPANDED_NODES:,} nodes at their calls "
               "(functions calling functions several times, nested: a call bomb)")
    return tuple(sorted(v.data_files)), v.table
