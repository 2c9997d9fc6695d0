"""The ONNX Runtime custom-op library in real ORT sessions: every op type x
dtype, bias handling, shape inference, zero-size tensors, clear errors, the
thread pool, and the model-local-function fallback (which ORT uses when the
library is not registered)."""
from __future__ import annotations

import json
import os

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from scipy import special

from gelu_onnx import contract, ortlib
from gelu_onnx.errors import InputError

NP = {TP.FLOAT: np.dtype(np.float32), TP.FLOAT16: np.dtype(np.float16), TP.BFLOAT16: np.dtype(ml_dtypes.bfloat16)}
KDT = {TP.FLOAT: 0, TP.FLOAT16: 1, TP.BFLOAT16: 2}
FORM_ID = {"erf": 0, "tanh": 1, "sigmoid": 2}


def make_model(op_type, dtype=TP.FLOAT, x_shape=("N", "H"), bias_shape=("H",), alpha=None,
               with_function=False, bias_dtype=None, opset=17):
    form, bias = contract.FORM_OF_OP_TYPE[op_type]
    ins = [helper.make_tensor_value_info("X", dtype, list(x_shape) if x_shape is not None else None)]
    names = ["X"]
    if bias:
        ins.append(helper.make_tensor_value_info("B", bias_dtype or dtype, list(bias_shape)))
        names.append("B")
    attrs = {} if alpha is None else {contract.ATTR_ALPHA: float(alpha)}
    node = helper.make_node(op_type, names, ["Y"], domain=contract.DOMAIN, **attrs)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", dtype, None)])
    funcs = [function_body(op_type, form, bias)] if with_function else []
    return helper.make_model(graph, ir_version=10, functions=funcs, opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid(contract.DOMAIN, contract.OPSET_VERSION)])


def function_body(op_type, form, bias):
    """The op's math as a model-local function (computed in the input type)."""
    n = helper.make_node

    def const(name, v):
        return [n("Constant", [], [name + "_f"], value=helper.make_tensor(name + "_f", TP.FLOAT, [], [v])),
                n("CastLike", [name + "_f", "X"], [name])]

    nodes = []
    v = "X"
    if bias:
        nodes.append(n("Add", ["X", "B"], ["v"]))
        v = "v"
    if form == "erf":
        nodes += const("c", contract.INV_SQRT2) + const("one", 1.0) + const("half", 0.5)
        nodes += [n("Mul", [v, "c"], ["t"]), n("Erf", ["t"], ["e"]), n("Add", ["e", "one"], ["e1"]),
                  n("Mul", [v, "e1"], ["m"]), n("Mul", ["m", "half"], ["Y"])]
    elif form == "tanh":
        nodes += const("k", contract.SQRT_2_OVER_PI) + const("c3", contract.TANH_CUBIC_COEFF)
        nodes += const("one", 1.0) + const("half", 0.5)
        nodes += [n("Mul", [v, v], ["x2"]), n("Mul", ["x2", v], ["x3"]), n("Mul", ["x3", "c3"], ["a"]),
                  n("Add", [v, "a"], ["s"]), n("Mul", ["s", "k"], ["u"]), n("Tanh", ["u"], ["th"]),
                  n("Add", ["th", "one"], ["t1"]), n("Mul", [v, "t1"], ["m"]), n("Mul", ["m", "half"], ["Y"])]
    else:
        nodes += [n("Constant", [], ["al_f"], value_float=1.0), ]
        nodes = nodes[:-1] + [n("Constant", [], ["al_f"], value_float=contract.QUICK_GELU_ALPHA),
                              n("CastLike", ["al_f", "X"], ["al"]),
                              n("Mul", [v, "al"], ["t"]), n("Sigmoid", ["t"], ["s"]), n("Mul", [v, "s"], ["Y"])]
    inputs = ["X", "B"] if bias else ["X"]
    return helper.make_function(contract.DOMAIN, op_type, inputs, ["Y"], nodes,
                                [helper.make_opsetid("", 17)])


