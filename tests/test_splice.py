"""gelu_onnx.onnxio.splice: fusing a single-file model without re-serialising its weights.

The reference for every output is the plain path (onnxio.load_model -> fuse ->
onnx.checker -> onnxio.save_model) on the same file: the splice path must write
the same model, byte for byte where the input was written canonically.
Thresholds are lowered so that small models exercise the splice path.
"""
from __future__ import annotations

import hashlib
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from gelu_onnx import cli, files, onnxio
from gelu_onnx.onnxio import format as fileformat, splice
from gelu_onnx.errors import GeluOnnxError, InputError
from gelu_onnx.fusion.index.graph import tensor_value

H, F = 32, 128  # weights of 16 KiB: stripped at the lowered threshold
STRIP = 4096


@pytest.fixture
def forced(monkeypatch):
    """Splice every file the CLI fuses, and strip tensors >= 4 KiB."""
    monkeypatch.setattr(files, "SPLICE_MIN_BYTES", 0)
    monkeypatch.setattr(splice, "STRIP_MIN_BYTES", STRIP)
    monkeypatch.delenv("GELU_ONNX_SPLICE", raising=False)


def _w(rng, name, *shape):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def _gelu(nodes, x, tag, c):
    """TorchScript's erf spelling on x."""
    nodes += [
        helper.make_node("Div", [x, c["sqrt2"]], [f"{tag}_d"], name=f"{tag}_Div"),
        helper.make_node("Erf", [f"{tag}_d"], [f"{tag}_e"], name=f"{tag}_Erf"),
        helper.make_node("Add", [f"{tag}_e", c["one"]], [f"{tag}_a"], name=f"{tag}_Add"),
        helper.make_node("Mul", [x, f"{tag}_a"], [f"{tag}_m"], name=f"{tag}_Mul"),
        helper.make_node("Mul", [f"{tag}_m", c["half"]], [f"{tag}_y"], name=f"{tag}_Mul2"),
    ]
    return f"{tag}_y"


def _model(subgraph=False, sparse=False, opset=17) -> onnx.ModelProto:
    """x[B,H] -> MatMul W1 -> Add b1 -> GELU -> MatMul W2 (-> If with a GELU inside)."""
    rng = np.random.default_rng(0)
    inits = [_w(rng, "W1", H, F), _w(rng, "b1", F), _w(rng, "W2", F, H), _w(rng, "W3", H, H)]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n)
              for n, v in (("sqrt2", 1.4142135381698608), ("one", 1.0), ("half", 0.5))]
    c = {t.name: t.name for t in inits}
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1")]
    g = _gelu(nodes, "hb", "g1", c)
    nodes.append(helper.make_node("MatMul", [g, "W2"], ["y0"], name="mm2"))
    out = "y0"
    if subgraph:
        body = []  # reads W3 and the constants from the outer scope
        body.append(helper.make_node("MatMul", ["y0", "W3"], ["s0"], name="s_mm"))
        sy = _gelu(body, "s0", "s1", c)
        then_g = helper.make_graph(body, "then", [], [helper.make_tensor_value_info(sy, TensorProto.FLOAT, None)])
        else_g = helper.make_graph([helper.make_node("Identity", ["y0"], ["e0"], name="e_id")], "else", [],
                                   [helper.make_tensor_value_info("e0", TensorProto.FLOAT, None)])
        nodes.append(helper.make_node("If", ["cond"], ["y1"], name="If_0", then_branch=then_g, else_branch=else_g))
        out = "y1"
    nodes.append(helper.make_node("Identity", [out], ["y"], name="out"))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", H])]
    if subgraph:
        inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", H])],
                              inits)
    if sparse:
        vals = numpy_helper.from_array(np.arange(1, 6, dtype=np.float32), "S")
        idx = numpy_helper.from_array(np.array([0, 7, 9, 30, 63], np.int64), "S_idx")
        graph.sparse_initializer.append(helper.make_sparse_tensor(vals, idx, [64]))  # unused: carried along
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _save(model, path) -> str:
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return str(path)


