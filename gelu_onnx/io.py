"""Safe model I/O: the only way gelu_onnx reads and writes ONNX files.

Reading (``load_model`` / ``load_model_proto``) parses the graph only — weight
payloads kept in external data files are never read — and validates what the
rest of the package relies on: a real ModelProto (not garbage that protobuf
happened to accept), IR/opset versions this onnx knows, declared domains,
known ``ai.onnx`` ops, SSA names, no dangling references, no cycles, and every
external-data reference (relative, no ``..``, no symlink leaving the model's
folder, a regular file large enough for the tensor).  Every refusal is one
``InputError`` / ``UnsafeModelError`` line naming the file.

Passed through on purpose (legal ONNX that the fuse pass leaves alone): ops in
any declared non-ONNX domain (``com.microsoft``, custom domains), nodes that
are acyclic but not topologically ordered (ONNX Runtime sorts them itself),
subgraphs that read outer-scope names, IR versions newer than a runtime loads
(see ``lower_ir_version``).

Writing (``save_model``) goes to a temporary file in the target folder and is
``os.replace``d into place; on any failure the temporaries are removed.  The
input model (and its data files) are never overwritten unless asked for.
Weights that live in external files stay there: the output references the
same relative locations, and when it goes to another folder the data files are
cloned next to it (a copy-on-write reflink where the filesystem has them,
else a copy; never a hard link, which onnx >= 1.23 refuses), so the output
folder is self-contained.  A model whose embedded tensors would exceed
protobuf's 2 GB limit is written with those tensors in ``<name>.data``.
See docs/safety.md.
"""
from __future__ import annotations

import contextlib
import mmap
import ntpath
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Iterator

import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import TensorProto

from .errors import GeluOnnxError, InputError, MissingFileError, UnsafeModelError, UnsupportedError

# Files at least this large are mapped rather than read (and go the splice
# skeleton path, gelu_onnx/splice.py, which uses the same bound).
MMAP_MIN_BYTES = 64 << 20
# Protobuf cannot serialize or parse a message of 2 GiB or more.
MAX_PROTO_BYTES = 2**31 - 1
# Embedded tensors at least this large move to the data file when a model
# must be written with external data (onnx.save's default threshold).
EXTERNAL_SIZE_THRESHOLD = 1024
# Offsets of tensors we write are aligned so runtimes can mmap them.
EXTERNAL_ALIGN = 4096
# The keys the ONNX spec defines for TensorProto.external_data.  Anything else
# is refused: old onnx copied unknown keys onto its reader object (e.g.
# "basepath"), which is how CVE-2024-27318-style escapes worked.
EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum"})

# Domains whose ops onnx knows the schemas of; ops in them must exist.
_ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")

# Bits per element for fixed-width types (STRING / UNDEFINED absent).
_T = TensorProto
_ELEM_BITS = {
    _T.FLOAT: 32, _T.UINT8: 8, _T.INT8: 8, _T.UINT16: 16, _T.INT16: 16,
    _T.INT32: 32, _T.INT64: 64, _T.BOOL: 8, _T.FLOAT16: 16, _T.DOUBLE: 64,
    _T.UINT32: 32, _T.UINT64: 64, _T.COMPLEX64: 64, _T.COMPLEX128: 128,
    _T.BFLOAT16: 16,
}
# Newer element types, each with the IR version that introduced it (looked up
# by name so an older onnx without the enum value still imports this module).
_ELEM_MIN_IR = {}
for _name, _bits, _ir in (
    ("FLOAT8E4M3FN", 8, 9), ("FLOAT8E4M3FNUZ", 8, 9), ("FLOAT8E5M2", 8, 9),
    ("FLOAT8E5M2FNUZ", 8, 9), ("UINT4", 4, 10), ("INT4", 4, 10),
    ("FLOAT4E2M1", 4, 11), ("FLOAT8E8M0", 8, 12), ("UINT2", 2, 13),
    ("INT2", 2, 13), ("FLOAT6E2M3", 6, 14), ("FLOAT6E3M2", 6, 14),
):
    if hasattr(_T, _name):
        _ELEM_BITS[getattr(_T, _name)] = _bits
        _ELEM_MIN_IR[getattr(_T, _name)] = _ir
# Fields that hold a tensor's data when it is not external.
_DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data",
                "int64_data", "double_data", "uint64_data")


def _max_opsets() -> dict[str, int]:
    last = onnx.helper.VERSION_TABLE[-1]  # (release, ir, ai.onnx, ml, training)
    return {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": last[3],
            "ai.onnx.preview.training": last[4]}


# --------------------------------------------------------------------------
# results


@dataclass
class LoadedModel:
    """A parsed, validated model and where it came from.

    ``path`` is the absolute path of the file (None for an in-memory model);
    ``base_dir`` the real path of the folder its external data resolve
    against; ``external_files`` the real paths of the data files it uses (all
    checked to be regular files inside ``base_dir``).  Weight payloads in those
    files were not read.
    """

    model: onnx.ModelProto
    path: str | None = None
    base_dir: str | None = None
    external_files: tuple[str, ...] = ()
    file_size: int = 0

    @property
    def has_external_data(self) -> bool:
        return bool(self.external_files)

    def save(self, model: onnx.ModelProto, out_path, *,
             overwrite_input: bool = False, keep_backups: bool = False) -> "SavedModel":
        """``save_model`` with this model as the source (input protected)."""
        return save_model(model, out_path, source=self,
                          overwrite_input=overwrite_input, keep_backups=keep_backups)


