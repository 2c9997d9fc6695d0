"""``python -m gelu_onnx`` is the ``gelu-onnx`` command (and its console
script). The signal handlers come before the heavy imports (numpy, onnx,
onnxruntime: half a second), which run with signals deferred to their end: a
Ctrl-C or SIGTERM then is one line and exit 128 + n, never a traceback nor
an ImportError from an interrupted C extension."""
import ctypes
import os
import sys

from . import memlimit
from .interrupts import preload, unwinding
from .streams import reopen_closed

# what every command imports; --help / --version need the parser only, and
# fuse / inspect no runtime (and not the parity checker). gelu_onnx.ortlib,
# which turns ONNX Runtime's telemetry off, comes in before onnxruntime.
_COMMAND_MODULES = ("gelu_onnx.cli", "gelu_onnx.files", "gelu_onnx.verify", "onnxruntime")
_FILE_COMMANDS = ("fuse", "inspect")


def main() -> int:
    reopen_closed()  # before anything is opened
    if memlimit.limit() is not None:
        # OpenBLAS (numpy's) maps a buffer per thread at import, and when one
        # fails it exits the process itself (status 1, "parity failed"):
        # gelu-onnx does no BLAS work worth threads (ONNX Runtime runs models)
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        if memlimit.short_of(memlimit.START_BYTES):
            _say(f"gelu-onnx: error: {memlimit.not_enough('start gelu-onnx', memlimit.START_BYTES).message}")
            return memlimit.UnsupportedError.exit_code
    with unwinding():
        try:
            quick = any(a in ("-h", "--help", "--version") for a in sys.argv[1:])
            files_only = bool(sys.argv[1:]) and sys.argv[1] in _FILE_COMMANDS
            if files_only:
                _reuse_freed_memory()
            preload(_COMMAND_MODULES[:1] if quick else _COMMAND_MODULES[:2] if files_only else _COMMAND_MODULES)
            from .cli import main as cli_main  # after the signal handlers, with the modules preloaded

            return cli_main()
        except (MemoryError, ImportError) as e:  # the imports, under a tight ulimit -v
            if not memlimit.allocation_failed(e):
                raise
            _say(f"gelu-onnx: error: {memlimit.not_enough('start gelu-onnx').message}")
            return memlimit.UnsupportedError.exit_code
        except KeyboardInterrupt as e:  # outside a command's own handling (the imports, argparse)
            signum = getattr(e, "signum", 2)
            _say(f"gelu-onnx: terminated by signal {signum}")
            return 128 + signum


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (OSError, ValueError):  # stderr full or gone: the exit code says it
        pass


def _reuse_freed_memory() -> None:
    """fuse / inspect hold a model's bytes several times, one after another
    (the file, the parsed model, onnx.checker's copies, the serialized
    output): glibc gives each such block its own mmap, zero-filled by the
    kernel page by page and unmapped when freed, and the next one faults in
    again (a third of a 60 MB model's system time). Its heap, never trimmed
    and without mmaps, reuses freed blocks; the command ends soon after. The
    library leaves a host process's malloc alone; elsewhere (musl, macOS) no
    ``mallopt``, nothing changes. benchmarks/results/deep_exports.md."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's malloc.h
    mallopt(m_mmap_max, 0)
    mallopt(m_trim_threshold, 2**31 - 1)


if __name__ == "__main__":
    sys.exit(main())
