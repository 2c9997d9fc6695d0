"""TensorRT end to end: the plugin built into an engine by TensorRT's ONNX
parser, run on the GPU, compared with a float64 reference.

Needs TensorRT >= 10, an NVIDIA GPU and the plugin library; each test skips
with the reason when one is missing (there is no GPU in CI). The first group
checks the error paths that need none of them.
"""
from __future__ import annotations

import sys
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from gelu_onnx import contract
from gelu_onnx import tensorrt as gtrt
from gelu_onnx.errors import UnsupportedError

# --- error paths (run everywhere) ------------------------------------------------


def test_missing_tensorrt_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # makes `import tensorrt` fail
    with pytest.raises(UnsupportedError, match="TensorRT is not installed"):
        gtrt.import_tensorrt()
    with pytest.raises(UnsupportedError, match="TensorRT is not installed"):
        gtrt.run_tensorrt("model.onnx", {})


def test_old_tensorrt_is_refused():
    old = types.SimpleNamespace(__version__="8.6.1")
    with pytest.raises(UnsupportedError, match=">= 10"):
        gtrt.import_tensorrt(old)


def test_plugin_path_from_env_must_exist(monkeypatch, tmp_path):
    monkeypatch.setenv(gtrt.PLUGIN_ENV, str(tmp_path / "nope.so"))
    with pytest.raises(UnsupportedError, match="is not a file"):
        gtrt.plugin_library_path()
    lib = tmp_path / "libgelu_onnx_trt.so"
    lib.write_bytes(b"")
    monkeypatch.setenv(gtrt.PLUGIN_ENV, str(lib))
    assert gtrt.plugin_library_path() == lib


# --- with TensorRT and a GPU -------------------------------------------------------


@pytest.fixture(scope="module")
def trt():
    try:
        mod = gtrt.import_tensorrt()
    except UnsupportedError as e:
        pytest.skip(str(e))
    try:
        gtrt.plugin_library_path()
    except UnsupportedError as e:
        pytest.skip(str(e))
    try:
        builder = mod.Builder(mod.Logger(mod.Logger.ERROR))  # fails without a usable GPU
    except (RuntimeError, TypeError) as e:
        pytest.skip(f"TensorRT found no usable GPU ({e})")
    if builder is None:
        pytest.skip("TensorRT found no usable GPU")
    try:
        import torch

        cuda = torch.cuda.is_available()
    except (ImportError, RuntimeError):
        cuda = False
    if not cuda:
        try:
            import polygraphy  # noqa: F401
        except ImportError:
            pytest.skip("needs a CUDA-enabled PyTorch or polygraphy to hand buffers to TensorRT")
    gtrt.load_plugin(mod)
    return mod


def _reference(form: str, v: np.ndarray, alpha: float) -> np.ndarray:
    from scipy.special import erf

    v = v.astype(np.float64)
    if form == "erf":
        return 0.5 * v * (1.0 + erf(v / contract.SQRT2))
    if form == "tanh":
        return 0.5 * v * (1.0 + np.tanh(contract.SQRT_2_OVER_PI * (v + contract.TANH_CUBIC_COEFF * v**3)))
    return v / (1.0 + np.exp(-alpha * v))


def _plugin_model(path, form, bias, elem_type, shape=(2, 3, 16), alpha=1.702, with_namespace_attr=False):
    """One fused node and no model-local function: TensorRT can only import
    it through the plugin."""
    op_type = contract.OP_TYPES[(form, bias)]
    attrs = {contract.ATTR_ALPHA: alpha} if form == "sigmoid" else {}
    if with_namespace_attr:
        attrs["plugin_namespace"] = contract.DOMAIN
    inputs = ["x"] + (["b"] if bias else [])
    node = helper.make_node(op_type, inputs, ["y"], domain=contract.DOMAIN, name="gelu0", **attrs)
    graph_inputs = [helper.make_tensor_value_info("x", elem_type, list(shape))]
    if bias:
        graph_inputs.append(helper.make_tensor_value_info("b", elem_type, [shape[-1]]))
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info("y", elem_type, list(shape))])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(contract.DOMAIN, contract.OPSET_VERSION)]
    )
    model.ir_version = 10
    onnx.save(model, path)


