"""The reference run of ``check``: the original model run more precisely.

The verdict (gelu_onnx.verify.verdict) judges the fused model by how far it
is from this run compared with how far the original itself is. The
reference is the original's graph with every float tensor retyped: float32
for an fp16/bf16 model (2^13 times finer than fp16: ample, at half of
float64's memory), float64 for a float32 one - run on the CPU with ONNX
Runtime's graph optimizations off (no fused kernels; no TF32: the CPU has
none). Retyping keeps the graph: initializers, Constant values, Cast / dtype
attributes, graph inputs and outputs change type, nothing else; value_info
is dropped (ONNX Runtime infers it). A node ONNX Runtime cannot run in the
copy's type (Erf, Conv, Gelu-20, com.microsoft ops, Q/DQ in float64) runs in
float32 between two Casts: which ones is asked of ONNX Runtime on a copy
without the weights (gelu_onnx.verify.kernel_coverage); the report names
them. A copy whose weights would exceed contract.REFERENCE_MAX_BYTES is not
made (the check holds it, its bytes and ONNX Runtime's copy at once). When
no copy runs, the original itself (on the CPU, optimizations off) is the
reference, with a warning in full words; when not even that runs, the check
judges by the fixed tolerances.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import contract
from ..errors import InputError, UnsupportedError
from ..onnxio import tensor_array
from . import kernel_coverage, weights
from .inputs import is_bf16

_FLOATS = (TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE)
_NAMES = {TensorProto.DOUBLE: "float64", TensorProto.FLOAT: "float32"}
# ops whose output type is an attribute
_DTYPE_ATTR = {"EyeLike": "dtype", "RandomNormal": "dtype", "RandomNormalLike": "dtype", "RandomUniform": "dtype",
               "RandomUniformLike": "dtype", "Bernoulli": "dtype", "Multinomial": "dtype"}
_ORT_PREFIX = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_WHY_MAX = 400  # characters of a failure's first line kept in a note (cut between words)
_PROBE_MIN = 1024  # initializers this large become inputs of the type probe


@dataclass
class Reference:
    """How the reference ran: ``dtype`` float64 / float32 / 'original';
    ``islands``: op types run in float32 inside a float64 reference."""

    runner: object
    dtype: str
    islands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    feed_dtype: np.dtype | None = None  # float feeds are cast to it
    warnings: list[str] = field(default_factory=list)  # the original itself is the reference

    @property
    def label(self) -> str:
        if self.dtype == "none":
            return "none: judged by the fixed tolerances"
        if self.dtype == "original":
            return "the original itself (CPU, optimizations off)"
        isl = f" ({', '.join(self.islands)} in float32)" if self.islands else ""
        return f"the original in {self.dtype}{isl} (CPU, optimizations off)"

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.runner.run({k: self._cast(v) for k, v in feeds.items() if k in self.runner.input_names})

    def _cast(self, v: np.ndarray) -> np.ndarray:
        v = np.asarray(v)
        if self.feed_dtype is not None and (v.dtype.kind == "f" or is_bf16(v)):
            return v.astype(self.feed_dtype)
        return v


def retyped(model: onnx.ModelProto, to: int, base_dir: str | None = None,
            plan: kernel_coverage.Plan | None = None) -> onnx.ModelProto:
    """A copy of ``model`` with every float tensor of a type in ``_FLOATS``
    retyped to ``to`` (float32: only the 16-bit ones); ``plan``: the nodes
    that run in another type between Casts (gelu_onnx.verify.kernel_coverage)."""
    src = (TensorProto.FLOAT16, TensorProto.BFLOAT16) + ((TensorProto.FLOAT,) if to == TensorProto.DOUBLE else ())
    m = onnx.ModelProto()
    m.CopyFrom(model)
    np_to = np.float64 if to == TensorProto.DOUBLE else np.float32
    plan = plan or kernel_coverage.Plan()

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_type in src:
            # onnxio's reader: onnx's own cannot open external data under a folder whose name is not UTF-8
            a = tensor_array(t, base_dir).astype(np_to)
            t.CopyFrom(numpy_helper.from_array(a, t.name))

    def graph(g: onnx.GraphProto, main: bool = False) -> None:
        for t in g.initializer:
            tensor(t)
        for t in g.sparse_initializer:
            tensor(t.values)
        for vi in list(g.input) + list(g.output):
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.elem_type in src:
                tt.elem_type = to
        del g.value_info[:]
        nodes(g.node)
        islands = dict(plan.nodes) if main else {}
        for k, n in enumerate(g.node):
            dt = plan.op_types.get((n.domain, n.op_type))
            if k not in islands and dt is not None and not any(
                    a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
                islands[k] = kernel_coverage.Island(dt, (True,) * len(n.input), (True,) * len(n.output))
        if islands:
            _islands(g.node, islands, to)

    def nodes(ns) -> None:
        for n in ns:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sg in a.graphs:
                        graph(sg)
                elif a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                elif a.type == onnx.AttributeProto.INT and (
                        (n.op_type == "Cast" and a.name == "to") or _DTYPE_ATTR.get(n.op_type) == a.name):
                    if a.i in src:
                        a.i = to
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                _constant_floats(n, np_to)
            if n.op_type == "ConstantOfShape" and not any(a.name == "value" for a in n.attribute):
                n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1, np_to))))

    graph(m.graph, main=True)
    for f in m.functions:
        nodes(f.node)
        isl = {k: kernel_coverage.Island(plan.op_types[(n.domain, n.op_type)], (True,) * len(n.input),
                                         (True,) * len(n.output))
               for k, n in enumerate(f.node) if (n.domain, n.op_type) in plan.op_types}
        if isl:
            _islands(f.node, isl, to)
    return m


def retyped_lean(model: onnx.ModelProto, to: int, base_dir: str | None = None,
                 plan: kernel_coverage.Plan | None = None) -> onnx.ModelProto:
    """``retyped``, with the main graph's large float initializers left as
    they are (in their file) and widened by Cast nodes ONNX Runtime runs
    (gelu_onnx.verify.weights): the same values, without a copy of the
    weights in memory (BERT-base fp32 -> float64: 0.9 GB less)."""
    src = (TensorProto.FLOAT16, TensorProto.BFLOAT16) + ((TensorProto.FLOAT,) if to == TensorProto.DOUBLE else ())
    rest, big = weights.split(model, src)
    m = retyped(rest, to, base_dir, plan)
    weights.cast_in(m, big, to)
    return m


def _constant_floats(n: onnx.NodeProto, np_to) -> None:
    """value_float(s) make a float32 Constant: make it a tensor of ``np_to``."""
    for a in list(n.attribute):
        if a.name in ("value_float", "value_floats"):
            v = np.asarray(a.f if a.name == "value_float" else list(a.floats), np.float32).astype(np_to)
            n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(v)))


def _islands(ns, islands: dict, to: int) -> None:
    """Rewrite the node list ``ns``: node k of ``islands`` reads its float
    inputs Cast to the island's type and writes its float outputs through a
    Cast back to ``to``."""
    out = []
    for k, n in enumerate(ns):
        isl = islands.get(k)
        if isl is None:
            out.append(n)
            continue
        tag = f"__gelu_onnx_island_{k}"
        for i, x in enumerate(n.input):
            if x and i < len(isl.ins) and isl.ins[i]:
                n.input[i] = x + tag
                out.append(helper.make_node("Cast", [x], [n.input[i]], to=isl.dtype))
        out.append(n)
        for i, y in enumerate(n.output):
            if y and i < len(isl.outs) and isl.outs[i]:
                n.output[i] = y + tag
                out.append(helper.make_node("Cast", [n.output[i]], [y], to=to))
    del ns[:]
    ns.extend(out)


def _float_types(model: onnx.ModelProto) -> set[int]:
    from ..onnxio.walk import walk_graphs

    types = {t.data_type for g in walk_graphs(model.graph) for t in g.initializer}
    types |= {vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)}
    return types & set(_FLOATS)


def _beside(m: onnx.ModelProto, loaded):
    """The copy as a LoadedModel whose external data (the tensors it did not
    retype) resolve in the original's folder."""
    from .runners import load

    return load(m, base_dir=loaded.base_dir)


