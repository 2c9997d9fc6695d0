"""The native model scanner (plugins/scan, loaded with ctypes): a model
file's bytes read once into flat numpy arrays, for the fuse pass's per-node
work without one Python object per node.

The library is required: ``scan`` raises ScannerMissing when it is not
built (``gelu-onnx info`` says so). ``scan(data)`` returns a ``Scan`` or
None: None when the bytes are anything it does not map exactly (malformed,
the graph field twice, a name that is not UTF-8 or holds a NUL...;
``declined`` says which, in words). Fields protobuf keeps as unknown (a
known field with another wire type, groups, a value outside a closed enum)
are skipped, as protobuf skips them: the arrays are what protobuf parsed.
A model whose bytes it declines is scanned as protobuf re-serializes it
(which merges a field given twice). A Scan is a fact about bytes that protobuf also parsed;
nothing here refuses a file.

The arrays (the main graph; scan_graphs: several graphs'): per node ``node_op``, ``node_dom``,
``node_name`` (string ids), ``node_flags`` (NF_*), ``node_start`` /
``node_end`` (the node's field in the file, key included), inputs
``in_ids[node_in_off[i]:node_in_off[i+1]]`` and outputs likewise (id 0 is
"": an omitted optional name), attributes ``attr_*`` by ``node_attr_off``
(their fields' spans, names, NF_* flags); per initializer ``init_name``,
``init_dtype``, dims by ``init_dims_off``, ``init_flags`` (IF_*),
``init_ext`` (external_data entries), ``init_loc`` (data_location as
stored), ``init_raw_start`` / ``init_raw_len`` (-1: no raw_data),
``init_typed`` (values per typed data field, 6 per tensor: float, int32,
string, int64, double, uint64), ``init_start`` / ``init_end``; per attribute
tensor the same columns named ``at_*`` (no name), ``at_attr`` its attribute:
one row for each attribute whose only tensor is one ``t`` field (a
Constant's value; ``t`` twice, ``tensors`` and sparse tensors are read
from the proto), ``at_start`` / ``at_end`` that field's span; the graph's
``input_name``, ``output_name``, ``vi_name`` (+ ``vi_start`` / ``vi_end``);
``model_info`` = the graph field's key, value start and end; ``names``: the
string table. Sparse initializers are skipped (not in the arrays: the
fuse pass reads their names from the proto).
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import UnsupportedError
from ..libs import find, reinstall_command
from .format import ELEM_BITS, KNOWN_TYPES, elem_bits

LIBRARY = "libgelu_onnx_scan.so"
ENV_LIBRARY = "GELU_ONNX_SCAN_LIBRARY"
ABI_VERSION = 4

OK, MALFORMED, UNSUPPORTED = 0, 1, 2
# node_flags / attr_flags (plugins/scan/gelu_onnx_scan.cpp)
NF_DEVICE, NF_OVERLOAD, NF_SUBGRAPH, NF_REF, NF_TENSOR, NF_TYPEPROTO, NF_METADATA = 1, 2, 4, 8, 16, 32, 64
# init_flags / at_flags
IF_SEGMENT, IF_RAW, IF_RAW_TWICE, IF_METADATA, IF_DOC = 1, 2, 4, 8, 16
# str_flags
SF_BAD_UTF8, SF_NUL = 1, 2

# Per-tensor columns: init_* (initializers) and at_* (attribute tensors) alike
_TENSOR_COLUMNS = ("dtype", "dims_off", "flags", "ext", "start", "end", "raw_start", "raw_len",  # int32
                   "dims", "loc", "typed")  # int64

_lib = None  # the loaded library, False when there is none


def _library():
    global _lib
    if _lib is None:
        _lib = False
        path = find(LIBRARY, ENV_LIBRARY)
        if path is not None:
            try:
                lib = ctypes.CDLL(str(path))
                lib.gos_version.restype = ctypes.c_int32
                if lib.gos_version() == ABI_VERSION:
                    # p: a handle, or an array's address (ndarray.ctypes.data)
                    p, i64, ptr, text = ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER, ctypes.c_char_p
                    for f, res, args in (("gos_scan", p, [text, ctypes.c_size_t]),
                                         ("gos_scan_graphs", p, [text, ctypes.c_size_t, p, i64]),
                                         ("gos_status", ctypes.c_int, [p]), ("gos_message", text, [p]),
                                         ("gos_i32", i64, [p, text, ptr(ptr(ctypes.c_int32))]),
                                         ("gos_i64", i64, [p, text, ptr(ptr(i64))]),
                                         ("gos_blob", i64, [p, ptr(text)]), ("gos_free", None, [p]),
                                         ("gos_find", i64, [p, i64, text, i64]),
                                         ("gos_find_many", i64, [p, i64, text, p, i64, p])):
                        getattr(lib, f).restype, getattr(lib, f).argtypes = res, args
                    _lib = lib
            except (OSError, AttributeError):
                _lib = False
    return _lib or None


class ScannerMissing(UnsupportedError):
    """The package was installed without its native scanner (a broken build)."""


def built() -> bool:
    return _library() is not None


def require():
    lib = _library()
    if lib is None:
        raise ScannerMissing(f"{LIBRARY} (plugins/scan) is not built or does not load: the fuse pass "
                             f"needs it; reinstall the package ({reinstall_command()})")
    return lib


class Names:
    """String id -> str, decoded on first use (a big graph has millions)."""

    def __init__(self, blob: bytes, off: np.ndarray):
        self.blob, self._off = blob, off  # every string, each followed by a NUL
        self._cache: list = [None] * (len(off) - 1)
        self.ids: dict[str, int] = {}  # str -> id for every string decoded so far

    def __len__(self) -> int:
        return len(self._off) - 1

    def __getitem__(self, i: int) -> str:
        s = self._cache[i]
        if s is None:
            i = int(i)
            s = self._cache[i] = self.blob[int(self._off[i]):int(self._off[i + 1]) - 1].decode("utf-8")
            self.ids[s] = i
        return s

    def raw(self, i: int) -> bytes:
        """The string's bytes as stored (as it is written back)."""
        return self.blob[int(self._off[i]):int(self._off[i + 1]) - 1]

    def take(self, ids) -> list[str]:
        """[names[i] for i in ids]; many at once decode the whole table once."""
        ids = np.asarray(ids)
        if not len(ids):
            return []
        if len(ids) > 1000:
            return self.array()[ids].tolist()
        return [self[i] for i in ids.tolist()]

    def array(self) -> np.ndarray:
        """Every string, as a numpy object array (decoded once, all at once)."""
        arr = getattr(self, "_array", None)
        if arr is None:
            every = self.blob[:-1].decode("utf-8").split("\0")
            arr = self._array = np.array(every, dtype=object)
            self._cache = tuple(every)  # all decoded; a tuple, which the cycle collector stops tracking
            self.ids = dict(zip(every, range(len(every))))  # every id known: no find() per name
        return arr


