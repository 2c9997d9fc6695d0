"""gelu-onnx and ONNX Runtime: find and register the custom-op library
(libgelu_onnx_ort.so), the runtime's environment and logging, and what the
installed runtime accepts (asked of the runtime itself: runtimes move, so no
fact here is a table of versions; each is probed by loading a one-node model,
once per process, and the IR limit is kept on disk per installed runtime).

The library implements the ops of ``gelu_onnx.contract`` on ORT's CPU (and,
built with CUDA, CUDA) execution provider; without it ORT inlines the
model-local function each fused model carries (docs/design.md, "Targets").

Where the library is looked for: gelu_onnx.libs (``$GELU_ONNX_ORT_LIBRARY``,
the package's ``_lib`` folder, the installed distribution).
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import stat
import tempfile
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from . import libs
from .errors import InputError, UnsupportedError
from .onnxio.fileops import utf8_path

LIBRARY_NAME = "libgelu_onnx_ort.so"
ENV_VAR = "GELU_ONNX_ORT_LIBRARY"


def library_path(required: bool = True) -> Path | None:
    """Path of the custom-op library; None when missing and not ``required``
    (else UnsupportedError, or InputError for a bad $GELU_ONNX_ORT_LIBRARY)."""
    p = libs.find(LIBRARY_NAME, ENV_VAR)
    if p is None and required:
        bad = libs.env_problem(ENV_VAR)
        if bad:
            raise InputError(bad)
        raise UnsupportedError(
            f"the gelu-onnx custom-op library ({LIBRARY_NAME}) is not built: reinstall with "
            f"`{libs.reinstall_command()}` (CMake needs ONNX Runtime headers, see plugins/README.md) "
            f"or set {ENV_VAR}"
        )
    return p


def available() -> bool:
    """True when the library exists (it is not loaded here)."""
    try:
        return library_path(required=False) is not None
    except InputError:
        return False


TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"
LOG_ENV = "GELU_ONNX_ORT_LOG"  # ONNX Runtime's log level: 0 verbose .. 4 fatal (default: 4, nothing)


# ONNX Runtime's telemetry off unless the caller set ORT_DISABLE_TELEMETRY:
# importing onnxruntime 1.2x otherwise creates
# $HOME/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}
# and, where HOME cannot be written, prints a warning. Set when this module is
# imported, which every path of the package to onnxruntime does first (the
# command's preload too); once onnxruntime is imported it changes nothing.
if not os.environ.get(TELEMETRY_ENV):  # unset or empty
    os.environ[TELEMETRY_ENV] = "1"


def runtime():
    """The onnxruntime module. Imported here only, when a runtime feature is
    used: it is an optional dependency, and ``fuse`` needs none (about 0.3 s
    of imports; docs/design.md, "Dependencies and start-up")."""
    import onnxruntime

    return onnxruntime


def log_level() -> int:
    try:
        return min(4, max(0, int(os.environ.get(LOG_ENV, "4"))))
    except ValueError:
        return 4


def quiet(so):
    """``so`` (an onnxruntime.SessionOptions) and ONNX Runtime's default
    logger, which is process-wide and also writes what a session logs
    before its own logger exists, at log_level(): our one stderr line is
    the only one, on success and on failure (a model failing at run time
    logs a coloured error line first otherwise). Returns ``so``."""
    level = log_level()
    so.log_severity_level = level
    runtime().set_default_logger_severity(level)
    return so


_FOLDER_FDS: dict[str, int] = {}


def folder_arg(folder: str) -> str:
    """``folder`` as ONNX Runtime's C++ can take it (UTF-8 only): itself, or
    for a folder whose path holds other bytes, /proc/self/fd/N of a
    descriptor kept open on it for the process's life (one per folder)."""
    if utf8_path(folder) or not os.path.isdir("/proc/self/fd"):
        return folder
    if folder not in _FOLDER_FDS:
        _FOLDER_FDS[folder] = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    return f"/proc/self/fd/{_FOLDER_FDS[folder]}"


