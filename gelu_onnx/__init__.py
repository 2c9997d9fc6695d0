"""gelu-onnx: fuse every GELU spelling in an ONNX graph into one op."""
from __future__ import annotations

import importlib

# The version, in one place: pyproject.toml reads it from here (scikit-build-core's regex provider).
__version__ = "0.1.0"

# The public API, name -> the module that defines it, loaded on first use:
# importing the package must stay cheap (no numpy: the command installs its
# signal handlers first, gelu_onnx/__main__.py) and must not need
# onnxruntime until a runtime feature is used.
_LAZY = {**dict.fromkeys(("DOMAIN", "OP_TYPES"), "contract"),
         **dict.fromkeys(("fuse", "fuse_with_report", "inspect", "Fusion", "FuseResult", "fuse_file", "inspect_file",
                          "save"), "files"),
         "check": "verify", "build_info": "buildinfo", "session_options": "ortlib"}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
