"""The native model scanner (plugins/scan, gelu_onnx/onnxio/wire.py) against
onnx's own parser: every bundled export, the hand-built GELU corpus, and
seeded mutations of them. Where both accept the bytes, they read the same
nodes, names, initializers and graph inputs/outputs; the scanner never
crashes (the C++ under ASan/UBSan: tests/native/scan/scan_fuzz.cpp)."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from gelu_onnx.onnxio import wire
from gelu_onnx.onnxio.format import LEN, Malformed, Source, field_key, iter_fields, varint
from gelu_onnx.onnxio.wire import OK

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted((ROOT / "models").glob("*.onnx"))
SCAN = ROOT / "plugins" / "scan"


def test_the_scanner_is_built():
    """CMake builds it always (no dependencies); the fuse pass needs it."""
    assert wire.built(), "libgelu_onnx_scan.so is not built (pip install . builds it)"


def test_without_the_scanner_fuse_fails_clearly_and_info_says_so(tmp_path):
    """A build that lost its scanner: one line and exit 3 from fuse (nothing
    written), and gelu-onnx info names what is missing."""
    env = {**os.environ, wire.ENV_LIBRARY: str(tmp_path / "no-such-library.so")}
    dst = tmp_path / "out.onnx"
    run = subprocess.run([sys.executable, "-m", "gelu_onnx", "fuse", str(MODELS[0]), "-o", str(dst)],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 3 and not dst.exists()
    assert run.stderr.count("\n") == 1 and wire.LIBRARY in run.stderr and "is not built" in run.stderr
    info = subprocess.run([sys.executable, "-m", "gelu_onnx", "info"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert "native model scanner (required): no" in info.stdout and wire.LIBRARY in info.stdout


def _agree(data: bytes, s) -> None:
    """The scan ``s`` of ``data`` reads what onnx reads."""
    m = onnx.ModelProto()
    m.ParseFromString(data)
    g, nm = m.graph, s.names
    assert s.n_nodes == len(g.node)
    for i, n in enumerate(g.node):
        assert (nm[s.node_op[i]], nm[s.node_dom[i]], nm[s.node_name[i]]) == (n.op_type, n.domain, n.name)
        assert nm.take(s.in_ids[s.node_in_off[i]:s.node_in_off[i + 1]]) == list(n.input)
        assert nm.take(s.out_ids[s.node_out_off[i]:s.node_out_off[i + 1]]) == list(n.output)
        a0, a1 = s.node_attr_off[i], s.node_attr_off[i + 1]
        assert nm.take(s.attr_name[a0:a1]) == [a.name for a in n.attribute]
        attrs = onnx.NodeProto()  # the attribute fields' spans hold exactly the node's attributes
        attrs.ParseFromString(b"".join(data[s.attr_start[k]:s.attr_end[k]] for k in range(a0, a1)))
        assert list(attrs.attribute) == list(n.attribute)
        one = onnx.GraphProto()
        one.ParseFromString(data[s.node_start[i]:s.node_end[i]])
        assert list(one.node) == [n]
    assert len(s.init_name) == len(g.initializer)
    init = s.tensors("init_")
    for k, t in enumerate(g.initializer):
        assert nm[s.init_name[k]] == t.name
        _tensor_agrees(data, init, k, t, lambda b: onnx.GraphProto.FromString(b).initializer[0])
    # one at_* row for each attribute whose tensor content is one t field, in order
    src, rows = Source(data), []
    attrs = [a for n in g.node for a in n.attribute]
    for a in range(len(attrs)):
        [(_, _, _, v0, v1)] = iter_fields(src, int(s.attr_start[a]), int(s.attr_end[a]))
        nums = [num for num, wt, *_ in iter_fields(src, v0, v1) if wt == LEN]  # other wire types: unknown
        if nums.count(5) == 1 and not {10, 22, 23} & set(nums):
            rows.append(a)
    assert s.at_attr.tolist() == rows
    at = s.tensors("at_")
    for k, a in enumerate(rows):
        _tensor_agrees(data, at, k, attrs[a].t, lambda b: onnx.AttributeProto.FromString(b).t)
    assert nm.take(s.input_name) == [v.name for v in g.input]
    assert nm.take(s.output_name) == [v.name for v in g.output]
    assert nm.take(s.vi_name) == [v.name for v in g.value_info]
    for name in [v.name for v in g.input][:3] + [n.op_type for n in g.node][:3]:
        assert nm[s.find(name)] == name
    assert s.find("\x01 no model has this name") == -1


def _tensor_agrees(data: bytes, cols, k: int, t, parse) -> None:
    """Row k of a per-tensor column set (wire.TensorColumns) reads what onnx
    reads of ``t``; ``parse`` reads a tensor back from its field's span."""
    assert cols.dtype[k] == t.data_type
    assert cols.dims[cols.dims_off[k]:cols.dims_off[k + 1]].tolist() == list(t.dims)
    assert (cols.raw_len[k] >= 0) == t.HasField("raw_data") == bool(cols.flags[k] & wire.IF_RAW)
    if t.HasField("raw_data"):
        assert data[cols.raw_start[k]:cols.raw_start[k] + cols.raw_len[k]] == t.raw_data
    assert cols.ext[k] == len(t.external_data) and cols.loc[k] == t.data_location
    assert cols.typed[k].tolist() == [len(t.float_data), len(t.int32_data), len(t.string_data), len(t.int64_data),
                                      len(t.double_data), len(t.uint64_data)]
    assert bool(cols.flags[k] & wire.IF_SEGMENT) == t.HasField("segment")
    assert bool(cols.flags[k] & wire.IF_DOC) == t.HasField("doc_string")
    assert bool(cols.flags[k] & wire.IF_METADATA) == bool(len(t.metadata_props))
    assert parse(data[cols.start[k]:cols.end[k]]) == t
    dims = list(t.dims)
    assert cols.count[k] == (float(np.prod(np.array(dims, dtype=np.float64))) if dims else 1.0) or \
        not np.isfinite(cols.count[k])


