"""Fuse a large single-file model without parsing or re-writing its weights.

A 1.3 GB BERT-large file is 99.9 % weight payload, and the fuse pass never
changes a weight. So ``open_skeleton`` walks the protobuf wire format
(ModelProto -> field 7 graph -> field 5 initializers), reading only field
headers, and builds a *skeleton*: the same model in which
every large initializer is a valid external-data reference to its own payload
bytes inside the input file (location = the file's name, offset/length = the
raw_data bytes). The skeleton is a few hundred KB; it is validated by
``onnxio.validate`` like any loaded model (which also checks every reference lies
inside the file) and fused with the normal API. ``Skeleton.save`` then writes
the fused skeleton with each placeholder entry replaced by the original
initializer entry, copied byte for byte from the input file in the kernel
(``os.copy_file_range``), to a temp file that is renamed into place.

Only tensors that are certainly plain payload are stripped: main-graph
initializers with exactly one ``raw_data`` field of at least
``STRIP_MIN_BYTES`` whose length equals what dims and type require, and no
other data field. Everything else (small tensors, subgraph initializers,
sparse initializers, typed data fields) stays in the skeleton and goes the
normal way. A file this module cannot map field by field (the graph given
twice, external data of its own) returns None from
``open_skeleton`` and takes the plain path; a damaged file raises InputError.

onnx.checker resolves external-data locations against the current working
directory, so checks of the skeleton run inside ``Skeleton.in_folder()``
(which changes the process's cwd for its duration). What the checker then
verifies for a stripped tensor is its name/type/dims and that its payload
lies in a regular file; the payload length itself is checked exactly here.

Which files take this path: gelu_onnx.files.splice_wanted (GELU_ONNX_SPLICE=0
in the environment turns it off).
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError
from onnx import ModelProto, TensorProto

from ..errors import GeluOnnxError, InputError, UnsupportedError
from .load import LoadedModel
from .fileops import Folder, cleanup, copy_range, in_folder, new_mode, tmp_in, write_all
from ..interrupts import critical, fault, unwinding
from .format import (DATA_FIELDS, LEN, MAX_PROTO_BYTES, Malformed, Source, Unsupported, field_key, iter_fields, len_field,
                     tensor_nbytes, varint)
from .save import SavedModel, check_output_path
from .validate import validate_model
from .walk import iter_tensors

# raw_data payloads at least this large stay in the file. Must stay far above
# the largest tensor graph.tensor_value materialises (4096 elements): a
# stripped tensor is never read as a constant (tests/test_splice.py checks).
STRIP_MIN_BYTES = 256 << 10
# Room left under protobuf's 2 GiB for what the fuse adds (functions, nodes).
_MARGIN = 16 << 20
# File names usable as a relative external-data location as they are.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+=@,-]*")

_GRAPH, _INITIALIZER = 7, 5  # ModelProto.graph, GraphProto.initializer
_RAW_DATA = 9  # TensorProto.raw_data


# --- the skeleton -------------------------------------------------------------


@dataclass
class _Stripped:
    name: str
    start: int  # the whole initializer entry (key, length, TensorProto) in the input
    end: int
    entry: bytes  # the placeholder's initializer entry in the skeleton


@dataclass
class Skeleton:
    """A loaded, validated model whose large weights stay in the input file."""

    loaded: LoadedModel
    path: str  # real path of the input file
    stripped: dict[bytes, _Stripped] = field(default_factory=dict)  # by placeholder entry
    _fd: int | None = None

    @property
    def model(self) -> ModelProto:  # tests
        return self.loaded.model

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def in_folder(self):
        """Run onnx.checker / version conversion on the skeleton here: their
        external-data checks resolve locations against the cwd."""
        return in_folder(os.path.dirname(self.path))

    def save(self, model: ModelProto, out_path, *, overwrite_input: bool = False) -> SavedModel:
        """Write ``model`` (the fused skeleton) with the input's bytes in place of the placeholders."""
        shown, out, out_dir = check_output_path(out_path, self.path, overwrite_input)
        pieces, total = self._pieces(model)
        if total > MAX_PROTO_BYTES:
            raise UnsupportedError(f"{shown}: the fused model would be over 2 GB in one file")
        pending: list = []
        folder = Folder(os.path.realpath(out_dir), shown)  # every name through it: fileops.Folder
        final = os.path.join(folder.path, os.path.basename(out))
        with unwinding():
            try:
                fault("write:start")
                fd, tmp = tmp_in(folder.path, os.path.basename(out), pending, final, new_mode(final))
                try:
                    for p in pieces:
                        if isinstance(p, tuple):  # (offset, length) of the input: copied in the kernel
                            copy_range(self._fd, fd, *p, self.path)
                        else:
                            write_all(fd, p)
                finally:
                    os.close(fd)
                fault("write:before-rename")
                with critical():
                    os.replace(tmp, final)
                    pending.clear()
            except OSError as e:  # a read-only or full folder, no permission: one line, nothing left
                cleanup(pending, [])
                raise InputError(f"{shown}: cannot write it ({e.strerror or e})") from None
            except BaseException:
                cleanup(pending, [])
                raise
            finally:
                folder.close()
        return SavedModel(out)

    # -- output assembly --------------------------------------------------------
    def _pieces(self, model: ModelProto) -> tuple[list, int]:
        """The output as bytes and (offset, length) ranges of the input file; its size."""
        external = sum(1 for t in iter_tensors(model) if t.data_location == TensorProto.EXTERNAL)
        buf = model.SerializeToString()  # small: the weights are placeholders
        try:
            src = Source(buf)
            graphs = [f for f in iter_fields(src, 0, len(buf)) if f[:2] == (_GRAPH, LEN)]
        except (Malformed, Unsupported) as e:  # we serialized it: a bug
            raise GeluOnnxError(f"splice: cannot re-read the fused skeleton ({e})") from None
        if len(graphs) != 1:
            raise GeluOnnxError("splice: the fused skeleton has no single graph field")
        _, _, gstart, gval, gend = graphs[0]
        body: list = []
        glen, run, used = 0, gval, 0
        for num, wt, fs, vs, fe in iter_fields(src, gval, gend):
            if num != _INITIALIZER or wt != LEN:
                continue
            rec = self.stripped.get(buf[fs:fe])
            if rec is None:
                continue
            body.append(buf[run:fs])
            body.append((rec.start, rec.end - rec.start))
            glen += (fs - run) + (rec.end - rec.start)
            run = fe
            used += 1
        if used != external:
            # a placeholder was changed (or a reference to elsewhere appeared):
            # the fuse never touches weights, so this is a bug, not bad input
            raise GeluOnnxError(f"splice: {external - used} weight placeholder(s) were modified by the fuse")
        body.append(buf[run:gend])
        glen += gend - run
        head = buf[:gstart] + field_key(_GRAPH, LEN) + varint(glen)
        tail = buf[gend:]
        return [head, *body, tail], len(head) + glen + len(tail)