def _sha(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _fuse_cli(src, dst, monkeypatch, *extra, splice_on=True) -> int:
    monkeypatch.setenv("GELU_ONNX_SPLICE", "1" if splice_on else "0")
    return cli.main(["fuse", str(src), "-o", str(dst), *extra])


# --- the skeleton ---------------------------------------------------------------


def test_stripped_tensors_are_never_materialised():
    """The smallest tensor splice strips (STRIP_MIN_BYTES of complex128) must be
    above graph.tensor_value's materialising limit: a placeholder is never
    read as a constant, so matching sees what it sees on the plain path."""
    t = TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[splice.STRIP_MIN_BYTES // 16])
    t.raw_data = bytes(4 * t.dims[0])
    assert tensor_value(t) is None


def test_save_without_changes_is_byte_identical(tmp_path):
    src = _save(_model(subgraph=True), tmp_path / "m.onnx")
    skel = splice.open_skeleton(src, strip_min_bytes=STRIP)
    with skel:
        assert {s.name for s in skel.stripped.values()} == {"W1", "W2", "W3"}
        assert skel.model.ByteSize() < os.path.getsize(src) // 3
        for t in skel.model.graph.initializer:  # placeholders: references into the file itself
            if t.name in ("W1", "W2", "W3"):
                info = {e.key: e.value for e in t.external_data}
                assert info["location"] == "m.onnx"
                with open(src, "rb") as f:
                    f.seek(int(info["offset"]))
                    raw = f.read(int(info["length"]))
                orig = next(i for i in _model(subgraph=True).graph.initializer if i.name == t.name)
                assert raw == orig.raw_data
        skel.save(skel.model, tmp_path / "same.onnx")
    with open(src, "rb") as a, open(tmp_path / "same.onnx", "rb") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize("target", ["custom", "standard", "ort"])
@pytest.mark.parametrize("variant", ["plain", "subgraph", "sparse"])
def test_cli_splice_equals_plain_path(tmp_path, monkeypatch, forced, target, variant):
    model = _model(subgraph=variant == "subgraph", sparse=variant == "sparse")
    src = _save(model, tmp_path / "in.onnx")
    before = _sha(src)
    assert splice.open_skeleton(src) is not None
    assert _fuse_cli(src, tmp_path / "a.onnx", monkeypatch, "--target", target, splice_on=True) == 0
    assert _fuse_cli(src, tmp_path / "b.onnx", monkeypatch, "--target", target, splice_on=False) == 0
    assert _sha(src) == before  # input untouched
    a, b = onnx.load(tmp_path / "a.onnx"), onnx.load(tmp_path / "b.onnx")
    assert a == b
    with open(tmp_path / "a.onnx", "rb") as fa, open(tmp_path / "b.onnx", "rb") as fb:
        assert fa.read() == fb.read()  # canonical input: even the bytes agree
    ops = [n.op_type for n in a.graph.node]
    assert "Erf" not in ops
    for name in ("W1", "W2"):  # weights carried over unchanged
        w = next(t for t in a.graph.initializer if t.name == name)
        o = next(t for t in model.graph.initializer if t.name == name)
        assert w.raw_data == o.raw_data and w.data_location == TensorProto.DEFAULT


@pytest.mark.parametrize("variant", ["plain", "subgraph", "sparse"])
def test_inspect_on_the_skeleton_equals_the_plain_path(tmp_path, monkeypatch, capsys, variant):
    src = _save(_model(subgraph=variant == "subgraph", sparse=variant == "sparse"), tmp_path / "m.onnx")
    outs = {}
    for on in (True, False):
        monkeypatch.setattr(files, "SPLICE_MIN_BYTES", 0 if on else 1 << 62)
        monkeypatch.setattr(splice, "STRIP_MIN_BYTES", STRIP)
        calls = []
        real = splice.open_skeleton
        monkeypatch.setattr(splice, "open_skeleton", lambda *a, **k: calls.append(real(*a, **k)) or calls[-1])
        assert cli.main(["inspect", src, "--json"]) == 0
        assert [c is not None for c in calls] == ([True] if on else [])  # the skeleton path was (not) taken
        outs[on] = capsys.readouterr().out
    assert outs[True] == outs[False]
    assert '"gelus": 0' not in outs[True]


def test_spliced_output_runs_like_the_original(tmp_path, monkeypatch, forced):
    src = _save(_model(subgraph=True), tmp_path / "in.onnx")
    assert _fuse_cli(src, tmp_path / "out.onnx", monkeypatch) == 0
    feed = {"x": np.random.default_rng(1).standard_normal((3, H)).astype(np.float32), "cond": np.array(True)}
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_overwrite_input_in_place(tmp_path, monkeypatch, forced):
    src = _save(_model(), tmp_path / "in.onnx")
    copy = _save(_model(), tmp_path / "copy.onnx")
    assert _fuse_cli(src, src, monkeypatch) == 2  # refused without the flag
    assert _fuse_cli(src, src, monkeypatch, "--overwrite-input") == 0
    assert _fuse_cli(copy, tmp_path / "ref.onnx", monkeypatch, splice_on=False) == 0
    assert onnx.load(src) == onnx.load(tmp_path / "ref.onnx")
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_save_refuses_the_input_and_leaves_no_temp(tmp_path):
    src = _save(_model(), tmp_path / "in.onnx")
    with splice.open_skeleton(src, strip_min_bytes=STRIP) as skel:
        with pytest.raises(InputError, match="refusing to overwrite the input"):
            skel.save(skel.model, src)
        with pytest.raises(InputError, match="does not exist"):
            skel.save(skel.model, tmp_path / "nope" / "out.onnx")
        # a placeholder changed by a (buggy) pass is caught, nothing is written
        t = next(t for t in skel.model.graph.initializer if t.name == "W1")
        t.dims[0] += 1
        with pytest.raises(GeluOnnxError, match="placeholder"):
            skel.save(skel.model, tmp_path / "out.onnx")
    assert sorted(os.listdir(tmp_path)) == ["in.onnx"]


def test_placeholders_resolve_only_in_folder(tmp_path):
    """onnx.checker resolves the placeholders against the cwd: in_folder()."""
    src = _save(_model(), tmp_path / "in.onnx")
    with splice.open_skeleton(src, strip_min_bytes=STRIP) as skel:
        with skel.in_folder():
            onnx.checker.check_model(skel.model)
        cwd = os.getcwd()
        assert cwd == os.getcwd()


# --- what goes the plain way ----------------------------------------------------------


def test_external_data_model_takes_the_plain_path(tmp_path, monkeypatch, forced):
    model = _model()
    path = tmp_path / "ext.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="ext.data", size_threshold=1024)
    assert splice.open_skeleton(path) is None
    assert _fuse_cli(path, tmp_path / "out.onnx", monkeypatch) == 0
    out = onnx.load(tmp_path / "out.onnx", load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in out.graph.initializer)


def test_graph_field_twice_takes_the_plain_path(tmp_path, monkeypatch, forced):
    """Protobuf merges a repeated singular field; splice leaves that to protobuf."""
    model = _model()
    extra = onnx.ModelProto()
    extra.graph.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "zz"))
    path = tmp_path / "twice.onnx"
    with open(path, "wb") as f:
        f.write(model.SerializeToString() + extra.SerializeToString())
    assert splice.open_skeleton(path, strip_min_bytes=STRIP) is None
    assert _fuse_cli(path, tmp_path / "out.onnx", monkeypatch) == 0


