"""Reading ONNX files: parse the graph only (external weight payloads are
never read) and validate it; tensor_array reads one small tensor safely."""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import TensorProto, numpy_helper

from ..errors import InputError, MissingFileError, UnsafeModelError
from ..interrupts import fault
from ..memlimit import not_enough, short_of
from . import wire
from .fileops import path_arg
from .format import MAX_PROTO_BYTES, external_info, is_external, tensor_nbytes
from .arraytable import ArrayTable
from .validate import Validator, one_line, quote, validate_model


@dataclass(kw_only=True)
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
    # the main graph's nodes as the scanner read the file (valid while it is unchanged), if the fuse pass can use them
    table: ArrayTable | None = None
    # the file's bytes, when the scanner read them (the fuse pass copies from them)
    data: bytes | None = None


def _read(path: str, size: int) -> bytes:
    """The file's bytes, read (never mapped: a mapped file that another
    process truncates while we parse it kills us with SIGBUS). Files of
    MMAP_MIN_BYTES and more normally go the splice path, which reads only
    field headers."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)  # the file we opened, not the one we stat'ed before
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError("not a regular file")
        fault("read:opened")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(size + 1)
    finally:
        os.close(fd)
    if len(data) != size:
        raise InputError(f"{one_line(path)}: the file changed size while it was being read "
                         f"({size} bytes, then {len(data)}{'+' if len(data) > size else ''})")
    return data


def load_model(path) -> LoadedModel:
    """Read and validate an ONNX file (external weight payloads are not read);
    one InputError / UnsafeModelError line naming the file on anything malformed or unsafe."""
    shown = path_arg(path, "model path")
    where = one_line(shown)
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
    except MemoryError:
        raise not_enough(f"read {where}", st.st_size) from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError, TypeError, MemoryError):
        # upb says "parse failed" when it cannot allocate too: a file that
        # could not have been parsed in the memory left is not called damaged
        if short_of(2 * st.st_size):
            raise not_enough(f"read {where}", 2 * st.st_size) from None
        raise InputError(f"{where}: not a valid ONNX model (protobuf parse failed: "
                         "truncated, damaged or not ONNX)") from None
    try:
        return _validated(model, data, os.path.dirname(apath), where, apath)
    except (EncodeError, MemoryError):  # a model just parsed serializes, but for memory
        raise not_enough(f"read {where}", st.st_size) from None


def _validated(model: onnx.ModelProto, data: bytes, base_dir, where: str, path: str | None = None) -> LoadedModel:
    """The model parsed from ``data``, validated with the native scanner's
    reading of those bytes (of the model's own serialization when it
    declines them: the graph field given twice, which protobuf merges)."""
    scan = wire.scan(data)
    scan = scan if scan is not None else wire.scan(model.SerializeToString())
    base = os.path.realpath(base_dir) if base_dir is not None else None
    files, table = validate_model(model, base_dir=base, where=where, scan=scan)
    return LoadedModel(model=model, path=path, base_dir=base, external_files=files, file_size=len(data), table=table,
                       data=scan.data if isinstance(table, ArrayTable) else None)


def load_model_proto(model_or_path, *, base_dir=None) -> LoadedModel:
    """Like load_model, also for an in-memory ModelProto (validated as is, not
    copied; ``base_dir``: the folder its external data are relative to) or bytes."""
    if isinstance(model_or_path, onnx.ModelProto):
        files = validate_model(model_or_path, base_dir=base_dir, where="model")[0]
        base = os.path.realpath(base_dir) if base_dir is not None else None
        return LoadedModel(model=model_or_path, base_dir=base, external_files=files)
    if isinstance(model_or_path, (bytes, bytearray, memoryview)):
        model = onnx.ModelProto()
        try:
            model.ParseFromString(model_or_path)
        except (DecodeError, ValueError, RuntimeError, TypeError):
            raise InputError("model bytes: not a valid ONNX model (protobuf parse failed)") from None
        return _validated(model, bytes(model_or_path), base_dir, "model bytes")
    if isinstance(model_or_path, LoadedModel):
        return model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        return load_model(model_or_path)
    raise InputError(f"expected an onnx.ModelProto or a path, got {type(model_or_path).__name__}")


def tensor_array(t: TensorProto, base_dir=None):
    """numpy value of a tensor; an external one is read (only its own byte
    range) after the same checks as loading — for the few small constants a
    caller needs, never for a whole model's weights."""
    if not is_external(t):
        return numpy_helper.to_array(t)
    v = Validator(f"tensor {quote(t.name)}",
                   os.path.realpath(base_dir) if base_dir is not None else None)
    v.tensor(t)
    info = external_info(t)
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
        v.fail(f"external data {quote(info['location'])} ended early")
    local = TensorProto()
    local.name, local.data_type = t.name, t.data_type
    local.dims.extend(t.dims)
    local.raw_data = raw
    return numpy_helper.to_array(local)