@dataclass
class SavedModel:
    """What ``save_model`` wrote.  ``notes`` are one-line messages for the log."""

    path: str
    data_files: list[str] = field(default_factory=list)  # data files in the output folder
    linked: list[str] = field(default_factory=list)      # reflink-cloned from the source folder
    copied: list[str] = field(default_factory=list)      # copied (no reflink possible)
    externalized: int = 0                                # tensors moved out (> 2 GB model)
    notes: list[str] = field(default_factory=list)
    # (backup, final): what the write replaced, kept (hard links) until
    # commit(); rollback() puts it back, so a failure after writing (the
    # checker on a big model) leaves every pre-existing file as it was.
    backups: list[tuple[str, str]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)

    def commit(self) -> None:
        for bak, _ in self.backups:
            with contextlib.suppress(OSError):
                os.unlink(bak)
        self.backups.clear()

    def rollback(self) -> None:
        """Remove what this write created and restore what it replaced."""
        for f in self.created:
            with contextlib.suppress(OSError):
                os.unlink(f)
        for bak, final in self.backups:
            with contextlib.suppress(OSError):
                os.replace(bak, final)
        self.backups.clear()


# --------------------------------------------------------------------------
# helpers


def _q(name, limit: int = 120) -> str:
    """Quote a name from a (possibly hostile) file for a one-line message."""
    s = repr(name)
    return s if len(s) <= limit else s[:limit] + "...'"


def _one_line(msg: str) -> str:
    return msg.replace("\r", "\\r").replace("\n", "\\n")


def _norm_domain(d) -> str:
    return "" if d in ("", "ai.onnx") else d


def _node_label(node, i: int) -> str:
    name = node.name or f"#{i}"
    return f"{_q(name)} ({_q(node.op_type)[1:-1]})"


def _subgraphs(node) -> Iterator[tuple[str, onnx.GraphProto]]:
    for a in node.attribute:
        if a.HasField("g"):
            yield a.name, a.g
        for k, g in enumerate(a.graphs):
            yield f"{a.name}[{k}]", g


def _attr_tensors(attrs) -> Iterator[TensorProto]:
    for a in attrs:
        if a.HasField("t"):
            yield a.t
        yield from a.tensors
        if a.HasField("sparse_tensor"):
            yield a.sparse_tensor.values
            yield a.sparse_tensor.indices
        for st in a.sparse_tensors:
            yield st.values
            yield st.indices