def session_options(base=None):
    """An ``onnxruntime.SessionOptions`` (``base``, extended in place, or a
    fresh one) with the custom-op library registered; UnsupportedError when
    the library is not built or this onnxruntime refuses it."""
    ort = runtime()
    path = library_path(required=True)
    so = base if base is not None else ort.SessionOptions()
    try:
        so.register_custom_ops_library(str(path))
    except Exception as e:  # onnxruntime raises plain RuntimeError/Fail
        raise UnsupportedError(f"onnxruntime {ort.__version__} could not load {path}: {e}") from e
    return so


# --- what the installed runtime accepts ---------------------------------------------

def runtime_version() -> str:
    return runtime().__version__


def loads_ir(ir: int) -> bool:
    """True when the installed onnxruntime loads a model of IR version ``ir``
    (an Identity at opset 13, which every supported runtime knows)."""
    ort = runtime()
    so = quiet(ort.SessionOptions())
    so.log_severity_level = 4  # the refusals below are expected: never shown, even with -v
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "ir_probe",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=ir)
    try:
        ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal means "not this IR"
        return False
    return True


@functools.lru_cache(maxsize=None)
def max_ir_version() -> int:
    """Highest IR version the installed onnxruntime loads (probed downward
    from two above what the installed onnx writes; IR 7 is opset 13's floor),
    kept in a cache file keyed by the runtime's version, path and library
    file, so ``fuse`` need not import the runtime for every model it writes
    (GELU_ONNX_CACHE=off: always ask)."""
    key = _runtime_key()
    cached = _cache_read().get(key) if key is not None else None
    if isinstance(cached, int):
        return cached
    limit = next((ir for ir in range(onnx.IR_VERSION + 2, 6, -1) if loads_ir(ir)), 6)
    if key is not None:
        _cache_write(key, limit)
    return limit


CACHE_ENV = "GELU_ONNX_CACHE"  # "off": no cache file; else the folder (default ~/.cache/gelu-onnx)


def _runtime_key() -> str | None:
    """The installed onnxruntime's identity without importing it: its
    version (capi/build_and_package_info.py), the real path of the package
    and the size and mtime of its extension module. None when unsure."""
    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.origin:
        return None
    capi = os.path.join(os.path.dirname(os.path.realpath(spec.origin)), "capi")
    try:
        info = open(os.path.join(capi, "build_and_package_info.py"), encoding="utf-8").read()
        ext = [f for f in os.listdir(capi) if f.startswith("onnxruntime_pybind11_state") and f.endswith((".so", ".pyd"))]
        st = os.stat(os.path.join(capi, ext[0])) if len(ext) == 1 else None
    except OSError:
        return None
    version = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", info)
    if version is None or st is None:
        return None
    return f"{version.group(1)}|{capi}|{st.st_size}|{st.st_mtime_ns}"


def _cache_file() -> str | None:
    where = os.environ.get(CACHE_ENV)
    if where == "off":
        return None
    if not where:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "gelu-onnx")
    return os.path.join(where, "ort-max-ir.json")


_CACHE_MAX_BYTES = 1 << 20  # a few entries; anything bigger is not ours


def _cache_read() -> dict:
    """The cache's entries; {} for anything but a small regular file we can
    read. Opened without following a link and without blocking (a FIFO or a
    device planted at the path is ignored, never waited on or read)."""
    path = _cache_file()
    if path is None:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _CACHE_MAX_BYTES:
            return {}
        data = json.loads(os.read(fd, _CACHE_MAX_BYTES + 1).decode("utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}
    finally:
        os.close(fd)


def _cache_write(key: str, limit: int) -> None:
    """Best effort: a folder that cannot be written leaves the runtime asked next time too."""
    path = _cache_file()
    if path is None:
        return
    data = _cache_read()
    data[key] = limit
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
            return  # not a file of ours (a FIFO, a device, a link): left alone
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".ort-max-ir.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass
