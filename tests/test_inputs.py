"""Generated integer inputs stay inside the table they index (issue 23 point
4): through every op that only moves the ids' values, in subgraphs and
model-local functions, for token / position / token-type ids; masks stay all
ones. Hand-built graphs per op, then real exports (every bundled model,
XLNet's TorchScript export that transposes input_ids before its embedding)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from gelu_onnx import verify

REPO = Path(__file__).resolve().parents[1]
ROWS = 7  # the table's size: ids drawn from [0, 100) would overrun it
DIM = 16  # every symbolic dim: 16 x 16 ids, P(all < 7 in [0, 100)) ~ 1e-180


def _model(nodes, inits, ids_dims=("b", "s"), ids_type=T.INT64, out="y", opset=17, functions=(), extra_inputs=()):
    inits = [nh.from_array(np.random.default_rng(0).standard_normal((ROWS, 3)).astype(np.float32), "table"), *inits]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("ids", ids_type, list(ids_dims)), *extra_inputs],
                     [h.make_tensor_value_info(out, T.FLOAT, None)], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), *([h.make_opsetid("local", 1)] if functions else [])],
                     ir_version=10, functions=list(functions))
    return m  # outputs of any rank (no declared shape): ONNX Runtime, which runs each, is the check


def _i64(name, *v):
    return nh.from_array(np.array(v, np.int64), name)


def _gather(src, out="y", table="table", axis=0):
    return h.make_node("Gather", [table, src], [out], axis=axis)


# ids -> <shape-only op> -> Gather(table, .): one per op the ids pass through
SHAPE_ONLY = {
    "Transpose": ([h.make_node("Transpose", ["ids"], ["t"], perm=[1, 0]), _gather("t")], []),
    "Reshape": ([h.make_node("Reshape", ["ids", "shp"], ["t"]), _gather("t")], [_i64("shp", -1)]),
    "Cast": ([h.make_node("Cast", ["ids"], ["t"], to=T.INT32), _gather("t")], []),
    "Unsqueeze+Squeeze": ([h.make_node("Unsqueeze", ["ids", "ax"], ["u"]), h.make_node("Squeeze", ["u", "ax"], ["t"]),
                           _gather("t")], [_i64("ax", 0)]),
    "Slice": ([h.make_node("Slice", ["ids", "st", "en"], ["t"]), _gather("t")], [_i64("st", 1), _i64("en", 1000)]),
    "Flatten": ([h.make_node("Flatten", ["ids"], ["t"]), _gather("t")], []),
    "Expand": ([h.make_node("Expand", ["ids", "shp"], ["t"]), _gather("t")], [_i64("shp", 2, 1, 1)]),
    "Identity": ([h.make_node("Identity", ["ids"], ["t"]), _gather("t")], []),
    "Concat with a constant": ([h.make_node("Concat", ["cls", "ids"], ["t"], axis=1), _gather("t")],
                               [nh.from_array(np.zeros((DIM, 1), np.int64), "cls")]),
    "Tile": ([h.make_node("Tile", ["ids", "rep"], ["t"]), _gather("t")], [_i64("rep", 1, 2)]),
    "Split": ([h.make_node("Split", ["ids"], ["t0", "t1"], axis=0, num_outputs=2), _gather("t1")], []),
    "Gather of ids": ([h.make_node("Gather", ["ids", "pick"], ["t"], axis=1), _gather("t")], [_i64("pick", 0, 0)]),
    "chain Transpose-Cast-Reshape": ([h.make_node("Transpose", ["ids"], ["t0"], perm=[1, 0]),
                                      h.make_node("Cast", ["t0"], ["t1"], to=T.INT32),
                                      h.make_node("Reshape", ["t1", "shp"], ["t"]), _gather("t")], [_i64("shp", -1)]),
    "table on axis 1": ([h.make_node("Transpose", ["ids"], ["t"], perm=[1, 0]), _gather("t", table="tableT", axis=1)],
                        [nh.from_array(np.ones((3, ROWS), np.float32), "tableT")]),
    "table through Cast (fp16 weights)": ([h.make_node("Cast", ["table16"], ["tab"], to=T.FLOAT),
                                           h.make_node("Transpose", ["ids"], ["t"], perm=[1, 0]),
                                           _gather("t", table="tab")],
                                          [nh.from_array(np.ones((ROWS, 3), np.float16), "table16")]),
}


def _feeds_fit_and_run(m, extra=()):
    for seed in range(3):
        feeds = verify.make_inputs(m, seed=seed, dim_default=DIM)
        for name in ("ids", *extra):
            a = feeds[name]
            assert a.size and 0 <= a.min() and a.max() < ROWS, (name, a.min(), a.max())
        verify.run(verify.load(m), feeds, use_library=False)  # ORT refuses an out-of-range index


@pytest.mark.parametrize("case", list(SHAPE_ONLY))
def test_ids_through_a_shape_only_op_fit_the_table(case):
    nodes, inits = SHAPE_ONLY[case]
    _feeds_fit_and_run(_model(nodes, inits, opset=18))


def test_ids_into_an_if_branch_and_a_loop_body():
    then = h.make_graph([h.make_node("Transpose", ["ids"], ["t"], perm=[1, 0]), _gather("t", "yt")], "then", [],
                        [h.make_tensor_value_info("yt", T.FLOAT, None)])
    other = h.make_graph([h.make_node("Identity", ["table"], ["ye"])], "else", [],
                         [h.make_tensor_value_info("ye", T.FLOAT, None)])
    nodes = [h.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    _feeds_fit_and_run(_model(nodes, [nh.from_array(np.array(True), "cond")]))


def test_ids_into_a_model_local_function():
    """A function that transposes its ids and gathers from a table passed as
    an argument (the table's size comes from the caller) and one holding its
    own Constant table."""
    f_arg = h.make_function("local", "Embed", ["tab", "x"], ["out"],
                            [h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]), _gather("xt", "out", table="tab")],
                            [h.make_opsetid("", 17)])
    const = h.make_tensor("ct", T.FLOAT, [ROWS, 2], np.ones(ROWS * 2, np.float32))
    f_const = h.make_function("local", "EmbedC", ["x"], ["out"],
                              [h.make_node("Constant", [], ["ctab"], value=const),
                               h.make_node("Reshape", ["x", "flat"], ["xf"]), _gather("xf", "out", table="ctab"),
                               ], [h.make_opsetid("", 17)])
    f_const.node.insert(0, h.make_node("Constant", [], ["flat"], value=h.make_tensor("f", T.INT64, [1], [-1])))
    nodes = [h.make_node("Embed", ["table", "ids"], ["y"], domain="local"),
             h.make_node("EmbedC", ["ids"], ["y2"], domain="local")]
    m = _model(nodes, [], functions=[f_arg, f_const])
    m.graph.output.append(h.make_tensor_value_info("y2", T.FLOAT, None))
    _feeds_fit_and_run(m)


def test_token_type_position_ids_and_mask_each_get_their_own_range():
    extra = [h.make_tensor_value_info(n, T.INT64, ["b", "s"]) for n in ("token_type_ids", "position_ids",
                                                                         "attention_mask")]
    nodes = [_gather("ids", "we"), h.make_node("Transpose", ["token_type_ids"], ["tt"], perm=[1, 0]),
             _gather("tt", "te0", table="types"), h.make_node("Transpose", ["te0"], ["te"], perm=[1, 0, 2]),
             h.make_node("Cast", ["position_ids"], ["pc"], to=T.INT32), _gather("pc", "pe", table="positions"),
             h.make_node("Add", ["we", "te"], ["s1"]), h.make_node("Add", ["s1", "pe"], ["s2"]),
             h.make_node("Cast", ["attention_mask"], ["mf"], to=T.FLOAT),
             h.make_node("Unsqueeze", ["mf", "ax"], ["mu"]), h.make_node("Mul", ["s2", "mu"], ["y"])]
    inits = [nh.from_array(np.ones((2, 3), np.float32), "types"),
             nh.from_array(np.ones((40, 3), np.float32), "positions"), _i64("ax", -1)]
    m = _model(nodes, inits, extra_inputs=extra)
    for seed in range(3):
        f = verify.make_inputs(m, seed=seed, dim_default=DIM)
        assert f["ids"].max() < ROWS and f["token_type_ids"].max() < 2 and f["position_ids"].max() < 40
        assert f["position_ids"].max() >= ROWS  # its own table, not the word table's
        assert len(np.unique(f["token_type_ids"])) == 2
        assert np.all(f["attention_mask"] == 1)
        verify.run(verify.load(m), f, use_library=False)


def test_ids_reaching_two_tables_fit_the_smaller():
    nodes = [_gather("ids", "a"), h.make_node("Transpose", ["ids"], ["t"], perm=[1, 0]),
             _gather("t", "b", table="big"), h.make_node("ReduceSum", ["a"], ["y"])]
    m = _model(nodes, [nh.from_array(np.ones((500, 3), np.float32), "big")])
    m.graph.output.append(h.make_tensor_value_info("b", T.FLOAT, None))
    _feeds_fit_and_run(m)


def test_ids_changed_by_arithmetic_are_not_followed():
    """ids + 1 reach the table: the range of the ids is not the table's, so
    the default [0, 100) stays (the user passes --inputs)."""
    m = _model([h.make_node("Add", ["ids", "one"], ["t"]), _gather("t")], [_i64("one", 1)])
    f = verify.make_inputs(m, dim_default=DIM)
    assert f["ids"].max() >= ROWS and f["ids"].max() < verify.INT_HIGH_DEFAULT


# --- real exports ---------------------------------------------------------------

MANIFEST = json.loads((REPO / "models" / "manifest.json").read_text())
INT_ENTRIES = [e for e in MANIFEST["models"] if any("range" in s for s in e["inputs"].values())]


@pytest.mark.parametrize("entry", INT_ENTRIES, ids=lambda e: e["file"])
def test_bundled_exports_get_ids_in_their_vocabulary(entry):
    m = onnx.load(str(REPO / "models" / entry["file"]))
    feeds = verify.make_inputs(m, dim_default=8)
    for name, spec in entry["inputs"].items():
        if "range" in spec:
            lo, hi = spec["range"]
            assert lo <= feeds[name].min() and feeds[name].max() < hi, (name, spec["range"])
    verify.run(verify.load(m), feeds, use_library=False)


@pytest.mark.slow
@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_xlnet_export_runs_on_generated_ids(tmp_path, exporter):
    """transformers' XLNetModel (tiny config, vocabulary 64): the TorchScript
    export transposes input_ids before the embedding Gather (issue 23: ids up
    to 85 made the original fail)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    sys.path.insert(0, str(REPO))
    from models.params import randomize_params

    torch.manual_seed(0)
    cfg = transformers.XLNetConfig(vocab_size=64, d_model=32, n_layer=2, n_head=2, d_inner=64, ff_activation="gelu",
                                   attn_implementation="eager")
    model = randomize_params(transformers.XLNetModel(cfg).eval(), 0)

    class Ids(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids):
            return self.m(input_ids=ids, use_mems=False, return_dict=False)[0]

    path = tmp_path / "xlnet.onnx"
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        if exporter == "torchscript":
            torch.onnx.export(Ids().eval(), (ids,), str(path), dynamo=False, opset_version=17,
                              input_names=["input_ids"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}})
        else:
            torch.onnx.export(Ids().eval(), (ids,), str(path), dynamo=True, opset_version=18, input_names=["input_ids"])
    m = onnx.load(str(path))
    if exporter == "torchscript":
        assert any(n.op_type == "Transpose" and "input_ids" in n.input for n in m.graph.node)
    feeds = verify.make_inputs(m, dim_default=16)
    assert feeds["input_ids"].max() < 64
    out = verify.run(verify.load(m), feeds, use_library=False)
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(feeds["input_ids"]), use_mems=False, return_dict=False)[0].numpy()
    got = next(iter(out.values()))
    np.testing.assert_allclose(got, ref, atol=1e-4)