def iter_graphs(model: onnx.ModelProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """Every graph with its path ('' = main, 'If_0/then_branch' ...), functions' subgraphs included."""

    def walk(g, path):
        yield path, g
        for i, n in enumerate(g.node):
            for attr, sg in _subgraphs(n):
                yield from walk(sg, f"{path}/{n.name or f'#{i}'}/{attr}".lstrip("/"))

    yield from walk(model.graph, "")
    for f in model.functions:
        for i, n in enumerate(f.node):
            for attr, sg in _subgraphs(n):
                yield from walk(sg, f"{f.domain}.{f.name}/{n.name or f'#{i}'}/{attr}")


def iter_tensors(model: onnx.ModelProto) -> Iterator[TensorProto]:
    """Every TensorProto in the model: initializers, sparse initializers,
    tensor attributes (Constant values) — in subgraphs and functions too."""
    for _, g in iter_graphs(model):
        yield from g.initializer
        for st in g.sparse_initializer:
            yield st.values
            yield st.indices
        for n in g.node:
            yield from _attr_tensors(n.attribute)
    for f in model.functions:
        for n in f.node:
            yield from _attr_tensors(n.attribute)
        yield from _attr_tensors(f.attribute_proto)


def embedded_bytes(model: onnx.ModelProto) -> int:
    """Bytes of tensor data stored inside the model, from shapes and field
    lengths — no payload is copied (unlike ByteSize(), which serializes)."""
    total = 0
    for t in iter_tensors(model):
        if _is_external(t):
            continue
        if t.HasField("raw_data"):
            n = tensor_nbytes(t)
            total += n if n is not None else len(t.raw_data)
        total += 4 * (len(t.float_data) + len(t.int32_data))
        total += 8 * (len(t.int64_data) + len(t.double_data) + len(t.uint64_data))
        total += sum(len(x) for x in t.string_data)
    return total


def _is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def _external_info(t: TensorProto) -> dict:
    return {e.key: e.value for e in t.external_data}


def tensor_nbytes(t: TensorProto) -> int | None:
    """Payload size of a fixed-width tensor from dims and type, else None."""
    bits = _ELEM_BITS.get(t.data_type)
    if bits is None:
        return None
    n = 1
    for d in t.dims:
        n *= d
    return (n * bits + 7) // 8


# --------------------------------------------------------------------------
# validation


class _Scope:
    """Names visible from a subgraph: its enclosing graphs' names, innermost first."""

    def __init__(self, names, parent: "_Scope | None"):
        self.names, self.parent = names, parent

    def __contains__(self, name) -> bool:
        s = self
        while s is not None:
            if name in s.names:
                return True
            s = s.parent
        return False


class _Validator:
    def __init__(self, where: str, base_dir: str | None):
        self.where = where
        self.base_dir = base_dir
        self.opsets: dict[str, int] = {}
        self.local_functions: set[tuple[str, str]] = set()
        self.data_files: dict[str, int] = {}  # real path -> size
        self._schema_ok: dict[tuple, str | None] = {}

    def fail(self, msg: str, cls=InputError):
        raise cls(_one_line(f"{self.where}: {msg}"))

    def text(self, *values, what: str = "a name"):
        # protobuf hands back bytes for a string field holding invalid UTF-8
        for v in values:
            if isinstance(v, bytes):
                self.fail(f"{what} {_q(v)} is not valid UTF-8 (the file is damaged)")

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
            key = (_norm_domain(f.domain), f.name, f.overload)
            if key[:2] in self.local_functions and not f.overload:
                self.fail(f"model-local function {_q(f.domain)}.{_q(f.name)} is defined twice")
            self.local_functions.add(key[:2])
        g = m.graph
        if not g.node and not g.output:
            self.fail("the graph is empty (no nodes and no outputs)")
        if not g.output:
            self.fail("the graph has no outputs")
        self.graph(g, "", None)
        for f in m.functions:
            self.function(f)

    def _opsets(self, imports, owner: str) -> dict[str, int]:
        maxes = _max_opsets()
        out: dict[str, int] = {}
        for op in imports:
            self.text(op.domain, what="opset domain")
            d = _norm_domain(op.domain)
            shown = d or "ai.onnx"
            if d in out:
                self.fail(f"{owner} imports domain {_q(shown)} twice")
            if op.version <= 0:
                self.fail(f"{owner} imports domain {_q(shown)} at invalid opset version {op.version}")
            if d in maxes and op.version > maxes[d]:
                self.fail(f"opset {op.version} of domain {_q(shown)} is newer than onnx "
                          f"{onnx.__version__} supports (at most {maxes[d]})")
            out[d] = op.version
        return out

    def function(self, f):
        opsets = dict(self.opsets)
        opsets.update(self._opsets(f.opset_import, f"function {_q(f.name)}"))
        for i, n in enumerate(f.node):
            self.node_op(n, i, opsets, f"function {_q(f.name)}")
            for t in _attr_tensors(n.attribute):
                self.tensor(t)
            for attr, sg in _subgraphs(n):
                # Function bodies may use attribute references and their own
                # inputs inside subgraphs; only tensors and ops are checked.
                for _, sub in _walk_plain(sg):
                    for t in sub.initializer:
                        self.tensor(t)
                    for j, sn in enumerate(sub.node):
                        self.node_op(sn, j, opsets, f"function {_q(f.name)}")
                        for t in _attr_tensors(sn.attribute):
                            self.tensor(t)
        for t in _attr_tensors(f.attribute_proto):
            self.tensor(t)

    # -- ops --------------------------------------------------------------
    def node_op(self, n, i: int, opsets: dict[str, int], where: str):
        self.text(n.op_type, n.domain, n.name, *n.input, *n.output, what="node name")
        self.text(*(a.name for a in n.attribute), what="attribute name")
        d = _norm_domain(n.domain)
        if d not in opsets:
            self.fail(f"node {_node_label(n, i)} in {where} uses domain {_q(n.domain)}, "
                      "which the model does not import (no opset_import entry)")
        if d not in _ONNX_DOMAINS or (d, n.op_type) in self.local_functions:
            return  # custom / contrib domains are passed through
        key = (n.op_type, d, opsets[d])
        if key not in self._schema_ok:
            err = None
            try:
                onnx.defs.get_schema(n.op_type, opsets[d], d)
            except Exception:  # onnx's SchemaError
                shown = d or "ai.onnx"
                if onnx.defs.has(n.op_type, d):
                    err = (f"op {_q(n.op_type)} does not exist in {shown} opset "
                           f"{opsets[d]} (it was added in a later opset)")
                else:
                    err = f"unknown op {_q(n.op_type)} in domain {_q(shown)}"
            self._schema_ok[key] = err
        if self._schema_ok[key]:
            self.fail(f"node {_node_label(n, i)} in {where}: {self._schema_ok[key]}")

    # -- graphs -----------------------------------------------------------
    def graph(self, g, gpath: str, outer: _Scope | None) -> set:
        """Check one graph (recursively); return the outer-scope names it reads."""
        where = f"graph {_q(gpath)}" if gpath else "the main graph"
        inputs = set()
        self.text(*(vi.name for vi in (*g.input, *g.output, *g.value_info)),
                  what="value name")
        for vi in g.input:
            if vi.name in inputs:
                self.fail(f"{where} declares input {_q(vi.name)} twice")
            inputs.add(vi.name)
        inits = set()
        for t in g.initializer:
            self.text(t.name, what="initializer name")
            if t.name in inits:
                self.fail(f"{where} has two initializers named {_q(t.name)}")
            inits.add(t.name)
            self.tensor(t)
        for st in g.sparse_initializer:
            name = st.values.name
            self.text(name, what="initializer name")
            if name in inits:
                self.fail(f"{where} has two initializers named {_q(name)}")
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
                    self.fail(f"tensor {_q(o)} in {where} is produced twice (by node "
                              f"{_node_label(nodes[j], j)} and node {_node_label(n, i)}); "
                              "an ONNX graph must assign each name once")
                if o in defined:
                    self.fail(f"node {_node_label(n, i)} in {where} overwrites graph "
                              f"input/initializer {_q(o)}; an ONNX graph must assign each name once")
                producer[o] = i
        here = _Scope(defined | producer.keys(), outer)
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
                self.fail(f"{what} in {where} reads {_q(name)}, which is never defined "
                          "(no graph input, initializer or node output has that name)")

        for i, n in enumerate(nodes):
            self.node_op(n, i, self.opsets, where)
            for t in _attr_tensors(n.attribute):
                self.tensor(t)
            for x in n.input:
                if x:
                    use(x, i, n)
            for attr, sg in _subgraphs(n):
                sub_path = f"{gpath}/{n.name or f'#{i}'}/{attr}".lstrip("/")
                for x in self.graph(sg, sub_path, here):
                    use(x, i, n, via_subgraph=True)
        for o in g.output:
            if o.name in producer or o.name in defined:
                continue
            if outer is not None and o.name in outer:
                free.add(o.name)
                continue
            self.fail(f"graph output {_q(o.name)} of {where} is never defined "
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
        loc = t.data_location
        if loc not in (TensorProto.DEFAULT, TensorProto.EXTERNAL):
            self.fail(f"tensor {_q(t.name)} has an invalid data_location {loc}")
        if loc == TensorProto.DEFAULT:
            if len(t.external_data):
                self.fail(f"tensor {_q(t.name)} has external_data entries but is not "
                          "marked as external (data_location)", UnsafeModelError)
            return
        info: dict = {}
        for e in t.external_data:
            self.text(e.key, e.value, what="external_data entry")
            if e.key in info:
                self.fail(f"tensor {_q(t.name)} repeats external_data key {_q(e.key)}",
                          UnsafeModelError)
            if e.key not in EXTERNAL_KEYS:
                self.fail(f"tensor {_q(t.name)} has unknown external_data key {_q(e.key)} "
                          f"(allowed: {', '.join(sorted(EXTERNAL_KEYS))})", UnsafeModelError)
            info[e.key] = e.value
        for f in _DATA_FIELDS:
            if (t.HasField(f) if f == "raw_data" else len(getattr(t, f))):
                self.fail(f"tensor {_q(t.name)} is marked external but also holds "
                          "embedded data")
        if t.data_type == TensorProto.STRING:
            self.fail(f"string tensor {_q(t.name)} cannot use external data")
        location = info.get("location")
        if not location:
            self.fail(f"tensor {_q(t.name)} is marked external but has no location")
        offset = self._int(info.get("offset", "0"), "offset", t)
        length = info.get("length")
        length = None if length is None else self._int(length, "length", t)
        nbytes = tensor_nbytes(t)
        if any(d < 0 for d in t.dims):
            self.fail(f"tensor {_q(t.name)} has a negative dimension")
        if nbytes is None:
            self.fail(f"tensor {_q(t.name)} has data_type {t.data_type}, "
                      "which cannot be stored as external data")
        if length is not None and length != nbytes and _ELEM_BITS[t.data_type] % 8 == 0:
            self.fail(f"tensor {_q(t.name)}: external length {length} does not match its "
                      f"shape and type ({nbytes} bytes)")
        real = self.resolve(location, t.name)
        size = self.data_files[real]
        need = nbytes if length is None else max(length, nbytes)
        if offset + need > size:
            self.fail(f"tensor {_q(t.name)}: external data {_q(location)} is {size} bytes, "
                      f"but the tensor needs bytes {offset}..{offset + need}")

    def _int(self, value, key, t) -> int:
        if not isinstance(value, str) or not re.fullmatch(r"[0-9]{1,19}", value):
            self.fail(f"tensor {_q(t.name)} has an invalid external_data {key} {_q(value)}")
        return int(value)

    def resolve(self, location, tensor_name) -> str:
        """Real path of an external-data location, refused unless it is a
        regular file inside the model folder.  Never opens anything."""
        what = f"external data {_q(location)} of tensor {_q(tensor_name)}"
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
            self.fail(f"{what} resolves to {_q(real)}, outside the model's folder "
                      f"{_q(self.base_dir)} (through a symlink)", UnsafeModelError)
        try:
            st = os.stat(real)
        except FileNotFoundError:
            self.fail(f"{what}: file not found in {_q(self.base_dir)}")
        except OSError as e:
            self.fail(f"{what}: cannot access it ({e.strerror})")
        if not stat.S_ISREG(st.st_mode):
            self.fail(f"{what} is not a regular file", UnsafeModelError)
        if st.st_nlink > 1:  # onnx >= 1.23 refuses these too ("potential hardlink attack")
            self.fail(f"{what} has {st.st_nlink} hard links; onnx refuses such external data files "
                      "(copy it: cp --no-preserve=links)", UnsafeModelError)
        self.data_files[real] = st.st_size
        return real


def _walk_plain(g) -> Iterator[tuple[str, onnx.GraphProto]]:
    yield "", g
    for n in g.node:
        for _, sg in _subgraphs(n):
            yield from _walk_plain(sg)


def validate_model(model: onnx.ModelProto, *, base_dir: str | None = None,
                   where: str = "model") -> tuple[str, ...]:
    """Validate a parsed model (see module doc); return the real paths of the
    external data files it uses.  Raises InputError / UnsafeModelError."""
    v = _Validator(where, os.path.realpath(base_dir) if base_dir is not None else None)
    try:
        v.model(model)
    except RecursionError:
        v.fail("subgraphs are nested too deeply")
    return tuple(sorted(v.data_files))


# --------------------------------------------------------------------------
# loading


def _read(path: str, size: int) -> memoryview | bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)  # the file we opened, not the one we stat'ed before
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError("not a regular file")
        if size < MMAP_MIN_BYTES:
            # A mapped file truncated by another process while we parse it
            # kills us with SIGBUS: small files (all but the skeleton path's)
            # are read instead.
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read()
        try:
            # mmap avoids a second in-memory copy of the file and parses
            # ~2x faster than read(); fall back where mmap is not possible.
            return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        except (OSError, ValueError):
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read()
    finally:
        os.close(fd)


def load_model(path) -> LoadedModel:
    """Read and validate an ONNX file; external weight payloads are not read.

    Returns a LoadedModel; raises InputError (exit 2) / UnsafeModelError (exit
    2) with one line naming the file on anything malformed or unsafe.
    """
    try:
        shown = os.fspath(path)
    except TypeError:
        raise InputError(f"expected a model path, got {type(path).__name__}") from None
    if isinstance(shown, bytes):
        shown = os.fsdecode(shown)
    where = _one_line(shown)
    if not shown:
        raise InputError("empty model path")
    if "\x00" in shown:
        raise InputError(f"{where!r}: not a valid path")
    try:
        st = os.stat(shown)
    except FileNotFoundError:
        raise MissingFileError(f"{where}: no such file") from None
    except OSError as e:
        raise InputError(f"{where}: cannot access it ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{where}: is a directory, not an ONNX file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{where}: not a regular file")
    if st.st_size == 0:
        raise InputError(f"{where}: empty file, not an ONNX model")
    if st.st_size > MAX_PROTO_BYTES:
        raise InputError(
            f"{where}: {st.st_size / 2**30:.1f} GiB in one file; protobuf cannot hold "
            "more than 2 GiB, so models this large must keep their weights in "
            "external data files")
    apath = os.path.abspath(shown)
    try:
        data = _read(apath, st.st_size)
    except OSError as e:
        raise InputError(f"{where}: cannot read it ({e.strerror or e})") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError, TypeError):
        raise InputError(f"{where}: not a valid ONNX model (protobuf parse failed: "
                         "truncated, damaged or not ONNX)") from None
    finally:
        if isinstance(data, memoryview):
            mm = data.obj
            data.release()
            mm.close()
    base = os.path.realpath(os.path.dirname(apath))
    files = validate_model(model, base_dir=base, where=where)
    return LoadedModel(model, apath, base, files, st.st_size)