def session(model, library=True, threads=1, profile=None):
    so = ortlib.session_options() if library else ort.SessionOptions()
    so.intra_op_num_threads = threads
    if profile:  # a path prefix: ORT names files by the millisecond, so make them unique
        so.enable_profiling = True
        so.profile_file_prefix = str(profile)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run(sess, feeds):
    """Runs with any of our dtypes (bfloat16 through OrtValues over uint16 buffers)."""
    if not any(a.dtype == NP[TP.BFLOAT16] for a in feeds.values()):
        return sess.run(None, feeds)[0]
    io = sess.io_binding()
    for k, a in feeds.items():
        io.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            np.ascontiguousarray(a).view(np.uint16), onnx_element_type=TP.BFLOAT16))
    x = feeds["X"]
    out = np.zeros(x.shape, np.uint16)
    io.bind_ortvalue_output("Y", ort.OrtValue.ortvalue_from_numpy_with_onnx_type(out, onnx_element_type=TP.BFLOAT16))
    sess.run_with_iobinding(io)
    return out.view(NP[TP.BFLOAT16])


def reference(form, v, alpha=contract.QUICK_GELU_ALPHA):
    v = np.asarray(v, np.float64)
    if form == "erf":
        return v * 0.5 * special.erfc(-v / np.sqrt(2.0))
    if form == "tanh":
        return v * special.expit(2 * np.sqrt(2 / np.pi) * (v + contract.TANH_CUBIC_COEFF * v**3))
    return v * special.expit(np.float64(np.float32(alpha)) * v)


def kernel(lib, form, dtype, x, b=None, alpha=contract.QUICK_GELU_ALPHA):
    """The same kernel called directly (ctypes): ORT's output must equal it bit for bit."""
    x = np.ascontiguousarray(x)
    y = np.zeros_like(x)
    b = None if b is None else np.ascontiguousarray(b)
    rc = lib.gelu_cpu_range(FORM_ID[form], KDT[dtype], x.ctypes.data, None if b is None else b.ctypes.data,
                            0 if b is None else b.size, y.ctypes.data, 0, x.size, alpha)
    assert rc == 0
    return y


def test_library_loads_and_negotiates_api(lib):
    session(make_model("GeluErf"))
    minor = int(ort.__version__.split(".")[1])
    assert lib.gelu_onnx_ort_api_version() == min(minor, 21)


@pytest.mark.parametrize("dtype", [TP.FLOAT, TP.FLOAT16, TP.BFLOAT16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("op_type", list(contract.FORM_OF_OP_TYPE))
def test_every_op_and_dtype(lib, op_type, dtype):
    form, bias = contract.FORM_OF_OP_TYPE[op_type]
    rng = np.random.default_rng(hash((op_type, dtype)) % 2**32)
    npdt = NP[dtype]
    x = (rng.standard_normal((3, 5, 96)) * 3).astype(npdt)
    b = rng.standard_normal(96).astype(npdt) if bias else None
    feeds = {"X": x} if b is None else {"X": x, "B": b}
    y = run(session(make_model(op_type, dtype, x_shape=("A", "B", "H"))), feeds)
    assert y.dtype == npdt and y.shape == x.shape
    expect = kernel(lib, form, dtype, x, b)
    np.testing.assert_array_equal(y.view(np.uint8), expect.view(np.uint8))
    v = x.astype(np.float32) + (0 if b is None else b.astype(np.float32))
    tol = contract.PARITY_TOLERANCE[npdt.name]
    np.testing.assert_allclose(y.astype(np.float64), reference(form, v), rtol=tol["rtol"], atol=tol["atol"])


def test_random_shapes_and_types(lib):
    rng = np.random.default_rng(7)
    for _ in range(25):
        op_type = rng.choice(list(contract.FORM_OF_OP_TYPE))
        form, bias = contract.FORM_OF_OP_TYPE[op_type]
        dtype = [TP.FLOAT, TP.FLOAT16, TP.BFLOAT16][rng.integers(3)]
        rank = int(rng.integers(1, 5))
        shape = tuple(int(d) for d in rng.integers(0 if rng.random() < 0.15 else 1, 9, size=rank))
        x = (rng.standard_normal(shape) * 4).astype(np.float32)
        if x.size:  # a few NaN / +-inf / huge / subnormal inputs too
            flat = x.reshape(-1)
            idx = rng.integers(0, x.size, size=min(4, x.size))
            flat[idx] = rng.choice(np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-40, -20.0], np.float32), idx.size)
        with np.errstate(over="ignore"):
            x = x.astype(NP[dtype])
        b = rng.standard_normal(shape[-1]).astype(NP[dtype]) if bias else None
        m = make_model(op_type, dtype, x_shape=[f"d{i}" for i in range(rank)], bias_shape=("h",))
        y = run(session(m), {"X": x} if b is None else {"X": x, "B": b})
        assert y.shape == x.shape and y.dtype == x.dtype
        k = kernel(lib, form, dtype, x, b)
        nan = np.isnan(k.astype(np.float32))
        assert np.array_equal(np.isnan(y.astype(np.float32)), nan)
        np.testing.assert_array_equal(y[~nan].view(np.uint8), k[~nan].view(np.uint8))


