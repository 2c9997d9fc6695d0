"""File operations the writers share: the output folder opened once (Folder),
temp files recorded for cleanup in one uninterruptible step, permission bits,
backups (hard links, else copies) of what a write replaces, and the one copy routine of the package (reflink, else
copy_file_range, else chunks; never a whole payload in Python memory)."""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile

from ..errors import InputError, UnsafeModelError
from ..interrupts import critical, fault


def path_arg(path, what: str = "path") -> str:
    """A path argument as str (bytes decoded as the OS does), or one line,
    exit 2: not path-like, empty, or holding NUL. ``what`` names it in that
    line ("model path", "output path")."""
    try:
        p = os.fspath(path)
    except TypeError:
        raise InputError(f"expected a {what}, got {type(path).__name__}") from None
    if isinstance(p, bytes):
        p = os.fsdecode(p)
    if not p:
        raise InputError(f"empty {what}")
    if "\x00" in p:
        raise InputError(f"{p!r}: not a valid {what}")
    return p


def utf8_path(path) -> bool:
    """Whether a path can be handed to onnx's and ONNX Runtime's C++ as a
    str (they take UTF-8 only; a path with other bytes is read by Python,
    its model passed in memory)."""
    try:
        os.fspath(path).encode("utf-8")
    except (UnicodeEncodeError, AttributeError):
        return False
    return True


@contextlib.contextmanager
def in_folder(folder):
    """Run the block with ``folder`` as the process's cwd (onnx.checker and
    the version converter resolve external data against it)."""
    back = os.open(".", os.O_RDONLY)
    try:
        os.chdir(folder)
        yield
    finally:
        os.fchdir(back)
        os.close(back)


def umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def new_mode(final: str, like: int | None = None) -> int:
    """Permission bits of a file written at ``final``: those of the file it
    replaces, else those of ``like`` (a data file's source) under the umask,
    else a normal create's (0666 & ~umask)."""
    with contextlib.suppress(OSError):
        st = os.lstat(final)
        if stat.S_ISREG(st.st_mode):
            return stat.S_IMODE(st.st_mode) & 0o777
    return (0o666 if like is None else like & 0o777) & ~umask()


def tmp_in(folder: str, final_name: str, pending: list | None = None, final: str | None = None,
           mode: int | None = None) -> tuple[int, str]:
    """A temp file in ``folder`` for ``final_name`` (hidden; the name cut so
    that it stays under NAME_MAX), recorded in ``pending`` as (temp, final)
    in the same uninterruptible step, so a signal never leaves it behind."""
    with critical():
        fd, tmp = tempfile.mkstemp(prefix=f".{final_name[:100]}.", suffix=".tmp", dir=folder)
        if pending is not None:
            pending.append((tmp, final))
    # mkstemp makes 0600; match a normal create (or the file replaced). A
    # filesystem without Unix modes (vfat) may refuse: its files have none
    with contextlib.suppress(PermissionError, NotImplementedError):
        os.fchmod(fd, (0o666 & ~umask()) if mode is None else mode)
    return fd, tmp


_FICLONE = 0x40049409  # linux/fs.h: ioctl(dst_fd, FICLONE, src_fd)


def reflink(src: str, dst_fd: int) -> bool:
    try:
        with open(src, "rb") as f:
            fcntl.ioctl(dst_fd, _FICLONE, f.fileno())
        return True
    except OSError:
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
    start, end, kernel = offset, offset + length, True
    while offset < end:
        if kernel:
            try:
                n = os.copy_file_range(src_fd, dst_fd, min(end - offset, 1 << 30), offset)
            except (AttributeError, OSError) as e:
                if isinstance(e, OSError) and e.errno not in _NO_COPY_RANGE:
                    raise
                kernel = False
                continue
        else:
            chunk = os.pread(src_fd, min(end - offset, 1 << 24), offset)
            write_all(dst_fd, chunk)
            n = len(chunk)
        if n == 0:
            raise InputError(f"{shown}: the file shrank while it was being copied")
        if offset == start:
            fault("write:copy")
        offset += n


