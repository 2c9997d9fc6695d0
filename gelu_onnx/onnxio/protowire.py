"""The protobuf wire format, read and written by hand where parsing a whole
message would cost too much (onnxio/splice.py's skeleton of a big file) or
where only the field headers matter (is_model_file: a previous output or a
user's other file?). Reads never leave the range they are given."""
from __future__ import annotations

import os

LEN = 2  # length-delimited wire type


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
    field of the message at [start, end); never reads outside that range."""
    pos = start
    win, base = b"", 0
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
        elif wt in (3, 4):
            raise Unsupported("protobuf groups")
        else:
            raise Malformed(f"invalid wire type {wt}")
        pos = base + i
        if pos > end:
            raise Malformed("a field runs past the end of its message")
        yield num, wt, base + fstart, base + vstart, pos


def field_key(num: int, wt: int) -> bytes:
    return varint((num << 3) | wt)


def varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)



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
