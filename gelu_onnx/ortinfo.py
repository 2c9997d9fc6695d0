"""What the installed onnxruntime accepts, asked of the runtime itself.

Runtimes move (onnxruntime 1.31 loads IR <= 13, 1.32 loads 14), so nothing
here is a table of versions: each fact is probed by loading a one-node
model, once per process; the IR limit is also kept on disk per installed
runtime (max_ir_version).
"""
from __future__ import annotations

import functools

from .ortlib import quiet, runtime_env


def version() -> str:
    runtime_env()
    import onnxruntime as ort

    return ort.__version__


def _quiet_options():
    runtime_env()
    import onnxruntime as ort

    so = ort.SessionOptions()
    quiet(so)
    so.log_severity_level = 4  # the refusals below are expected: never shown, even with -v
    return so


def loads_ir(ir: int) -> bool:
    """True when the installed onnxruntime loads a model of IR version ``ir``
    (an Identity at opset 13, which every supported runtime knows)."""
    so = _quiet_options()
    import onnxruntime as ort
    from onnx import TensorProto, helper

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
    from two above what the installed onnx writes; IR 7 is opset 13's floor).
    The runtime is asked the first time; its answer is kept in a small cache
    file keyed by the runtime's version, install path and library file, so
    a later run (``fuse`` asks it of every model it writes) need not import
    it (GELU_ONNX_CACHE=off: always ask)."""
    key = _runtime_key()
    cached = _cache_read().get(key) if key is not None else None
    if isinstance(cached, int):
        return cached
    import onnx

    limit = 6
    for ir in range(onnx.IR_VERSION + 2, 6, -1):
        if loads_ir(ir):
            limit = ir
            break
    if key is not None:
        _cache_write(key, limit)
    return limit


CACHE_ENV = "GELU_ONNX_CACHE"  # "off": no cache file; else the folder (default ~/.cache/gelu-onnx)


def _runtime_key() -> str | None:
    """The installed onnxruntime's identity without importing it: its
    version (capi/build_and_package_info.py), the real path of the package
    and the size and mtime of its extension module. None when unsure."""
    import importlib.util
    import os
    import re

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
    import os

    where = os.environ.get(CACHE_ENV)
    if where == "off":
        return None
    if not where:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        where = os.path.join(base, "gelu-onnx")
    return os.path.join(where, "ort-max-ir.json")


def _cache_read() -> dict:
    import json

    path = _cache_file()
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def _cache_write(key: str, limit: int) -> None:
    """Best effort: a folder that cannot be written leaves the runtime asked next time too."""
    import json
    import os
    import tempfile

    path = _cache_file()
    if path is None:
        return
    data = _cache_read()
    data[key] = limit
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
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