def copy_into(src_real: str, dst_fd: int, size: int):
    """Copy the first ``size`` bytes (what was validated) of a data file to
    dst_fd from its start, without reading them into Python memory."""
    fd = os.open(src_real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeModelError(f"{src_real}: external data is not a regular file")
        if st.st_size < size:
            raise InputError(f"{src_real}: the file shrank while it was being copied")
        os.ftruncate(dst_fd, 0)  # a failed reflink may have left a partial clone
        # only the data, holes stay holes: a sparse 1 TB data file holding a
        # few MB costs a few MB (the size is set last)
        for start, end in _data_extents(fd, size):
            os.lseek(dst_fd, start, os.SEEK_SET)
            copy_range(fd, dst_fd, start, end - start, src_real)
        os.ftruncate(dst_fd, size)
    finally:
        os.close(fd)


def _data_extents(fd: int, size: int):
    """(start, end) of the parts of [0, size) that hold data (SEEK_DATA /
    SEEK_HOLE; the whole range where the filesystem does not tell)."""
    if not hasattr(os, "SEEK_DATA"):
        yield 0, size
        return
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # only a hole is left
                return
            yield pos, size  # not supported here
            return
        if start >= size:
            return
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        yield start, end
        pos = end


def source_mode(path: str) -> int | None:
    with contextlib.suppress(OSError):
        return os.stat(path).st_mode
    return None


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def makedirs(path: str, root: str, made: list[str]):
    parts = []
    while not os.path.isdir(path) and os.path.normpath(path) != os.path.normpath(root):
        parts.append(path)
        path = os.path.dirname(path)
    for p in reversed(parts):
        with critical():  # made and recorded for cleanup in one step
            os.mkdir(p)
            made.append(p)


# link() refusals that mean "this filesystem has no hard links here" (vfat,
# exFAT, many SMB/FUSE mounts: EPERM; others: EOPNOTSUPP; a link count at its limit)
NO_LINK = {getattr(errno, n) for n in ("EPERM", "EOPNOTSUPP", "ENOTSUP", "EXDEV", "EMLINK") if hasattr(errno, n)}


def backup(path: str) -> str:
    """What ``path`` holds, kept under a hidden name in its folder until the
    write commits: a hard link (free). Where the filesystem has none, a copy
    (reflink, else a kernel-side copy) with its permission bits, so ``path``
    itself is still replaced in one rename and never missing meanwhile."""
    folder, name = os.path.split(path)
    for k in range(1000):
        bak = os.path.join(folder, f".{name[:100]}.gelu-onnx-prev{k or ''}")
        try:
            os.link(path, bak)
            return bak
        except FileExistsError:
            continue
        except OSError as e:
            if e.errno not in NO_LINK:
                raise
        try:
            fd = os.open(bak, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        try:
            st = os.stat(path)
            with contextlib.suppress(PermissionError):  # as in tmp_in
                os.fchmod(fd, stat.S_IMODE(st.st_mode))
            if not (reflink(path, fd) and os.fstat(fd).st_size == st.st_size):
                copy_into(path, fd, st.st_size)
        except BaseException:
            os.close(fd)
            os.unlink(bak)
            raise
        os.close(fd)
        return bak
    raise InputError(f"{path}: no free name to keep the previous file while writing")


class Folder:
    """An output folder opened once (O_DIRECTORY | O_NOFOLLOW) after its
    checks. ``path`` names it through that descriptor (/proc/self/fd/N), so
    every temp file, rename, link, backup and cleanup lands in the folder
    that was checked, even when its path is renamed or swapped for a link
    mid-write: the write can then neither go elsewhere (into the input's
    folder) nor leave a temp file behind. Without /proc, ``path`` is the real
    path. ``close()`` when the write committed or rolled back."""

    def __init__(self, real: str, where: str):
        try:
            self.fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise InputError(f"{where}: cannot open its folder ({e.strerror or e})") from None
        try:
            same = os.path.samestat(os.fstat(self.fd), os.stat(real))
        except OSError:
            same = False
        if not same:
            self.close()
            raise InputError(f"{where}: its folder was replaced while it was checked; nothing was written")
        via = f"/proc/self/fd/{self.fd}"
        self.path = via if os.path.isdir(via) else real

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def same_bytes(a: str, b: str) -> bool:
    """Whether two regular files hold the same bytes; holes in both are
    skipped (comparing two sparse 1 TB files reads their data only)."""
    try:
        fa = os.open(a, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            fb = os.open(b, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
            try:
                sa, sb = os.fstat(fa), os.fstat(fb)
                if not (stat.S_ISREG(sa.st_mode) and stat.S_ISREG(sb.st_mode)) or sa.st_size != sb.st_size:
                    return False
                spans = sorted([*_data_extents(fa, sa.st_size), *_data_extents(fb, sb.st_size)])
                pos = 0
                for start, end in spans:
                    start = max(start, pos)
                    while start < end:
                        n = min(end - start, 1 << 20)
                        if os.pread(fa, n, start) != os.pread(fb, n, start):
                            return False
                        start += n
                    pos = max(pos, end)
                return True
            finally:
                os.close(fb)
        finally:
            os.close(fa)
    except OSError:
        return False


# folders this process holds locked: real path -> [fd or None, depth]
_locked: dict[str, list] = {}


@contextlib.contextmanager
def folder_lock(folder: str):
    """Hold an exclusive lock on ``folder`` itself (flock on the directory:
    no lock file is written) while a write decides which data files it may
    claim, renames and checks, so concurrent writers into one folder go one
    after the other. Re-entrant within a process. Where the filesystem has
    no flock on a folder (some network filesystems, an unreadable folder) the
    write goes on unlocked: claim() still never replaces another writer's
    data file."""
    real = os.path.realpath(folder)
    held = _locked.get(real)
    if held is not None:
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
        return
    fd = None
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        if fd is not None:
            os.close(fd)
            fd = None
    _locked[real] = [fd, 1]
    try:
        yield
    finally:
        del _locked[real]
        if fd is not None:
            os.close(fd)  # releases the lock


def claim(tmp: str, final: str) -> bool:
    """Rename ``tmp`` to a ``final`` that did not exist, atomically: False
    (``tmp`` left as it is) when another writer created ``final`` meanwhile.
    A hard link fails on an existing name where a rename would replace it;
    filesystems without hard links fall back to a rename (the folder lock
    then keeps writers apart)."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    except OSError as e:
        if e.errno not in NO_LINK:
            raise
        os.replace(tmp, final)
        return True
    os.unlink(tmp)
    return True


def cleanup(pending: list[tuple[str, str]], made_dirs: list[str]):
    with critical():
        for tmp, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for d in reversed(made_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        pending.clear()
        made_dirs.clear()
