"""Many serialized NodeProtos from one template at once (numpy): a node
serialized once with placeholder names, then per member its name fields
filled with that member's names, each node wrapped as GraphProto's field 1.
The replacement nodes of a set of matches and the stand-ins of the input's
check model are written this way: byte assembly only, no decisions.

A template's name fields (input 1, output 2, name 3) are lists of parts:
literal text, or a placeholder key whose value per member is a string of
the model (an id into the scanner's string table)."""
from __future__ import annotations

import numpy as np
from onnx import AttributeProto, NodeProto

from ...onnxio.format import LEN, Source, iter_fields, varint

MARK = "\x00"  # placeholders are "\x00KEY\x00" (no name the scanner maps holds a NUL)


def split(s: str) -> list[str]:
    """"\\0R\\0_Cast" -> ["\\0R", "_Cast"]: placeholders (a leading NUL) and literals."""
    parts, bits = [], s.split(MARK)
    for k, b in enumerate(bits):
        if k % 2:
            parts.append(MARK + b)
        elif b:
            parts.append(b)
    return parts


def pieces(node: bytes) -> list:
    """A serialized NodeProto as bytes and (field number, parts) for its name fields with placeholders."""
    out, mark = [], MARK.encode()
    for num, wt, start, vstart, end in iter_fields(Source(node), 0, len(node)):
        if wt == LEN and num in (1, 2, 3) and mark in node[vstart:end]:
            out.append((num, split(node[vstart:end].decode("utf-8"))))
        else:
            out.append(node[start:end])
    return out


class Strings:
    """The scanner's string table as bytes: string id -> its bytes."""

    def __init__(self, blob: bytes, off: np.ndarray):
        self.buf = np.frombuffer(blob, np.uint8)
        self.start = off[:-1].astype(np.int64)
        self.length = np.diff(off).astype(np.int64) - 1  # each string is followed by a NUL


def table_strings(t) -> Strings:
    """The string table of an onnxio.ArrayTable ``t`` as Strings (made once)."""
    st = getattr(t, "byte_strings", None)
    if st is None:
        st = t.byte_strings = Strings(t.names.blob, t.scan.str_off)
    return st


def varints(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of ``v`` (< 2^35): (bytes, one row per value, 5 wide; lengths)."""
    v = v.astype(np.int64)
    out = np.zeros((len(v), 5), np.uint8)
    n = np.ones(len(v), np.int64)
    rest = v.copy()
    for k in range(5):
        more = rest >= 0x80
        out[:, k] = (rest & 0x7F) | np.where(more, 0x80, 0)
        n += more & (k < 4)
        rest >>= 7
    return out, n


def fill(nodes: list[list], values: dict[str, np.ndarray], strings: Strings) -> tuple[np.ndarray, np.ndarray]:
    """The nodes (each a ``pieces`` list) for every member, each node as a
    GraphProto node field, the members' nodes one after another:
    (bytes, each member's start offset in them; one more at the end).
    ``values``: placeholder key -> each member's string id."""
    m = len(next(iter(values.values()))) if values else 1
    lit = bytearray()  # literal parts and constant pieces
    segs = []  # per segment: (kind, data) where kind: "lit" (offset, length), "str" (ids), "var" (values)

    def literal(b: bytes):
        off = len(lit)
        lit.extend(b)
        return ("lit", (off, len(b)))

    node_lens = []
    node_segs = []
    for node in nodes:
        one = []
        total = np.zeros(m, np.int64)
        for p in node:
            if isinstance(p, bytes):
                one.append(literal(p))
                total += len(p)
                continue
            num, parts = p
            flen = np.zeros(m, np.int64)
            inner = []
            for part in parts:
                if part.startswith(MARK):
                    ids = values[part[1:]]
                    inner.append(("str", ids))
                    flen += strings.length[ids]
                else:
                    b = part.encode("utf-8")
                    inner.append(literal(b))
                    flen += len(b)
            vb, vn = varints(flen)
            one.append(literal(bytes([num << 3 | 2])))
            one.append(("var", (vb, vn)))
            one.extend(inner)
            total += 1 + vn + flen
        node_lens.append(total)
        node_segs.append(one)
    for total, one in zip(node_lens, node_segs):
        vb, vn = varints(total)
        segs.append(literal(b"\x0a"))
        segs.append(("var", (vb, vn)))
        segs.extend(one)
    # one source: the string table, then the literals, then every varint column
    base_lit = len(strings.buf)
    sources = [strings.buf, np.frombuffer(bytes(lit), np.uint8)]
    at = base_lit + len(lit)
    starts, lens = [], []
    for kind, data in segs:
        if kind == "lit":
            off, n = data
            starts.append(np.full(m, base_lit + off, np.int64))
            lens.append(np.full(m, n, np.int64))
        elif kind == "str":
            starts.append(strings.start[data])
            lens.append(strings.length[data])
        else:
            vb, vn = data
            sources.append(vb.reshape(-1))
            starts.append(at + 5 * np.arange(m, dtype=np.int64))
            lens.append(vn)
            at += vb.size
    src = np.concatenate(sources)
    S = np.stack(starts, axis=1).reshape(-1)  # member-major: all of member 0's segments first
    L = np.stack(lens, axis=1).reshape(-1)
    first = np.repeat(S - np.cumsum(np.r_[0, L[:-1]]), L)
    out = src[first + np.arange(int(L.sum()))]
    per = np.stack(lens, axis=1).sum(axis=1)
    offsets = np.zeros(m + 1, np.int64)
    np.cumsum(per, out=offsets[1:])
    return out, offsets


def join(parts: list[str], values: dict[str, np.ndarray], strings: Strings, m: int) -> tuple[bytes, np.ndarray]:
    """The string ``parts`` spell for each of m members (placeholders filled):
    (all of them one after another, each one's start offset; one more at the end)."""
    lit = bytearray()
    starts, lens = [], []
    base = len(strings.buf)
    for p in parts:
        if p.startswith(MARK):
            ids = values[p[1:]]
            starts.append(strings.start[ids])
            lens.append(strings.length[ids])
        else:
            b = p.encode("utf-8")
            starts.append(np.full(m, base + len(lit), np.int64))
            lens.append(np.full(m, len(b), np.int64))
            lit.extend(b)
    src = np.concatenate([strings.buf, np.frombuffer(bytes(lit), np.uint8)])
    S = np.stack(starts, axis=1).reshape(-1)
    L = np.stack(lens, axis=1).reshape(-1)
    out = src[np.repeat(S - np.cumsum(np.r_[0, L[:-1]]), L) + np.arange(int(L.sum()))]
    off = np.zeros(m + 1, np.int64)
    np.cumsum(np.stack(lens, axis=1).sum(axis=1), out=off[1:])
    return out.tobytes(), off


def field(payload: bytes, number: int = 1) -> bytes:
    """``payload`` as one length-delimited protobuf field (default: GraphProto's
    node): models are assembled from serialized parts, so no node passes
    through a Python protobuf object twice."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def node_bytes(op: str, ins: list[str], outs: list[str], **ints) -> bytes:
    """A serialized default-domain node with INT attributes (the check models' Add and Cast)."""
    n = NodeProto(op_type=op, input=ins, output=outs)
    for k, v in ints.items():
        n.attribute.add(name=k, i=v, type=AttributeProto.INT)
    return n.SerializeToString()
