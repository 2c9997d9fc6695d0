"""Fuzzing template replay (fusion/match/replay.py, the matches carried in sets
through the byte rewrite and the check model) against the matcher run on
every anchor on its own (the definition replay stands for): seeded random
GELU chains and fans with members made different in ways the carry was not
built for (replay_fuzz_models.py), every target; the same report, the same
output bytes, the same refusal, fuse_file too; the outputs of valid inputs
pass onnx.checker and compute what the input computes in ONNX Runtime.
Plus the cases the long run found, minimised.

A long run (a few thousand models):
    GELU_ONNX_REPLAY_FUZZ_MODELS=3000 python -m pytest tests/test_replay_fuzz.py -q -k seeded
"""
from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper

import gelu_onnx
from helpers import graph_build as GB
import replay_fuzz_models as FZ
from gelu_onnx.errors import GeluOnnxError
from gelu_onnx.fusion.targets import TARGETS
from gelu_onnx.onnxio import load_model_proto
from gelu_onnx.onnxio.arraytable import ArrayTable
from test_replay import one_by_one

MODELS = int(os.environ.get("GELU_ONNX_REPLAY_FUZZ_MODELS", "150"))


def _report(res) -> dict:
    d = res.as_dict()
    return {**{k: d[k] for k in ("fusions", "near_misses", "notes", "already_target_ops")},
            "counts": (d["fused"], list(d["by_form"].items()))}


def _outcome(fn):
    """('ok', value) or ('refused', error type, message): a refusal is an
    answer both ways must give alike; anything else is a failure."""
    try:
        return "ok", fn()
    except GeluOnnxError as e:
        return "refused", type(e).__name__, str(e)


def _fused(loaded, target):
    res = gelu_onnx.fuse_with_report(loaded, target, inplace=True)
    return _report(res), res.model.SerializeToString()


def _both_ways(data: bytes, target: str, monkeypatch, api: bool = True, inspect: bool = True) -> tuple:
    """(one-by-one outcome, carried outcome, whether the scanner read the main
    graph), fuse (and ``inspect``), each through onnxio.load_model_proto;
    ``api``: where the model loads, the ModelProto API agrees."""

    def inspected():
        return _report(gelu_onnx.inspect(load_model_proto(data), target)) if inspect else None

    one_by_one(monkeypatch)
    plain = _outcome(lambda: (_fused(load_model_proto(data), target), inspected()))
    one_by_one(monkeypatch, False)
    taken = []

    def scanned():
        loaded = load_model_proto(data)
        taken.append(isinstance(loaded.table, ArrayTable))
        return _fused(loaded, target), inspected()

    got = _outcome(scanned)
    if api and plain[0] == "ok":
        res = gelu_onnx.fuse_with_report(onnx.load_from_string(data), target)
        assert (_report(res), res.model.SerializeToString()) == plain[1][0]
    return plain, got, bool(taken and taken[0])


def _fuse_file_both_ways(data: bytes, target: str, tmp_path, monkeypatch) -> list:
    src = tmp_path / "in.onnx"
    src.write_bytes(data)
    outs = []
    for on in (True, False):
        one_by_one(monkeypatch, on)
        dst = tmp_path / f"out{int(on)}.onnx"
        outs.append(_outcome(lambda: (gelu_onnx.fuse_file(src, dst, target), dst.read_bytes())[1]))
    return outs


def _checks(model) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
        return True
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return False


def _ort_parity(data: bytes, out: bytes, fp16: bool, depth: int) -> None:
    import onnxruntime as ort

    from gelu_onnx import ortlib

    rng = np.random.default_rng(0)
    try:
        plain = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        feeds = {i.name: (rng.standard_normal([d if isinstance(d, int) else 3 for d in i.shape]) * 2).astype(
            np.float16 if "float16" in i.type else np.float32) for i in plain.get_inputs()}
        want = plain.run(None, feeds)
    except Exception:  # noqa: BLE001 - an input ORT refuses (duplicate node names, a planted bad shape)
        return
    got = ort.InferenceSession(out, ortlib.session_options(), providers=["CPUExecutionProvider"]).run(None, feeds)
    # relative, growing with the chain's depth: each GELU adds its kernel's
    # few ulps (docs/kernels.md: tanh 3(1 + |t|) ulp; 30 chained fp32 tanh
    # GELUs measured 1.2e-5 from the input's graph); fp16: every op of the
    # input rounds to fp16 (the fused op once), and members may compute in
    # fp16 where the input cast to fp32
    tol = 2e-2 * max(1.0, depth / 3) if fp16 else 1e-5 * max(1.0, depth / 4)
    for w, g in zip(want, got):
        w64, g64 = w.astype(np.float64), g.astype(np.float64)
        assert w.shape == g.shape and np.array_equal(np.isnan(w64), np.isnan(g64))
        assert np.all(np.abs(w64 - g64) <= tol * np.maximum(1.0, np.abs(w64)))