def load_model_proto(model_or_path, *, base_dir=None) -> LoadedModel:
    """Like load_model, also for an in-memory ModelProto or serialized bytes.

    A ModelProto is validated as is (not copied); ``base_dir`` is the folder
    its external-data locations are relative to (needed only if it has any).
    """
    if isinstance(model_or_path, onnx.ModelProto):
        files = validate_model(model_or_path, base_dir=base_dir, where="model")
        base = os.path.realpath(base_dir) if base_dir is not None else None
        return LoadedModel(model_or_path, None, base, files, 0)
    if isinstance(model_or_path, (bytes, bytearray, memoryview)):
        model = onnx.ModelProto()
        try:
            model.ParseFromString(model_or_path)
        except (DecodeError, ValueError, RuntimeError, TypeError):
            raise InputError("model bytes: not a valid ONNX model (protobuf parse failed)") from None
        files = validate_model(model, base_dir=base_dir, where="model bytes")
        base = os.path.realpath(base_dir) if base_dir is not None else None
        return LoadedModel(model, None, base, files, len(model_or_path))
    if isinstance(model_or_path, LoadedModel):
        return model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        return load_model(model_or_path)
    raise InputError(f"expected an onnx.ModelProto or a path, got {type(model_or_path).__name__}")


def tensor_array(t: TensorProto, base_dir=None):
    """numpy value of a tensor; an external one is read (only its own byte
    range) after the same checks as loading — for the few small constants a
    caller needs, never for a whole model's weights."""
    from onnx import numpy_helper

    if not _is_external(t):
        return numpy_helper.to_array(t)
    v = _Validator(f"tensor {_q(t.name)}",
                   os.path.realpath(base_dir) if base_dir is not None else None)
    v.tensor(t)
    info = _external_info(t)
    real = v.resolve(info["location"], t.name)
    offset, nbytes = int(info.get("offset", "0")), tensor_nbytes(t)
    fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            v.fail("external data is not a regular file", UnsafeModelError)
        raw = os.pread(fd, nbytes, offset)
    finally:
        os.close(fd)
    if len(raw) != nbytes:
        v.fail(f"external data {_q(info['location'])} ended early")
    local = TensorProto()
    local.name, local.data_type = t.name, t.data_type
    local.dims.extend(t.dims)
    local.raw_data = raw
    return numpy_helper.to_array(local)


