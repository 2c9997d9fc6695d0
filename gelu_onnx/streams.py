"""The command's standard streams, as launchers leave them: closed (``>&-``,
daemons), full (``/dev/full``, a full disk), or a pipe whose reader left
(``| head``). None of these changes the exit code or prints a traceback
(docs/cli.md, "Standard streams": the rules and the decision on a lost report).
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import sys


def reopen_closed() -> None:
    """Each of fds 0, 1, 2 that is closed becomes /dev/null, before anything
    is opened (else the first file opened would get its descriptor, and a
    print or ONNX Runtime's logging to fd 2 would land in it), and Python's
    stream for it exists (None when the process started without it)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: this one
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdin is None:
        sys.stdin = open(0, closefd=False)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")


def install(errors: str) -> tuple[Report, Quiet]:
    """Wrap sys.stdout (Report) and sys.stderr (Quiet) for one command,
    writing with the codec error handler ``errors``; the caller puts
    ``.stream`` of each back at the end."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors=errors)
    out, err = Report(sys.stdout), Quiet(sys.stderr)
    sys.stdout, sys.stderr = out, err
    return out, err


class Quiet:
    """A standard stream whose write errors are dropped. After the first one
    its descriptor is pointed at /dev/null, so what is still buffered (and
    the interpreter's flush at exit) goes there instead of failing again."""

    def __init__(self, stream):
        self.stream = stream
        self.lost: OSError | None = None

    def write(self, s):
        self._try("write", s)
        return len(s)

    def flush(self):
        self._try("flush")

    def _try(self, method: str, *args) -> None:
        if self.stream is not None and self.lost is None:
            try:
                getattr(self.stream, method)(*args)
            except (OSError, ValueError) as e:
                self._lose(e)

    def _lose(self, e) -> None:
        self.lost = e if isinstance(e, OSError) else OSError(errno.EBADF, "closed")
        with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()  # into /dev/null: the buffer is empty again

    def __getattr__(self, name):
        return getattr(self.stream, name)


class Report(Quiet):
    """stdout, the report: a success whose report was lost says so on stderr."""

    def settle(self, success: bool) -> None:
        """Flush at the command's end; on a success whose report was lost
        (not to a reader that left), one warning line on stderr."""
        self.flush()
        if success and self.lost is not None and not isinstance(self.lost, BrokenPipeError):
            print(f"gelu-onnx: warning: the report could not be written to standard output "
                  f"({self.lost.strerror or self.lost}); the command's work is done", file=sys.stderr)