def test_mostly_small_tensors_take_the_plain_path(tmp_path, monkeypatch, forced):
    """A file whose skeleton would be over half of it (a deep export at a
    small hidden size: its weights are all under the strip size) is read by
    the plain path, and the output is the same as when it is forced there."""
    model = _model()
    path = _save(model, tmp_path / "small.onnx")
    assert splice.open_skeleton(path, strip_min_bytes=STRIP) is not None  # big weights: spliced
    assert splice.open_skeleton(path, strip_min_bytes=64 << 10) is None  # none strippable
    monkeypatch.setattr(splice, "STRIP_MIN_BYTES", 64 << 10)
    assert _fuse_cli(path, tmp_path / "a.onnx", monkeypatch) == 0
    assert _fuse_cli(path, tmp_path / "b.onnx", monkeypatch, splice_on=False) == 0
    assert (tmp_path / "a.onnx").read_bytes() == (tmp_path / "b.onnx").read_bytes()


def test_tensor_with_wrong_payload_length_is_refused(tmp_path, monkeypatch, forced):
    """A payload longer than its dims say is bad input (ONNX Runtime refuses
    it; onnx.checker lets it through): the skeleton is never built, and both
    paths refuse it alike (exit 2). It was once passed through unstripped."""
    model = _model()
    # W3 (4 KiB, at the strip threshold): the others are stripped, so the
    # skeleton stays under half the file and is validated
    w = next(t for t in model.graph.initializer if t.name == "W3")
    w.raw_data = w.raw_data + bytes(4)  # longer than dims say
    path = _save(model, tmp_path / "bad.onnx")
    with pytest.raises(InputError, match="raw_data holds 4100 bytes"):
        splice.open_skeleton(path, strip_min_bytes=STRIP)
    rc_a = _fuse_cli(path, tmp_path / "a.onnx", monkeypatch, splice_on=True)
    rc_b = _fuse_cli(path, tmp_path / "b.onnx", monkeypatch, splice_on=False)
    assert rc_a == rc_b == 2


