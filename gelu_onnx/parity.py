"""Parity: run the original and the fused model on the same inputs, compare.

Inputs are either seeded random tensors built from the declared graph inputs
(see :func:`make_inputs` for the rules) or a user's ``.npz``. Both models run
in a real ONNX Runtime session (or TensorRT, via ``gelu_onnx.tensorrt``);
outputs are matched by name and compared per output with the default
tolerance of the output's dtype (``contract.PARITY_TOLERANCE``), which the
caller may override. Nothing here raises on a mismatch: :func:`check`
(gelu_onnx.parity_check) returns a report whose ``ok`` the CLI maps to exit 1.
"""
from __future__ import annotations

import math

import ctypes
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import contract
from .errors import InputError, UnsupportedError

PROVIDERS = ("cpu", "cuda", "tensorrt")
OPT_LEVELS = ("disable", "basic", "extended", "all")
DIM_DEFAULT = 4
INT_HIGH_DEFAULT = 100
# Inputs whose name says "mask" get all ones / True: a random 0/1 attention
# mask can blank a whole row (softmax of all -inf = NaN), which compares NaN
# to NaN and proves nothing.
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
# Ops that carry integer ids through unchanged on the way to a Gather.
_ID_PASSTHROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}
# ONNX Runtime can load models larger than this only from a file.
_PROTO_LIMIT = 2**31 - 1


def dtype_name(elem_type: int) -> str:
    return contract.FLOAT_DTYPES.get(elem_type) or helper.tensor_dtype_to_string(elem_type).replace(
        "TensorProto.", ""
    ).lower()


def np_dtype_of(elem_type: int) -> np.dtype:
    if elem_type == TensorProto.STRING:
        return np.dtype(object)
    try:
        return contract.np_dtype(elem_type)
    except Exception as e:  # e.g. float8 / int4 without a numpy spelling here
        raise UnsupportedError(f"tensor type {dtype_name(elem_type)} is not supported by the parity checker") from e


def _is_bf16(a: np.ndarray) -> bool:
    return a.dtype == contract.np_dtype(TensorProto.BFLOAT16)


# --- inputs ------------------------------------------------------------------


@dataclass
class InputSpec:
    name: str
    elem_type: int
    dims: list  # int for fixed, str for named, None for unknown


def input_specs(model: onnx.ModelProto) -> list[InputSpec]:
    """The inputs a caller must feed: graph inputs that are not initializers."""
    inits = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            kind = vi.type.WhichOneof("value") or "unknown"
            raise UnsupportedError(f"input '{vi.name}' is a {kind}, not a tensor; the parity checker feeds tensors only")
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            raise InputError(f"input '{vi.name}' declares no shape (not even its rank); pass the inputs with --inputs FILE.npz")
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(None)
        specs.append(InputSpec(vi.name, tt.elem_type, dims))
    return specs


