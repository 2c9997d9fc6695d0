"""The reference run of ``check``: the original model run more precisely, by
which the verdict (gelu_onnx.verify.verdict) judges both models. What it is,
why, and what it costs: docs/verdict.md, "The reference run".
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
from ..onnxio.walk import subgraphs, walk_graphs
from . import kernel_coverage
from .arrayfiles import first_line
from .inputs import is_bf16
from .runners import load
from .weights import cast_in, skeleton, split

_FLOATS = set(contract.FLOAT_DTYPES)
_NAMES = {TensorProto.DOUBLE: "float64", TensorProto.FLOAT: "float32"}
# ops whose output type is an attribute
_DTYPE_ATTR = {"EyeLike": "dtype", "RandomNormal": "dtype", "RandomNormalLike": "dtype", "RandomUniform": "dtype",
               "RandomUniformLike": "dtype", "Bernoulli": "dtype", "Multinomial": "dtype"}
_ORT_PREFIX = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_WHY_MAX = 400  # characters of a failure's first line kept in a note (cut between words)


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
    first: dict | None = None  # the outputs of the trial run on the first feeds (the check's first iteration)

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


def _sources(to: int) -> tuple[int, ...]:
    """The elem types a copy in ``to`` retypes (float32: only the 16-bit ones)."""
    return (TensorProto.FLOAT16, TensorProto.BFLOAT16) + ((TensorProto.FLOAT,) if to == TensorProto.DOUBLE else ())


def retyped(model: onnx.ModelProto, to: int, base_dir: str | None = None,
            plan: kernel_coverage.Plan | None = None) -> onnx.ModelProto:
    """A copy of ``model`` with every float tensor of a type in ``_sources(to)``
    retyped to ``to``; ``plan``: the nodes that run in another type between
    Casts (gelu_onnx.verify.kernel_coverage)."""
    src = _sources(to)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    np_to = helper.tensor_dtype_to_np_dtype(to)
    plan = plan or kernel_coverage.Plan()

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_type in src:
            # onnxio's reader: onnx's own cannot open external data under a folder whose name is not UTF-8
            t.CopyFrom(numpy_helper.from_array(tensor_array(t, base_dir).astype(np_to), t.name))

    def graph(g: onnx.GraphProto, islands: dict) -> None:
        for t in g.initializer:
            tensor(t)
        for t in g.sparse_initializer:
            tensor(t.values)
        for vi in list(g.input) + list(g.output):
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type in src:
                vi.type.tensor_type.elem_type = to
        del g.value_info[:]
        body(g.node, islands)

    def body(ns, islands: dict) -> None:
        for n in ns:
            for _, sg in subgraphs(n):
                graph(sg, {})
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                elif a.type == onnx.AttributeProto.INT and a.i in src and (
                        (n.op_type == "Cast" and a.name == "to") or _DTYPE_ATTR.get(n.op_type) == a.name):
                    a.i = to
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                _constant_floats(n, np_to)
            if n.op_type == "ConstantOfShape" and not any(a.name == "value" for a in n.attribute):
                n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(np.zeros(1, np_to))))
        for k, n in enumerate(ns):  # by op type: in bodies and functions (kernel_coverage.Plan)
            dt = plan.op_types.get((n.domain, n.op_type))
            if k not in islands and dt is not None and not any(subgraphs(n)):
                islands[k] = kernel_coverage.Island(dt, (True,) * len(n.input), (True,) * len(n.output))
        if islands:
            _islands(ns, islands, to)

    graph(m.graph, dict(plan.nodes))
    for f in m.functions:
        body(f.node, {})
    return m


def retyped_lean(model: onnx.ModelProto, to: int, base_dir: str | None = None,
                 plan: kernel_coverage.Plan | None = None) -> onnx.ModelProto:
    """``retyped``, with the main graph's big float initializers left as they
    are (in their file) and widened by Cast nodes ONNX Runtime runs
    (gelu_onnx.verify.weights): the same values, without a copy of the
    weights in memory (BERT-base fp32 -> float64: 0.9 GB less)."""
    rest, big = split(model, _sources(to))
    m = retyped(rest, to, base_dir, plan)
    cast_in(m, big, to)
    return m


def _constant_floats(n: onnx.NodeProto, np_to) -> None:
    """value_float(s) make a float32 Constant: make it a tensor of ``np_to``."""
    for a in list(n.attribute):
        if a.name in ("value_float", "value_floats"):
            v = np.asarray(a.f if a.name == "value_float" else list(a.floats), np.float32).astype(np_to)
            n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(v)))


def _islands(ns, islands: dict, to: int) -> None:
    """Node k of ``islands`` reads its float inputs Cast to its type, writes its outputs Cast back to ``to``."""
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
    types = {t.data_type for g in walk_graphs(model.graph) for t in g.initializer}
    types |= {vi.type.tensor_type.elem_type for vi in list(model.graph.input) + list(model.graph.output)}
    return types & _FLOATS


def _float_bytes(model: onnx.ModelProto, to: int) -> int:
    """Bytes of the main graph's float initializers once retyped to ``to``."""
    item = helper.tensor_dtype_to_np_dtype(to).itemsize
    return sum(int(np.prod(t.dims)) * item for t in model.graph.initializer if t.data_type in _FLOATS)


def why(e: BaseException) -> str:
    """A failed copy's error in whole words: its first line without ONNX Runtime's status prefix."""
    line = _ORT_PREFIX.sub("", first_line(e)).strip()
    if len(line) > _WHY_MAX:
        line = line[:_WHY_MAX].rsplit(" ", 1)[0] + " (...)"
    return line


def build(loaded, make_runner, feeds: Mapping[str, np.ndarray]) -> Reference:
    """The most precise reference that runs on ``feeds``: for an fp16/bf16
    model float32, then float64; for a float32 one float64; each with the
    islands ONNX Runtime needs (gelu_onnx.verify.kernel_coverage); then the
    original, with a warning; each failure moves to the next. When none runs,
    ``dtype`` is 'none' (the check falls back to fixed bounds).
    ``make_runner(model)``: a CPU runner at optimization level 'disable'."""
    types = _float_types(loaded.model)
    notes, failed = [], []
    half = bool(types & {TensorProto.FLOAT16, TensorProto.BFLOAT16})
    sk = sk32 = None

    def beside(m):  # the copy's external data (what it did not retype) resolve in the original's folder
        return make_runner(load(m, base_dir=loaded.base_dir))

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
            plan = kernel_coverage.plan(sk_to, sk32, to, cands, beside)
            m = retyped_lean(loaded.model, to, loaded.base_dir, plan)
            ref = Reference(beside(m), _NAMES[to], plan.labels(loaded.model), notes,
                            helper.tensor_dtype_to_np_dtype(to))
            ref.first = ref.run(feeds)  # a kernel may be missing only at run time
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
        ref.first = ref.run(feeds)
        return ref
    except (InputError, UnsupportedError) as e:
        notes.append(f"the original does not run without graph optimizations ({why(e)}): "
                     "outputs are judged by the fixed tolerances")
        return Reference(None, "none", [], notes)
