"""Find and register the ONNX Runtime custom-op library (libgelu_onnx_ort.so).

The library implements the op contract of ``gelu_onnx.contract`` (domain
``ai.gelu_onnx``, op types GeluErf ... BiasGeluSigmoid) for float32, float16 and
bfloat16 on ORT's CPU execution provider and, when built with CUDA, on the CUDA
execution provider. Fused models also carry each op's math as a model-local
function, so they run without the library too (ORT inlines the function when no
kernel is registered); with the library registered ORT runs our kernels.

Where the library is looked for, in order:
  1. ``$GELU_ONNX_ORT_LIBRARY`` (a path to the .so);
  2. ``gelu_onnx/_lib/`` next to this module (wheel or regular install);
  3. the installed distribution's file list (scikit-build-core's editable
     "redirect" mode keeps compiled files in site-packages while the .py files
     stay in the source tree).
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import InputError, UnsupportedError

LIBRARY_NAME = "libgelu_onnx_ort.so"
ENV_VAR = "GELU_ONNX_ORT_LIBRARY"
DISTRIBUTION = "gelu-onnx"


def _from_distribution() -> Path | None:
    from importlib import metadata

    try:
        files = metadata.files(DISTRIBUTION) or ()
    except metadata.PackageNotFoundError:  # a source checkout that is not installed
        return None
    for f in files:
        if f.name == LIBRARY_NAME:
            p = Path(f.locate())
            if p.is_file():
                return p
    return None


def library_path(required: bool = True) -> Path | None:
    """Path of the custom-op library. With ``required`` (default) a missing
    library raises UnsupportedError (or InputError for a bad
    $GELU_ONNX_ORT_LIBRARY); otherwise it returns None."""
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env)
        if p.is_file():
            return p.resolve()
        if required:
            raise InputError(f"{ENV_VAR}={env} is not a file")
        return None
    here = Path(__file__).resolve().parent / "_lib" / LIBRARY_NAME
    if here.is_file():
        return here
    p = _from_distribution()
    if p is None and required:
        raise UnsupportedError(
            f"the gelu-onnx custom-op library ({LIBRARY_NAME}) is not built: reinstall with "
            "`pip install .` (CMake needs ONNX Runtime headers, see DEVELOPERS.md) "
            f"or set {ENV_VAR}"
        )
    return p


def available() -> bool:
    """True when the library exists (it is not loaded here)."""
    try:
        return library_path(required=False) is not None
    except InputError:
        return False


def session_options(base=None):
    """An ``onnxruntime.SessionOptions`` with the custom-op library registered.

    ``base``: options to extend (modified in place and returned); a fresh
    SessionOptions otherwise. Raises UnsupportedError when the library is not
    built, or when this onnxruntime refuses to load it.
    """
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
