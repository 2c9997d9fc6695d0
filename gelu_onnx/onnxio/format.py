"""The ONNX file format: facts about tensors and model files (sizes, limits,
external-data keys: one source for every constant the I/O modules share),
and the protobuf wire format, read and written by hand where parsing a whole
message would cost too much (onnxio/splice.py's skeleton of a big file,
fusion/rewrite/emit.py) or where only the field headers matter
(is_model_file: a previous output or a user's other file?). Wire reads never
leave the range they are given."""
from __future__ import annotations

import math
import os

import numpy as np
from onnx import TensorProto

# Files at least this large go the splice skeleton path (onnxio/splice.py:
# field headers read, weights never parsed); smaller ones are read whole
# (never mapped: a truncation by another process would be a SIGBUS).
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

_T = TensorProto
# The element types TensorProto.DataType defines (others: runtimes refuse them).
KNOWN_TYPES = frozenset(TensorProto.DataType.values())
# Domains whose ops onnx knows the schemas of; ops in them must exist.
ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")

# Bits per element for fixed-width types (STRING / UNDEFINED absent).
ELEM_BITS = {
    _T.FLOAT: 32, _T.UINT8: 8, _T.INT8: 8, _T.UINT16: 16, _T.INT16: 16,
    _T.INT32: 32, _T.INT64: 64, _T.BOOL: 8, _T.FLOAT16: 16, _T.DOUBLE: 64,
    _T.UINT32: 32, _T.UINT64: 64, _T.COMPLEX64: 64, _T.COMPLEX128: 128,
    _T.BFLOAT16: 16,
}
# Newer element types, each with the IR version that introduced it (looked up
# by name so an older onnx without the enum value still imports this module).
ELEM_MIN_IR = {}
for _name, _bits, _ir in (
    ("FLOAT8E4M3FN", 8, 9), ("FLOAT8E4M3FNUZ", 8, 9), ("FLOAT8E5M2", 8, 9),
    ("FLOAT8E5M2FNUZ", 8, 9), ("UINT4", 4, 10), ("INT4", 4, 10),
    ("FLOAT4E2M1", 4, 11), ("FLOAT8E8M0", 8, 12), ("UINT2", 2, 13),
    ("INT2", 2, 13), ("FLOAT6E2M3", 6, 14), ("FLOAT6E3M2", 6, 14),
):
    if hasattr(_T, _name):
        ELEM_BITS[getattr(_T, _name)] = _bits
        ELEM_MIN_IR[getattr(_T, _name)] = _ir
_BITS = np.full(max(ELEM_BITS) + 1, -1, np.int64)
_BITS[list(ELEM_BITS)] = list(ELEM_BITS.values())


def elem_bits(dtypes: np.ndarray) -> np.ndarray:
    """ELEM_BITS of each element type in an array, -1 where it has none."""
    d = np.asarray(dtypes, np.int64)
    return np.where((d >= 0) & (d < len(_BITS)), _BITS[np.clip(d, 0, len(_BITS) - 1)], -1)


# Fields that hold a tensor's data when it is not external.
DATA_FIELDS = ("raw_data", "float_data", "int32_data", "string_data",
                "int64_data", "double_data", "uint64_data")


def is_external(t: TensorProto) -> bool:
    return t.data_location == TensorProto.EXTERNAL


def external_info(t: TensorProto) -> dict:
    return {e.key: e.value for e in t.external_data}


def tensor_nbytes(t: TensorProto) -> int | None:
    """Payload size of a fixed-width tensor from dims and type, else None."""
    bits = ELEM_BITS.get(t.data_type)
    return None if bits is None else (math.prod(t.dims) * bits + 7) // 8


# The typed field holding each type's values when there is no raw_data, and
# how many entries one element takes (what ONNX Runtime reads).
_TYPED_FIELD = {_T.FLOAT: ("float_data", 1), _T.COMPLEX64: ("float_data", 2), _T.DOUBLE: ("double_data", 1),
                _T.COMPLEX128: ("double_data", 2), _T.INT64: ("int64_data", 1), _T.UINT32: ("uint64_data", 1),
                _T.UINT64: ("uint64_data", 1), _T.STRING: ("string_data", 1),
                **{k: ("int32_data", 1) for k in (_T.INT32, _T.INT16, _T.INT8, _T.UINT16, _T.UINT8, _T.BOOL,
                                                  _T.FLOAT16, _T.BFLOAT16)}}


def embedded_size_error(t: TensorProto) -> str | None:
    """Why an embedded tensor holds more data than its dims say, else None.
    ONNX Runtime refuses such a tensor, a reader could take either count, and
    onnx.checker lets it through (it refuses data that is too short itself)."""
    if any(d < 0 for d in t.dims):
        return None  # the checker words it
    n = math.prod(t.dims)
    if t.HasField("raw_data"):
        want = tensor_nbytes(t)
        got = len(t.raw_data)
        if want is not None and ELEM_BITS[t.data_type] % 8 == 0 and got > want:
            return f"raw_data holds {got} bytes, its dims and type need {want}"
        return None
    field, per = _TYPED_FIELD.get(t.data_type, (None, 1))
    if field is None:
        return None
    got = len(getattr(t, field))
    if got > n * per:
        return f"{field} holds {got} values, its dims need {n * per}"
    return None


