"""TensorRT helpers: find and load the plugin library, build an engine, run it.

``run_tensorrt(model_path, feeds)`` is what ``gelu-onnx check --provider
tensorrt`` calls. TensorRT itself is optional: everything here raises
``UnsupportedError`` with one clear sentence when TensorRT, a GPU or the plugin
library is missing. The plugin (``libgelu_onnx_trt.so``) needs TensorRT >= 10
(IPluginV3); see plugins/tensorrt/README.md for which TensorRT versions pick the
plugin over the model-local function shipped in fused models.
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np

from . import libs
from .contract import DOMAIN, OP_TYPES, OPSET_VERSION
from .errors import InputError, UnsupportedError

PLUGIN_ENV = "GELU_ONNX_TRT_PLUGIN"  # explicit path to the plugin library
# For IPluginRegistry.load_library / trtexec --dynamicPlugins (exports getCreators):
PLUGIN_LIBRARY = "gelu_onnx_trt.dll" if sys.platform == "win32" else "libgelu_onnx_trt.so"
# Registers itself when loaded, for trtexec --staticPlugins / polygraphy --plugins:
PLUGIN_AUTOREG_LIBRARY = "gelu_onnx_trt_autoreg.dll" if sys.platform == "win32" else "libgelu_onnx_trt_autoreg.so"
PLUGIN_VERSION = str(OPSET_VERSION)
MIN_TENSORRT_MAJOR = 10  # IPluginV3

_loaded: dict[int, Path] = {}  # id(plugin registry) -> library loaded into it


def plugin_library_path(autoreg: bool = False) -> Path:
    """Path of libgelu_onnx_trt.so (or, with ``autoreg``, of the variant that
    registers itself when loaded), or UnsupportedError saying why there is none."""
    name = PLUGIN_AUTOREG_LIBRARY if autoreg else PLUGIN_LIBRARY
    p = libs.find(name, None if autoreg else PLUGIN_ENV)
    if p is None:
        if os.environ.get(PLUGIN_ENV) and not autoreg:
            raise UnsupportedError(f"{PLUGIN_ENV}={os.environ[PLUGIN_ENV]} is not a file")
        raise UnsupportedError(
            f"the TensorRT plugin library ({name}) was not built: on a machine with TensorRT >= 10 and CUDA, "
            f"TensorRT_ROOT=<TensorRT install dir> {libs.reinstall_command()} (CMake prints 'TensorRT plugin "
            f"NOT built: <reason>' otherwise), or point {PLUGIN_ENV} at the library"
        )
    return p


def import_tensorrt(trt_module=None):
    """The tensorrt module (>= 10), or UnsupportedError."""
    trt = trt_module
    if trt is None:
        try:
            import tensorrt as trt  # type: ignore[import-not-found]
        except (ImportError, OSError) as e:  # absent, or libnvinfer fails to load
            raise UnsupportedError(
                f"TensorRT is not installed or does not load ({type(e).__name__}: {e}); "
                "install it (pip install tensorrt) on a machine with an NVIDIA GPU"
            ) from None
    major = int(str(getattr(trt, "__version__", "0")).split(".")[0] or 0)
    if major < MIN_TENSORRT_MAJOR:
        raise UnsupportedError(
            f"TensorRT {trt.__version__} is too old: the gelu-onnx plugin is an IPluginV3 and needs "
            f"TensorRT >= {MIN_TENSORRT_MAJOR}; use target 'custom' without the plugin (model-local functions)"
        )
    return trt


def _plugin_registered(registry) -> bool:
    name = OP_TYPES[("erf", False)]
    for get in ("get_creator", "get_plugin_creator"):
        fn = getattr(registry, get, None)
        if fn is not None:
            try:
                if fn(name, PLUGIN_VERSION, DOMAIN) is not None:
                    return True
            except (TypeError, RuntimeError):  # signature differs across TensorRT versions
                continue
    return False


def load_plugin(trt_module=None) -> Path:
    """Load the plugin library into TensorRT's plugin registry (idempotent).

    The library is first loaded with ctypes (RTLD_GLOBAL), which turns a
    missing dependency into a clear error, then handed to
    ``IPluginRegistry.load_library`` (TensorRT >= 8.5) - the same entry points
    (getCreators / setLoggerFinder) that ``trtexec --dynamicPlugins`` uses.
    """
    trt = import_tensorrt(trt_module)
    path = plugin_library_path()
    registry = trt.get_plugin_registry()
    if _loaded.get(id(registry)) == path or _plugin_registered(registry):
        _loaded[id(registry)] = path
        return path
    try:
        ctypes.CDLL(str(path), mode=getattr(os, "RTLD_GLOBAL", 0) | getattr(os, "RTLD_NOW", 0))
    except OSError as e:
        raise UnsupportedError(f"cannot load {path}: {e}") from None
    if registry.load_library(str(path)) is None and not _plugin_registered(registry):
        raise UnsupportedError(f"TensorRT could not register the plugins in {path} (see the TensorRT log)")
    _loaded[id(registry)] = path
    return path


@dataclass
class TensorRTRun:
    """Outputs of one engine run, and which layers used the gelu-onnx plugin."""

    outputs: dict[str, np.ndarray]
    plugin_layers: list[str] = field(default_factory=list)  # "ai.gelu_onnx::GeluErf" per plugin layer
    tensorrt_version: str = ""


def _np_dtype_from_trt(trt, dt):
    if dt == trt.DataType.BF16:
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(trt.nptype(dt))


def _parser_error(err) -> str:
    desc = getattr(err, "desc", None)
    return desc() if callable(desc) else str(err)


def _gelu_plugin_of(trt, layer) -> str | None:
    """Return "namespace::name" when ``layer`` is one of our plugin layers."""
    if layer.type != getattr(trt.LayerType, "PLUGIN_V3", object()):
        return None
    try:
        layer.__class__ = trt.IPluginV3Layer  # network.get_layer returns the ILayer base
        core = layer.plugin.get_capability_interface(trt.PluginCapabilityType.CORE)
        name, ns = core.plugin_name, core.plugin_namespace
    except (AttributeError, TypeError, RuntimeError):  # bindings differ across versions
        return None
    return f"{ns}::{name}" if name in OP_TYPES.values() else None


def build_engine(onnx_path, trt_module=None, *, input_shapes=None, plugin_override: bool = False):
    """Parse ``onnx_path`` with TensorRT's ONNX parser (plugin loaded) and build
    a serialized engine. Returns (engine_bytes, plugin_layers).

    The network is strongly typed where TensorRT supports it, so fp16 / bf16
    models run in the precision the ONNX graph states. ``input_shapes``
    ({name: shape}) pins dynamic inputs. ``plugin_override`` sets the parser
    flag kENABLE_PLUGIN_OVERRIDE (TensorRT >= 10.15), which also lets *other*
    registered plugins replace same-named ONNX ops: off by default.
    """
    trt = import_tensorrt(trt_module)
    load_plugin(trt)
    path = Path(onnx_path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if plugin_override:
        flag = getattr(trt.OnnxParserFlag, "ENABLE_PLUGIN_OVERRIDE", None)
        if flag is None:
            raise UnsupportedError(
                f"TensorRT {trt.__version__} has no ENABLE_PLUGIN_OVERRIDE parser flag (needs >= 10.15)"
            )
        parser.set_flag(flag)
    if not parser.parse_from_file(str(path)):
        errors = "; ".join(_parser_error(parser.get_error(i)) for i in range(parser.num_errors))
        raise UnsupportedError(f"TensorRT's ONNX parser rejected {path}: {errors}")

    plugin_layers = [n for n in (_gelu_plugin_of(trt, network.get_layer(i)) for i in range(network.num_layers)) if n]
    config = builder.create_builder_config()
    dynamic = [network.get_input(i) for i in range(network.num_inputs) if -1 in tuple(network.get_input(i).shape)]
    if dynamic:
        profile = builder.create_optimization_profile()
        for t in dynamic:
            if not input_shapes or t.name not in input_shapes:
                raise InputError(f"input '{t.name}' has a dynamic shape {tuple(t.shape)}: give its shape")
            shape = tuple(int(d) for d in input_shapes[t.name])
            profile.set_shape(t.name, shape, shape, shape)
        config.add_optimization_profile(profile)
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise UnsupportedError(f"TensorRT could not build an engine for {path} (see the TensorRT log above)")
    return bytes(engine), plugin_layers


def _run_with_torch(trt, torch, engine, feeds):
    ctx = engine.create_execution_context()
    keep = {}
    outputs = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        dt = _np_dtype_from_trt(trt, engine.get_tensor_dtype(name))
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
            if name not in feeds:
                raise InputError(f"no value given for the engine input '{name}'")
            a = np.ascontiguousarray(feeds[name], dtype=dt)
            if dt.name == "bfloat16":  # torch has no numpy bf16: move the bits
                t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            else:
                t = torch.from_numpy(a)
            t = t.cuda()
            ctx.set_input_shape(name, tuple(a.shape))
            keep[name] = t
            ctx.set_tensor_address(name, t.data_ptr())
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            dt = _np_dtype_from_trt(trt, engine.get_tensor_dtype(name))
            shape = tuple(ctx.get_tensor_shape(name))
            tdt = torch.bfloat16 if dt.name == "bfloat16" else getattr(torch, dt.name)
            t = torch.empty(shape, dtype=tdt, device="cuda")
            keep[name] = t
            ctx.set_tensor_address(name, t.data_ptr())
    stream = torch.cuda.current_stream()
    if not ctx.execute_async_v3(stream.cuda_stream):
        raise UnsupportedError("TensorRT failed to run the engine (see the TensorRT log)")
    stream.synchronize()
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            t = keep[name].cpu()
            if t.dtype == torch.bfloat16:
                outputs[name] = t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
            else:
                outputs[name] = t.numpy()
    return outputs


def _cuda_torch():
    """torch when it is installed with CUDA, else None (optional: imported only for an engine run)."""
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


def _run_with_polygraphy(engine, feeds):
    from polygraphy.backend.trt import TrtRunner  # type: ignore[import-not-found]

    with TrtRunner(engine) as runner:
        return {k: np.asarray(v) for k, v in runner.infer(feed_dict=feeds).items()}


def build_engine_and_run(onnx_path, inputs: dict, trt_module=None, *, plugin_override: bool = False) -> TensorRTRun:
    """Build a TensorRT engine for ``onnx_path`` and run it once on ``inputs``.

    Device memory comes from a CUDA-enabled PyTorch when there is one, else
    from Polygraphy's TrtRunner (bfloat16 I/O needs PyTorch).
    """
    trt = import_tensorrt(trt_module)
    feeds = {k: np.asarray(v) for k, v in inputs.items()}
    engine_bytes, plugin_layers = build_engine(
        onnx_path, trt, input_shapes={k: v.shape for k, v in feeds.items()}, plugin_override=plugin_override
    )
    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    if engine is None:
        raise UnsupportedError("TensorRT could not deserialize the engine it just built")
    torch = _cuda_torch()
    if torch is not None:
        outputs = _run_with_torch(trt, torch, engine, feeds)
    else:
        if any(v.dtype.name == "bfloat16" for v in feeds.values()):
            raise UnsupportedError("running bfloat16 inputs through TensorRT from Python needs a CUDA-enabled PyTorch")
        try:
            outputs = _run_with_polygraphy(engine, feeds)
        except ImportError:
            raise UnsupportedError(
                "running a TensorRT engine from Python needs device memory: install a CUDA-enabled PyTorch "
                "or polygraphy (pip install polygraphy)"
            ) from None
    return TensorRTRun(outputs=outputs, plugin_layers=plugin_layers, tensorrt_version=str(trt.__version__))


def run_tensorrt(model_path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs of ``model_path`` run by TensorRT with the gelu-onnx plugin loaded
    (for ``gelu-onnx check --provider tensorrt``)."""
    return build_engine_and_run(model_path, feeds).outputs


if __name__ == "__main__":  # python -m gelu_onnx.tensorrt: where the plugin libraries are
    try:
        print(f"dynamic (--dynamicPlugins, load_library): {plugin_library_path()}")
        print(f"self-registering (--staticPlugins, polygraphy --plugins): {plugin_library_path(autoreg=True)}")
    except UnsupportedError as e:
        print(f"gelu-onnx: {e.message}", file=sys.stderr)
        sys.exit(e.exit_code)
