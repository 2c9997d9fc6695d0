"""Checking the fuser on the corpus and on fuzzed graphs: parity in real ONNX
Runtime sessions, the untouched-nodes and idempotence checks, fusions and
near-misses against what each case says."""
from __future__ import annotations

import ctypes
import itertools
import math
import zlib

import numpy as np
import onnx
from onnx import TensorProto

from gelu_onnx import contract as C
from gelu_onnx import ortlib

F32, F16, BF16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE
INT64, BOOL = TensorProto.INT64, TensorProto.BOOL
H = 16  # hidden size of every frame
from helpers.graph_build import Chain


# --------------------------------------------------------------------------
# Checking helpers (shared by the corpus test and the fuzz test)
# --------------------------------------------------------------------------
def iter_nodes(graph: onnx.GraphProto):
    for n in graph.node:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from iter_nodes(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from iter_nodes(g)


def node_signature(n: onnx.NodeProto):
    attrs = sorted((a.name, a.SerializeToString()) for a in n.attribute
                   if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS))
    return (n.op_type, n.domain, tuple(n.input), tuple(n.output), tuple(attrs))


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def make_feeds(model: onnx.ModelProto, seed: int) -> list[dict[str, np.ndarray]]:
    """Seeded N(0,1)*3 inputs; one feed per value of each bool input (both If branches)."""
    rng = np.random.default_rng(seed)
    base, bools = {}, []
    # ORT rejects feeds for initializer-backed inputs of IR < 4 models (it holds them constant).
    held = {t.name for t in model.graph.initializer} if model.ir_version < 4 else set()
    for vi in model.graph.input:
        if vi.name in held:
            continue
        tt = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        if tt.elem_type == BOOL:
            bools.append(vi.name)
            continue
        base[vi.name] = np.asarray(rng.standard_normal(shape) * 3.0).astype(C.np_dtype(tt.elem_type))
    feeds = []
    for vals in itertools.product((True, False), repeat=len(bools)):
        f = dict(base)
        f.update({n: np.array(v) for n, v in zip(bools, vals)})
        feeds.append(f)
    return feeds


class NotRunnable(Exception):
    """ONNX Runtime's CPU provider has no kernel for this dtype (e.g. bfloat16 Mul)."""


def run_ort(model: onnx.ModelProto, feed, so=None, optimize=True) -> list[np.ndarray]:
    import onnxruntime as ort

    so = so or ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as e:
        if "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            raise NotRunnable(str(e).splitlines()[0]) from e
        raise
    bf16 = np.dtype(C.np_dtype(BF16))
    if not any(v.dtype == bf16 for v in feed.values()) and not any(
            "bfloat16" in o.type for o in sess.get_outputs()):
        return sess.run(None, feed)
    # The Python binding has no numpy type for bfloat16: pass bit patterns in
    # OrtValues and copy the output buffers back out.
    vals = {k: (ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.ascontiguousarray(v).view(np.uint16), BF16)
                if v.dtype == bf16 else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)))
            for k, v in feed.items()}
    outs = []
    for v in sess.run_with_ort_values(None, vals):
        if v.data_type() == "tensor(bfloat16)":
            a = np.empty(v.shape(), np.uint16)
            if a.nbytes:
                ctypes.memmove(a.ctypes.data, v.data_ptr(), a.nbytes)
            outs.append(a.view(bf16))
        else:
            outs.append(v.numpy())
    return outs


def run_reference(model: onnx.ModelProto, feed) -> list[np.ndarray]:
    from onnx.reference import ReferenceEvaluator

    return list(ReferenceEvaluator(model).run(None, feed))


def tolerance(dname: str, via_reference: bool = False) -> dict[str, float]:
    """PARITY_TOLERANCE for dname; onnx.reference evaluates Erf in float32
    (np.vectorize(math.erf, otypes=['f'])), so float64 runs through it get fp32's."""
    tol = C.PARITY_TOLERANCE[dname]
    if via_reference and dname == "float64":
        tol = C.PARITY_TOLERANCE["float32"]
    return tol


def compare(orig: list[np.ndarray], fused: list[np.ndarray], names: list[str], what: str,
            via_reference: bool = False) -> None:
    assert len(orig) == len(fused), f"{what}: {len(fused)} outputs, original has {len(orig)}"
    for name, a, b in zip(names, orig, fused):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{what}: output {name} shape {b.shape} != {a.shape}"
        assert a.dtype == b.dtype, f"{what}: output {name} dtype {b.dtype} != {a.dtype}"
        dname = {np.dtype(C.np_dtype(k)): v for k, v in C.FLOAT_DTYPES.items()}.get(a.dtype)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        if dname is None:
            assert np.array_equal(a64, b64), f"{what}: output {name} differs"
            continue
        tol = tolerance(dname, via_reference)
        bad = np.abs(b64 - a64) > tol["atol"] + tol["rtol"] * np.abs(a64)
        if np.isnan(a64).any() or np.isnan(b64).any():
            bad |= np.isnan(a64) != np.isnan(b64)
        if bad.any():
            i = np.unravel_index(np.argmax(np.where(bad, np.abs(b64 - a64), -1)), a.shape)
            raise AssertionError(
                f"{what}: output {name} ({dname}) {int(bad.sum())}/{bad.size} elements out of "
                f"rtol={tol['rtol']} atol={tol['atol']}; worst at {tuple(int(v) for v in i)}: "
                f"original {a64[i]!r} fused {b64[i]!r}")


