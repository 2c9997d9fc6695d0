"""Runners: one model in one runtime behind ``run(feeds) -> {output: array}``
(ONNX Runtime sessions, and TensorRT through gelu_onnx.tensorrt), kept apart
from the comparison the way Polygraphy keeps them."""
from __future__ import annotations

import ctypes
import gc
import os
import tempfile
import time
from pathlib import Path
from typing import Mapping

import numpy as np
from onnx import TensorProto

from .. import contract, ortlib
from ..buildinfo import build_info
from ..contract import OPT_LEVELS, PROVIDERS
from ..errors import InputError, UnsupportedError
from ..files import splice_wanted
from ..onnxio import load_model_proto as load, save_model, splice
from ..onnxio.fileops import utf8_path
from ..onnxio.walk import walk_graphs
from ..tensorrt import run_tensorrt
from .arrayfiles import first_line
from .inputs import is_bf16

_PROTO_LIMIT = 2**31 - 1  # ONNX Runtime loads larger models only from a file
_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
           "all": "ORT_ENABLE_ALL"}


def _ort():
    """onnxruntime, imported when a session is made: gelu_onnx.verify is also
    imported by `inspect` (files.inspect_file -> verify.pairing), which makes
    none (tests/test_imports.py has the measurement)."""
    import onnxruntime

    return onnxruntime


def custom_op_libraries(paths) -> list[str]:
    """The absolute paths of --custom-op-library files (each must exist; ONNX Runtime says whether it loads)."""
    out = []
    for p in paths or ():
        a = os.path.abspath(os.fspath(p))
        if not os.path.isfile(a):
            raise InputError(f"--custom-op-library {p}: no such file")
        out.append(a)
    return list(dict.fromkeys(out))


def make_session_options(use_library: bool, opt_level: str = "all", threads: int | None = None, libraries=(),
                         lean: bool = False):
    ort = _ort()
    if opt_level not in _LEVELS:
        raise InputError(f"unknown optimization level '{opt_level}' (choose from {', '.join(OPT_LEVELS)})")
    so = ortlib.session_options() if use_library else ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[opt_level])
    if lean:  # each node as soon as its inputs are ready: a model whose Casts widen its weights
        # (weights.cast_in) then holds few widened weights at once (BERT-base float64: 0.99 GB peak, not 1.21)
        so.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    # ONNX Runtime's own lines (warnings, run-time errors) are not ours to
    # print, unless GELU_ONNX_ORT_LOG asks (0 verbose .. 4 fatal)
    ortlib.quiet(so)
    for lib in libraries:
        try:
            so.register_custom_ops_library(lib)
        except Exception as e:  # noqa: BLE001 - ONNX Runtime's own error, in one line
            raise InputError(f"--custom-op-library {lib}: onnxruntime cannot load it ({first_line(e)})") from None
    if threads is not None:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return so


def cuda_provider_options(tf32: bool | None = None) -> dict[str, str]:
    """The CUDA EP's options: ``tf32`` False turns TF32 off (what ``check``
    does: the EP's default, use_tf32=1, rounds MatMul inputs to 10 mantissa
    bits, 1.6e-3 on a 12-layer fp32 BERT-base); None keeps the EP's default."""
    return {} if tf32 is None else {"use_tf32": "1" if tf32 else "0"}


def ort_providers(provider: str, tf32: bool | None = None) -> list:
    """ONNX Runtime's providers argument for ``provider``."""
    ort = _ort()
    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if provider == "cuda":
        have = ort.get_available_providers()
        if "CUDAExecutionProvider" not in have:
            raise UnsupportedError(
                f"--provider cuda needs onnxruntime-gpu (CUDAExecutionProvider); this onnxruntime {ort.__version__} has {', '.join(have)}"
            )
        return [("CUDAExecutionProvider", cuda_provider_options(tf32)), "CPUExecutionProvider"]
    raise InputError(f"unknown provider '{provider}' (choose from {', '.join(PROVIDERS)})")


