"""The IR version a model needs: write the lowest, so older runtimes load it
(onnx >= 1.23 stamps IR 14 on everything)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto
from google.protobuf.message import EncodeError

from .format import ELEM_MIN_IR, MAX_PROTO_BYTES, elem_bits, tensor_embedded_bytes as _embedded
from . import wire
from .walk import attr_tensors, iter_graphs
from .wire import NF_DEVICE, NF_SUBGRAPH, NF_TENSOR, NF_TYPEPROTO


def _type_min_ir(tp, acc: list):
    which = tp.WhichOneof("value")
    if which is None:
        return
    if which == "opaque_type":
        acc.append(14)  # opaque types outside ONNX-ML builds: IR 14
        return
    inner = getattr(tp, which)
    if which in ("tensor_type", "sparse_tensor_type"):
        acc.append(ELEM_MIN_IR.get(inner.elem_type, 0))
    elif which in ("sequence_type", "optional_type"):
        _type_min_ir(inner.elem_type, acc)
    elif which == "map_type":
        _type_min_ir(inner.value_type, acc)


@dataclass
class ModelFacts:
    """What writing a model needs to know (docs/design.md, "The file pipeline")."""

    external: list  # the external tensors
    embedded: int  # bytes of tensor data stored inside the model
    min_ir: int | None  # the lowest IR its opsets and types allow (None: an opset unknown to this onnx)


def _opset_needs(model) -> tuple[list[int], bool]:
    """The IR versions the model's and its functions' opset imports need;
    known=False when onnx does not know one of them."""
    try:
        return [onnx.helper.find_min_ir_version_for(list(o.opset_import), ignore_unknown=True)
                for o in (model, *model.functions)], True
    except ValueError:
        return [], False


def _attr_type_needs(n, need: list) -> None:
    for a in n.attribute:
        for tp in (*([a.tp] if a.HasField("tp") else []), *a.type_protos):
            _type_min_ir(tp, need)


def _function_needs(model, tensors: list, need: list) -> None:
    """Model-local functions' tensors (into ``tensors``) and types, and the
    model's configuration (IR 11), into ``need``."""
    for f in model.functions:
        for n in f.node:
            tensors += attr_tensors(n.attribute)
        tensors += attr_tensors(f.attribute_proto)
        for vi in getattr(f, "value_info", ()):
            _type_min_ir(vi.type, need)
    if len(getattr(model, "configuration", ())):
        need.append(11)


def model_facts(model: onnx.ModelProto) -> ModelFacts:
    """One walk over every graph and tensor (writing takes it once, not four times)."""
    need, known = _opset_needs(model)
    tensors: list = []  # what iter_tensors yields, gathered in the same walk
    configured = "device_configurations" in onnx.NodeProto.DESCRIPTOR.fields_by_name
    for _, g in iter_graphs(model):
        tensors += g.initializer
        for st in g.sparse_initializer:
            tensors += (st.values, st.indices)
        for vi in (*g.input, *g.output, *g.value_info):
            _type_min_ir(vi.type, need)
        for n in g.node:
            if n.attribute:
                tensors += attr_tensors(n.attribute)
                _attr_type_needs(n, need)
            if configured and len(n.device_configurations):
                need.append(11)
    _function_needs(model, tensors, need)
    external = [t for t in tensors if t.data_location == TensorProto.EXTERNAL]
    total = sum(_embedded(t) for t in tensors if t.data_location != TensorProto.EXTERNAL)
    need.extend(ELEM_MIN_IR.get(dt, 0) for dt in {t.data_type for t in tensors})
    return ModelFacts(external, total, max(3, *need) if known else None)


def serialized_facts(model: onnx.ModelProto) -> tuple[bytes | None, ModelFacts]:
    """(the model serialized, its ModelFacts): from the native scanner's
    arrays of those bytes when it maps them (kept for speed: docs/design.md,
    "The file pipeline"); else model_facts (bytes None when the model does
    not serialize, e.g. over 2 GB)."""
    try:
        data = model.SerializeToString()
    except (EncodeError, ValueError):
        return None, model_facts(model)
    s = wire.scan(data)
    facts = _scanned_facts(model, s) if s is not None else None
    return data, facts if facts is not None else model_facts(model)


