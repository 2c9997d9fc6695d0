"""Writing ONNX files without losing a user's data: temp file + rename,
backups until commit, rollback, data files cloned (reflink) or copied next to
the output, never over the input or another model's data (docs/safety.md)."""
from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass, field

import onnx
from google.protobuf.message import EncodeError
from onnx import TensorProto

from ..errors import GeluOnnxError, InputError, UnsafeModelError, UnsupportedError
from .format import (EXTERNAL_ALIGN, EXTERNAL_SIZE_THRESHOLD, MAX_PROTO_BYTES, external_info,
                      is_external, is_model_file, tensor_nbytes)
from .fileops import (Folder, backup, claim, cleanup, copy_into, folder_lock, makedirs, new_mode, path_arg,
                      reflink, same_bytes, same_file, source_mode, tmp_in)
from ..interrupts import critical, fault, unwinding
from ..memlimit import not_enough, short_of
from .irversion import ModelFacts, model_facts
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
    # (backup, final): what the write replaced, kept (hard links, else copies) until
    # commit(); rollback() puts it back, so a failure after writing (the
    # checker on a big model) leaves every pre-existing file as it was.
    backups: list[tuple[str, str]] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    # the output folder, opened once: backups and created name files through it
    folder: Folder | None = None

    def commit(self) -> None:
        with critical():
            for bak, _ in self.backups:
                with contextlib.suppress(OSError):
                    os.unlink(bak)
            self.backups.clear()
            self.created.clear()
            self._close()

    def through_folder(self) -> str:
        """``path`` named through the folder the write opened (until it
        commits or rolls back): what was written there, wherever the
        folder's path now leads."""
        return self.path if self.folder is None else os.path.join(self.folder.path, os.path.basename(self.path))

    def _close(self) -> None:
        if self.folder is not None:
            self.folder.close()
            self.folder = None

    def rollback(self, close: bool = True) -> None:
        """Remove what this write created and restore what it replaced
        (``close``: and let go of the folder; the writer's own cleanup of
        its temp files still needs it otherwise)."""
        with critical():
            fault("write:rollback")  # a second signal here waits for the rollback's end
            for f in self.created:
                with contextlib.suppress(OSError):
                    os.unlink(f)
            for bak, final in self.backups:
                with contextlib.suppress(OSError):
                    os.replace(bak, final)
            self.backups.clear()
            self.created.clear()
            if close:
                self._close()


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


def check_output_path(out_path, input_path=None, overwrite_input: bool = False, *,
                      replaceable=None, check_existing: bool = True) -> tuple[str, str, str]:
    """The checks every writer makes on its output path, before anything is
    written: a real path (no NUL, no trailing slash), in an existing folder,
    not a directory, device, FIFO or socket, and not the input model unless
    ``overwrite_input``. A symlink to a file in its own folder is written
    through (the target is replaced, the link stays); one that dangles or
    points into another folder is refused. An existing file is
    replaced only when ``replaceable(path)`` says it is one of the files this
    writer makes (default: an ONNX model, i.e. a previous output) or it is
    empty: never a user's weights or notes. Returns (path as shown in
    messages, absolute path written, its folder)."""
    shown = path_arg(out_path, "output path")
    where = one_line(shown)
    if shown.endswith(os.sep) or (os.altsep and shown.endswith(os.altsep)):
        raise InputError(f"{where}: ends with a path separator; give an output file name")
    out = os.path.abspath(shown)
    if os.path.islink(out):
        # written through only to a file beside the link: a link planted to
        # aim the write elsewhere (or at nothing) is refused, never followed
        target = os.path.realpath(out)
        if not os.path.lexists(target):
            raise InputError(f"{where}: is a symlink to {one_line(target)}, which does not exist; "
                             "give the real output path")
        elsewhere = os.path.dirname(target) != os.path.realpath(os.path.dirname(out))
        out = target
    else:
        elsewhere = False
    out_dir = os.path.dirname(out)
    try:
        if not os.path.isdir(out_dir):
            raise InputError(f"{where}: output folder {one_line(out_dir)} does not exist")
        if os.path.isdir(out):
            raise InputError(f"{where}: is a directory; give an output file name")
        st = os.lstat(out) if os.path.lexists(out) else None
    except OSError as e:  # a name over the OS limits, a loop of links
        raise InputError(f"{where}: cannot use it as output ({e.strerror or e})") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"{where}: exists and is not a regular file (a device, FIFO, socket or symlink "
                         "loop); refusing to replace it")
    if input_path is not None and same_file(out, input_path) and not overwrite_input:
        raise InputError(f"{where}: refusing to overwrite the input model; choose another "
                         "output path (or request in-place explicitly)")
    if elsewhere:
        raise InputError(f"{where}: is a symlink to {one_line(out)}, outside its folder; refusing "
                         "to write there: give the real output path")
    if check_existing and not (input_path is not None and same_file(out, input_path)):
        refuse_unreplaceable(where, out, replaceable)
    return where, out, out_dir