def load_lean(model):
    """The model loaded; a big file as onnxio.splice's skeleton, its weights
    referenced in place in the file (never held while sessions run: BERT-base
    fp32, 438 MB, is a ~1 MB proto)."""
    if isinstance(model, (str, os.PathLike)) and splice_wanted(model):
        skel = splice.open_skeleton(model)
        if skel is not None:
            skel.close()  # its file descriptor serves saving a fused skeleton, not this
            return skel.loaded
    return load(model)


class ModelSource:
    """A model as ORT wants it: its file when it has one, else bytes (external
    data resolved against its base_dir) or, over 2 GiB, a temp file."""

    def __init__(self, model, label: str):
        self.loaded = load(model)
        self.label = label
        self._tmp = None

    def ort_arg(self, so):
        if self.loaded.path is not None and utf8_path(self.loaded.path):  # else in memory
            return self.loaded.path
        if self.loaded.model.ByteSize() >= _PROTO_LIMIT:
            return str(self.file())
        if self.loaded.base_dir is not None:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path",
                                        ortlib.folder_arg(self.loaded.base_dir))
        return self.loaded.model.SerializeToString()

    def file(self) -> Path:
        """A path on disk (TensorRT's parser and >2 GiB models need one)."""
        if self.loaded.path is not None:
            return Path(self.loaded.path)
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="gelu-onnx-")
            # io links the external data files next to the temp copy
            self._file = Path(save_model(self.loaded.model, Path(self._tmp.name) / f"{self.label}.onnx",
                                         source_dir=self.loaded.base_dir).path)
        return self._file


def _load_failure(src: ModelSource, e: BaseException):
    ir = src.loaded.model.ir_version
    if ir > ortlib.max_ir_version():  # the session failed: say why in one line
        return UnsupportedError(
            f"the {src.label} model has IR version {ir}; the installed onnxruntime {ortlib.runtime_version()} "
            f"loads IR <= {ortlib.max_ir_version()} (gelu-onnx fuse writes the lowest IR a model needs; "
            f"or upgrade onnxruntime)"
        )
    msg = first_line(e)
    if "NOT_IMPLEMENTED" in msg or "Could not find an implementation" in msg:
        return UnsupportedError(f"onnxruntime cannot run the {src.label} model: {msg}")
    return InputError(f"onnxruntime cannot load the {src.label} model: {msg}")


def _to_ort_values(feeds):
    ov = _ort().OrtValue
    return {k: ov.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(v).view(np.uint16), TensorProto.BFLOAT16)
            if is_bf16(v) else ov.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}


def _ortvalue_to_numpy(v) -> np.ndarray:
    # onnxruntime's Python binding has no numpy type for bfloat16: copy the
    # (CPU) buffer's bits into an ml_dtypes array instead.
    if v.data_type() == "tensor(bfloat16)":
        a = np.empty(v.shape(), np.uint16)
        if a.nbytes:
            ctypes.memmove(a.ctypes.data, v.data_ptr(), a.nbytes)
        return a.view(contract.np_dtype(TensorProto.BFLOAT16))
    return v.numpy()


class OrtRunner:
    """One ORT session; ``run(feeds)`` returns {output name: ndarray}."""

    def __init__(self, model, provider="cpu", use_library=False, opt_level="all", threads=None, label="model",
                 tf32=None, libraries=(), lean=False):
        self.src = ModelSource(model, label)
        so = make_session_options(use_library, opt_level, threads, libraries, lean)
        providers = ort_providers(provider, tf32)
        try:
            self.sess = _ort().InferenceSession(self.src.ort_arg(so), sess_options=so, providers=providers)
        except Exception as e:
            raise _load_failure(self.src, e) from e
        if provider == "cuda" and "CUDAExecutionProvider" not in self.sess.get_providers():
            raise UnsupportedError("--provider cuda: onnxruntime fell back to CPU (CUDA libraries missing or no GPU)")
        self.input_names = [i.name for i in self.sess.get_inputs()]
        self.output_names = [o.name for o in self.sess.get_outputs()]
        self._bf16 = any("bfloat16" in x.type for x in self.sess.get_inputs() + self.sess.get_outputs())
        self.label = label

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            if self._bf16:
                vals = self.sess.run_with_ort_values(self.output_names, _to_ort_values(feeds))
                outs = [_ortvalue_to_numpy(v) for v in vals]
            else:
                outs = self.sess.run(self.output_names, dict(feeds))
        except Exception as e:
            raise InputError(f"onnxruntime failed to run the {self.label} model: {first_line(e)}") from e
        return dict(zip(self.output_names, outs))