def _sparse():
    return helper.make_sparse_tensor(helper.make_tensor("v", onnx.TensorProto.FLOAT, [1], [1.0]),
                                     helper.make_tensor("i", onnx.TensorProto.INT64, [1], [0]), [4])


def _odd_constants() -> onnx.ModelProto:
    """A Constant for each of model_helpers.odd_tensors, a sparse one and a value_floats one."""
    from helpers.model_helpers import odd_tensors

    nodes = [helper.make_node("Constant", [], [f"k{i}"], value=t) for i, t in enumerate(odd_tensors().values())]
    nodes += [helper.make_node("Constant", [], ["ks"], sparse_value=_sparse()),
              helper.make_node("Constant", [], ["kv"], value_floats=[1.0, 2.0])]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("k0", onnx.TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _field(num: int, payload: bytes) -> bytes:
    return field_key(num, LEN) + varint(len(payload)) + payload


def test_attribute_tensors_agree_with_onnx():
    """The at_* columns against onnx, on Constant values stored every way
    (tests/helpers/model_helpers.odd_tensors) and on bytes protobuf never
    writes: raw_data twice (the last counts), a t field twice (protobuf
    merges: no row, read from the proto), t beside tensors / a sparse tensor
    (no row), a tensor field with another wire type (protobuf keeps it as an
    unknown field: a row without it), an attribute with no tensor at all."""
    from helpers.model_helpers import odd_tensors

    odd, sparse = odd_tensors(), _sparse()
    m = _odd_constants()
    g = m.graph
    data = m.SerializeToString()
    s = wire.scan(data)
    assert s is not None and len(s.at_attr) == len(odd)
    _agree(data, s)
    # hand-made attributes, appended to the graph as further nodes
    t1, t2 = odd["raw"].SerializeToString(), odd["float-data"].SerializeToString()
    head = onnx.AttributeProto(name="value", type=onnx.AttributeProto.TENSOR).SerializeToString()
    crafted = [
        head + _field(5, t1 + _field(9, b"\0" * 24)),  # raw_data twice: a row, the last raw_data
        head + _field(5, t1) + _field(5, t2),  # t twice: merged by protobuf, no row
        head + _field(5, t1) + _field(10, t2),  # t and tensors: no row
        head + _field(5, t1) + _field(22, sparse.SerializeToString()),  # t and a sparse tensor: no row
        head + _field(5, t1 + field_key(2, LEN) + varint(1) + b"\1"),  # data_type as bytes: unknown, a row
        onnx.AttributeProto(name="alpha", type=onnx.AttributeProto.FLOAT, f=1.0).SerializeToString(),
    ]
    body = g.SerializeToString() + b"".join(
        _field(1, onnx.NodeProto(output=[f"c{i}"], op_type="Constant").SerializeToString() + _field(5, a))
        for i, a in enumerate(crafted))
    m.ClearField("graph")
    data = m.SerializeToString() + _field(7, body)
    s = wire.scan(data)
    assert s is not None
    _agree(data, s)
    n = len(s.attr_flags)
    assert s.at_attr[-2:].tolist() == [n - 6, n - 2] and s.at_raw_len[-2] == 24
    assert s.at_dtype[-1] == odd["raw"].data_type
    assert (s.attr_flags[-6:] & wire.NF_TENSOR).tolist() == [wire.NF_TENSOR] * 5 + [0]


def test_fields_protobuf_keeps_as_unknown_are_skipped():
    """Known field numbers with another wire type, groups and a value
    outside a closed enum (data_location 7), in the model, the graph, a
    node, an attribute, its tensor, an initializer, the graph's input and
    output (model_helpers.unknown_field_models): protobuf keeps each as an
    unknown field and never reads it; the scanner skips it, and its arrays
    are what onnx reads. Bytes protobuf refuses (an end-group tag outside
    its group or of another group, a group left open, groups nested past
    protobuf's limit of 100) are MALFORMED (onnxio.format.iter_fields:
    Malformed); 100 deep is read, as one field."""
    from helpers.model_helpers import constant_gelu_model, unknown_field_models

    clean = constant_gelu_model().SerializeToString()
    for where, data in unknown_field_models().items():
        s = wire.raw_scan(data)
        assert s.status == OK and wire.declined(s) is None, (where, s.message)
        _agree(data, s)
        assert s.tensors("init_").loc.tolist() == [0, 0] and s.at_loc.tolist() == [0]

    def nested(depth: int) -> bytes:
        return field_key(9, 3) * depth + field_key(9, 4) * depth

    for data, ok in ((nested(100) + clean, True), (nested(101) + clean, False),
                     (field_key(9, 4) + clean, False), (field_key(9, 3) + field_key(8, 4) + clean, False),
                     (clean + field_key(9, 3), False), (clean + field_key(9, 3) + field_key(1, 0) + b"\1", False)):
        try:
            onnx.ModelProto.FromString(data)
            parsed = True
        except Exception:  # noqa: BLE001 - protobuf's DecodeError
            parsed = False
        assert parsed == ok and wire.raw_scan(data).status == (OK if ok else wire.MALFORMED)
        try:  # the Python reader of the wire format (onnxio.format) alike
            fields = [f[:2] for f in iter_fields(Source(data), 0, len(data))]
        except Malformed:
            fields = None
        assert (fields is not None) == ok and (not ok or fields[0] == (9, 3))
    _agree(nested(100) + clean, wire.scan(nested(100) + clean))


def test_a_declined_graph_is_refused_with_the_scanners_reason():
    """arraytable.graph_table words what the scanner declined: a name that
    is not UTF-8 (exit 2, docs/safety.md), or the scanner's own reason
    (here: the graph field twice, which a fuse never meets: protobuf's
    serialization merges it; exit 3), never one for the other."""
    from helpers.model_helpers import constant_gelu_model

    from gelu_onnx.errors import InputError, UnsupportedError
    from gelu_onnx.onnxio.arraytable import graph_table

    m = constant_gelu_model()
    twice = m.SerializeToString() + _field(7, m.graph.SerializeToString())
    with pytest.raises(UnsupportedError) as e:
        graph_table(m.graph, wire.raw_scan(twice), outer=False)
    assert "not exactly one graph field" in str(e.value) and "UTF-8" not in str(e.value)
    assert not isinstance(e.value, InputError) and "\n" not in str(e.value)
    m.graph.node[1].name = "a\0name"
    with pytest.raises(InputError, match="not UTF-8 or holds a NUL byte"):
        graph_table(m.graph, wire.raw_scan(m.SerializeToString()), outer=False)


def test_scan_agrees_with_onnx_on_bundled_models():
    for path in MODELS:
        data = path.read_bytes()
        s = wire.scan(data)
        assert s is not None, f"{path.name}: {wire.raw_scan(data).message}"
        _agree(data, s)


def test_scan_agrees_with_onnx_on_the_gelu_corpus():
    from helpers.gelu_corpus import all_cases

    declined = 0
    for case in all_cases():
        data = case.model.SerializeToString()
        s = wire.scan(data)
        if s is None:  # subgraphs hold sparse tensors? names with NULs? say why, and count
            declined += 1
            continue
        _agree(data, s)
    assert declined == 0


def test_mutated_models_agree_or_are_declined():
    """Seeded mutations: the scanner returns a status for every one; where it
    and onnx both accept the bytes they read the same graph."""
    rng = random.Random(20251125)
    seen = {OK: 0, wire.MALFORMED: 0, wire.UNSUPPORTED: 0}
    for path in MODELS[::12]:
        base = path.read_bytes()
        for _ in range(60):
            b = bytearray(base)
            for _ in range(rng.randint(1, 3)):
                pos = rng.randrange(len(b))
                r = rng.random()
                if r < 0.5:
                    b[pos] ^= 1 << rng.randrange(8)
                elif r < 0.75:
                    del b[pos:pos + rng.randint(1, 8)]
                else:
                    b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            data = bytes(b)
            s = wire.raw_scan(data)
            seen[s.status] += 1
            if s.status != OK or s.names is None:
                continue
            try:
                onnx.ModelProto().ParseFromString(data)
            except Exception:  # noqa: BLE001 - protobuf refused it: load refuses it as before
                continue
            if wire.scan(data) is not None:
                _agree(data, s)
    assert seen[OK] and seen[wire.MALFORMED]


def test_every_truncation_is_a_status():
    data = MODELS[0].read_bytes()[:4000]
    for cut in range(len(data)):
        assert wire.raw_scan(data[:cut]).status in (OK, wire.MALFORMED, wire.UNSUPPORTED)


def test_the_scanner_under_asan_and_ubsan(tmp_path):
    """tests/native/scan/scan_fuzz.cpp: the scanner compiled with ASan/UBSan,
    fed bundled models and seeded mutations of them in exactly sized buffers;
    every OK scan's arrays checked for internal consistency."""
    from helpers.model_helpers import unknown_field_models

    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler")
    exe = tmp_path / "scan_fuzz"
    cmd = [cxx, "-std=c++17", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
           "-fno-sanitize-recover=all", f"-I{SCAN}", str(ROOT / "tests" / "native" / "scan" / "scan_fuzz.cpp"),
           str(SCAN / "gelu_onnx_scan.cpp"), "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    hostile = tmp_path / "hostile.onnx"
    hostile.write_bytes(b"\x3a" + b"\xff" * 9 + b"\x01" + b"\x0a\x05\x0a\x03abc")  # a graph field of 2^63 bytes
    odd = tmp_path / "odd-constants.onnx"  # attribute tensors stored every way (the at_* columns)
    odd.write_bytes(_odd_constants().SerializeToString())
    files = [str(p) for p in MODELS[::6]] + [str(hostile), str(odd)]
    for where in ("attribute", "initializer"):  # fields protobuf keeps as unknown, groups among them
        files.append(str(tmp_path / f"unknown-{where}.onnx"))
        Path(files[-1]).write_bytes(unknown_field_models()[where])
    r = subprocess.run([str(exe), "400", *files], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert r.stdout.startswith("ok ")