def library_session_options():
    """gelu_onnx.session_options() when the custom-op library is built, else None."""
    try:
        from gelu_onnx import ortlib
    except ImportError:
        return None
    avail = getattr(ortlib, "available", None)
    if avail is not None and not avail():
        return None
    return ortlib.session_options()


def _ort_optimizer_breaks(model, feed) -> bool:
    try:
        run_ort(model, feed, optimize=True)
    except NotRunnable:
        return False
    except Exception:  # noqa: BLE001 - any failure of the original counts
        return True
    return False


def parity(original: onnx.ModelProto, fused: onnx.ModelProto, seed: int, with_library: bool) -> list[str]:
    """Run both models on the same seeded inputs; raise on any difference beyond
    PARITY_TOLERANCE. Returns notes on what could not be run (and why)."""
    notes: list[str] = []
    names = [o.name for o in original.graph.output]
    for feed in make_feeds(original, seed):
        via_ref = False
        try:
            ref = run_ort(original, feed, optimize=False)
            ref_how = "ort"
        except NotRunnable as e:
            via_ref = True
            ref = run_reference(original, feed)
            ref_how = f"onnx.reference (ORT CPU: {e})"
        variants = [("fused, no library", None)]
        if with_library:
            so = library_session_options()
            if so is None:
                notes.append("custom-op library not available: only the function fallback was run")
            else:
                variants.append(("fused, with library", so))
        for what, so in variants:
            try:
                try:
                    out = run_ort(fused, feed, so=so)
                except NotRunnable:
                    raise
                except Exception as e:
                    if not _ort_optimizer_breaks(original, feed):
                        raise
                    # ORT's own graph optimizer breaks the unfused original as well:
                    # not the fuser's doing; compare with optimizations off.
                    notes.append(f"{what}: ORT's optimizer also fails on the original "
                                 f"({str(e).splitlines()[0][:120]}); ran with optimizations off")
                    out = run_ort(fused, feed, so=so, optimize=False)
            except NotRunnable as e:
                if ref_how == "ort":
                    raise AssertionError(f"{what}: ORT cannot run the fused model although it runs the original: {e}")
                if so is not None:
                    notes.append(f"{what}: not runnable on ORT CPU ({e})")
                    continue
                try:
                    via_ref = True
                    out = run_reference(fused, feed)
                except Exception as e2:  # noqa: BLE001
                    notes.append(f"{what}: neither ORT CPU nor onnx.reference can run it ({type(e2).__name__}: {e2})")
                    continue
            compare(ref, out, names, f"{what} vs original [{ref_how}]", via_ref)
    return notes


def assert_untouched(case_chains: list[Chain], original: onnx.ModelProto, fused: onnx.ModelProto,
                     fused_roots: set[str]) -> None:
    """Every node outside a fused chain is still there, identical; fused chains' nodes are gone."""
    fused_sigs = {}
    for n in iter_nodes(fused.graph):
        fused_sigs.setdefault(n.name, set()).add(node_signature(n))
    may_go, must_go = set(), set()
    for ch in case_chains:
        if ch.roots & fused_roots:
            may_go |= ch.aux | ch.nodes
            must_go |= ch.nodes
    for n in iter_nodes(original.graph):
        present = node_signature(n) in fused_sigs.get(n.name, ())
        if n.name in must_go:
            assert not present, f"node {n.name} ({n.op_type}) of a fused chain is still in the graph"
        elif n.name not in may_go:
            # node_signature leaves out subgraph bodies: their nodes are checked one by one
            assert present, f"node {n.name} ({n.op_type}) outside any fused chain was changed or removed"
    for a, b in ((original.graph.input, fused.graph.input), (original.graph.output, fused.graph.output)):
        assert [v.name for v in a] == [v.name for v in b], "graph inputs/outputs changed"
        for va, vb in zip(a, b):
            assert va.type.tensor_type.elem_type == vb.type.tensor_type.elem_type, f"type of {va.name} changed"


def model_key(m: onnx.ModelProto) -> bytes:
    parts = [m.graph.SerializeToString()] + [f.SerializeToString() for f in m.functions]
    parts += [o.SerializeToString() for o in m.opset_import]
    return b"\0".join(parts)


ORT_OPS = {"erf": {"com.microsoft.Gelu", "com.microsoft.BiasGelu"},
           "tanh": {"com.microsoft.FastGelu"}, "sigmoid": {"com.microsoft.QuickGelu"}}