def test_ids_into_ort_embed_layer_normalization():
    """ONNX Runtime's fused embedding (what its transformers optimizer
    writes): word ids index input 2, segment ids input 4."""
    hid = 4
    tabs = {"word": (ROWS, hid), "pos": (40, hid), "seg": (2, hid)}
    inits = [nh.from_array(np.random.default_rng(1).standard_normal(s).astype(np.float32), n) for n, s in tabs.items()]
    inits += [nh.from_array(np.ones(hid, np.float32), "gamma"), nh.from_array(np.zeros(hid, np.float32), "beta")]
    nodes = [h.make_node("Transpose", ["ids"], ["t"], perm=[1, 0]), h.make_node("Cast", ["t"], ["i32"], to=T.INT32),
             h.make_node("Cast", ["segment_ids"], ["s32"], to=T.INT32),
             h.make_node("EmbedLayerNormalization", ["i32", "s32", "word", "pos", "seg", "gamma", "beta"],
                         ["y", "mask_index"], domain="com.microsoft", epsilon=1e-5)]
    m = _model(nodes, inits, extra_inputs=[h.make_tensor_value_info("segment_ids", T.INT64, ["s", "b"])])
    m.opset_import.append(h.make_opsetid("com.microsoft", 1))
    m.graph.initializer.remove(next(t for t in m.graph.initializer if t.name == "table"))
    for seed in range(3):
        f = verify.make_inputs(m, seed=seed, dim_default=DIM)
        assert f["ids"].max() < ROWS and f["segment_ids"].max() < 2 and len(np.unique(f["segment_ids"])) == 2
        verify.run(verify.load(m), f, use_library=False)
