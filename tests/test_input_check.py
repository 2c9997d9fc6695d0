"""gelu_onnx.files.check_input: a model no runtime would take is bad input
(exit 2) before anything is fused, even when the fault sits inside a GELU
that fusion would remove (the output would then look valid).

Each case is checked against ONNX Runtime itself where it refuses the
original, so the refusals are the runtime's, not ours."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper

import gelu_onnx
from gelu_onnx.errors import InputError


def _gelu(x="x", y="y"):
    return [helper.make_node("Div", [x, "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["q"]), helper.make_node("Mul", [x, "q"], ["m"]),
            helper.make_node("Mul", ["m", "half"], [y])]


def _consts():
    return [helper.make_tensor(n, T.FLOAT, [], [v]) for n, v in (("r2", 2**0.5), ("one", 1.0), ("half", 0.5))]


def _model(nodes, inits, *, outputs=None, value_info=(), functions=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                          outputs or [helper.make_tensor_value_info("y", T.FLOAT, [2, 8])], inits,
                          value_info=list(value_info))
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(g, opset_imports=opsets, functions=list(functions), ir_version=10)


def _lying_dtype():  # a GELU-internal tensor declared int64: ONNX Runtime refuses the model
    return _model(_gelu(), _consts(), value_info=[helper.make_tensor_value_info("d", T.INT64, [2, 8])])


def _lying_output():
    return _model(_gelu(), _consts(), outputs=[helper.make_tensor_value_info("y", T.INT32, [2, 8])])


def _lying_shape():
    return _model(_gelu(), _consts(), value_info=[helper.make_tensor_value_info("e", T.FLOAT, [3, 3, 3])])


def _wrong_attr_type():  # value_float declared INT: the runtime reads another value than onnx.helper would
    c = helper.make_node("Constant", [], ["r2"], value_float=2**0.5)
    c.attribute[0].type = onnx.AttributeProto.INT
    return _model([c] + _gelu(), _consts()[1:])


def _recursive_function_with_gelu():
    consts = [helper.make_node("Constant", [], [n], value_float=v) for n, v in (("r2", 2**0.5), ("one", 1.0),
                                                                              ("half", 0.5))]
    body = consts + _gelu("a", "b0") + [helper.make_node("F", ["b0"], ["b"], domain="local")]
    f = helper.make_function("local", "F", ["a"], ["b"], body,
                             [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    return _model([helper.make_node("F", ["x"], ["y"], domain="local")], [], functions=[f])


def _unknown_element_type():
    t = onnx.TensorProto(name="w", data_type=999, dims=[1], raw_data=b"\0" * 4)
    return _model(_gelu(), _consts() + [t])


def _negative_dims():
    return _model(_gelu(), _consts() + [onnx.TensorProto(name="w", data_type=T.FLOAT, dims=[-1])])


def _short_raw_data():  # the GELU's own constant: 4 bytes for 4 floats
    cs = _consts()
    cs[0].ClearField("float_data")
    cs[0].dims.extend([4])
    cs[0].raw_data = np.float32(2**0.5).tobytes()
    return _model(_gelu(), cs)


CASES = {
    "value_info dtype lies": (_lying_dtype, "ShapeInferenceError", True),
    "graph output dtype lies": (_lying_output, "InferenceError", True),
    "value_info shape lies": (_lying_shape, "InferenceError", False),
    "attribute of the wrong type": (_wrong_attr_type, "type field and data field mismatch", True),
    "recursive function holding a GELU": (_recursive_function_with_gelu, "Cycle detected", True),
    "unknown element type": (_unknown_element_type, "unknown element type 999", True),
    "negative dims": (_negative_dims, "Negative dimension", False),
    "raw_data shorter than its dims": (_short_raw_data, "raw_data size", True),
}


def _runtime_refuses(model) -> bool:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal
        return True
    return False


@pytest.mark.parametrize("case", list(CASES))
def test_invalid_input_is_refused_before_fusing(tmp_path, case):
    build, fragment, ort_refuses = CASES[case]
    model = build()
    if ort_refuses:  # the reference: the runtime itself will not take it
        assert _runtime_refuses(model)
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    before = src.read_bytes()
    out = tmp_path / "out.onnx"
    with pytest.raises(InputError, match=fragment):
        gelu_onnx.fuse_file(src, out)
    with pytest.raises(InputError, match=fragment):
        gelu_onnx.inspect_file(src)
    assert not out.exists() and src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_cli_says_one_line_and_exit_2(tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(_lying_dtype().SerializeToString())
    for argv in (["fuse", src, "-o", tmp_path / "o.onnx"], ["inspect", src]):
        r = subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, argv)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "the input model fails onnx.checker" in lines[0], lines
    assert not (tmp_path / "o.onnx").exists()


def test_the_valid_version_of_each_case_is_fused(tmp_path):
    src = tmp_path / "m.onnx"
    src.write_bytes(_model(_gelu(), _consts()).SerializeToString())
    done = gelu_onnx.fuse_file(src, tmp_path / "o.onnx")
    assert [f.form for f in done.result.fusions] == ["erf"]