def refuse_unreplaceable(where: str, out: str, replaceable=None) -> None:
    """An existing, non-empty file at ``out`` that is not what this writer
    makes (``replaceable(path)``; default: an ONNX model) is never replaced."""
    try:
        if not os.path.getsize(out):
            return
    except OSError:
        return  # not there
    if not (replaceable(out) if replaceable is not None else is_model_file(out)):
        raise InputError(f"{where}: exists and is not {'a file this command writes' if replaceable else 'an ONNX model'}"
                         " (weights? another file?); refusing to replace it: remove it first or choose "
                         "another output path")


def save_model(model: onnx.ModelProto, out_path, *, source: LoadedModel | None = None,
               source_dir=None, overwrite_input: bool = False,
               max_proto_bytes: int | None = None, keep_backups: bool = False,
               facts: ModelFacts | None = None, payload: bytes | None = None) -> SavedModel:
    """Write ``model`` to ``out_path`` atomically (temp file + rename).

    ``source`` (the LoadedModel it came from) or ``source_dir`` say where its
    external data live and which files must not be overwritten (the input
    file unless ``overwrite_input``; its data files always). External tensors
    keep their locations; in another folder their data files are
    reflink-cloned (else copied) next to the output. A model over
    ``max_proto_bytes`` (protobuf's 2 GB; GELU_ONNX_TEST_MAX_PROTO_BYTES for
    tests) has its tensors >= 1 KiB moved to ``<output name>.data``, in place
    as onnx.save does. A signal during the write removes every temp file and
    puts back what was replaced. ``facts`` / ``payload``: the model's
    irversion.ModelFacts / serialization, when the caller has them.
    """
    if max_proto_bytes is None:
        max_proto_bytes = int(os.environ.get("GELU_ONNX_TEST_MAX_PROTO_BYTES", MAX_PROTO_BYTES))
    with unwinding(), folder_lock(os.path.dirname(os.path.abspath(path_arg(out_path, "output path")))):
        input_path, protected = (None, set()) if source is None else (source.path, set(source.external_files))
        if source is not None and source_dir is None:
            source_dir = source.base_dir
        where, shown_out, out_dir = check_output_path(out_path, input_path, overwrite_input, check_existing=False)
        # From here on every name is resolved in the folder opened now, through
        # its descriptor (fileops.Folder): checks, temp files, renames, cleanup.
        folder = Folder(os.path.realpath(out_dir), where)
        saved = SavedModel(shown_out, folder=folder)
        try:
            return _save_in(model, folder, where, shown_out, out_dir, source_dir, input_path, protected,
                            max_proto_bytes, keep_backups, facts or model_facts(model), payload, saved)
        except BaseException:
            saved._close()
            raise


def _claim(tmp: str, final: str, where: str, saved: SavedModel, shown: str) -> None:
    """A new data file takes its name only if no other writer took it since
    it was looked at (claim: never a rename over it); one that did, with
    the same bytes, is used as it is (the temp copy goes)."""
    if claim(tmp, final):
        saved.created.append(final)
    elif same_bytes(final, tmp):
        os.unlink(tmp)
    else:
        raise InputError(f"{where}: {shown} was written by another process meanwhile and is not this "
                         "model's data; refusing to replace it: write the output into another folder")