# --------------------------------------------------------------------------
# IR version


def _type_min_ir(tp, acc: list):
    which = tp.WhichOneof("value")
    if which is None:
        return
    if which == "opaque_type":
        acc.append(14)  # opaque types outside ONNX-ML builds: IR 14
        return
    inner = getattr(tp, which)
    if which in ("tensor_type", "sparse_tensor_type"):
        acc.append(_ELEM_MIN_IR.get(inner.elem_type, 0))
    elif which in ("sequence_type", "optional_type"):
        _type_min_ir(inner.elem_type, acc)
    elif which == "map_type":
        _type_min_ir(inner.value_type, acc)


def required_ir_version(model: onnx.ModelProto) -> int | None:
    """Lowest IR version the model's opsets and element types allow (>= 3),
    None when an opset is unknown to this onnx.  Covers the features added in
    IR 9..14 (new element types, opaque types, multi-device configs)."""
    try:
        need = [onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)]
        for f in model.functions:
            need.append(onnx.helper.find_min_ir_version_for(list(f.opset_import),
                                                            ignore_unknown=True))
    except ValueError:
        return None
    for t in iter_tensors(model):
        need.append(_ELEM_MIN_IR.get(t.data_type, 0))
    for _, g in iter_graphs(model):
        for vi in (*g.input, *g.output, *g.value_info):
            _type_min_ir(vi.type, need)
        for n in g.node:
            for a in n.attribute:
                for tp in (*([a.tp] if a.HasField("tp") else []), *a.type_protos):
                    _type_min_ir(tp, need)
            if len(getattr(n, "device_configurations", ())):
                need.append(11)
    for f in model.functions:
        for vi in getattr(f, "value_info", ()):
            _type_min_ir(vi.type, need)
    if len(getattr(model, "configuration", ())):
        need.append(11)
    return max(3, *need)


