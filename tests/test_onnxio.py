"""gelu_onnx.onnxio on valid models: what loads, what is written, external data
kept external (never loaded), the output folder self-contained, IR clamping.

Hostile inputs are in tests/test_onnxio_hostile.py (corpus: tests/helpers/hostile/malformed.py).  The > 2 GB round trip needs
~7 GB of RAM and a minute: it runs with GELU_ONNX_LARGE_TESTS=1.
"""
from __future__ import annotations

import glob
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from scipy.special import erf

from gelu_onnx import onnxio
from gelu_onnx.onnxio.format import external_info
from gelu_onnx.errors import InputError, UnsafeModelError
from helpers.hostile.malformed import ffn_model, save_external, write_proto


REPO = Path(__file__).resolve().parents[1]
F = TensorProto.FLOAT


def ffn_reference(x: np.ndarray, model: onnx.ModelProto) -> np.ndarray:
    """float64 numpy/scipy value of ffn_model: gelu_erf(x @ W + B)."""
    w = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    h = x.astype(np.float64) @ w["W"] + w["B"]
    return 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))


def run(path_or_bytes, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def external_tensors(model: onnx.ModelProto):
    return [t for t in onnxio.iter_tensors(model) if t.data_location == TensorProto.EXTERNAL]


@pytest.fixture
def ext_model(tmp_path):
    """A real external-data model (written by onnx.save) in tmp/in/."""
    src = tmp_path / "in"
    src.mkdir()
    m = ffn_model(hidden=64)
    save_external(m, src / "m.onnx", location="weights.bin")
    return src / "m.onnx", m


X = np.random.default_rng(7).standard_normal((2, 64)).astype(np.float32)


# --- loading -----------------------------------------------------------------


def test_load_plain_model(tmp_path):
    m = ffn_model()
    p = tmp_path / "m.onnx"
    write_proto(m, p)
    lm = onnxio.load_model(p)
    assert lm.model.SerializeToString() == m.SerializeToString()
    assert lm.path == str(p) and lm.base_dir == str(tmp_path.resolve())
    assert lm.external_files == () and lm.file_size == p.stat().st_size


def test_load_model_proto_validates_without_copy():
    m = ffn_model()
    lm = onnxio.load_model_proto(m)
    assert lm.model is m
    assert onnxio.load_model_proto(m.SerializeToString()).model == m
    with pytest.raises(InputError):
        onnxio.load_model_proto(42)


def test_external_payload_not_loaded(ext_model):
    path, _ = ext_model
    lm = onnxio.load_model(path)
    ext = external_tensors(lm.model)
    assert [t.name for t in ext] == ["W"]
    assert not ext[0].HasField("raw_data")
    assert lm.external_files == (str(path.parent.resolve() / "weights.bin"),)
    # the file on disk is much larger than what was parsed
    assert (path.parent / "weights.bin").stat().st_size == 64 * 64 * 4 > path.stat().st_size


def test_external_model_without_folder_refused(ext_model):
    path, _ = ext_model
    m = onnx.load(str(path), load_external_data=False)
    with pytest.raises(InputError, match="no model folder is known"):
        onnxio.load_model_proto(m)
    assert onnxio.load_model_proto(m, base_dir=path.parent).external_files


def test_legal_constructs_pass(tmp_path):
    """Legal ONNX the fuse pass leaves alone: outer-scope reads in subgraphs,
    unsorted nodes, custom and contrib domains, optional empty inputs,
    an initializer that is also a graph input, a sparse initializer."""
    m = ffn_model()
    g = m.graph
    # If whose branches read the outer 'y' and 'x'
    then = helper.make_graph([helper.make_node("Relu", ["y"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["t2"])], "else", [],
                              [helper.make_tensor_value_info("t2", F, None)])
    g.initializer.append(numpy_helper.from_array(np.array(True), "cond"))
    g.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=then, else_branch=other))
    # contrib + custom domain ops, declared
    g.node.append(helper.make_node("FastGelu", ["y"], ["fg"], domain="com.microsoft"))
    g.node.append(helper.make_node("Whatever", ["fg", ""], ["w", ""], domain="my.ops"))
    m.opset_import.extend([helper.make_opsetid("com.microsoft", 1), helper.make_opsetid("my.ops", 3)])
    # Clip with an omitted optional input
    g.node.append(helper.make_node("Clip", ["y", "", "half"], ["c"]))
    # overridable constant (initializer also a graph input) and a sparse initializer
    g.input.append(helper.make_tensor_value_info("half", F, []))
    sp = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.0], np.float32), "sp"),
                                   numpy_helper.from_array(np.array([3], np.int64), "sp_idx"), [8])
    g.sparse_initializer.append(sp)
    for name in ("z", "w", "c"):
        g.output.append(helper.make_tensor_value_info(name, F, None))
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(reversed(nodes))  # not topologically sorted, but acyclic
    onnxio.load_model_proto(m)