DTYPES = [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16]


@pytest.mark.parametrize("elem_type", DTYPES, ids=lambda t: contract.FLOAT_DTYPES[t])
@pytest.mark.parametrize("form,bias", sorted(contract.OP_TYPES), ids=lambda v: str(v))
def test_plugin_matches_float64_reference(trt, tmp_path, form, bias, elem_type):
    dt = contract.np_dtype(elem_type)
    if dt.name == "bfloat16":
        try:
            import torch

            if not torch.cuda.is_available():
                pytest.skip("bfloat16 I/O from Python needs a CUDA-enabled PyTorch")
        except ImportError:
            pytest.skip("bfloat16 I/O from Python needs a CUDA-enabled PyTorch")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 16)) * 3).astype(dt)
    feeds = {"x": x}
    if bias:
        feeds["b"] = rng.standard_normal(16).astype(dt)
    path = tmp_path / "m.onnx"
    _plugin_model(path, form, bias, elem_type, alpha=1.625)
    run = gtrt.build_engine_and_run(path, feeds, trt)
    assert run.plugin_layers == [f"::{contract.OP_TYPES[(form, bias)]}"] or run.plugin_layers == [
        f"{contract.DOMAIN}::{contract.OP_TYPES[(form, bias)]}"
    ], run.plugin_layers
    v = x.astype(np.float64) + (feeds["b"].astype(np.float64) if bias else 0.0)
    want = _reference(form, v, 1.625)
    got = run.outputs["y"].astype(np.float64)
    tol = contract.PARITY_TOLERANCE[dt.name]
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"])


def test_plugin_namespace_attribute_selects_domain_creator(trt, tmp_path):
    path = tmp_path / "m.onnx"
    _plugin_model(path, "erf", True, TensorProto.FLOAT, with_namespace_attr=True)
    x = np.linspace(-4, 4, 96, dtype=np.float32).reshape(2, 3, 16)
    b = np.linspace(-1, 1, 16, dtype=np.float32)
    run = gtrt.build_engine_and_run(path, {"x": x, "b": b}, trt)
    assert run.plugin_layers == [f"{contract.DOMAIN}::BiasGeluErf"]
    np.testing.assert_allclose(run.outputs["y"], _reference("erf", x + b, 0.0), rtol=1e-5, atol=1e-5)


def test_fused_model_under_tensorrt_matches_reference(trt, tmp_path):
    """A decomposed erf GELU with bias, fused by gelu_onnx.fuse (custom target,
    model-local functions included), run by TensorRT. Whether TensorRT picks
    the plugin or inlines the function depends on its version (README); the
    numbers must match either way."""
    import gelu_onnx

    X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])
    Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])
    inits = [
        helper.make_tensor("bias", TensorProto.FLOAT, [32], np.linspace(-1, 1, 32).astype(np.float32)),
        helper.make_tensor("sqrt2", TensorProto.FLOAT, [], [contract.SQRT2]),
        helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
    ]
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["v"]),
        helper.make_node("Div", ["v", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["v", "p"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["y"]),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [X], [Y], inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    fused = gelu_onnx.fuse(model, target="custom")
    path = tmp_path / "fused.onnx"
    onnx.save(fused, path)
    x = np.linspace(-5, 5, 128, dtype=np.float32).reshape(4, 32)
    run = gtrt.build_engine_and_run(path, {"x": x}, trt)
    want = _reference("erf", x.astype(np.float64) + np.linspace(-1, 1, 32).astype(np.float32), 0.0)
    np.testing.assert_allclose(run.outputs["y"], want, rtol=1e-5, atol=1e-5)