# required_ir_version checks every feature added from IR 11 on (IR 10's
# function overloads and metadata are not checked), so models are never
# lowered below it.
IR_FLOOR = 11


def checkable_in_memory(model: onnx.ModelProto) -> bool:
    """Whether onnx.checker can take the model object itself: no external
    data (the checker resolves it relative to a file) and room under
    protobuf's 2 GB (not ByteSize(): upb serializes the whole model for it).
    Otherwise it is checked as a file, after writing."""
    return embedded_bytes(model) < MAX_PROTO_BYTES - (64 << 20) and not any(
        t.data_location == TensorProto.EXTERNAL for t in iter_tensors(model))


def lowest_ir_version(model: onnx.ModelProto) -> int | None:
    """The lowest IR version ``model`` can be written with (at least
    ``IR_FLOOR``); None when one of its opsets is unknown to this onnx."""
    need = required_ir_version(model)
    return None if need is None else max(need, IR_FLOOR)


def lower_ir_version(model: onnx.ModelProto) -> int | None:
    """Lower model.ir_version (in place) to the lowest the model needs, so
    older runtimes load it too (onnx >= 1.23 stamps IR 14 on what it writes);
    returns the old version when lowered, else None.  Never raises it."""
    low = lowest_ir_version(model)
    if low is None or model.ir_version <= low:
        return None
    old, model.ir_version = model.ir_version, low
    return old


# --------------------------------------------------------------------------
# saving


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _tmp_in(folder: str, final_name: str) -> tuple[int, str]:
    fd, tmp = tempfile.mkstemp(prefix=f".{final_name}.", suffix=".tmp", dir=folder)
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; match a normal create
    return fd, tmp


_FICLONE = 0x40049409  # linux/fs.h: ioctl(dst_fd, FICLONE, src_fd)


def _reflink(src: str, dst_fd: int) -> bool:
    try:
        import fcntl

        with open(src, "rb") as f:
            fcntl.ioctl(dst_fd, _FICLONE, f.fileno())
        return True
    except (OSError, ImportError):
        return False


