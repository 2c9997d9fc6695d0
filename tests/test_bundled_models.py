"""Every bundled export (models/manifest.json) fused for every target.

The expected GELU counts in the manifest were counted from the torch models
(activation-module hooks, cross-checked against the config), not by
gelu_onnx. For each file and target this checks: the number and forms of
fusions, nothing fused in the negative controls, the fused model passes the
full ONNX checker and loads in ONNX Runtime 1.31 (IR <= 13), exactly the
fused Erf/Tanh/Sigmoid nodes left the graph, a second fuse finds nothing,
and ORT gives the same outputs for the original and the fused model on seeded
random inputs (contract.PARITY_TOLERANCE) — for custom, both with our
custom-op library and in a plain ORT that runs the model-local functions.
"""
from __future__ import annotations

import functools
import json
import os
import pickle
import signal
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import gelu_onnx
from gelu_onnx import contract, ortlib

MODELS = Path(__file__).resolve().parent.parent / "models"
MANIFEST = json.loads((MODELS / "manifest.json").read_text())
ENTRIES = {e["file"]: e for e in MANIFEST["models"]}
from gelu_onnx.fusion.targets import TARGETS
# Test sizes for named (dynamic) axes: deliberately not the export's example
# sizes, so a shape baked in by the exporter or the rewrite shows up.
AXIS_SIZES = {"batch": 3, "sequence": 5, "samples": 480}
OP_PREFIX = {"custom": contract.DOMAIN + ".", "standard": "Gelu", "ort": contract.MS_DOMAIN + "."}
NODE_OF_FORM = {"erf": "Erf", "tanh": "Tanh", "sigmoid": "Sigmoid"}
SEED = 0


