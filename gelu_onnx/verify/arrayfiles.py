"""Untrusted array files: .npy bytes and .npz archives, read safely.

A user's ``--inputs`` / ``--reference-outputs`` file is untrusted. Every
array's header (dtype, shape) is read first and handed to ``expect`` (which
checks it against the model) and the declared size is checked against the
bytes that are really there, all before one array byte is inflated: a header
declaring 2**40 elements is a clear InputError, and a compressed member that
would inflate far beyond its stored size (a zip bomb) is refused. Arrays that
need pickle (object dtype) are refused unless ``allow_pickle`` is given: a
pickle can run any code on load.
"""
from __future__ import annotations

import io
import math
import zipfile
from dataclasses import dataclass
from typing import IO, Callable

import numpy as np
import numpy.lib.format as npformat

from ..errors import InputError

# A compressed .npz member may inflate to at most this many times its stored
# size once it is larger than BOMB_FLOOR_BYTES. Real feeds compress far less
# (random floats ~1.1x, token ids ~4-8x); zeros deflate ~1000x, the bomb.
# Small members are never refused: they cannot hurt.
MAX_INFLATE_RATIO = 64
BOMB_FLOOR_BYTES = 16 << 20
_READ_CHUNK = 1 << 20

# expect(name, dtype, shape) raises InputError when an array of that header
# does not fit the model; it runs before the array is read.
Expect = Callable[[str, np.dtype, tuple], None]


@dataclass(frozen=True)
class Header:
    dtype: np.dtype
    shape: tuple
    fortran: bool
    offset: int  # bytes before the data

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * math.prod(self.shape)


def read_header(fp: IO[bytes], what: str) -> Header:
    """The .npy header at fp's position (numpy's own bounded parser)."""
    start = fp.tell()
    try:
        version = npformat.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = npformat.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, fortran, dtype = npformat.read_array_header_2_0(fp)
        else:
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not supported")
    except (ValueError, TypeError, SyntaxError, EOFError) as e:
        raise InputError(f"{what}: not a valid .npy array ({first_line(e)})") from None
    if any((not isinstance(d, int)) or d < 0 for d in shape):
        raise InputError(f"{what}: invalid shape {shape} in the .npy header")
    return Header(np.dtype(dtype), tuple(shape), bool(fortran), fp.tell() - start)


def _check_pickle(h: Header, what: str, allow_pickle: bool) -> None:
    if h.dtype.hasobject and not allow_pickle:
        raise InputError(f"{what}: an object array needs pickle to load, which can run arbitrary code; "
                         "refused (pass --allow-pickle only for files you trust)")


def _build(h: Header, buf: bytearray | bytes, what: str) -> np.ndarray:
    if len(buf) != h.nbytes:
        raise InputError(f"{what}: the header declares {list(h.shape)} {h.dtype} ({h.nbytes} bytes) "
                         f"but the file holds {len(buf)} data bytes")
    a = np.frombuffer(buf, dtype=h.dtype) if h.nbytes else np.empty(0, h.dtype)
    return a.reshape(h.shape, order="F" if h.fortran else "C")


def decode_npy(data: bytes, what: str, expect: Expect, name: str, allow_pickle: bool) -> np.ndarray:
    """An array from complete .npy bytes (e.g. base64-decoded from JSON)."""
    fp = io.BytesIO(data)
    h = read_header(fp, what)
    _check_pickle(h, what, allow_pickle)
    expect(name, h.dtype, h.shape)
    if h.dtype.hasobject:  # allowed by the caller, who was told it is unsafe
        fp.seek(0)
        return np.load(fp, allow_pickle=True)
    # bytearray: a writable array without a second copy
    return _build(h, bytearray(memoryview(data)[h.offset:]), what)


def read_npz(src, what: str, expect: Expect, allow_pickle: bool,
             on_names: Callable[[list[str]], None] | None = None) -> dict[str, np.ndarray]:
    """{name: array} from an .npz (path or binary file object), each member's
    header checked by ``expect`` and its size bounded before it is inflated;
    ``on_names`` sees the array names first."""
    try:
        zf = zipfile.ZipFile(src)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise InputError(f"{what}: cannot read it as .npz ({first_line(e)})") from None
    out: dict[str, np.ndarray] = {}
    with zf:
        members = [i for i in zf.infolist() if not i.is_dir()]
        names = [i.filename[:-4] if i.filename.endswith(".npy") else i.filename for i in members]
        if len(set(names)) != len(names):
            raise InputError(f"{what}: the archive holds one array name twice")
        if on_names is not None:
            on_names(names)
        headers = {}
        archive = _size_of(zf)
        for info, name in zip(members, names):  # every header before any data
            mwhat = f"{what}: '{name}'"
            if info.compress_size > archive:  # a lying size would defeat the ratio check below
                raise InputError(f"{mwhat}: the archive claims {info.compress_size} stored bytes but is "
                                 f"{archive} bytes long (truncated or forged)")
            if info.compress_type != zipfile.ZIP_STORED and info.file_size > BOMB_FLOOR_BYTES \
                    and info.file_size > MAX_INFLATE_RATIO * max(info.compress_size, 1):
                raise InputError(f"{mwhat} would inflate from {info.compress_size} to {info.file_size} bytes "
                                 f"(more than {MAX_INFLATE_RATIO}x: a compression bomb?); refused")
            try:
                with zf.open(info) as f:
                    h = read_header(f, mwhat)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
                raise InputError(f"{mwhat}: cannot read it ({first_line(e)})") from None
            _check_pickle(h, mwhat, allow_pickle)
            if not h.dtype.hasobject and info.file_size != h.offset + h.nbytes:
                raise InputError(f"{mwhat}: the header declares {list(h.shape)} {h.dtype} ({h.nbytes} bytes) "
                                 f"but the archive holds {max(info.file_size - h.offset, 0)} data bytes")
            expect(name, h.dtype, h.shape)
            headers[name] = (info, h)
        for name, (info, h) in headers.items():
            mwhat = f"{what}: '{name}'"
            try:
                with zf.open(info) as f:
                    if h.dtype.hasobject:
                        out[name] = np.load(io.BytesIO(f.read()), allow_pickle=True)
                        continue
                    f.read(h.offset)
                    out[name] = _build(h, _read_exactly(f, h.nbytes), mwhat)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
                raise InputError(f"{mwhat}: cannot read it ({first_line(e)})") from None
    return out


def _size_of(zf: zipfile.ZipFile) -> int:
    fp = zf.fp
    here = fp.tell()
    try:
        return fp.seek(0, io.SEEK_END)
    finally:
        fp.seek(here)


def _read_exactly(f, n: int) -> bytearray:
    """n bytes in chunks (the zip member's CRC is checked at its end)."""
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(min(_READ_CHUNK, n - len(buf)))
        if not chunk:
            break
        buf += chunk
    f.read(1)  # reach the end of the member: zipfile checks the CRC there
    return buf


def encode_npy(a: np.ndarray) -> bytes:
    """.npy bytes without pickle (object arrays are refused by numpy itself)."""
    b = io.BytesIO()
    np.save(b, np.asarray(a), allow_pickle=False)
    return b.getvalue()


def first_line(e: BaseException) -> str:
    """An error's first line (its type's name when it says nothing)."""
    return (str(e).strip() or type(e).__name__).splitlines()[0]