def _save_in(model, folder: Folder, where: str, shown_out: str, out_dir: str, source_dir, input_path, protected,
             max_proto_bytes, keep_backups, facts: ModelFacts, given, saved: SavedModel) -> SavedModel:
    out = os.path.join(folder.path, os.path.basename(shown_out))
    real_dir = os.path.realpath(folder.path)

    def shown(p: str) -> str:  # a path through the folder's descriptor, as the user named it
        return os.path.join(out_dir, os.path.relpath(p, folder.path))

    for p in protected:
        if same_file(out, p):
            raise InputError(f"{where}: refusing to overwrite {p}, an external data file "
                             "of the input model")

    # Which data files does the output reference?  Validated again: this is
    # the path by which bytes get copied, so it gets the same escape checks.
    v = Validator(where, os.path.realpath(source_dir) if source_dir is not None else None)
    refs: dict[str, str] = {}  # location -> source real path
    for t in facts.external:
        if is_external(t):
            v.tensor(t)
            loc = external_info(t)["location"]
            refs[loc] = v.resolve(loc, t.name)
    for src in refs.values():
        if same_file(out, src):
            raise InputError(f"{where}: refusing to overwrite {src}, an external data file "
                             "the model uses")
    if not (input_path is not None and same_file(out, input_path)):
        refuse_unreplaceable(where, out)

    pending: list[tuple[str, str]] = []  # (temp, final), renamed in this order
    made_dirs: list[str] = []
    try:
        fault("write:start")
        if refs and real_dir != v.base_dir:
            done: set = set()
            for loc, src in sorted(refs.items()):
                dst = os.path.normpath(os.path.join(folder.path, loc))
                if dst in done:  # one file, spelled twice ("w.bin", "./w.bin")
                    continue
                done.add(dst)
                dst_dir = os.path.dirname(dst)
                if not os.path.isdir(dst_dir):
                    makedirs(dst_dir, folder.path, made_dirs)
                real_dst_dir = os.path.realpath(dst_dir)
                if os.path.commonpath([real_dst_dir, real_dir]) != real_dir:
                    raise UnsafeModelError(f"{where}: data file {loc} would be written "
                                           f"outside the output folder (through a symlink)")
                if same_file(dst, out) or os.path.abspath(dst) == out:
                    raise InputError(f"{where}: the model's external data file {loc} would be written "
                                     "at the output path itself; choose another output name")
                saved.data_files.append(shown(dst))
                if os.path.islink(dst):  # onnx refuses links as data files; and never replace one
                    raise InputError(f"{where}: {shown(dst)} is a symlink where the model's data file {loc} goes; "
                                     "refusing to replace it: write the output into another folder")
                if os.path.lexists(dst) and same_file(dst, src):
                    continue  # the same file (the output folder is the input folder, bind-mounted)
                if any(same_file(dst, p) for p in protected if os.path.lexists(dst)):
                    raise InputError(f"{where}: refusing to overwrite {shown(dst)}, an external data "
                                     "file of the input model")
                if os.path.lexists(dst):
                    if not same_bytes(dst, src):
                        # another model's data (it would then compute other values)
                        raise InputError(f"{where}: {shown(dst)} already exists and is not this model's data "
                                         f"file {loc} (its bytes differ); refusing to replace it: write "
                                         "the output into another folder")
                    st = os.lstat(dst)
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                        continue  # this model's bytes already (an earlier run): kept as it is
                # Not a hard link: onnx >= 1.23 refuses to load a model whose
                # data file has several links ("potential hardlink attack"),
                # which would break the user's *input* model too. A reflink
                # (copy-on-write clone, btrfs/xfs) costs nothing; else copy.
                fd, tmp = tmp_in(dst_dir, os.path.basename(dst), pending, dst,
                                 new_mode(dst, source_mode(src)))
                try:
                    # the bytes validated above, no fewer (a file truncated since fails)
                    if reflink(src, fd) and os.fstat(fd).st_size >= v.data_files[src]:
                        saved.linked.append(shown(dst))
                    else:
                        copy_into(src, fd, v.data_files[src])
                        saved.copied.append(shown(dst))
                finally:
                    os.close(fd)
                fault("write:data-copied")
        # upb's ByteSize() serializes the whole model (and a failed > 2 GB
        # serialization takes seconds), so decide from the payload sizes.
        payload = None
        margin = min(64 << 20, max_proto_bytes // 8)
        if facts.embedded <= max_proto_bytes - margin:
            try:
                payload = given if given is not None else model.SerializeToString()
            except (EncodeError, MemoryError):  # not the 2 GB limit: its payloads are below it
                if short_of(facts.embedded):
                    raise not_enough(f"write {where}", facts.embedded) from None
                payload = None
            if payload is not None and len(payload) > max_proto_bytes:
                payload = None
        if payload is None:
            name = _data_name(out, refs, protected, folder.path)
            data = os.path.join(folder.path, name)
            fd, tmp = tmp_in(folder.path, name, pending, data, new_mode(data, new_mode(out)))
            try:
                saved.externalized = _externalize(model, fd, name)
            finally:
                os.close(fd)
            saved.data_files.append(os.path.join(out_dir, name))
            over = "2 GB" if max_proto_bytes == MAX_PROTO_BYTES else f"{max_proto_bytes} bytes"
            saved.notes.append(f"model is over {over}: {saved.externalized} tensors "
                               f"written to external data file {name} next to {os.path.basename(out)}")
            try:
                payload = model.SerializeToString()
            except (EncodeError, MemoryError):
                if short_of(facts.embedded // 8):
                    raise not_enough(f"write {where}", facts.embedded // 8) from None
                raise UnsupportedError(f"{where}: the graph itself is over 2 GB even "
                                       "without tensor payloads") from None
        fd, tmp = tmp_in(folder.path, os.path.basename(out), pending, out, new_mode(out))
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        del payload
        fault("write:before-rename")
        # all renames or none: a signal in here is acted on after the loop,
        # and the rollback below then puts back what was replaced
        with critical():
            for tmp, final in pending:
                if final == out:
                    fault("write:data-renamed")  # every data file is in place, the model not yet
                if os.path.lexists(final):
                    bak = backup(final)
                    saved.backups.append((bak, final))
                elif final != out:
                    _claim(tmp, final, where, saved, shown(final))
                    continue
                else:
                    saved.created.append(final)
                os.replace(tmp, final)
            pending.clear()
    except BaseException as e:
        with critical():  # both, even if another signal comes
            saved.rollback(close=False)
            cleanup(pending, made_dirs)
        if isinstance(e, OSError) and not isinstance(e, GeluOnnxError):
            raise InputError(f"{where}: cannot write it ({e.strerror or e})") from None
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


def _data_name(out: str, refs: dict, protected: set, out_dir: str) -> str:
    base = os.path.basename(out)
    for k in range(1000):
        name = f"{base}.data" if k == 0 else f"{base}.{k}.data"
        path = os.path.join(out_dir, name)
        if name in refs or any(same_file(path, p) for p in protected):
            continue
        if any(same_file(path, os.path.join(out_dir, r)) for r in refs):
            continue
        if os.path.islink(path) or (os.path.lexists(path) and not _written_by_us(path, base)):
            continue  # another file of that name: never replaced
        return name
    raise InputError(f"{base}: no free name for its external data file")


def _written_by_us(data: str, model_name: str) -> bool:
    """``data`` (named after the output) is the companion of the output model
    this write replaces: that model exists and stores tensors in it. Its
    previous bytes are kept until the write commits."""
    model = os.path.join(os.path.dirname(data), model_name)
    try:
        if not os.path.isfile(model) or os.path.getsize(model) > MAX_PROTO_BYTES:
            return False
        m = onnx.ModelProto()
        with open(model, "rb") as f:
            m.ParseFromString(f.read())
    except Exception:  # noqa: BLE001 - unreadable or not a model: not ours to replace
        return False
    name = os.path.basename(data)
    return any(is_external(t) and external_info(t).get("location") == name for t in iter_tensors(m))