def _float_bytes(model: onnx.ModelProto, to: int) -> int:
    """Bytes of the main graph's float initializers once retyped to ``to``."""
    item = 8 if to == TensorProto.DOUBLE else 4
    return sum(int(np.prod(t.dims)) * item for t in model.graph.initializer if t.data_type in _FLOATS)


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without its large initializers (graph inputs of the same
    type and shape instead): a session of it finds the missing kernels
    without copying the weights (BERT-base in float64: 0.2 s, not 13 s)."""
    g = model.graph
    sk = onnx.ModelProto(ir_version=model.ir_version, opset_import=list(model.opset_import),
                         functions=list(model.functions))
    sg = sk.graph
    sg.name = "skeleton"  # not g.name: a name that is not UTF-8 cannot be read as str
    sg.node.extend(g.node)
    sg.input.extend(g.input)
    sg.output.extend(g.output)
    sg.value_info.extend(g.value_info)
    sg.sparse_initializer.extend(g.sparse_initializer)
    have = {i.name for i in g.input}
    for t in g.initializer:
        if int(np.prod(t.dims)) < _PROBE_MIN:
            sg.initializer.append(t)
        elif t.name not in have:
            sg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return sk


def why(e: BaseException) -> str:
    """What a failed copy's error says, in whole words: its first line
    without ONNX Runtime's status prefix, never cut inside a word."""
    msg = e.message if isinstance(e, (InputError, UnsupportedError)) else str(e)
    line = (msg.strip().splitlines() or [type(e).__name__])[0]
    line = _ORT_PREFIX.sub("", line).strip()
    if len(line) > _WHY_MAX:
        line = line[:_WHY_MAX].rsplit(" ", 1)[0] + " (...)"
    return line


