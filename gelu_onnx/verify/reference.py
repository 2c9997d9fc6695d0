"""The reference run of ``check``: the original model run more precisely.

The verdict (gelu_onnx.verify.verdict) judges the fused model by how far it
is from this run compared with how far the original itself is. The
reference is the original's graph with every float tensor retyped: float32
for an fp16/bf16 model (2^13 times finer than fp16: ample, at half of
float64's memory), float64 for a float32 one - run on the CPU with ONNX
Runtime's graph optimizations off (no fused kernels; no TF32: the CPU has
none). Retyping keeps the graph: initializers, Constant values, Cast / dtype
attributes, graph inputs and outputs change type, nothing else; value_info
is dropped (ONNX Runtime infers it). An op the CPU EP has no float64 kernel
for (ONNX Runtime 1.32: Erf, so every erf GELU, and Conv) runs in float32
between two Casts, found first on a copy without the weights; the report
says so. A copy whose weights would exceed contract.REFERENCE_MAX_BYTES is
not made (the check holds it, its bytes and ONNX Runtime's copy at once).
When no copy runs, the original itself (on the CPU, optimizations
off) is the reference, and the report says that; when not even that runs,
the check judges by the fixed tolerances.
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
from . import weights
from .inputs import is_bf16

_FLOATS = (TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE)
_NAMES = {TensorProto.DOUBLE: "float64", TensorProto.FLOAT: "float32"}
# ops whose output type is an attribute
_DTYPE_ATTR = {"EyeLike": "dtype", "RandomNormal": "dtype", "RandomNormalLike": "dtype", "RandomUniform": "dtype",
               "RandomUniformLike": "dtype", "Bernoulli": "dtype", "Multinomial": "dtype"}
_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\(\d+\)")
# islands in float32 for ops without a float64 kernel: one op type per retry;
# unary ops, and these, whose every input and output is a float tensor
_MAX_ISLANDS = 6
_PROBE_MIN = 1024  # initializers this large become inputs of the kernel probe
_ALL_FLOAT = {"Conv", "ConvTranspose", "InstanceNormalization", "BatchNormalization", "GroupNormalization",
              "LayerNormalization", "Gemm", "MatMul"}


@dataclass
class Reference:
    """How the reference ran: ``dtype`` float64 / float32 / 'original';
    ``islands``: op types run in float32 inside a float64 reference."""

    runner: object
    dtype: str
    islands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    feed_dtype: np.dtype | None = None  # float feeds are cast to it

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
            islands: tuple[str, ...] = ()) -> onnx.ModelProto:
    """A copy of ``model`` with every float tensor of a type in ``_FLOATS``
    retyped to ``to`` (float32: only the 16-bit ones); ``islands``: op types
    that run in float32 between Casts (unary ops only)."""
    src = (TensorProto.FLOAT16, TensorProto.BFLOAT16) + ((TensorProto.FLOAT,) if to == TensorProto.DOUBLE else ())
    m = onnx.ModelProto()
    m.CopyFrom(model)
    np_to = np.float64 if to == TensorProto.DOUBLE else np.float32

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_type in src:
            a = numpy_helper.to_array(t, base_dir or "").astype(np_to)
            t.CopyFrom(numpy_helper.from_array(a, t.name))

    def graph(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            tensor(t)
        for t in g.sparse_initializer:
            tensor(t.values)
        for vi in list(g.input) + list(g.output):
            tt = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and tt.elem_type in src:
                tt.elem_type = to
        del g.value_info[:]
        nodes(g.node, g)

    def nodes(ns, g) -> None:
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
        if g is not None and islands:
            _islands(g, islands)

    graph(m.graph)
    for f in m.functions:
        nodes(f.node, None)
    return m


def retyped_lean(model: onnx.ModelProto, to: int, base_dir: str | None = None,
                 islands: tuple[str, ...] = ()) -> onnx.ModelProto:
    """``retyped``, with the main graph's large float initializers left as
    they are (in their file) and widened by Cast nodes ONNX Runtime runs
    (gelu_onnx.verify.weights): the same values, without a copy of the
    weights in memory (BERT-base fp32 -> float64: 0.9 GB less)."""
    src = (TensorProto.FLOAT16, TensorProto.BFLOAT16) + ((TensorProto.FLOAT,) if to == TensorProto.DOUBLE else ())
    rest, big = weights.split(model, src)
    m = retyped(rest, to, base_dir, islands)
    weights.cast_in(m, big, to)
    return m


def _constant_floats(n: onnx.NodeProto, np_to) -> None:
    """value_float(s) make a float32 Constant: make it a tensor of ``np_to``."""
    for a in list(n.attribute):
        if a.name in ("value_float", "value_floats"):
            v = np.asarray(a.f if a.name == "value_float" else list(a.floats), np.float32).astype(np_to)
            n.attribute.remove(a)
            n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(v)))


def _islands(g: onnx.GraphProto, ops: tuple[str, ...]) -> None:
    out = []
    for k, n in enumerate(g.node):
        if n.op_type not in ops or not (len(n.input) == 1 or n.op_type in _ALL_FLOAT):
            out.append(n)
            continue
        tag = f"__gelu_onnx_f32_{k}"
        for i, x in enumerate(n.input):
            if x:
                n.input[i] = x + tag
                out.append(helper.make_node("Cast", [x], [n.input[i]], to=TensorProto.FLOAT))
        out.append(n)
        for i, y in enumerate(n.output):
            if y:
                n.output[i] = y + tag
                out.append(helper.make_node("Cast", [n.output[i]], [y], to=TensorProto.DOUBLE))
    del g.node[:]
    g.node.extend(out)


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


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
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


def _missing_kernels(loaded, make_runner, to: int) -> list[str]:
    """The op types the CPU EP has no ``to`` kernel for, found on the skeleton."""
    islands: list[str] = []
    sk = _skeleton(loaded.model)
    while len(islands) < _MAX_ISLANDS:
        try:
            make_runner(_beside(retyped(sk, to, loaded.base_dir, tuple(islands)), loaded))
            break
        except Exception as e:  # noqa: BLE001 - the full copy's own try says what failed
            miss = _NO_KERNEL.search(e.message if isinstance(e, (InputError, UnsupportedError)) else str(e))
            if not miss or miss.group(1) in islands:
                break
            islands.append(miss.group(1))
    return islands


def build(loaded, make_runner, feeds: Mapping[str, np.ndarray]) -> Reference:
    """The most precise reference that runs on ``feeds``.

    ``loaded``: the original (onnxio.LoadedModel); ``make_runner(model)``:
    a CPU runner at optimization level 'disable' (ModelProto or LoadedModel
    in, ``run(feeds)`` out). An fp16/bf16 model: float32, then float64; a
    float32 one: float64 (op types without a float64 kernel in float32
    islands); then the original; each failure to build or run moves to the
    next. When none runs, ``dtype`` is 'none' (the check falls back to fixed
    bounds)."""
    types = _float_types(loaded.model)
    notes: list[str] = []
    half = bool(types & {TensorProto.FLOAT16, TensorProto.BFLOAT16})
    for to in ([TensorProto.FLOAT] if half else []) + [TensorProto.DOUBLE]:
        size = _float_bytes(loaded.model, to)
        if size > contract.REFERENCE_MAX_BYTES:
            notes.append(f"a {_NAMES[to]} copy of the original would hold {size / 2**30:.1f} GiB of weights "
                         f"(more than {contract.REFERENCE_MAX_BYTES / 2**30:g} GiB): not made")
            continue
        islands = _missing_kernels(loaded, make_runner, to) if to == TensorProto.DOUBLE else []
        try:
            m = retyped_lean(loaded.model, to, loaded.base_dir, tuple(islands))
            ref = Reference(make_runner(_beside(m, loaded)), _NAMES[to], islands, notes,
                            np.dtype(np.float64 if to == TensorProto.DOUBLE else np.float32))
            ref.run(feeds)  # a kernel may be missing only at run time
            return ref
        except Exception as e:  # noqa: BLE001 - any failure: the next, less precise reference
            msg = e.message if isinstance(e, (InputError, UnsupportedError)) else str(e)
            why = msg.splitlines()[0][:160] if msg else type(e).__name__
            notes.append(f"the {_NAMES[to]} copy of the original does not run on the CPU ({why})")
    try:
        ref = Reference(make_runner(loaded), "original", [], notes)
        ref.run(feeds)
        return ref
    except (InputError, UnsupportedError) as e:
        notes.append(f"the original does not run without graph optimizations ({e.message[:160]}): "
                     "outputs are judged by the fixed tolerances")
        return Reference(None, "none", [], notes)
