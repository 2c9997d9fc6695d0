"""One finder for what the native build put next to the package
(``gelu_onnx/_lib``): the ONNX Runtime custom-op library, the TensorRT plugin
libraries, the scanner, the native test programs; and, when one is missing,
the pip command that rebuilds this install the way it was made."""
from __future__ import annotations

import json
import os
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "gelu-onnx"
FOLDER = "_lib"


def find(name: str, env_var: str | None = None) -> Path | None:
    """The built file ``name``, or None: from ``env_var`` when it is set (None
    if it names no file: see env_problem), else ``_lib/`` next to this module,
    else the installed distribution's file list (scikit-build-core's editable
    "redirect" mode keeps compiled files in site-packages)."""
    if env_var and os.environ.get(env_var):
        p = Path(os.environ[env_var])
        return p.resolve() if p.is_file() else None
    here = Path(__file__).resolve().parent / FOLDER / name
    if here.is_file():
        return here
    try:
        files = metadata.files(DISTRIBUTION) or ()
    except metadata.PackageNotFoundError:  # a source checkout, not installed
        return None
    for f in files:
        if f.name == name and f.parent.name == FOLDER:
            p = Path(f.locate())
            if p.is_file():
                return p
    return None


def env_problem(env_var: str) -> str | None:
    """'VAR=value is not a file' when the variable is set to something else."""
    v = os.environ.get(env_var)
    if v and not Path(v).is_file():
        return f"{env_var}={v} is not a file"
    return None


def reinstall_command() -> str:
    """The pip command that rebuilds this install the way it was made: pip
    records a local or URL install in direct_url.json (PEP 610); an install
    from an index has none."""
    try:
        raw = metadata.distribution("gelu-onnx").read_text("direct_url.json")
        origin = json.loads(raw) if raw else None
    except (metadata.PackageNotFoundError, ValueError, OSError):
        origin = None
    if not isinstance(origin, dict) or not isinstance(origin.get("url"), str):
        return "pip install --force-reinstall --no-deps gelu-onnx"
    url = origin["url"]
    where = unquote(urlparse(url).path) if url.startswith("file:") else url
    if (origin.get("dir_info") or {}).get("editable"):
        return f"pip install -e {shlex.quote(where)}"
    return f"pip install --force-reinstall --no-deps {shlex.quote(where)}"