def build(loaded, make_runner, feeds: Mapping[str, np.ndarray]) -> Reference:
    """The most precise reference that runs on ``feeds``.

    ``loaded``: the original (onnxio.LoadedModel); ``make_runner(model)``:
    a CPU runner at optimization level 'disable' (ModelProto or LoadedModel
    in, ``run(feeds)`` out). An fp16/bf16 model: float32, then float64; a
    float32 one: float64; each with the islands ONNX Runtime needs
    (gelu_onnx.verify.kernel_coverage); then the original, with a warning;
    each failure to build or run moves to the next. When none runs,
    ``dtype`` is 'none' (the check falls back to fixed bounds)."""
    types = _float_types(loaded.model)
    notes: list[str] = []
    failed: list[str] = []
    half = bool(types & {TensorProto.FLOAT16, TensorProto.BFLOAT16})
    sk = sk32 = None

    def probe_runner(m):
        return make_runner(_beside(m, loaded))

    for to in ([TensorProto.FLOAT] if half else []) + [TensorProto.DOUBLE]:
        size = _float_bytes(loaded.model, to)
        if size > contract.REFERENCE_MAX_BYTES:
            notes.append(f"a {_NAMES[to]} copy of the original would hold {size / 2**30:.1f} GiB of weights "
                         f"(more than {contract.REFERENCE_MAX_BYTES / 2**30:g} GiB): not made")
            failed.append(f"the {_NAMES[to]} copy would be too large")
            continue
        try:
            if sk is None:
                sk = skeleton(loaded.model)
                sk32 = retyped(sk, TensorProto.FLOAT, loaded.base_dir)
            cands = (TensorProto.FLOAT,) if to == TensorProto.DOUBLE else tuple(
                t for t in (TensorProto.FLOAT16, TensorProto.BFLOAT16) if t in types)
            sk_to = sk32 if to == TensorProto.FLOAT else retyped(sk, to, loaded.base_dir)
            plan = kernel_coverage.plan(sk_to, sk32, to, cands, probe_runner)
            m = retyped_lean(loaded.model, to, loaded.base_dir, plan)
            ref = Reference(make_runner(_beside(m, loaded)), _NAMES[to], plan.labels(loaded.model), notes,
                            np.dtype(np.float64 if to == TensorProto.DOUBLE else np.float32))
            ref.run(feeds)  # a kernel may be missing only at run time
            notes += plan.notes
            return ref
        except Exception as e:  # noqa: BLE001 - any failure: the next, less precise reference
            reason = why(e)
            notes.append(f"the {_NAMES[to]} copy of the original does not run on the CPU: {reason}")
            failed.append(f"the {_NAMES[to]} copy: {reason}")
    loud = ("the reference is the original itself, not a more precise copy of it ("
            + "; ".join(failed) + "). The verdict then takes the original's own rounding error as zero and "
            "judges the fused model by a few ulp of the output alone: a deep fp16 or bf16 model may fail on "
            "rounding alone, and the report cannot say which model is the more accurate (docs/verdict.md)")
    try:
        ref = Reference(make_runner(loaded), "original", [], notes, warnings=[loud])
        ref.run(feeds)
        return ref
    except (InputError, UnsupportedError) as e:
        notes.append(f"the original does not run without graph optimizations ({why(e)}): "
                     "outputs are judged by the fixed tolerances")
        return Reference(None, "none", [], notes)
