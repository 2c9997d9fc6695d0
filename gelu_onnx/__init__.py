"""gelu-onnx: fuse every GELU spelling in an ONNX graph into one op."""
from __future__ import annotations

# The version, in one place: pyproject.toml reads it from here (scikit-build-core's regex provider).
__version__ = "0.1.0"

__all__ = ["fuse", "fuse_with_report", "inspect", "save", "fuse_file", "inspect_file", "check", "Fusion", "FuseResult",
           "session_options", "build_info", "DOMAIN", "OP_TYPES", "__version__"]


def __getattr__(name):
    # Lazy: importing the package must stay cheap (no numpy: the command
    # installs its signal handlers first, gelu_onnx/__main__.py) and must not
    # need onnxruntime until a runtime feature is used.
    if name in ("DOMAIN", "OP_TYPES"):
        from . import contract

        return getattr(contract, name)
    if name in ("fuse", "fuse_with_report", "inspect", "Fusion", "FuseResult", "fuse_file", "inspect_file", "save"):
        from . import files

        return getattr(files, name)
    if name == "check":
        from .verify import check

        return check
    if name == "build_info":
        from .buildinfo import build_info

        return build_info
    if name == "session_options":
        from .ortlib import session_options

        return session_options
    raise AttributeError(name)