def open_skeleton(path, *, strip_min_bytes: int | None = None) -> Skeleton | None:
    """Read and validate the model at ``path`` without its large weights.

    None when the file cannot be handled this way (then use load.load_model);
    InputError / UnsafeModelError (the io messages) when it is damaged or unsafe.
    """
    shown = os.fspath(path)
    real = os.path.realpath(shown)
    strip_min = STRIP_MIN_BYTES if strip_min_bytes is None else strip_min_bytes
    if not _SAFE_NAME.fullmatch(os.path.basename(real)):
        return None
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None  # the plain path words the error
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0 or st.st_size > MAX_PROTO_BYTES - _MARGIN:
            raise Unsupported("not a regular file of a size we splice")
        skel_bytes, stripped = _scan(Source(fd=fd, size=st.st_size), os.path.basename(real), strip_min)
        fault("read:scanned")
        model = ModelProto()
        try:
            model.ParseFromString(skel_bytes)
        except (DecodeError, ValueError, RuntimeError, TypeError):
            raise Malformed("protobuf parse failed") from None
        # the io checks, on the skeleton: every placeholder is verified to lie
        # inside this very file
        files = validate_model(model, base_dir=os.path.dirname(real), where=shown)[0]
        placeholders = sum(1 for t in iter_tensors(model) if t.data_location == TensorProto.EXTERNAL)
        if placeholders != len(stripped) or files not in ((), (real,)):
            raise Unsupported("the model has external data of its own")
    except Unsupported:
        os.close(fd)
        return None
    except Malformed:
        os.close(fd)
        raise InputError(f"{shown}: not a valid ONNX model (protobuf parse failed: truncated, "
                         "damaged or not ONNX)") from None
    except BaseException:
        os.close(fd)
        raise
    loaded = LoadedModel(model=model, path=real, base_dir=os.path.dirname(real),
                         external_files=(real,) if stripped else (), file_size=st.st_size)
    return Skeleton(loaded, real, {s.entry: s for s in stripped}, fd)