def _scanned_facts(model: onnx.ModelProto, s) -> ModelFacts | None:
    """model_facts from a scan of the model's bytes: the main graph's tensors
    from the arrays (the attributes they do not size parsed from the bytes they
    point at), functions and value infos as model_facts reads them. None for a
    model with subgraphs (or external attribute tensors)."""
    if (s.node_flags & NF_SUBGRAPH).any():
        return None
    g = model.graph
    need, known = _opset_needs(model)
    for vi in (*g.input, *g.output, *g.value_info):
        _type_min_ir(vi.type, need)
    tensors: list = []  # function tensors, and the tensors the arrays do not size
    init, at = s.tensors("init_"), s.tensors("at_")
    init_plain, init_bytes = _sized(init)
    at_plain, at_bytes = _sized(at)
    # attributes whose every tensor is sized from the arrays, and that hold no type
    sized_attr = np.zeros(len(s.attr_flags), bool)
    sized_attr[s.at_attr[at_plain]] = True
    sized_attr &= (s.attr_flags & NF_TYPEPROTO) == 0
    at_plain &= sized_attr[s.at_attr]
    held = np.flatnonzero(((s.attr_flags & (NF_TENSOR | NF_TYPEPROTO)) != 0) & ~sized_attr)
    if len(held):
        # the other attributes holding a tensor or a type, parsed at once as
        # one node's attributes (their field bytes as written), not node by node
        holder = onnx.NodeProto.FromString(b"".join(
            s.data[a:b] for a, b in zip(s.attr_start[held].tolist(), s.attr_end[held].tolist())))
        tensors += attr_tensors(holder.attribute)
        _attr_type_needs(holder, need)
        if any(t.data_location == TensorProto.EXTERNAL for t in tensors):
            return None  # the model's own tensors, not the holder's copies, for writing
    if (s.node_flags & NF_DEVICE).any():
        need.append(11)
    _function_needs(model, tensors, need)
    embedded = sum(init_bytes[init_plain].tolist()) + sum(at_bytes[at_plain].tolist())  # exact: no int64 overflow
    tensors += [g.initializer[k] for k in np.flatnonzero(~init_plain).tolist()]
    external = [t for t in tensors if t.data_location == TensorProto.EXTERNAL]
    embedded += sum(_embedded(t) for t in tensors if t.data_location != TensorProto.EXTERNAL)
    dtypes = {t.data_type for t in tensors}.union(np.unique(np.concatenate([init.dtype, at.dtype[at_plain]])).tolist())
    need.extend(ELEM_MIN_IR.get(dt, 0) for dt in dtypes)
    return ModelFacts(external, embedded, max(3, *need) if known else None)


def _sized(cols):
    """(plain, bytes): which tensors of ``cols`` (a wire.TensorColumns) are
    sized from the arrays alone (stored inside the file, no string_data),
    and each one's tensor_embedded_bytes (int64)."""
    bits = elem_bits(cols.dtype)
    typed = cols.typed
    # under 2^45 elements: the float64 products below are exact for any element width
    plain = (cols.loc == 0) & (typed[:, 2] == 0) & (np.abs(cols.count) < 2.0 ** 45)
    count = np.where(plain, cols.count, 0)
    nbytes = np.where(bits >= 0, np.ceil(count * np.maximum(bits, 0) / 8), cols.raw_len).astype(np.int64)
    return plain, (np.where(cols.raw_len >= 0, nbytes, 0) + 4 * (typed[:, 0] + typed[:, 1])
                   + 8 * (typed[:, 3] + typed[:, 4] + typed[:, 5]))


# ModelFacts.min_ir covers every feature added from IR 11 on (new element
# types, opaque types, multi-device configs; IR 10's function overloads and
# metadata are not checked), so models are never lowered below it.
IR_FLOOR = 11


def checkable_in_memory(model: onnx.ModelProto, facts: ModelFacts | None = None) -> bool:
    """Whether onnx.checker can take the model object itself: no external
    data (the checker resolves it relative to a file) and room under
    protobuf's 2 GB (not ByteSize(): upb serializes the whole model for it).
    Otherwise it is checked as a file, after writing."""
    facts = facts or model_facts(model)
    return not facts.external and facts.embedded < MAX_PROTO_BYTES - (64 << 20)


def lowest_ir_version(model: onnx.ModelProto, facts: ModelFacts | None = None) -> int | None:
    """The lowest IR version ``model`` can be written with (at least
    ``IR_FLOOR``, or the newest this onnx knows when that is older: onnx 1.16
    knows IR 10); None when one of its opsets is unknown to this onnx."""
    need = (facts or model_facts(model)).min_ir
    return None if need is None else max(need, min(IR_FLOOR, onnx.IR_VERSION))


def lower_ir_version(model: onnx.ModelProto, facts: ModelFacts | None = None) -> int | None:
    """Lower model.ir_version (in place) to lowest_ir_version (never raise it);
    the old version when lowered, else None."""
    low = lowest_ir_version(model, facts)
    if low is None or model.ir_version <= low:
        return None
    old, model.ir_version = model.ir_version, low
    return old