def test_alpha_attribute():
    x = np.linspace(-5, 5, 64, dtype=np.float32).reshape(8, 8)
    for alpha in (None, 1.5, 2.0):
        y = run(session(make_model("GeluSigmoid", alpha=alpha)), {"X": x})
        a = contract.QUICK_GELU_ALPHA if alpha is None else alpha
        np.testing.assert_allclose(y, reference("sigmoid", x, a), rtol=2e-6, atol=1e-7)


def test_shape_inference_keeps_symbolic_dims():
    s = session(make_model("BiasGeluTanh", x_shape=("batch", "seq", 768), bias_shape=(768,)))
    assert s.get_outputs()[0].shape == ["batch", "seq", 768]
    assert s.get_outputs()[0].type == "tensor(float)"


def test_unnamed_dynamic_dims_do_not_become_minus_one():
    """An unknown, unnamed input dim must not be inferred as the value -1 for
    the output: a Reshape whose target is built from Shape(output) would then
    see two -1s and the session would fail to load (seen on a fused BERT)."""
    n = helper.make_node
    nodes = [
        n("GeluErf", ["X"], ["Y"], domain=contract.DOMAIN),
        n("Shape", ["Y"], ["s"]),
        n("Constant", [], ["i0"], value=helper.make_tensor("i0", TP.INT64, [1], [0])),
        n("Gather", ["s", "i0"], ["d0"], axis=0),
        n("Constant", [], ["m1"], value=helper.make_tensor("m1", TP.INT64, [1], [-1])),
        n("Concat", ["d0", "m1"], ["target"], axis=0),
        n("Reshape", ["Y", "target"], ["Z"]),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TP.FLOAT, [None, None, 8])],
                          [helper.make_tensor_value_info("Z", TP.FLOAT, None)])
    m = helper.make_model(g, ir_version=10, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid(contract.DOMAIN, contract.OPSET_VERSION)])
    x = np.random.default_rng(5).standard_normal((2, 3, 8)).astype(np.float32)
    z = session(m).run(None, {"X": x})[0]
    np.testing.assert_allclose(z, reference("erf", x).reshape(2, 24), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(0, 768), (4, 0), (0,), (2, 0, 3)])
def test_zero_size_tensors(shape):
    for op_type in ("GeluErf", "BiasGeluErf"):
        _, bias = contract.FORM_OF_OP_TYPE[op_type]
        m = make_model(op_type, x_shape=[f"d{i}" for i in range(len(shape))], bias_shape=("h",))
        x = np.zeros(shape, np.float32)
        feeds = {"X": x, "B": np.zeros(shape[-1], np.float32)} if bias else {"X": x}
        y = run(session(m), feeds)
        assert y.shape == shape


def test_scalar_input():
    y = run(session(make_model("GeluErf", x_shape=())), {"X": np.array(1.5, np.float32)})
    assert y.shape == () and abs(float(y) - reference("erf", 1.5)) < 1e-6


@pytest.mark.parametrize("bias_shape,message", [
    ((5,), "bias has shape [5] but X has shape [4, 768]; bias must be 1-D with length = X's last dimension (768)"),
    ((2, 384), "bias has shape [2, 384]"),
    ((1, 768), "bias has shape [1, 768]"),
])
def test_bias_mismatch_is_a_clear_error(bias_shape, message):
    m = make_model("BiasGeluErf", bias_shape=[f"b{i}" for i in range(len(bias_shape))])
    s = session(m)
    with pytest.raises(Exception) as e:
        s.run(None, {"X": np.zeros((4, 768), np.float32), "B": np.zeros(bias_shape, np.float32)})
    assert "ai.gelu_onnx.BiasGeluErf: " + message in str(e.value)