def _scan(src: Source, location: str, strip_min: int) -> tuple[bytes, list[_Stripped]]:
    """The skeleton's bytes: the file with each large raw_data initializer
    replaced by an external-data reference into the file itself.
    Unsupported once the skeleton would be over half the file: mostly nodes
    and small tensors (a deep export at a small hidden size), which the plain
    path reads faster (benchmarks/results/deep_exports.md). A walk in Python,
    not the native scanner: that needs the file in memory (read whole, or
    mapped: SIGBUS if another process truncates it), and a declined file's
    walk costs about what one scan does (docs/design.md, the file pipeline)."""
    size = src.size
    top = list(iter_fields(src, 0, size))
    graphs = [f for f in top if f[:2] == (_GRAPH, LEN)]  # another wire type: an unknown field to protobuf
    if len(graphs) != 1:
        raise Unsupported("not exactly one graph field")  # io words the missing-graph error
    _, _, gstart, gval, gend = graphs[0]
    stripped: list[_Stripped] = []
    parts: list[bytes] = []
    run = gval  # start of the graph bytes not yet copied
    kept_max, gone = size // 2, 0  # the skeleton must be under half the file (open_skeleton)
    for num, wt, fs, vs, fe in iter_fields(src, gval, gend):
        if fs - gone > kept_max:  # what the skeleton keeps before this field (a field may be the weight itself)
            raise Unsupported("the weights are not most of the file")
        if num != _INITIALIZER or wt != LEN or fe - vs < strip_min:
            continue
        rec = _placeholder(src, fs, vs, fe, location, strip_min)
        if rec is None:
            continue
        parts.append(src.read(run, fs))
        parts.append(rec.entry)
        stripped.append(rec)
        gone += (fe - fs) - len(rec.entry)
        run = fe
    if size - gone > kept_max:
        raise Unsupported("the weights are not most of the file")
    parts.append(src.read(run, gend))
    graph = b"".join(parts)
    out = src.read(0, gstart) + len_field(graph, _GRAPH) + src.read(gend, size)
    return out, stripped


def _placeholder(src: Source, fs: int, vs: int, fe: int, location: str, strip_min: int) -> _Stripped | None:
    raw = None
    rest: list[bytes] = []
    for num, wt, f0, v0, f1 in iter_fields(src, vs, fe):
        if num == _RAW_DATA:
            if raw is not None or wt != LEN:
                return None  # repeated or odd raw_data: leave it to protobuf
            raw = (v0, f1)
        else:
            rest.append(src.read(f0, f1))
    if raw is None or raw[1] - raw[0] < strip_min:
        return None
    t = TensorProto()
    try:
        t.ParseFromString(b"".join(rest))
    except (DecodeError, ValueError, RuntimeError, TypeError):
        raise Malformed("bad initializer") from None
    if (t.data_location != TensorProto.DEFAULT or len(t.external_data) or t.HasField("segment")
            or any(len(getattr(t, f)) for f in DATA_FIELDS[1:]) or isinstance(t.name, bytes)
            or tensor_nbytes(t) != raw[1] - raw[0]):
        return None  # not plain payload: protobuf / io / the checker judge it as usual
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", str(raw[0])), ("length", str(raw[1] - raw[0]))):
        e = t.external_data.add()
        e.key, e.value = k, v
    body = t.SerializeToString()
    return _Stripped(t.name, fs, fe, len_field(body, _INITIALIZER))