def test_seeded_models_both_ways(tmp_path, monkeypatch):
    taken = 0
    for seed in range(MODELS):
        model, desc = FZ.build(seed, max_members=40, dtypes=(GB.F32, GB.F32, GB.F16, GB.BF16))
        data = model.SerializeToString()
        valid = None
        for target in TARGETS:
            plain, scanned, took = _both_ways(data, target, monkeypatch, api=seed % 3 == 0, inspect=seed % 2 == 0)
            assert plain == scanned, (seed, target, desc)
            taken += took
            if seed % 8 == TARGETS.index(target):
                f0, f1 = _fuse_file_both_ways(data, target, tmp_path, monkeypatch)
                assert f0 == f1, (seed, target, desc)
                valid = _checks(model) if valid is None else valid
                assert valid or f0[0] == "refused", (seed, target, desc)  # what the checker refuses
            if plain[0] != "ok" or seed % 6 or any(n.domain == "com.microsoft" for n in model.graph.node):
                continue  # com.microsoft ops hide a planted bad type or shape from the input's check
            valid = _checks(model) if valid is None else valid
            if valid:
                out = plain[1][0][1]
                assert _checks(onnx.load_from_string(out)), (seed, target, desc)
                _ort_parity(data, out, desc["dt"] != TensorProto.FLOAT, desc["n"])
    assert taken >= MODELS * len(TARGETS) * 0.8  # the scanner read the file, not declined


# --- what the long run found, minimised -----------------------------------------------


def _chain(n: int) -> onnx.ModelProto:
    """x -> [Add(bias) -> GELU] * n in five spellings cycling (so every spelling repeats)."""
    b = GB.Builder()
    h = b.input("x", GB.F32, ["batch", GB.H])
    fams = ("ts_erf", "dynamo_tanh", "quick_gelu", "megatron", "jax_erf")
    for i in range(n):
        h = b.node("Add", [h, b.weight("bias", [GB.H], scale=0.1)])
        h = GB.gelu(b, fams[i % len(fams)], h, style="init")
    b.output(h, GB.F32, ["batch", GB.H])
    return b.model()


def test_a_repeat_in_domain_ai_onnx_is_checked(tmp_path, monkeypatch):
    """A repeated region with one node in domain "ai.onnx" (matched as the
    default domain) in a model importing only "": onnx.checker refuses the
    input (no opset import for "ai.onnx"), so fuse_file must too. The check
    model stood in for the repeat as for its class's first region (the class
    key had no domains) and the fault vanished, both ways."""
    model = _chain(10)
    sig = [n for n in model.graph.node if n.op_type == "Sigmoid"]
    sig[-1].domain = "ai.onnx"  # the second QuickGELU: a repeat of the first
    assert not _checks(model)
    outs = _fuse_file_both_ways(model.SerializeToString(), "custom", tmp_path, monkeypatch)
    assert outs[0] == outs[1] and outs[0][:2] == ("refused", "InputError") and "ai.onnx" in outs[0][2]


def test_a_declared_name_is_never_generated(monkeypatch):
    """value_info declaring a name no node makes is valid; a rewrite that
    gave a new tensor that name gave it the declared type too (fp16 for an
    fp32 GELU output between Casts), and the output failed the checker."""
    b = GB.Builder(GB.F16)
    h = b.input("x", GB.F16, ["batch", GB.H])
    for i in range(6):
        h = b.node("Cast", [GB.gelu(b, "ts_erf", b.node("Cast", [h], to=GB.F32), dtype=GB.F32)], to=GB.F16)
    b.output(h, GB.F16, ["batch", GB.H])
    model = b.model()
    for target in TARGETS:
        first = gelu_onnx.fuse(model, target)
        made = {o for n in first.graph.node for o in n.output} - {o for n in model.graph.node for o in n.output}
        assert made, target  # the rewrite names tensors of its own here
        m = onnx.ModelProto()
        m.CopyFrom(model)
        m.graph.value_info.extend(helper.make_tensor_value_info(t, GB.F16, ["batch", 1]) for t in sorted(made))
        assert _checks(m)
        plain, scanned, took = _both_ways(m.SerializeToString(), target, monkeypatch)
        assert plain == scanned and took and plain[0] == "ok"
        out = onnx.load_from_string(plain[1][0][1])
        assert _checks(out) and not made & {o for n in out.graph.node for o in n.output}