def test_bias_with_scalar_x_is_a_clear_error():
    s = session(make_model("BiasGeluErf", x_shape=(), bias_shape=("h",)))
    with pytest.raises(Exception, match="X is a scalar; a bias needs X of rank >= 1"):
        s.run(None, {"X": np.array(1.0, np.float32), "B": np.zeros(1, np.float32)})


@pytest.mark.parametrize("dtype,bias_dtype", [(TP.DOUBLE, None), (TP.INT32, None), (TP.FLOAT, TP.FLOAT16)])
def test_unsupported_types_are_refused_at_load(dtype, bias_dtype):
    op = "BiasGeluErf" if bias_dtype else "GeluErf"
    with pytest.raises(Exception) as e:
        session(make_model(op, dtype, bias_dtype=bias_dtype))
    text = str(e.value)
    assert op in text and ("type" in text.lower() or "implementation" in text.lower()), text


def test_threads_give_identical_results():
    x = np.random.default_rng(3).standard_normal((1000, 1024)).astype(np.float32)  # 63 chunks
    m = make_model("GeluErf")
    y1 = run(session(m, threads=1), {"X": x})
    y2 = run(session(m, threads=2), {"X": x})
    np.testing.assert_array_equal(y1, y2)


def _profiled_op_types(sess, feeds):
    run(sess, feeds)
    path = sess.end_profiling()
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        os.unlink(path)
    return {e["args"]["op_name"] for e in events if e.get("cat") == "Node" and "op_name" in e.get("args", {})}


@pytest.mark.parametrize("op_type", list(contract.FORM_OF_OP_TYPE))
def test_local_function_fallback(op_type, tmp_path):
    """A model carrying the op's math as a model-local function: with the
    library ORT runs our kernel (the profile names the op), without it ORT
    inlines the function (the profile shows other nodes: the function body,
    or what ORT's optimizer fused it into, e.g. QuickGelu); both agree within
    the parity tolerance."""
    form, bias = contract.FORM_OF_OP_TYPE[op_type]
    m = make_model(op_type, with_function=True)
    rng = np.random.default_rng(11)
    feeds = {"X": (rng.standard_normal((16, 64)) * 3).astype(np.float32)}
    if bias:
        feeds["B"] = rng.standard_normal(64).astype(np.float32)
    with_lib = session(m, library=True, profile=tmp_path / "lib")
    without = session(m, library=False, profile=tmp_path / "nolib")
    assert _profiled_op_types(with_lib, feeds) == {op_type}
    ops = _profiled_op_types(without, feeds)
    assert ops and op_type not in ops
    tol = contract.PARITY_TOLERANCE["float32"]
    np.testing.assert_allclose(run(with_lib, feeds), run(without, feeds), rtol=tol["rtol"], atol=tol["atol"])


def test_missing_library_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv(ortlib.ENV_VAR, str(tmp_path / "nope.so"))
    assert not ortlib.available()
    with pytest.raises(InputError, match="is not a file"):
        ortlib.session_options()


@pytest.mark.parametrize("dtype", [TP.FLOAT, TP.FLOAT16])
def test_large_outputs_use_streaming_stores_bit_identically(dtype):
    """Outputs >= 32 MiB take the non-temporal-store path: same bits as the
    same values computed in small (cached-store) tensors."""
    np_dt = np.float32 if dtype == TP.FLOAT else np.float16
    rows = (40 << 20) // (np.dtype(np_dt).itemsize * 1024)  # 40 MiB of output
    x = (np.random.default_rng(7).standard_normal((rows, 1024)) * 4).astype(np_dt)
    b = np.random.default_rng(8).standard_normal(1024).astype(np_dt)
    sess = session(make_model("BiasGeluTanh", dtype), threads=2)
    big = run(sess, {"X": x, "B": b})
    small = np.concatenate([run(sess, {"X": x[i:i + 512], "B": b}) for i in range(0, rows, 512)])
    assert big.view(np.uint16 if np_dt == np.float16 else np.uint32).tobytes() == \
        small.view(np.uint16 if np_dt == np.float16 else np.uint32).tobytes()