def _copy_into(src_real: str, dst_fd: int):
    """Copy a (validated) data file without reading it into Python memory."""
    fd = os.open(src_real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeModelError(f"{src_real}: external data is not a regular file")
        left = st.st_size
        try:
            while left > 0:
                n = os.copy_file_range(fd, dst_fd, min(left, 1 << 30))
                if n == 0:
                    break
                left -= n
        except (AttributeError, OSError):
            os.lseek(fd, 0, os.SEEK_SET)
            os.lseek(dst_fd, 0, os.SEEK_SET)
            os.ftruncate(dst_fd, 0)
            with os.fdopen(os.dup(fd), "rb") as fs, os.fdopen(os.dup(dst_fd), "wb") as fdst:
                shutil.copyfileobj(fs, fdst, 1 << 24)
    finally:
        os.close(fd)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _externalize(model: onnx.ModelProto, fd: int, location: str) -> int:
    """Move embedded tensors >= EXTERNAL_SIZE_THRESHOLD into the open data
    file (in place on ``model``, like onnx.save does).  Returns the count."""
    count = 0
    offset = 0
    with os.fdopen(os.dup(fd), "wb") as f:
        for t in iter_tensors(model):
            if _is_external(t) or not t.HasField("raw_data"):
                continue
            est = tensor_nbytes(t)
            if est is not None and est < EXTERNAL_SIZE_THRESHOLD // 2:
                continue  # certainly small: skip copying its bytes out
            raw = t.raw_data
            if len(raw) < EXTERNAL_SIZE_THRESHOLD:
                continue
            pad = (-offset) % EXTERNAL_ALIGN
            f.write(b"\0" * pad)
            offset += pad
            f.write(raw)
            del t.external_data[:]
            for k, v in (("location", location), ("offset", str(offset)),
                         ("length", str(len(raw)))):
                e = t.external_data.add()
                e.key, e.value = k, v
            t.data_location = TensorProto.EXTERNAL
            t.ClearField("raw_data")
            offset += len(raw)
            count += 1
    return count


def check_output_path(out_path, input_path=None, overwrite_input: bool = False) -> tuple[str, str, str]:
    """The checks every model writer makes on its output path: a real path
    (no NUL), in an existing folder, not a directory, and not the input model
    unless ``overwrite_input``. Returns (path as shown in messages, absolute
    path, its folder)."""
    try:
        shown = os.fspath(out_path)
    except TypeError:
        raise InputError(f"expected an output path, got {type(out_path).__name__}") from None
    where = _one_line(str(shown))
    if not shown or "\x00" in str(shown):
        raise InputError(f"{where!r}: not a valid output path")
    out = os.path.abspath(shown)
    out_dir = os.path.dirname(out)
    if not os.path.isdir(out_dir):
        raise InputError(f"{where}: output folder {out_dir} does not exist")
    if os.path.isdir(out):
        raise InputError(f"{where}: is a directory; give an output file name")
    if os.path.lexists(out) and not stat.S_ISREG(os.lstat(out).st_mode) and not os.path.islink(out):
        raise InputError(f"{where}: exists and is not a regular file (a device, FIFO or socket); "
                         "refusing to replace it")
    if input_path is not None and _same_file(out, input_path) and not overwrite_input:
        raise InputError(f"{where}: refusing to overwrite the input model; choose another "
                         "output path (or request in-place explicitly)")
    return where, out, out_dir


def save_model(model: onnx.ModelProto, out_path, *, source: LoadedModel | None = None,
               source_dir=None, input_path=None, overwrite_input: bool = False,
               max_proto_bytes: int = MAX_PROTO_BYTES, keep_backups: bool = False) -> SavedModel:
    """Write ``model`` to ``out_path`` atomically (temp file + rename).

    ``source`` (the LoadedModel it came from) or ``source_dir``/``input_path``
    say where its external data live and which files must not be
    overwritten.  The input file is refused as output unless
    ``overwrite_input``; the input's data files are always refused.  External
    tensors keep their locations; when the output folder differs from the
    source folder, the data files are reflink-cloned (else copied) next to it.
    If the serialized model would exceed ``max_proto_bytes`` (protobuf's 2 GB
    limit by default), tensors >= 1 KiB go to ``<output name>.data`` (the
    model object is changed in place then, as onnx.save does).
    """
    protected: set[str] = set()
    if source is not None:
        source_dir = source_dir if source_dir is not None else source.base_dir
        input_path = input_path if input_path is not None else source.path
        protected.update(source.external_files)
    where, out, out_dir = check_output_path(out_path, input_path, overwrite_input)
    real_dir = os.path.realpath(out_dir)
    for p in protected:
        if _same_file(out, p):
            raise InputError(f"{where}: refusing to overwrite {p}, an external data file "
                             "of the input model")

    # Which data files does the output reference?  Validated again: this is
    # the path by which bytes get copied, so it gets the same escape checks.
    v = _Validator(where, os.path.realpath(source_dir) if source_dir is not None else None)
    refs: dict[str, str] = {}  # location -> source real path
    for t in iter_tensors(model):
        if _is_external(t):
            v.tensor(t)
            loc = _external_info(t)["location"]
            refs[loc] = v.resolve(loc, t.name)
    for src in refs.values():
        if _same_file(out, src):
            raise InputError(f"{where}: refusing to overwrite {src}, an external data file "
                             "the model uses")

    saved = SavedModel(out)
    pending: list[tuple[str, str]] = []  # (temp, final), renamed in this order
    made_dirs: list[str] = []
    try:
        if refs and real_dir != v.base_dir:
            for loc, src in sorted(refs.items()):
                dst = os.path.join(out_dir, loc)
                dst_dir = os.path.dirname(dst)
                if not os.path.isdir(dst_dir):
                    _makedirs(dst_dir, out_dir, made_dirs)
                real_dst_dir = os.path.realpath(dst_dir)
                if os.path.commonpath([real_dst_dir, real_dir]) != real_dir:
                    raise UnsafeModelError(f"{where}: data file {loc} would be written "
                                           f"outside the output folder (through a symlink)")
                if _same_file(dst, out) or os.path.abspath(dst) == out:
                    raise InputError(f"{where}: the model's external data file {loc} would be written "
                                     "at the output path itself; choose another output name")
                saved.data_files.append(dst)
                if os.path.lexists(dst) and _same_file(dst, src):
                    continue  # already linked by an earlier run
                if any(_same_file(dst, p) for p in protected if os.path.lexists(dst)):
                    raise InputError(f"{where}: refusing to overwrite {dst}, an external data "
                                     "file of the input model")
                if os.path.lexists(dst) and not _same_bytes(dst, src):
                    # another model's data (it would then compute other values)
                    raise InputError(f"{where}: {dst} already exists and is not this model's data "
                                     f"file {loc} (its bytes differ); refusing to replace it: write "
                                     "the output into another folder")
                # Not a hard link: onnx >= 1.23 refuses to load a model whose
                # data file has several links ("potential hardlink attack"),
                # which would break the user's *input* model too. A reflink
                # (copy-on-write clone, btrfs/xfs) costs nothing; else copy.
                fd, tmp = _tmp_in(real_dst_dir, os.path.basename(dst))
                pending.append((tmp, dst))
                try:
                    if _reflink(src, fd):
                        saved.linked.append(dst)
                    else:
                        _copy_into(src, fd)
                        saved.copied.append(dst)
                finally:
                    os.close(fd)
        # upb's ByteSize() serializes the whole model (and a failed > 2 GB
        # serialization takes seconds), so decide from the payload sizes.
        payload = None
        margin = min(64 << 20, max_proto_bytes // 8)
        if embedded_bytes(model) <= max_proto_bytes - margin:
            try:
                payload = model.SerializeToString()
            except EncodeError:
                payload = None
            if payload is not None and len(payload) > max_proto_bytes:
                payload = None
        if payload is None:
            name = _data_name(out, refs, protected, out_dir)
            fd, tmp = _tmp_in(real_dir, name)
            pending.append((tmp, os.path.join(out_dir, name)))
            try:
                saved.externalized = _externalize(model, fd, name)
            finally:
                os.close(fd)
            saved.data_files.append(os.path.join(out_dir, name))
            saved.notes.append(f"model is over {_size(max_proto_bytes)}: {saved.externalized} tensors "
                               f"written to external data file {name} next to {os.path.basename(out)}")
            try:
                payload = model.SerializeToString()
            except EncodeError:
                raise UnsupportedError(f"{where}: the graph itself is over 2 GB even "
                                       "without tensor payloads") from None
        fd, tmp = _tmp_in(real_dir, os.path.basename(out))
        pending.append((tmp, out))
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        del payload
        if os.environ.get("GELU_ONNX_TEST_SIGNAL_BEFORE_RENAME"):  # fault injection (tests)
            import signal

            os.kill(os.getpid(), getattr(signal, os.environ["GELU_ONNX_TEST_SIGNAL_BEFORE_RENAME"]))
        for tmp, final in pending:
            if os.path.lexists(final):
                bak = _backup(final)
                saved.backups.append((bak, final))
            else:
                saved.created.append(final)
            os.replace(tmp, final)
        pending.clear()
    except GeluOnnxError:
        saved.rollback()
        _cleanup(pending, made_dirs)
        raise
    except OSError as e:
        saved.rollback()
        _cleanup(pending, made_dirs)
        raise InputError(f"{where}: cannot write it ({e.strerror or e})") from None
    except BaseException:
        saved.rollback()
        _cleanup(pending, made_dirs)
        raise
    if not keep_backups:  # else the caller commits (or rolls back) after its own checks
        saved.commit()
    if saved.linked:
        saved.notes.append(f"{len(saved.linked)} external data file(s) cloned (reflink) next to "
                           f"{os.path.basename(out)}")
    if saved.copied:
        saved.notes.append(f"{len(saved.copied)} external data file(s) copied next to "
                           f"{os.path.basename(out)}")
    return saved


def _size(n: int) -> str:
    return "2 GB" if n == MAX_PROTO_BYTES else f"{n} bytes"


def _makedirs(path: str, root: str, made: list[str]):
    parts = []
    while not os.path.isdir(path) and os.path.normpath(path) != os.path.normpath(root):
        parts.append(path)
        path = os.path.dirname(path)
    for p in reversed(parts):
        os.mkdir(p)
        made.append(p)


def _backup(path: str) -> str:
    """A hidden hard link to ``path`` in its folder (free, same filesystem)."""
    folder, name = os.path.split(path)
    for k in range(1000):
        bak = os.path.join(folder, f".{name}.gelu-onnx-prev{k or ''}")
        try:
            os.link(path, bak)
            return bak
        except FileExistsError:
            continue
    raise InputError(f"{path}: no free name to keep the previous file while writing")


def _same_bytes(a: str, b: str) -> bool:
    import filecmp

    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def _data_name(out: str, refs: dict, protected: set, out_dir: str) -> str:
    base = os.path.basename(out)
    for k in range(1000):
        name = f"{base}.data" if k == 0 else f"{base}.{k}.data"
        path = os.path.join(out_dir, name)
        if name in refs or any(_same_file(path, p) for p in protected):
            continue
        if any(_same_file(path, os.path.join(out_dir, r)) for r in refs):
            continue
        if os.path.lexists(path) and not _written_by_us(path, base):
            continue  # another file of that name: never replaced
        return name
    raise InputError(f"{out}: no free name for its external data file")


def _written_by_us(data: str, model_name: str) -> bool:
    """``data`` (named after the output) goes with the output model that this
    write replaces; its previous bytes are kept until the write commits."""
    return os.path.isfile(os.path.join(os.path.dirname(data), model_name))


def _cleanup(pending: list[tuple[str, str]], made_dirs: list[str]):
    for tmp, _ in pending:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    for d in reversed(made_dirs):
        try:
            os.rmdir(d)
        except OSError:
            pass