def tensor_embedded_bytes(t: TensorProto) -> int:
    """Bytes of tensor data ``t`` stores inside the model, from shapes and
    field lengths: no payload is copied (unlike ByteSize(), which serializes)."""
    total = 0
    if t.HasField("raw_data"):
        n = tensor_nbytes(t)
        total += n if n is not None else len(t.raw_data)
    total += 4 * (len(t.float_data) + len(t.int32_data))
    total += 8 * (len(t.int64_data) + len(t.double_data) + len(t.uint64_data))
    return total + sum(map(len, t.string_data))


# --- the protobuf wire format ------------------------------------------------------

LEN = 2  # length-delimited wire type
MAX_DEPTH = 100  # protobuf's nesting limit (upb's and C++'s default): it refuses deeper messages


class Unsupported(Exception):
    """Valid protobuf this module does not map field by field: use the plain path."""


class Malformed(Exception):
    """Not a well-formed protobuf message."""


def read_varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise Malformed("a field header runs past the end of its message")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise Malformed("a varint is longer than 10 bytes")


class Source:
    """The input's bytes: a file read with pread in small windows (nothing is
    mapped, so the weights never count as this process's memory), or bytes."""

    WINDOW = 1 << 16

    def __init__(self, data=None, fd: int | None = None, size: int = 0):
        self.data, self.fd = data, fd
        self.size = len(data) if data is not None else size

    def read(self, start: int, end: int) -> bytes:
        if self.data is not None:
            return bytes(self.data[start:end])
        out = os.pread(self.fd, end - start, start)
        while len(out) < end - start:
            more = os.pread(self.fd, end - start - len(out), start + len(out))
            if not more:
                raise Malformed("the file ends early")
            out += more
        return out

    def window(self, pos: int, end: int) -> tuple[bytes, int]:
        """(bytes, their offset) with the bytes at pos; at least 20 unless the range ends."""
        if self.data is not None:
            return self.data, 0
        return os.pread(self.fd, min(self.WINDOW, end - pos), pos), pos


def iter_fields(src: Source, start: int, end: int):
    """(field number, wire type, field start, value start, field end) of each
    field of the message at [start, end); never reads outside that range. A
    group is one field, to its end-group tag (protobuf keeps it as an unknown
    field: onnx.proto declares none), wrong nesting Malformed as protobuf has it."""
    pos = start
    win, base = b"", 0
    groups: list[int] = []  # the numbers of the groups open, outermost first
    while pos < end:
        # a field header (key + length or varint value) is at most 20 bytes
        if pos - base + 20 > len(win) and base + len(win) < end:
            win, base = src.window(pos, end)
        lim = min(end, base + len(win)) - base
        i = fstart = pos - base
        key, i = read_varint(win, i, lim)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise Malformed("field number 0")
        if wt == 0:
            _, i = read_varint(win, i, lim)
            vstart = i
        elif wt == 1:
            vstart, i = i, i + 8
        elif wt == LEN:
            n, vstart = read_varint(win, i, lim)
            i = vstart + n
        elif wt == 5:
            vstart, i = i, i + 4
        elif wt == 3:
            if len(groups) == MAX_DEPTH:
                raise Malformed("groups nested deeper than protobuf reads")
            if not groups:
                group = (num, base + fstart, base + i)
            groups.append(num)
            vstart = i
        elif wt == 4:
            if not groups or groups.pop() != num:
                raise Malformed("an end-group tag outside its group")
            vstart = i
        else:
            raise Malformed(f"invalid wire type {wt}")
        pos = base + i
        if pos > end:
            raise Malformed("a field runs past the end of its message")
        if wt == 4 and not groups:
            yield group[0], 3, group[1], group[2], pos
        elif not groups:
            yield num, wt, base + fstart, base + vstart, pos
    if groups:
        raise Malformed("a group runs past the end of its message")


def field_key(num: int, wt: int) -> bytes:
    return varint((num << 3) | wt)


def varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def len_field(payload: bytes, number: int = 1) -> bytes:
    """``payload`` as one length-delimited field ``number`` (default 1:
    GraphProto's node): models are assembled from serialized parts, so no node
    passes through a Python protobuf object twice."""
    return field_key(number, LEN) + varint(len(payload)) + payload


# ModelProto's top-level fields (onnx.proto) and their wire types
MODEL_FIELDS = {1: 0, 2: LEN, 3: LEN, 4: LEN, 5: 0, 6: LEN, 7: LEN, 8: LEN, 14: LEN, 20: LEN,
                 25: LEN, 26: LEN}


def is_model_file(path) -> bool:
    """Whether the file is, at its top level, a serialized ModelProto with a
    graph: field headers only (a weights file or a text fails at its first
    bytes), so a writer can tell a previous output from a user's other files."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        graph = False
        for num, wt, *_ in iter_fields(Source(fd=fd, size=size), 0, size):
            if MODEL_FIELDS.get(num) != wt:
                return False
            graph = graph or num == 7  # ModelProto.graph
        return graph
    except (Malformed, Unsupported, OSError):
        return False
    finally:
        os.close(fd)