class TensorRTRunner:
    """The model as a TensorRT engine (gelu_onnx.tensorrt: our plugin registered), built
    per run: TensorRT needs the input shapes, which the feeds give."""

    def __init__(self, model, label="model"):
        self.src = ModelSource(model, label)
        self.label = label
        inits = {t.name for t in self.src.loaded.model.graph.initializer}
        self.input_names = [i.name for i in self.src.loaded.model.graph.input if i.name not in inits]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        # its UnsupportedError passes through (exit 3)
        return {k: np.asarray(v) for k, v in run_tensorrt(str(self.src.file()), dict(feeds)).items()}


def runner(model, provider="cpu", use_library=False, opt_level="all", threads=None, label="model", tf32=None,
           libraries=(), lean=False):
    """The runner for ``provider``; ``tf32``: the CUDA EP's use_tf32 (None: its default)."""
    if provider == "tensorrt":
        return TensorRTRunner(model, label)
    return OrtRunner(model, provider, use_library, opt_level, threads, label=label, tf32=tf32, libraries=libraries,
                     lean=lean)


def run_all(model, provider: str, feeds_its, *, use: bool, opt_level: str, tf32: bool, label: str,
             libraries=()) -> tuple[list[dict], list[float]]:
    """Build, run every iteration, release (the next session is built only once
    this one's memory is back): outputs and seconds per run."""
    r = runner(model, provider, use, opt_level, label=label, tf32=tf32, libraries=libraries)
    outs, times = [], []
    for feeds in feeds_its:
        t0 = time.perf_counter()
        outs.append(r.run({k: v for k, v in feeds.items() if k in r.input_names}))
        times.append(time.perf_counter() - t0)
    del r
    gc.collect()
    return outs, times


def run(model, feeds, provider="cpu", use_library=None, opt_level="all", label="model") -> dict[str, np.ndarray]:
    """Run ``model`` (path or ModelProto) once on ``feeds``. ``use_library``:
    None = our custom-op library when it is built, True = require it, False =
    plain ONNX Runtime (the fused model then runs its model-local functions)."""
    use = resolve_library(use_library) if provider != "tensorrt" else False
    r = runner(model, provider, use, opt_level, label=label)
    return r.run({k: v for k, v in feeds.items() if k in r.input_names})


def resolve_library(use_library) -> bool:
    """None: whether our custom-op library is available; True: it must be."""
    if use_library is not None and not use_library:
        return False
    try:
        available = bool(ortlib.available())
    except Exception:  # noqa: BLE001 - a library that does not load is not available
        available = False
    if use_library and not available:
        raise UnsupportedError("the gelu-onnx custom-op library is not built or cannot be loaded (see gelu_onnx.ortlib)")
    return available


def model_label(m) -> str:
    path = getattr(m, "path", None) if not isinstance(m, (str, os.PathLike)) else m
    return "<memory>" if path is None else str(path)


def library_warnings(fused, use: bool, asked, providers) -> list[str]:
    """What the user must know when our kernels will not run: a check that
    passes then proves the model-local functions, not the kernels."""
    if not any(n.domain == contract.DOMAIN for g in walk_graphs(fused.graph) for n in g.node):
        return []
    out = []
    if not use and asked is None:
        out.append("the gelu-onnx custom-op library is not available: ONNX Runtime runs the fused ops' "
                   "model-local functions, not our kernels (see `gelu-onnx info`)")
    if use and "cuda" in providers and build_info()["build"].get("cuda_kernels") is False:
        out.append("this build has no CUDA kernels: our ops run on the CPU inside the CUDA session "
                   "(see `gelu-onnx info`)")
    return out