class Scan:
    """One model's main graph (or scan_graphs' graphs) as arrays (see the module doc); ``find`` looks
    a string up in the scanner's own table (no Python dict of every name)."""

    def __init__(self, lib, handle, data: bytes):
        self._lib, self._handle = lib, handle  # (__del__ frees it, also when __init__ fails)
        self.data = data  # the bytes scanned
        self.status = lib.gos_status(handle)
        self.message = lib.gos_message(handle).decode("utf-8", "replace")
        blob = ctypes.c_char_p()
        n = lib.gos_blob(handle, ctypes.byref(blob))
        self.names = Names(ctypes.string_at(blob, n) if n > 0 else b"", self.str_off)

    def __getattr__(self, name):
        """An array, copied from the scanner's result on first use and kept as
        an attribute (a small graph's validation reads half of them: each copy
        is a ctypes call)."""
        if name.startswith("_") or "_handle" not in self.__dict__:
            raise AttributeError(name)
        for fn, ctype, dtype in ((self._lib.gos_i32, ctypes.c_int32, np.int32),
                                 (self._lib.gos_i64, ctypes.c_int64, np.int64)):
            ptr = ctypes.POINTER(ctype)()
            n = fn(self._handle, name.encode(), ctypes.byref(ptr))
            if n >= 0:  # one copy (np.ctypeslib.as_array makes a ctypes type per call)
                a = self.__dict__[name] = np.empty(n, dtype)
                ctypes.memmove(a.ctypes.data, ptr, a.nbytes)
                return a
        raise AttributeError(name)

    @property
    def n_nodes(self) -> int:
        return len(self.node_op)

    def tensors(self, prefix: str) -> "TensorColumns":
        """The initializers' (``"init_"``) or attribute tensors' (``"at_"``) columns."""
        return TensorColumns(self, prefix)

    def odd_attributes(self) -> np.ndarray:
        """The attributes (indices of the attr_* arrays) whose tensors are
        checked one by one: those the at_* columns show outside the plain
        case (TensorColumns.plain), and those they leave out (tensors, sparse,
        t twice)."""
        loose = (self.attr_flags & NF_TENSOR) != 0
        if not loose.any() and not len(self.at_attr):
            return np.zeros(0, np.int64)
        loose[self.at_attr] = False
        return np.sort(np.concatenate([self.at_attr[~self.tensors("at_").plain()], np.flatnonzero(loose)]))

    def parsed(self, i: int):
        """String ``i`` as protobuf hands it back: bytes when it is not UTF-8."""
        return self.names.raw(i) if self.str_flags[i] & SF_BAD_UTF8 else self.names[i]

    def find(self, name: str, graph: int = 0) -> int:
        """The id of ``name`` in graph ``graph`` of the scan, -1 when it has no such string."""
        b = name.encode("utf-8", "surrogatepass")
        return int(self._lib.gos_find(self._handle, graph, b, len(b)))

    def find_many(self, names, graph: int = 0) -> np.ndarray:
        raw = [n.encode("utf-8", "surrogatepass") for n in names]
        off = np.cumsum([0, *map(len, raw)], dtype=np.int64)
        out = np.empty(len(raw), np.int32)
        if raw:
            blob = b"".join(raw)
            self._lib.gos_find_many(self._handle, graph, blob, off.ctypes.data, len(raw), out.ctypes.data)
        return out

    def __del__(self):
        h, self._handle = getattr(self, "_handle", None), None
        if h:
            self._lib.gos_free(h)