def test_nodes_out_of_topological_order(monkeypatch):
    """The API takes a ModelProto whose nodes are not in topological order
    (the checker refuses such a file; ONNX Runtime sorts it): the numeric
    check evaluated a region in file order and read a value not yet made
    (AttributeError), both ways."""
    model = _chain(10)
    nodes = list(model.graph.node)[::-1]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    data = model.SerializeToString()
    for target in TARGETS:
        plain, scanned, _ = _both_ways(data, target, monkeypatch)
        assert plain == scanned and plain[0] == "ok"
        assert plain[1][0][0]["counts"][0] == (10 if target != "standard" else 8)
        _ort_parity(data, plain[1][0][1], False, 20)


def test_an_omitted_operand_is_not_a_region_node(tmp_path, monkeypatch):
    """An Erf/Tanh/... whose operand is written as an omitted input ("", then
    x): the matcher took the node into a region by its non-empty inputs and
    the numeric check read its first input, "", as a constant: AttributeError
    both ways. Such a node (more operands than its op has, or one omitted)
    is no region node now; the checker refuses the file, and fuse_file with it."""
    model = _chain(10)
    tanh = [n for n in model.graph.node if n.op_type == "Tanh"][-1]
    tanh.input.insert(0, "")
    data = model.SerializeToString()
    for target in TARGETS:
        plain, scanned, took = _both_ways(data, target, monkeypatch)
        assert plain == scanned and took and plain[0] == "ok"
        assert plain[1][0][0]["counts"][0] == (9 if target != "standard" else 7)
    f0, f1 = _fuse_file_both_ways(data, "custom", tmp_path, monkeypatch)
    assert f0 == f1 and f0[:2] == ("refused", "InputError") and "input size 2" in f0[2]


def test_a_contrib_bias_of_one_element_is_not_folded(monkeypatch):
    """com.microsoft FastGelu(X, B) with B of shape [1] over X [N, 8]: ONNX
    Runtime's kernel reads B cyclically and runs it; converted to our
    BiasGeluTanh (1-D bias over X's last dimension) the output failed at run
    time, both ways (the bias an initializer, or read through an Identity). Such a bias is provably not the op's: that member is a
    near-miss, left as it is, and the output computes what the input does."""
    b = GB.Builder()
    h = b.input("x", GB.F32, ["batch", 8])
    for i in range(6):
        bias = b.weight("bias", [1] if i in (3, 4) else [8], scale=0.1)
        if i == 4:  # the same, read through an Identity
            bias = b.node("Identity", [bias])
        h = b.node("FastGelu", [h, bias], domain="com.microsoft")
    b.output(h, GB.F32, ["batch", 8])
    model = b.model()
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    data = model.SerializeToString()
    for target in TARGETS:
        plain, scanned, _ = _both_ways(data, target, monkeypatch)
        assert plain == scanned and plain[0] == "ok"
        assert [n["code"] for n in plain[1][0][0]["near_misses"]] == ["native-arity"] * 2
        _ort_parity(data, plain[1][0][1], False, 6)


def test_a_bias_add_with_a_spare_output_is_checked(tmp_path, monkeypatch):
    """A repeat's bias Add written with a second output (the checker: "output
    size 2 not in range"): the check model collapsed the Add with its
    region into one Add(h, b) -> root stand-in, one output, and fuse_file
    accepted the input with replay while refusing it one by one."""
    model = _chain(10)
    adds = [n for n in model.graph.node if n.op_type == "Add" and n.input[1].startswith("bias")]
    adds[7].output.append("")
    assert not _checks(model)
    for target in TARGETS:
        f0, f1 = _fuse_file_both_ways(model.SerializeToString(), target, tmp_path, monkeypatch)
        assert f0 == f1 and f0[:2] == ("refused", "InputError") and "output size 2" in f0[2]
