"""Find and register the ONNX Runtime custom-op library (libgelu_onnx_ort.so).

The library implements the op contract of ``gelu_onnx.contract`` (domain
``ai.gelu_onnx``, op types GeluErf ... BiasGeluSigmoid) for float32, float16 and
bfloat16 on ORT's CPU execution provider and, when built with CUDA, on the CUDA
execution provider. Fused models also carry each op's math as a model-local
function, so they run without the library too (ORT inlines the function when no
kernel is registered); with the library registered ORT runs our kernels.

Where the library is looked for: gelu_onnx.libs (``$GELU_ONNX_ORT_LIBRARY``,
the package's ``_lib`` folder, the installed distribution).
"""
from __future__ import annotations

from pathlib import Path

from . import libs
from .errors import InputError, UnsupportedError

LIBRARY_NAME = "libgelu_onnx_ort.so"
ENV_VAR = "GELU_ONNX_ORT_LIBRARY"


def library_path(required: bool = True) -> Path | None:
    """Path of the custom-op library. With ``required`` (default) a missing
    library raises UnsupportedError (or InputError for a bad
    $GELU_ONNX_ORT_LIBRARY); otherwise it returns None."""
    p = libs.find(LIBRARY_NAME, ENV_VAR)
    if p is None and required:
        bad = libs.env_problem(ENV_VAR)
        if bad:
            raise InputError(bad)
        raise UnsupportedError(
            f"the gelu-onnx custom-op library ({LIBRARY_NAME}) is not built: reinstall with "
            "`pip install .` (CMake needs ONNX Runtime headers, see plugins/README.md) "
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


def runtime_env() -> None:
    """Before onnxruntime is first imported (the command does it first
    thing, gelu_onnx/__main__.py): its telemetry off unless the caller set
    ORT_DISABLE_TELEMETRY. Importing onnxruntime 1.2x otherwise creates
    $HOME/.cache/Microsoft/DeveloperTools/.onnxruntime/{deviceid,onnxruntime.db}
    and, where HOME cannot be written, prints a warning. Once onnxruntime is
    imported this changes nothing."""
    import os

    if not os.environ.get(TELEMETRY_ENV):  # unset or empty
        os.environ[TELEMETRY_ENV] = "1"


def log_level() -> int:
    import os

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
    import onnxruntime as ort

    level = log_level()
    so.log_severity_level = level
    ort.set_default_logger_severity(level)
    return so


_FOLDER_FDS: dict[str, int] = {}


def folder_arg(folder: str) -> str:
    """``folder`` as ONNX Runtime's C++ can take it (UTF-8 only): itself, or
    for a folder whose path holds other bytes, /proc/self/fd/N of a
    descriptor kept open on it for the process's life (one per folder)."""
    import os

    from .onnxio.fileops import utf8_path

    if utf8_path(folder) or not os.path.isdir("/proc/self/fd"):
        return folder
    if folder not in _FOLDER_FDS:
        _FOLDER_FDS[folder] = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    return f"/proc/self/fd/{_FOLDER_FDS[folder]}"


def session_options(base=None):
    """An ``onnxruntime.SessionOptions`` with the custom-op library registered.

    ``base``: options to extend (modified in place and returned); a fresh
    SessionOptions otherwise. Raises UnsupportedError when the library is not
    built, or when this onnxruntime refuses to load it.
    """
    runtime_env()
    import onnxruntime as ort

    path = library_path(required=True)
    so = base if base is not None else ort.SessionOptions()
    try:
        so.register_custom_ops_library(str(path))
    except Exception as e:  # onnxruntime raises plain RuntimeError/Fail
        raise UnsupportedError(f"onnxruntime {ort.__version__} could not load {path}: {e}") from e
    return so


def kernel_library():
    """ctypes handle to the library's kernel C ABI (gelu_cpu_range,
    gelu_cpu_isa, gelu_cpu_set_isa, gelu_cpu_erf_precise, gelu_cuda_launch; see
    plugins/common/gelu_kernels.h). For tests and benchmarks."""
    import ctypes

    lib = ctypes.CDLL(str(library_path(required=True)))
    i64, vp = ctypes.c_int64, ctypes.c_void_p
    lib.gelu_cpu_range.argtypes = [ctypes.c_int, ctypes.c_int, vp, vp, i64, vp, i64, i64, ctypes.c_float]
    lib.gelu_cpu_range.restype = ctypes.c_int
    lib.gelu_cuda_launch.argtypes = [ctypes.c_int, ctypes.c_int, vp, vp, i64, vp, i64, ctypes.c_float, vp]
    lib.gelu_cuda_launch.restype = ctypes.c_int
    lib.gelu_cpu_isa.restype = ctypes.c_char_p
    lib.gelu_cpu_set_isa.argtypes = [ctypes.c_char_p]
    lib.gelu_cpu_set_isa.restype = ctypes.c_char_p
    lib.gelu_cpu_erf_precise.argtypes = [ctypes.c_int]
    lib.gelu_cpu_erf_precise.restype = ctypes.c_int
    lib.gelu_onnx_ort_api_version.restype = ctypes.c_uint32
    return lib