def test_real_exports_load(tmp_path):
    files = sorted(glob.glob(str(REPO / "models" / "*.onnx")))
    if not files:
        pytest.skip("no exported models in models/ (run models/export_models.py)")
    for f in files:
        lm = onnxio.load_model(f)
        assert lm.model.graph.node, f


# --- saving ------------------------------------------------------------------


def test_plain_save_is_atomic_and_readable(tmp_path):
    m = ffn_model(hidden=64)
    out = tmp_path / "o.onnx"
    saved = onnxio.save_model(m, out)
    assert Path(saved.path) == out and os.listdir(tmp_path) == ["o.onnx"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    np.testing.assert_allclose(run(str(out), X), ffn_reference(X, m), rtol=1e-5, atol=1e-5)
    # saving again replaces it; the model passed in is not modified
    before = m.SerializeToString()
    onnxio.save_model(m, out)
    assert m.SerializeToString() == before and os.listdir(tmp_path) == ["o.onnx"]


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_external_roundtrip_to_other_folder(ext_model, tmp_path):
    path, m = ext_model
    want = ffn_reference(X, m)
    np.testing.assert_allclose(run(str(path), X), want, rtol=1e-5, atol=1e-5)
    lm = onnxio.load_model(path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    saved = onnxio.save_model(lm.model, out_dir / "o.onnx", source=lm)
    assert sorted(os.listdir(out_dir)) == ["o.onnx", "weights.bin"]
    # a reflink clone or a copy, never a hard link: onnx >= 1.23 refuses to
    # load models whose data files have several links (the input's too)
    assert saved.linked + saved.copied == [str(out_dir / "weights.bin")]
    assert (out_dir / "weights.bin").stat().st_ino != (path.parent / "weights.bin").stat().st_ino
    assert (out_dir / "weights.bin").stat().st_nlink == 1 == (path.parent / "weights.bin").stat().st_nlink
    assert (out_dir / "weights.bin").read_bytes() == (path.parent / "weights.bin").read_bytes()
    onnx.checker.check_model(str(path))          # the input still passes onnx's own checks
    onnx.load(str(path))
    # the output keeps W external, with the same relative location
    out_model = onnx.load(str(out_dir / "o.onnx"), load_external_data=False)
    ext = external_tensors(out_model)
    assert [(t.name, external_info(t)["location"]) for t in ext] == [("W", "weights.bin")]
    # self-contained: the input folder can go away
    shutil.rmtree(path.parent)
    np.testing.assert_allclose(run(str(out_dir / "o.onnx"), X), want, rtol=1e-5, atol=1e-5)
    assert onnxio.load_model(out_dir / "o.onnx").external_files == (str((out_dir / "weights.bin").resolve()),)


def test_external_save_same_folder_references_kept(ext_model):
    path, m = ext_model
    lm = onnxio.load_model(path)
    saved = onnxio.save_model(lm.model, path.parent / "o.onnx", source=lm)
    assert saved.linked == saved.copied == [] and saved.data_files == []
    assert sorted(os.listdir(path.parent)) == ["m.onnx", "o.onnx", "weights.bin"]
    np.testing.assert_allclose(run(str(path.parent / "o.onnx"), X), ffn_reference(X, m), rtol=1e-5, atol=1e-5)


def test_external_subfolder_and_rerun(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    m = ffn_model(hidden=64)
    save_external(m, src / "m.onnx", location="weights/part.bin")
    lm = onnxio.load_model(src / "m.onnx")
    for _ in range(2):  # a second run replaces the data file atomically
        onnxio.save_model(lm.model, out / "o.onnx", source=lm)
    assert sorted(os.listdir(out)) == ["o.onnx", "weights"]
    assert os.listdir(out / "weights") == ["part.bin"]
    np.testing.assert_allclose(run(str(out / "o.onnx"), X), ffn_reference(X, m), rtol=1e-5, atol=1e-5)


def test_external_copied_across_filesystems(ext_model):
    path, m = ext_model
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == path.stat().st_dev:
        pytest.skip("no second filesystem (/dev/shm) to force a plain copy")
    lm = onnxio.load_model(path)
    out_dir = Path(tempfile.mkdtemp(dir=shm))
    try:
        saved = onnxio.save_model(lm.model, out_dir / "o.onnx", source=lm)
        assert saved.copied == [str(out_dir / "weights.bin")] and not saved.linked
        assert (out_dir / "weights.bin").read_bytes() == (path.parent / "weights.bin").read_bytes()
        np.testing.assert_allclose(run(str(out_dir / "o.onnx"), X), ffn_reference(X, m), rtol=1e-5, atol=1e-5)
    finally:
        shutil.rmtree(out_dir)


def test_overwrite_input_when_asked(ext_model):
    path, m = ext_model
    lm = onnxio.load_model(path)
    with pytest.raises(InputError, match="refusing to overwrite the input"):
        onnxio.save_model(lm.model, path, source=lm)
    lm.model.producer_name = "rewritten"
    onnxio.save_model(lm.model, path, overwrite_input=True, source=lm)
    assert onnx.load(str(path), load_external_data=False).producer_name == "rewritten"
    assert sorted(os.listdir(path.parent)) == ["m.onnx", "weights.bin"]
    np.testing.assert_allclose(run(str(path), X), ffn_reference(X, m), rtol=1e-5, atol=1e-5)


def test_big_model_split_into_data_file(tmp_path):
    """Over the size limit the embedded tensors go to <name>.data (the 2 GB
    default is exercised by the GELU_ONNX_LARGE_TESTS round trip below)."""
    m = ffn_model(hidden=64)
    want = ffn_reference(X, m)
    out = tmp_path / "o.onnx"
    saved = onnxio.save_model(m, out, max_proto_bytes=4096)
    assert [t.name for t in external_tensors(m)] == ["W"]  # documented: changed in place, like onnx.save
    assert saved.externalized == 1 and saved.data_files == [str(tmp_path / "o.onnx.data")]
    assert "o.onnx.data" in saved.notes[0]
    on_disk = onnx.load(str(out), load_external_data=False)
    assert [t.name for t in external_tensors(on_disk)] == ["W"]  # B etc. are < 1 KiB
    np.testing.assert_allclose(run(str(out), X), want, rtol=1e-5, atol=1e-5)
    assert onnxio.load_model(out).external_files == (str((tmp_path / "o.onnx.data").resolve()),)


def test_fused_external_model_end_to_end(ext_model, tmp_path):
    """load -> fuse -> save elsewhere: weights stay external, the result runs in
    a plain ORT (model-local functions) and matches the float64 reference."""
    fuse = pytest.importorskip("gelu_onnx.files").fuse_with_report
    path, m = ext_model
    lm = onnxio.load_model(path)
    res = fuse(lm.model, target="custom")
    assert len(res.fusions) == 1
    out = tmp_path / "out" / "f.onnx"
    out.parent.mkdir()
    onnxio.save_model(res.model, out, source=lm)
    fused = onnxio.load_model(out)
    assert [t.name for t in external_tensors(fused.model)] == ["W"]
    assert sorted(os.listdir(out.parent)) == ["f.onnx", "weights.bin"]
    np.testing.assert_allclose(run(str(out), X), ffn_reference(X, m), rtol=1e-5, atol=1e-5)


def test_tensor_array_reads_only_validated_external(ext_model):
    path, m = ext_model
    lm = onnxio.load_model(path)
    w = next(t for t in lm.model.graph.initializer if t.name == "W")
    ref = next(numpy_helper.to_array(t) for t in m.graph.initializer if t.name == "W")
    np.testing.assert_array_equal(onnxio.tensor_array(w, lm.base_dir), ref)
    for e in w.external_data:
        if e.key == "location":
            e.value = "../escape.bin"
    with pytest.raises(UnsafeModelError):
        onnxio.tensor_array(w, lm.base_dir)


# --- IR version ----------------------------------------------------------------


def test_lower_ir_version():
    m = ffn_model(ir=14)
    assert onnxio.lower_ir_version(m) == 14 and m.ir_version == onnxio.IR_FLOOR == onnxio.lowest_ir_version(m)
    run(m.SerializeToString(), X[:, :16])
    assert onnxio.lower_ir_version(m) is None  # already the lowest
    old = ffn_model(ir=8)
    assert onnxio.lower_ir_version(old) is None and old.ir_version == 8  # never raised
    new_opset = ffn_model(ir=14)
    new_opset.opset_import[0].version = 28  # needs IR 14
    assert onnxio.lower_ir_version(new_opset) is None and new_opset.ir_version == 14
    if hasattr(TensorProto, "FLOAT6E2M3"):
        f6 = ffn_model(ir=14)
        vi = helper.make_tensor_value_info("f6", TensorProto.FLOAT6E2M3, [1])
        f6.graph.value_info.append(vi)
        assert onnxio.lower_ir_version(f6) is None and f6.ir_version == 14


def test_facts_from_the_scan_are_the_walks():
    """serialized_facts reads the attributes holding tensors or types from
    the scanner's spans, all at once: the same facts as model_facts' walk
    (Constant tensors of a type that needs IR 9, typed data, a type attribute)."""
    m = ffn_model(ir=14)
    g = m.graph
    f8 = helper.make_tensor("c8", TensorProto.FLOAT8E4M3FN, [2], [1.0, 2.0])
    g.node.extend([helper.make_node("Constant", [], ["k8"], value=f8),
                   helper.make_node("Constant", [], ["kf"], value=helper.make_tensor("cf", F, [3], [1.0, 2.0, 3.0])),
                   helper.make_node("Constant", [], ["ki"], value_ints=[1, 2, 3])])
    g.output.extend([helper.make_tensor_value_info("k8", TensorProto.FLOAT8E4M3FN, [2]),
                     helper.make_tensor_value_info("kf", F, [3])])
    payload, facts = onnxio.serialized_facts(m)
    walked = onnxio.model_facts(m)
    assert payload == m.SerializeToString()
    assert (facts.embedded, facts.min_ir, facts.external) == (walked.embedded, walked.min_ir, walked.external)
    assert facts.min_ir == 9 and facts.embedded == walked.embedded > 0


def test_facts_from_the_scan_of_odd_tensors_are_the_walks():
    """Tensors stored every way (helpers.model_helpers.odd_tensors) as
    Constant values and as initializers: the facts sized from the scanner's
    columns are model_facts' (external ones: model_facts' own walk)."""
    from gelu_onnx.onnxio import irversion, wire
    from helpers.model_helpers import odd_tensors

    for external in (False, True):
        m = ffn_model(ir=14)
        for i, (name, t) in enumerate(odd_tensors().items()):
            if name.startswith("external") and not external:
                continue
            m.graph.node.append(helper.make_node("Constant", [], [f"k{i}"], value=t))
            init = onnx.TensorProto()
            init.CopyFrom(t)
            init.name = f"i{i}"
            m.graph.initializer.append(init)
        payload, facts = onnxio.serialized_facts(m)
        walked = onnxio.model_facts(m)
        assert (facts.embedded, facts.min_ir, facts.external) == (walked.embedded, walked.min_ir, walked.external)
        scanned = irversion._scanned_facts(m, wire.scan(payload))
        assert (scanned is None) == external  # external attribute tensors: the walk's


# --- > 2 GB ---------------------------------------------------------------------


@pytest.mark.slow
def test_over_2gb_model_roundtrip(tmp_path):
    if os.environ.get("GELU_ONNX_LARGE_TESTS") != "1":
        pytest.skip("builds a 2.25 GiB model: set GELU_ONNX_LARGE_TESTS=1 (needs ~5 GB RAM)")
    n, size = 3, 3 * 2**26  # float32: 768 MiB each
    m = onnx.ModelProto(ir_version=10)
    m.opset_import.add(domain="", version=17)
    g = m.graph
    for i in range(n):  # built in place: no extra copies of the payload
        t = g.initializer.add(name=f"w{i}", data_type=F, dims=[size])
        t.raw_data = np.full(size, i + 1, np.float32).tobytes()
    g.initializer.extend([numpy_helper.from_array(np.array([0], np.int64), "st"),
                          numpy_helper.from_array(np.array([4], np.int64), "en")])
    g.node.extend([helper.make_node("Slice", [f"w{i}", "st", "en"], [f"s{i}"]) for i in range(n)])
    g.node.append(helper.make_node("Sum", [f"s{i}" for i in range(n)] + ["x"], ["y"]))
    g.input.append(helper.make_tensor_value_info("x", F, [4]))
    g.output.append(helper.make_tensor_value_info("y", F, [4]))
    assert onnxio.model_facts(m).embedded > onnxio.MAX_PROTO_BYTES
    saved = onnxio.save_model(m, tmp_path / "big.onnx")
    assert saved.externalized == n and "big.onnx.data" in saved.notes[0]
    assert (tmp_path / "big.onnx.data").stat().st_size >= n * size * 4
    assert (tmp_path / "big.onnx").stat().st_size < 1 << 20
    del m, g, t
    lm = onnxio.load_model(tmp_path / "big.onnx")
    assert len(external_tensors(lm.model)) == n
    del lm
    out = run_big(str(tmp_path / "big.onnx"))
    np.testing.assert_array_equal(out, np.full(4, sum(range(1, n + 1)), np.float32))


def run_big(path: str) -> np.ndarray:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": np.zeros(4, np.float32)})[0]