def _id_high(model: onnx.ModelProto, name: str) -> int | None:
    """Size of the table a Gather indexes with this input (through casts/reshapes)."""
    g = model.graph
    sizes = {t.name: list(t.dims) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value" and a.t is not None:
                    sizes[n.output[0]] = list(a.t.dims)
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    highs, todo, seen = [], [name], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for n in consumers.get(t, []):
            if n.op_type == "Gather" and len(n.input) > 1 and n.input[1] == t and n.input[0] in sizes:
                axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                table = sizes[n.input[0]]
                if -len(table) <= axis < len(table):
                    highs.append(table[axis])
            elif n.op_type in _ID_PASSTHROUGH and n.input and n.input[0] == t:
                todo.extend(n.output)
    return min(highs) if highs else None


def _resolve_shape(spec: InputSpec, dims: Mapping[str, int], dim_default: int) -> tuple:
    return tuple(
        d if isinstance(d, int) else (dims.get(d, dim_default) if isinstance(d, str) else dim_default)
        for d in spec.dims
    )


# Random feeds beyond this many values (about 2 GB of float32) are refused:
# a graph input may declare any dims, and a typo must not allocate terabytes.
MAX_RANDOM_ELEMENTS = 1 << 29


def make_inputs(
    model: onnx.ModelProto,
    seed: int = 0,
    overrides: Mapping[str, int] | None = None,
    dim_default: int = DIM_DEFAULT,
    scale: float = 1.0,
) -> dict[str, np.ndarray]:
    """Seeded random feeds for every required graph input.

    Shapes: fixed dims as declared; a named dim takes ``overrides[name]``
    (CLI ``--dim name=value``) or ``dim_default``; an anonymous dim takes
    ``dim_default``. Values: floats ~ N(0, 1) * ``scale``; integer inputs whose
    name contains "mask" are all ones (bool: True); other integer inputs are
    uniform in [0, table size) when they index a Gather over an initializer
    (token / position / type ids), else [0, 100); other bool inputs are fair
    coin flips. The same (model, seed, dims) always gives the same feeds.
    """
    overrides = dict(overrides or {})
    if dim_default < 0:
        raise InputError(f"--dim-default must be >= 0, got {dim_default}")
    specs = input_specs(model)
    named = {d for s in specs for d in s.dims if isinstance(d, str)}
    unknown = sorted(set(overrides) - named)
    if unknown:
        have = ", ".join(sorted(named)) or "none"
        raise InputError(f"--dim {unknown[0]}: no input has a dimension named '{unknown[0]}' (named dims: {have})")
    for k, v in overrides.items():
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise InputError(f"--dim {k}={v}: a dimension must be an integer >= 0")
    rng = np.random.default_rng(seed)
    feeds = {}
    total = 0
    for s in specs:
        shape = _resolve_shape(s, overrides, dim_default)
        total += math.prod(shape)
        if total > MAX_RANDOM_ELEMENTS:  # before any allocation: the model's dims are not trusted
            raise InputError(
                f"input '{s.name}' declares shape {list(shape)}: the random inputs would hold over "
                f"{MAX_RANDOM_ELEMENTS:.0e} values; set smaller named dims with --dim or pass --inputs FILE")
        et = s.elem_type
        if et in contract.FLOAT_DTYPES:
            a = (rng.standard_normal(shape) * scale).astype(np_dtype_of(et))
        elif et == TensorProto.BOOL:
            a = np.ones(shape, bool) if _MASK_NAME.search(s.name) else rng.random(shape) < 0.5
        elif et in (
            TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
            TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
        ):
            dt = np_dtype_of(et)
            if _MASK_NAME.search(s.name):
                a = np.ones(shape, dt)
            else:
                high = _id_high(model, s.name) or INT_HIGH_DEFAULT
                high = max(1, min(high, int(np.iinfo(dt).max) + 1))
                a = rng.integers(0, high, size=shape).astype(dt)
        else:
            raise UnsupportedError(
                f"cannot make random values for input '{s.name}' of type {dtype_name(et)}; pass --inputs FILE.npz"
            )
        feeds[s.name] = np.asarray(a)  # rank 0: a 0-d array, never a numpy scalar ORT cannot take
    return feeds


def describe_inputs(feeds: Mapping[str, np.ndarray], source: str) -> list[dict]:
    return [
        {"name": k, "dtype": dtype_str(v), "shape": list(v.shape), "source": source} for k, v in feeds.items()
    ]


def dtype_str(a: np.ndarray) -> str:
    return "bfloat16" if _is_bf16(a) else ("string" if a.dtype.kind in "OUS" else str(a.dtype))


def load_npz(path: str | os.PathLike, model: onnx.ModelProto, allow_pickle: bool = False) -> dict[str, np.ndarray]:
    """Feeds from a user's .npz (or Polygraphy JSON: its first iteration),
    validated against the model's declared inputs before any array is
    inflated (see gelu_onnx.feedfiles.load_inputs)."""
    from .feedfiles import load_inputs

    return load_inputs(path, model, allow_pickle=allow_pickle)[0]


def _show_dims(dims) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def save_npz(feeds: Mapping[str, np.ndarray], path: str | os.PathLike) -> None:
    """Write feeds atomically (bfloat16 as uint16 bit patterns, which load_npz reads back)."""
    from .feedfiles import save_npz as write

    write(feeds, path)


# --- running -----------------------------------------------------------------


def library_available() -> bool:
    try:
        from .ortlib import available
    except ImportError:
        return False
    try:
        return bool(available())
    except Exception:
        return False


def make_session_options(use_library: bool, opt_level: str = "all", threads: int | None = None):
    import onnxruntime as ort

    if use_library:
        from . import session_options

        so = session_options()
    else:
        so = ort.SessionOptions()
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    if opt_level not in levels:
        raise InputError(f"unknown optimization level '{opt_level}' (choose from {', '.join(OPT_LEVELS)})")
    so.graph_optimization_level = levels[opt_level]
    # ONNX Runtime's own warnings (unused initializers, ...) are not ours to
    # print: errors only, unless GELU_ONNX_ORT_LOG asks (0 verbose .. 4 fatal)
    so.log_severity_level = int(os.environ.get("GELU_ONNX_ORT_LOG", "3"))
    if threads is not None:
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return so


def ort_providers(provider: str) -> list[str]:
    import onnxruntime as ort

    if provider == "cpu":
        return ["CPUExecutionProvider"]
    if provider == "cuda":
        have = ort.get_available_providers()
        if "CUDAExecutionProvider" not in have:
            raise UnsupportedError(
                f"--provider cuda needs onnxruntime-gpu (CUDAExecutionProvider); this onnxruntime {ort.__version__} has {', '.join(have)}"
            )
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    raise InputError(f"unknown provider '{provider}' (choose from {', '.join(PROVIDERS)})")


def _first_line(e: BaseException) -> str:
    s = str(e).strip() or type(e).__name__
    return s.splitlines()[0]


def load(model, base_dir=None):
    """A validated io.LoadedModel from a path, ModelProto or LoadedModel.

    ``base_dir``: where an in-memory model's external data live (a model
    fused in memory keeps its source's external references)."""
    from .io import load_model_proto

    return load_model_proto(model, base_dir=base_dir)


class _ModelSource:
    """A model as ORT wants it: its file when it has one, else bytes (external
    data resolved against its base_dir) or, over 2 GiB, a temp file."""

    def __init__(self, model, label: str):
        self.loaded = load(model)
        self.label = label
        self._tmp = None

    @property
    def proto(self) -> onnx.ModelProto:
        return self.loaded.model

    def ort_arg(self, so):
        if self.loaded.path is not None:
            return self.loaded.path
        if self.proto.ByteSize() >= _PROTO_LIMIT:
            return str(self.file())
        if self.loaded.base_dir is not None:
            so.add_session_config_entry("session.model_external_initializers_file_folder_path", self.loaded.base_dir)
        return self.proto.SerializeToString()

    def file(self) -> Path:
        """A path on disk (TensorRT's parser and >2 GiB models need one)."""
        if self.loaded.path is not None:
            return Path(self.loaded.path)
        if self._tmp is None:
            from .io import save_model

            self._tmp = tempfile.TemporaryDirectory(prefix="gelu-onnx-")
            # io links the external data files next to the temp copy
            self._file = Path(save_model(self.proto, Path(self._tmp.name) / f"{self.label}.onnx",
                                         source_dir=self.loaded.base_dir).path)
        return self._file


def _load_failure(src: _ModelSource, e: BaseException):
    from . import ortinfo

    ir = src.proto.ir_version
    if ir > ortinfo.max_ir_version():  # the session failed: say why in one line
        return UnsupportedError(
            f"the {src.label} model has IR version {ir}; the installed onnxruntime {ortinfo.version()} "
            f"loads IR <= {ortinfo.max_ir_version()} (gelu-onnx fuse writes the lowest IR a model needs; "
            f"or upgrade onnxruntime)"
        )
    msg = _first_line(e)
    if "NOT_IMPLEMENTED" in msg or "Could not find an implementation" in msg:
        return UnsupportedError(f"onnxruntime cannot run the {src.label} model: {msg}")
    return InputError(f"onnxruntime cannot load the {src.label} model: {msg}")


def _to_ort_values(sess, feeds):
    import onnxruntime as ort

    out = {}
    for k, v in feeds.items():
        if _is_bf16(v):
            out[k] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(v).view(np.uint16), TensorProto.BFLOAT16)
        else:
            out[k] = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v))
    return out


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

    def __init__(self, model, provider="cpu", use_library=False, opt_level="all", threads=None, label="model"):
        import onnxruntime as ort

        self.src = _ModelSource(model, label)
        so = make_session_options(use_library, opt_level, threads)
        providers = ort_providers(provider)
        try:
            self.sess = ort.InferenceSession(self.src.ort_arg(so), sess_options=so, providers=providers)
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
                vals = self.sess.run_with_ort_values(self.output_names, _to_ort_values(self.sess, feeds))
                outs = [_ortvalue_to_numpy(v) for v in vals]
            else:
                outs = self.sess.run(self.output_names, dict(feeds))
        except Exception as e:
            raise InputError(f"onnxruntime failed to run the {self.label} model: {_first_line(e)}") from e
        return dict(zip(self.output_names, outs))


