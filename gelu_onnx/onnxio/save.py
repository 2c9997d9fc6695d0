"""Writing ONNX files without losing a user's data: temp file + rename,
backups until commit, rollback, data files cloned (reflink) or copied next to
the output, never over the input or another model's data (docs/safety.md)."""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from dataclasses import dataclass, field

import onnx
from google.protobuf.message import EncodeError
from onnx import TensorProto

from ..errors import GeluOnnxError, InputError, UnsafeModelError, UnsupportedError
from .tensors import (EXTERNAL_ALIGN, EXTERNAL_SIZE_THRESHOLD, MAX_PROTO_BYTES, embedded_bytes, external_info,
                      is_external, tensor_nbytes)
from .load import LoadedModel
from .validate import Validator, one_line
from .walk import iter_tensors


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


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def tmp_in(folder: str, final_name: str) -> tuple[int, str]:
    fd, tmp = tempfile.mkstemp(prefix=f".{final_name}.", suffix=".tmp", dir=folder)
    os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; match a normal create
    return fd, tmp


_FICLONE = 0x40049409  # linux/fs.h: ioctl(dst_fd, FICLONE, src_fd)


def reflink(src: str, dst_fd: int) -> bool:
    try:
        import fcntl

        with open(src, "rb") as f:
            fcntl.ioctl(dst_fd, _FICLONE, f.fileno())
        return True
    except (OSError, ImportError):
        return False


# copy_file_range refusals that mean "not here" (old kernels, some filesystems)
_NO_COPY_RANGE = {getattr(errno, n) for n in ("EXDEV", "ENOSYS", "EOPNOTSUPP", "EINVAL", "EPERM") if hasattr(errno, n)}


def write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def copy_range(src_fd: int, dst_fd: int, offset: int, length: int, shown: str) -> None:
    """Copy bytes [offset, offset+length) of src_fd to dst_fd's position, in the
    kernel where it can (copy_file_range), else in 16 MiB chunks; never the
    whole payload in Python memory. The one copy routine of the package (data
    files next to an output, the splice path's weights)."""
    end = offset + length
    try:
        while offset < end:
            n = os.copy_file_range(src_fd, dst_fd, min(end - offset, 1 << 30), offset)
            if n == 0:
                raise InputError(f"{shown}: the file shrank while it was being copied")
            offset += n
    except (AttributeError, OSError) as e:
        if isinstance(e, OSError) and e.errno not in _NO_COPY_RANGE:
            raise
        while offset < end:
            chunk = os.pread(src_fd, min(end - offset, 1 << 24), offset)
            if not chunk:
                raise InputError(f"{shown}: the file shrank while it was being copied") from None
            write_all(dst_fd, chunk)
            offset += len(chunk)


def copy_into(src_real: str, dst_fd: int):
    """Copy a (validated) data file without reading it into Python memory."""
    fd = os.open(src_real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeModelError(f"{src_real}: external data is not a regular file")
        copy_range(fd, dst_fd, 0, st.st_size, src_real)
    finally:
        os.close(fd)


def same_file(a: str, b: str) -> bool:
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
            if is_external(t) or not t.HasField("raw_data"):
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
    where = one_line(str(shown))
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
    if input_path is not None and same_file(out, input_path) and not overwrite_input:
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
        if same_file(out, p):
            raise InputError(f"{where}: refusing to overwrite {p}, an external data file "
                             "of the input model")

    # Which data files does the output reference?  Validated again: this is
    # the path by which bytes get copied, so it gets the same escape checks.
    v = Validator(where, os.path.realpath(source_dir) if source_dir is not None else None)
    refs: dict[str, str] = {}  # location -> source real path
    for t in iter_tensors(model):
        if is_external(t):
            v.tensor(t)
            loc = external_info(t)["location"]
            refs[loc] = v.resolve(loc, t.name)
    for src in refs.values():
        if same_file(out, src):
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
                if same_file(dst, out) or os.path.abspath(dst) == out:
                    raise InputError(f"{where}: the model's external data file {loc} would be written "
                                     "at the output path itself; choose another output name")
                saved.data_files.append(dst)
                if os.path.lexists(dst) and same_file(dst, src):
                    continue  # already linked by an earlier run
                if any(same_file(dst, p) for p in protected if os.path.lexists(dst)):
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
                fd, tmp = tmp_in(real_dst_dir, os.path.basename(dst))
                pending.append((tmp, dst))
                try:
                    if reflink(src, fd):
                        saved.linked.append(dst)
                    else:
                        copy_into(src, fd)
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
            fd, tmp = tmp_in(real_dir, name)
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
        fd, tmp = tmp_in(real_dir, os.path.basename(out))
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
        if name in refs or any(same_file(path, p) for p in protected):
            continue
        if any(same_file(path, os.path.join(out_dir, r)) for r in refs):
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
