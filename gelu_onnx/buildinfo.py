"""What this install contains and what the machine offers (`gelu-onnx info`).

The native build writes ``_lib/build_info.json`` (plugins/CMakeLists.txt:
which libraries were built, CUDA architectures, the TensorRT they were built
for, what is missing and how to get it); the rest is asked of the installed
packages at run time. Nothing here imports onnxruntime unless it is there.
"""
from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path

from . import __version__, ortlib
from .libs import reinstall_command
from .onnxio import wire

# Distributions that each ship the `onnxruntime` module: two of them in one
# environment overwrite each other's files (the CPU one hides CUDA).
ORT_FLAVOURS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-directml", "onnxruntime-openvino",
                "onnxruntime-qnn", "onnxruntime-training")


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def ort_flavours() -> dict[str, str]:
    """Installed onnxruntime distributions, name -> version."""
    return {d: v for d in ORT_FLAVOURS if (v := _version(d)) is not None}


def flavour_conflict() -> str | None:
    """One line with the fix when several onnxruntime flavours are installed."""
    have = ort_flavours()
    if len(have) < 2:
        return None
    keep = "onnxruntime-gpu" if "onnxruntime-gpu" in have else next(d for d in have if d != "onnxruntime")
    names = " ".join(sorted(have))
    return (f"several onnxruntime flavours are installed ({', '.join(f'{d} {v}' for d, v in sorted(have.items()))}); "
            f"they overwrite each other's files, so providers go missing. Fix: pip uninstall -y {names} && "
            f"pip install {keep}=={have[keep]}")


# Installs onnxruntime for any way this package was installed (the extras
# [cpu] / [gpu] exist only where the package itself can be named).
ORT_HINT = "pip install onnxruntime (or onnxruntime-gpu for CUDA)"


def _fix(missing: str, reinstall: str) -> str:
    """A build summary line (CMake's words, whose -D flags are for a CMake
    user) with the fix for this install."""
    line = re.sub(r"\s*\(pass -D[^)]*\)", "", missing)
    if line.startswith("TensorRT plugin") and "without CUDA" not in line:
        return f"{line}; build it: TensorRT_ROOT=<TensorRT install dir> {reinstall}"
    if line.startswith("TensorRT plugin"):
        return f"{line}; it needs the CUDA kernels first (nvcc on PATH, then {reinstall})"
    if line.startswith("CUDA kernels") and "GELU_ONNX_CUDA=OFF" not in line:
        return f"{line}; then: {reinstall}"
    if line.startswith("ONNX Runtime custom-op library"):
        return f"{line}; or: ONNXRUNTIME_ROOT=<ONNX Runtime release dir> {reinstall}"
    return line


def _native() -> dict:
    lib = ortlib.library_path(required=False)
    folder = lib.parent if lib is not None else Path(__file__).resolve().parent / "_lib"
    info_file = folder / "build_info.json"
    try:
        built = json.loads(info_file.read_text())
    except (OSError, ValueError):
        built = {"missing": ["the native build's summary (_lib/build_info.json) was not found: the package was "
                             f"installed without its native part ({reinstall_command()})"]}
    built["ort_library_path"] = str(lib) if lib is not None else None
    trt = folder / "libgelu_onnx_trt.so"
    built["tensorrt_plugin_path"] = str(trt) if trt.is_file() else None
    built["scanner"] = wire.built()
    return built


def _runtime() -> dict:
    out: dict = {"onnxruntime_flavours": ort_flavours(), "onnxruntime": None, "providers": []}
    if not out["onnxruntime_flavours"]:
        return out
    try:
        ort = ortlib.runtime()
        out["onnxruntime"] = ort.__version__
        out["providers"] = list(ort.get_available_providers())
    except Exception as e:  # noqa: BLE001 - a broken install is reported, not raised
        out["onnxruntime_error"] = f"{type(e).__name__}: {e}"
    return out


def build_info() -> dict:
    """Versions, what was built, what the machine offers, and what is missing."""
    info = {"gelu_onnx": __version__, "onnx": _version("onnx"), "numpy": _version("numpy")}
    info["build"] = _native()
    info.update(_runtime())
    warnings = []
    conflict = flavour_conflict()
    if conflict:
        warnings.append(conflict)
    if not info["onnxruntime_flavours"]:
        warnings.append(f"no onnxruntime is installed: fuse and inspect work; check and bench need one ({ORT_HINT})")
    if not info["build"]["scanner"]:
        warnings.append(f"the native model scanner ({wire.LIBRARY}) is not built or does not load: fuse and "
                        f"inspect cannot run without it (reinstall: {reinstall_command()})")
    if info["build"].get("ort_library_path") is None:
        warnings.append("the ONNX Runtime custom-op library is not available: fused models run through their "
                        "model-local functions (slower); see build.missing")
    if info["build"].get("cuda_kernels") is False and "CUDAExecutionProvider" in info["providers"]:
        warnings.append("onnxruntime offers CUDA but this build has no CUDA kernels: our ops fall back to the CPU "
                        f"(reinstall with nvcc on PATH: {reinstall_command()})")
    info["warnings"] = warnings
    return info


def describe(info: dict, *, quiet: bool = False) -> list[str]:
    """Human-readable lines for `gelu-onnx info` (``quiet``: the first line and the warnings)."""
    b = info["build"]
    if quiet:
        return [f"gelu-onnx {info['gelu_onnx']}"] + [f"warning: {w}" for w in info["warnings"]]
    yes = {True: "yes", False: "no", None: "unknown"}
    lines = [
        f"gelu-onnx {info['gelu_onnx']} (onnx {info['onnx']}, numpy {info['numpy']})",
        f"ONNX Runtime custom-op library: {yes[b.get('ort_library_path') is not None]}"
        + (f" ({b['ort_library_path']})" if b.get("ort_library_path") else ""),
        f"native model scanner (required): {yes[b.get('scanner')]}",
        f"CUDA kernels: {yes[b.get('cuda_kernels')]}"
        + (f" (CUDA {b.get('cuda_version')}, architectures {b.get('cuda_architectures')})"
           if b.get("cuda_kernels") else ""),
        f"TensorRT plugin: {yes[b.get('tensorrt_plugin')]}"
        + (f" (built for TensorRT {b.get('tensorrt_version')})" if b.get("tensorrt_plugin") else ""),
        "onnxruntime: " + (", ".join(f"{d} {v}" for d, v in sorted(info["onnxruntime_flavours"].items()))
                           or "not installed"),
        "providers: " + (", ".join(info["providers"]) or "-"),
    ]
    reinstall = reinstall_command()
    lines += [f"missing: {_fix(m, reinstall)}" for m in b.get("missing", [])]
    lines += [f"warning: {w}" for w in info["warnings"]]
    return lines