def feeds_for(entry: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    out = {}
    for name, spec in entry["inputs"].items():
        shape = list(spec["shape"])
        for axis, dim in spec["dynamic_axes"].items():
            shape[int(axis)] = AXIS_SIZES.get(dim, shape[int(axis)])
        if spec["dtype"].startswith("int"):
            lo, hi = spec["range"]
            out[name] = rng.integers(lo, hi, size=shape, dtype=spec["dtype"])
        else:
            out[name] = rng.standard_normal(shape).astype(spec["dtype"])
    return out


def run(model: onnx.ModelProto, feeds, so=None) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), so or ort.SessionOptions(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@functools.lru_cache(maxsize=None)
def original(file: str) -> onnx.ModelProto:
    return onnx.load(str(MODELS / file))


@functools.lru_cache(maxsize=None)
def reference_outputs(file: str):
    entry = ENTRIES[file]
    feeds = feeds_for(entry)
    return feeds, run(original(file), feeds)


@functools.lru_cache(maxsize=None)
def fused(file: str, target: str):
    return gelu_onnx.fuse_with_report(original(file), target=target)


def graph_nodes(g: onnx.GraphProto) -> Counter:
    """Op types in a graph and its If/Loop/Scan bodies (not in functions)."""
    c: Counter = Counter()
    for n in g.node:
        c[n.op_type] += 1
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                c += graph_nodes(a.g)
            for sub in a.graphs:
                c += graph_nodes(sub)
    return c


def assert_parity(entry, target, label, outs, ref):
    assert len(outs) == len(ref)
    for name, got, want in zip(entry["outputs"], outs, ref):
        assert got.shape == want.shape and got.dtype == want.dtype, name
        tol = contract.PARITY_TOLERANCE[str(want.dtype)]
        err = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bound = tol["atol"] + tol["rtol"] * np.abs(want.astype(np.float64))
        assert np.all(np.isfinite(got) == np.isfinite(want)), f"{name}: non-finite values differ ({label})"
        ok = np.isfinite(want)
        worst = float(np.max(err[ok] - bound[ok], initial=-np.inf))
        assert worst <= 0, (f"{entry['file']} [{target}, {label}] output {name}: max |diff| "
                            f"{float(np.max(err[ok])):.3g} exceeds atol {tol['atol']} + rtol {tol['rtol']}")


def _library_options():
    try:
        from gelu_onnx import ortlib
    except ImportError:
        return None
    return gelu_onnx.session_options() if ortlib.available() else None


CASES = [pytest.param(f, t, id=f"{Path(f).stem}-{t}") for f in ENTRIES for t in TARGETS]


def test_manifest_is_consistent():
    files = {p.name for p in MODELS.glob("*.onnx")}
    assert files == set(ENTRIES), f"untracked: {sorted(files - set(ENTRIES))}, missing: {sorted(set(ENTRIES) - files)}"
    archs = {e["name"] for e in ENTRIES.values()}
    assert len(archs) >= 27
    for need in ("bert", "vit", "gpt2", "clip_text"):
        got = {(e["exporter"], e["opset"]) for e in ENTRIES.values() if e["name"] == need}
        assert {x for x, _ in got} == {"torchscript", "dynamo"}, f"{need}: {sorted(got)}"
    assert any(e["kind"] == "negative-control" for e in ENTRIES.values())
    for e in ENTRIES.values():
        assert sum(e["expected_forms"].values()) == e["expected_gelus"]
        assert e["ir_version"] <= 10
    # Every combination not exported says why.
    assert all(s["reason"] for s in MANIFEST["skipped"])


@pytest.mark.parametrize("file,target", CASES)
def test_fuse_bundled_model(file, target):
    entry = ENTRIES[file]
    res = fused(file, target)
    want = Counter(entry["expected_forms"])
    if target == "standard":
        want.pop("sigmoid", None)  # no standard op for QuickGELU: left as is
    got = Counter(f.form for f in res.fusions)
    misses = [(n.code, n.anchor, n.reason) for n in res.near_misses]
    assert got == want, f"{file} [{target}]: fused {dict(got)}, expected {dict(want)}; near misses: {misses}"
    assert len(res.fusions) == entry["expected_fusions"][target]
    assert all(f.op.startswith(OP_PREFIX[target]) for f in res.fusions), [f.op for f in res.fusions]
    if entry["activation"] == "silu" and entry["graph_ops"].get("Sigmoid"):
        assert any(n.code == "silu" for n in res.near_misses), f"SiLU not reported as a near miss: {misses}"

    m = res.model
    assert m.ir_version <= ortlib.max_ir_version()
    onnx.checker.check_model(m, full_check=True)
    # Exactly the fused subgraphs' Erf/Tanh/Sigmoid nodes are gone (a pooler's
    # Tanh, a SiLU's Sigmoid stay).
    before, after = graph_nodes(original(file).graph), graph_nodes(m.graph)
    for form, op in NODE_OF_FORM.items():
        assert after[op] == before[op] - got[form], f"{op}: {before[op]} -> {after[op]}, fused {got[form]}"

    again = gelu_onnx.fuse_with_report(m, target=target)
    assert not again.fusions, f"second fuse found {[(f.form, f.root) for f in again.fusions]}"

    feeds, ref = reference_outputs(file)
    label = "plain onnxruntime" + (" (model-local functions)" if target == "custom" else "")
    assert_parity(entry, target, label, run(m, feeds), ref)


def in_child(fn, *args):
    """Run fn(*args) in a forked child: a crash in native code (an abort in a
    kernel library) fails this one test with its signal instead of killing
    the whole test run. Returns fn's result; re-raises its exception."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            payload = ("ok", fn(*args))
        except BaseException as e:  # noqa: BLE001 - shipped to the parent
            payload = ("err", e if _picklable(e) else AssertionError(f"{type(e).__name__}: {e}"))
        with os.fdopen(w, "wb") as f:
            pickle.dump(payload, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        raise AssertionError(f"crashed with signal {os.WTERMSIG(status)} ({signal.Signals(os.WTERMSIG(status)).name})")
    kind, value = pickle.loads(data)
    if kind == "err":
        raise value
    return value


def _picklable(e) -> bool:
    try:
        pickle.loads(pickle.dumps(e))
        return True
    except Exception:  # noqa: BLE001
        return False


def _run_with_library(file):
    feeds, _ = reference_outputs(file)
    return run(fused(file, "custom").model, feeds, _library_options())


@pytest.mark.parametrize("file", list(ENTRIES), ids=lambda f: Path(f).stem)
def test_custom_with_library(file):
    if _library_options() is None:
        pytest.skip("gelu_onnx.ortlib (the custom-op library) is not built/available here")
    _, ref = reference_outputs(file)
    fused(file, "custom")  # fuse in the parent (cached), run in the child
    outs = in_child(_run_with_library, file)
    assert_parity(ENTRIES[file], "custom", "custom-op library", outs, ref)
