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

import onnx
import pytest

from gelu_onnx.onnxio import wire
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
    for k, t in enumerate(g.initializer):
        assert nm[s.init_name[k]] == t.name and s.init_dtype[k] == t.data_type
        assert list(s.init_dims[s.init_dims_off[k]:s.init_dims_off[k + 1]]) == list(t.dims)
        assert (s.init_raw_len[k] >= 0) == t.HasField("raw_data")
        if t.HasField("raw_data"):
            assert data[s.init_raw_start[k]:s.init_raw_start[k] + s.init_raw_len[k]] == t.raw_data
        assert s.init_ext[k] == len(t.external_data) and s.init_loc[k] == t.data_location
        assert list(s.init_typed[6 * k:6 * k + 6]) == [len(t.float_data), len(t.int32_data), len(t.string_data),
                                                      len(t.int64_data), len(t.double_data), len(t.uint64_data)]
    assert nm.take(s.input_name) == [v.name for v in g.input]
    assert nm.take(s.output_name) == [v.name for v in g.output]
    assert nm.take(s.vi_name) == [v.name for v in g.value_info]
    for name in [v.name for v in g.input][:3] + [n.op_type for n in g.node][:3]:
        assert nm[s.find(name)] == name
    assert s.find("\x01 no model has this name") == -1


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
    files = [str(p) for p in MODELS[::6]] + [str(hostile)]
    r = subprocess.run([str(exe), "400", *files], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert r.stdout.startswith("ok ")