# Element types whose size is a whole number of bytes: a raw_data length is
# checked against dims for these in the plain case.
_BYTE_TYPES = np.array(sorted(t for t, bits in ELEM_BITS.items() if bits % 8 == 0 and t in KNOWN_TYPES))
_DIM_LIMIT = 1 << 31  # larger dims: products could overflow int64; those tensors are not plain


class TensorColumns:
    """One per-tensor column set of a scan (see the module doc) by column
    name: ``dtype``, ``dims`` by ``dims_off``, ``flags``, ``ext``, ``loc``,
    ``raw_len``, ``typed`` (n x 6), ...; ``owner``: the tensor of each dim;
    ``count``: each tensor's element count, the product of its dims as
    float64 (negative, inf or nan for such dims)."""

    def __init__(self, scan: Scan, prefix: str):
        for c in _TENSOR_COLUMNS:
            setattr(self, c, getattr(scan, prefix + c))
        self.n = n = len(self.dtype)
        self.typed = self.typed.reshape(n, 6)
        self.owner = np.repeat(np.arange(n), np.diff(self.dims_off))
        self.count = np.ones(n, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            np.multiply.at(self.count, self.owner, self.dims.astype(np.float64))

    def plain(self) -> np.ndarray:
        """Per tensor, whether it is plainly fine (onnxio.validate.Validator.tensor
        passes it): a known type, stored inside the file, raw_data no longer
        than its dims need, no other data field."""
        if not self.n:
            return np.zeros(0, bool)
        bad_dim = np.zeros(self.n, bool)
        np.logical_or.at(bad_dim, self.owner, (self.dims < 0) | (self.dims >= _DIM_LIMIT))
        big = bad_dim | ~(self.count < 2.0 ** 52)  # nan too
        count = np.where(big, 0, self.count)
        plain = (np.isin(self.dtype, _BYTE_TYPES) & (self.loc == 0) & (self.ext == 0) & ~big
                 & ((self.flags & (IF_RAW | IF_RAW_TWICE)) == IF_RAW) & (self.typed == 0).all(axis=1))
        return plain & (self.raw_len <= count * (np.maximum(elem_bits(self.dtype), 0) // 8))


def raw_scan(data: bytes) -> Scan | None:
    """The scanner's answer for ``data`` whatever its status (tests)."""
    lib = require()
    handle = lib.gos_scan(data, len(data))
    return Scan(lib, handle, data) if handle else None


def scan_graphs(graphs) -> Scan | None:
    """One scan of GraphProtos (If/Loop/Scan bodies) as protobuf serializes them, whatever its status:
    their rows one after another (``graph_nodes`` / ``_inits`` / ``_outputs``: where each graph's start,
    then the count), each graph's strings apart (``find(name, graph)``; its "" is an id of its own)."""
    lib, parts = require(), [g.SerializeToString() for g in graphs]
    off, data = np.cumsum([0, *map(len, parts)], dtype=np.int64), b"".join(parts)
    handle = lib.gos_scan_graphs(data, len(data), off.ctypes.data, len(parts))
    return Scan(lib, handle, data) if handle else None


def declined(s: Scan | None) -> str | None:
    """Why the fuse pass cannot read ``s`` (raw_scan's answer), in words;
    None when it can."""
    if s is None:
        return "the native model scanner ran out of memory"
    if s.status != OK:
        return f"the native model scanner cannot read it ({s.message})"
    if (s.str_flags & (SF_BAD_UTF8 | SF_NUL)).any():
        return ("a name that is not UTF-8 or holds a NUL byte; the fuse pass reads UTF-8 names only "
                "(docs/safety.md, names)")
    return None


def scan(data: bytes) -> Scan | None:
    """A Scan of ``data`` when the scanner maps it exactly, else None (see
    the module doc; ``declined`` says why)."""
    s = raw_scan(data)
    return s if declined(s) is None else None