def describe_fusions(fusions) -> str:
    return "; ".join(f"{f.op}@{f.graph or 'main'}:{f.root}(form={f.form},bias={f.bias},dtype={f.dtype})"
                     for f in fusions) or "none"


def check_fusions(case, key: str, fusions, outcomes=None) -> set[str]:
    """Fusions vs the case's chains for `key` (a target or 'inspect'); returns fused roots."""
    where = f"[{case.name} / {key}] fusions: {describe_fusions(fusions)}"
    seen: dict[int, object] = {}
    for f in fusions:
        ch = next((c for c in case.chains if f.root in c.roots), None)
        assert ch is not None, f"false fusion: root {f.root!r} is not the root of any GELU chain {where}"
        assert ch.expect[key] is not False, f"false fusion of the {ch.family} chain at {f.root!r} {where}"
        assert id(ch) not in seen, f"chain at {f.root!r} reported twice {where}"
        seen[id(ch)] = f
        assert f.form == ch.form, f"form {f.form} != {ch.form} {where}"
        assert f.graph == ch.graph, f"graph {f.graph!r} != {ch.graph!r} {where}"
        assert f.dtype in {ch.dtype} | ch.dtypes, f"dtype {f.dtype} != {ch.dtype} {where}"
        if ch.form == "sigmoid":
            assert f.alpha is not None and math.isclose(f.alpha, ch.consts["alpha"], rel_tol=1e-6), \
                f"alpha {f.alpha} != graph's {ch.consts['alpha']} {where}"
        if key == "custom":
            if ch.bias is not None:
                assert f.bias == ch.bias, f"bias {f.bias}, expected {ch.bias} {where}"
            assert f.op == f"{C.DOMAIN}.{C.OP_TYPES[(ch.form, f.bias)]}", f"op {f.op} {where}"
        elif key == "standard":
            assert ch.form != "sigmoid" and f.op == "Gelu", f"op {f.op} for a {ch.form} GELU {where}"
        elif key == "ort":
            assert f.op in ORT_OPS[ch.form], f"op {f.op} for a {ch.form} GELU {where}"
    missing = [c.family + "@" + (c.graph or "main") for c in case.chains if c.expect[key] and id(c) not in seen]
    assert not missing, f"GELU chains not fused: {missing} {where}"
    for c in case.chains:
        if c.expect[key] is None and outcomes is not None:
            outcomes[f"unspecified ({key})"].append(f"{case.name}: {'fused' if id(c) in seen else 'not fused'}")
    return {f.root for f in fusions}


def check_near_misses(case, near_misses, key):
    codes = {nm.code for nm in near_misses}
    for code in case.near_miss:
        assert code in codes, (f"[{case.name} / {key}] near-miss {code!r} not reported; got "
                               + "; ".join(f"{nm.code}: {nm.reason}" for nm in near_misses))
    for nm in near_misses:
        assert nm.reason and "\n" not in nm.reason, f"near-miss reason must be one sentence: {nm.reason!r}"


def _standard_refusal(case, target, err, outcomes) -> bool:
    if target != "standard" or case.opset >= C.STANDARD_GELU_OPSET:
        return False
    msg = str(err)
    assert msg and "\n" not in msg.strip(), f"refusal must be one clear line: {msg!r}"
    assert "opset" in msg.lower(), f"refusal must say it is about the opset: {msg!r}"
    outcomes["standard target below opset 20: refused"].append(f"{case.name}: {msg}")
    return True

def fuse_and_check(case, target: str, outcomes) -> object:
    """fuse_with_report(case.model, target) and every check of the corpus; returns the result
    (None when the standard target refused a model below opset 20, which is allowed)."""
    import gelu_onnx
    from gelu_onnx.errors import UnsupportedError

    before = case.model.SerializeToString()
    try:
        res = gelu_onnx.fuse_with_report(case.model, target=target)
    except UnsupportedError as e:
        if _standard_refusal(case, target, e, outcomes):
            return None
        raise
    assert case.model.SerializeToString() == before, "fuse_with_report modified its input model"
    if target == "standard" and case.opset < C.STANDARD_GELU_OPSET:
        outcomes["standard target below opset 20: upgraded"].append(case.name)
    roots = check_fusions(case, target, res.fusions, outcomes)
    check_near_misses(case, res.near_misses, target)
    m = res.model
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version <= ortlib.max_ir_version(), f"IR {m.ir_version}: the installed ORT cannot load it"
    assert_untouched(case.chains, case.model, m, roots)
    again = gelu_onnx.fuse_with_report(m, target=target)
    assert not again.fusions, f"second pass fused again: {describe_fusions(again.fusions)}"
    assert model_key(again.model) == model_key(m), "fuse(fuse(m)) differs from fuse(m)"
    for n in parity(case.model, m, seed_of(case.name), with_library=target == "custom"):
        outcomes["parity runs skipped"].append(f"{case.name} / {target}: {n}")
    return res