def test_wanted_threshold_and_switch(tmp_path, monkeypatch):
    src = _save(_model(), tmp_path / "m.onnx")
    monkeypatch.delenv("GELU_ONNX_SPLICE", raising=False)
    assert not files.splice_wanted(src)  # a small file: plain path
    assert files.splice_wanted(src, min_bytes=0)
    monkeypatch.setenv("GELU_ONNX_SPLICE", "0")
    assert not files.splice_wanted(src, min_bytes=0)


# --- damaged input --------------------------------------------------------------------


def _variants(data: bytes, rng):
    """Truncations at every field boundary-ish offset, and random byte flips."""
    cuts = sorted({*range(min(len(data), 64)), *rng.integers(0, len(data), 120).tolist(), len(data) - 1})
    for c in cuts:
        yield data[:c]
    for _ in range(200):
        b = bytearray(data)
        for i in rng.integers(0, len(b), int(rng.integers(1, 4))):
            b[i] = int(rng.integers(0, 256))
        yield bytes(b)
    for n in (1, 7, 100, 5000):
        yield rng.integers(0, 256, n, dtype=np.uint8).tobytes()


def test_damaged_files_raise_input_error_or_go_plain(tmp_path):
    data = _model(subgraph=True, sparse=True).SerializeToString()
    rng = np.random.default_rng(7)
    path = tmp_path / "d.onnx"
    outcomes = {"skeleton": 0, "plain": 0, "error": 0}
    for blob in _variants(data, rng):
        with open(path, "wb") as f:
            f.write(blob)
        try:
            skel = splice.open_skeleton(path, strip_min_bytes=STRIP)
        except InputError:
            outcomes["error"] += 1
            continue
        if skel is None:
            outcomes["plain"] += 1
            continue
        with skel:
            outcomes["skeleton"] += 1
            # whatever splice accepts, the plain loader accepts too
            onnxio.load_model(path)
    assert outcomes["error"] > 100 and outcomes["skeleton"] > 0


def test_wire_walker_stays_in_bounds():
    rng = np.random.default_rng(3)
    for _ in range(500):
        blob = rng.integers(0, 256, int(rng.integers(0, 64)), dtype=np.uint8).tobytes()
        try:
            for _, _, fs, vs, fe in fileformat.iter_fields(fileformat.Source(blob), 0, len(blob)):
                assert 0 <= fs < vs <= fe <= len(blob) or (fs < fe <= len(blob))
        except (fileformat.Malformed, fileformat.Unsupported):
            pass