def run(model, feeds, provider="cpu", use_library=None, opt_level="all", label="model") -> dict[str, np.ndarray]:
    """Run ``model`` (path or ModelProto) once on ``feeds`` with a real runtime.

    ``use_library``: None = our custom-op library when it is built, True =
    require it, False = plain ONNX Runtime (the fused model then runs through
    its model-local functions). ``provider`` "tensorrt" runs through
    ``gelu_onnx.tensorrt.run_tensorrt``.
    """
    if provider == "tensorrt":
        return _run_tensorrt(model, feeds, label)
    use = resolve_library(use_library)
    r = OrtRunner(model, provider, use, opt_level, label=label)
    return r.run({k: v for k, v in feeds.items() if k in r.input_names})


def resolve_library(use_library) -> bool:
    if use_library is None:
        return library_available()
    if use_library and not library_available():
        raise UnsupportedError("the gelu-onnx custom-op library is not built or cannot be loaded (see gelu_onnx.ortlib)")
    return bool(use_library)


def _run_tensorrt(model, feeds, label) -> dict[str, np.ndarray]:
    try:
        from .tensorrt import run_tensorrt
    except ImportError as e:
        raise UnsupportedError(f"--provider tensorrt: TensorRT support is not available ({_first_line(e)})") from e
    src = _ModelSource(model, label)
    out = run_tensorrt(str(src.file()), dict(feeds))  # its UnsupportedError passes through (exit 3)
    if isinstance(out, Mapping):
        return {k: np.asarray(v) for k, v in out.items()}
    return dict(zip([o.name for o in src.proto.graph.output], (np.asarray(v) for v in out)))


# --- comparing ---------------------------------------------------------------

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise distance in units in the last place of a's dtype.

    Counts the representable values between a and b using the IEEE bit
    patterns (works for float16 / bfloat16 / float32 / float64): same sign ->
    difference of magnitudes' bits, opposite signs -> their sum (+0 and -0
    are 0 apart). Only meaningful where both are finite.
    """
    if a.dtype != b.dtype or a.dtype.itemsize not in _UINT or not (a.dtype.kind == "f" or _is_bf16(a)):
        raise TypeError(f"ulp_distance needs two arrays of one float dtype, got {a.dtype} and {b.dtype}")
    u = _UINT[a.dtype.itemsize]
    sign = u(1) << u(8 * a.dtype.itemsize - 1)
    ia, ib = np.ascontiguousarray(a).view(u), np.ascontiguousarray(b).view(u)
    ma, mb = (ia & ~sign).astype(np.uint64), (ib & ~sign).astype(np.uint64)
    same = (ia & sign) == (ib & sign)
    return np.where(same, np.maximum(ma, mb) - np.minimum(ma, mb), ma + mb)


@dataclass
class OutputParity:
    name: str
    dtype: str
    shape: list | None
    max_abs: float | None = None
    max_rel: float | None = None
    max_ulp: int | None = None
    mismatched: int = 0  # elements outside tolerance (incl. non-finite mismatches)
    nonfinite_mismatched: int = 0  # NaN/inf in one model and not at the same place in the other
    elements: int = 0
    rtol: float | None = None
    atol: float | None = None
    passed: bool = False
    message: str = ""


def tolerance_for(dtype: str, tolerances: Mapping[str, Mapping[str, float]] | None = None) -> dict | None:
    """{'rtol', 'atol'} for an output dtype (None = exact: non-float outputs)."""
    base = contract.PARITY_TOLERANCE.get(dtype)
    if base is None:
        return None
    tol = dict(base)
    tol.update((tolerances or {}).get(dtype, {}))
    return tol


def compare_one(name: str, ref: np.ndarray, got: np.ndarray, tolerances=None) -> OutputParity:
    ref, got = np.asarray(ref), np.asarray(got)
    dt = dtype_str(ref)
    row = OutputParity(name=name, dtype=dt, shape=list(ref.shape), elements=int(ref.size))
    if dtype_str(got) != dt:
        row.message = f"dtype differs: original {dt}, fused {dtype_str(got)}"
        return row
    if ref.shape != got.shape:
        row.message = f"shape differs: original {list(ref.shape)}, fused {list(got.shape)}"
        return row
    tol = tolerance_for(dt, tolerances)
    if tol is None:  # integers, bool, strings: must be identical
        equal = ref == got
        row.mismatched = int(ref.size - np.count_nonzero(equal))
        if ref.dtype.kind in "iub" and ref.size:
            row.max_abs = float(np.max(np.abs(ref.astype(np.float64) - got.astype(np.float64))))
        row.passed = row.mismatched == 0
        row.message = "" if row.passed else f"{row.mismatched} of {ref.size} elements differ (exact match required for {dt})"
        return row
    row.rtol, row.atol = tol["rtol"], tol["atol"]
    a, b = ref.astype(np.float64), got.astype(np.float64)
    equal = (a == b) | (np.isnan(a) & np.isnan(b))
    finite = np.isfinite(a) & np.isfinite(b)
    row.nonfinite_mismatched = int(np.count_nonzero(~equal & ~finite))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(finite, np.abs(a - b), 0.0)
    close = equal | (finite & (diff <= row.atol + row.rtol * np.abs(a)))
    row.mismatched = int(ref.size - np.count_nonzero(close))
    if np.any(finite):
        row.max_abs = float(diff[finite].max())
        nz = finite & (a != 0)  # zeros of the original are covered by atol
        row.max_rel = float((diff[nz] / np.abs(a[nz])).max()) if np.any(nz) else 0.0
        row.max_ulp = int(ulp_distance(ref[finite], got[finite]).max())
    row.passed = row.mismatched == 0
    if not row.passed:
        parts = [f"{row.mismatched} of {ref.size} elements outside atol={row.atol:g} + rtol={row.rtol:g}*|original|"]
        if row.nonfinite_mismatched:
            parts.append(f"{row.nonfinite_mismatched} NaN/inf where the other model is finite or different")
        row.message = "; ".join(parts)
    return row


def compare(original_outputs: Mapping[str, np.ndarray], fused_outputs: Mapping[str, np.ndarray], tolerances=None) -> list[OutputParity]:
    """Per-output parity rows, matched by name (original order, then fused-only names)."""
    rows = []
    for name, ref in original_outputs.items():
        if name not in fused_outputs:
            ref = np.asarray(ref)
            rows.append(OutputParity(name=name, dtype=dtype_str(ref), shape=list(ref.shape), elements=int(ref.size),
                                     message="missing from the fused model's outputs"))
            continue
        rows.append(compare_one(name, ref, fused_outputs[name], tolerances))
    for name, v in fused_outputs.items():
        if name not in original_outputs:
            v = np.asarray(v)
            rows.append(OutputParity(name=name, dtype=dtype_str(v), shape=list(v.shape), elements=int(v.size),
                                     message="output exists only in the fused model"))
    return rows


# --- the check ---------------------------------------------------------------


def json_safe(x):
    """Non-finite floats as the strings 'inf' / '-inf' / 'nan' (strict JSON has none)."""
    if isinstance(x, float) and not np.isfinite(x):
        return "nan" if np.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def check(original, fused, *, provider: str = "cpu", **kwargs):
    """Run both models on the same inputs and compare every output: one
    provider's gelu_onnx.parity_check.check (which see for every option);
    returns its CheckReport (``ok``, ``outputs``, ``to_dict()``)."""
    from .parity_check import check as full_check

    if provider not in PROVIDERS:
        raise InputError(f"unknown provider '{provider}' (choose from {', '.join(PROVIDERS)})")
    return full_check(original, fused, providers=[provider], **kwargs)


def model_label(m) -> str:
    path = getattr(m, "path", None) if not isinstance(m, (str, os.PathLike)) else m
    return "<memory>" if path is None else str(path)
