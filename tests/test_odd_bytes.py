"""Bytes that are not UTF-8 are data (docs/safety.md, "names"): a model whose
graph names, doc strings, metadata, producer and dim_params hold invalid
UTF-8 is inspected, fused and checked (exit 0, the bytes kept as they are);
paths holding byte 0xff work, or are one line, exit 2, printed with the
byte escaped as \\xff. Never exit 4 (a TypeError from onnx's or ONNX
Runtime's C++, which take UTF-8 paths only). Fields protobuf parses as
unknown (a known field with another wire type, groups) are data too."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from helpers.model_helpers import constant_gelu_model, external_model, gelu_model, unknown_field_models

STRICT = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}
ODD = b"\xff\xfe"


def gelu(*args, env=None) -> subprocess.CompletedProcess:
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *args], capture_output=True, env=e, timeout=300)


def _odd_strings_model() -> bytes:
    """A GELU in each branch of an If; every free-text string field ends in
    two bytes that are not UTF-8 (placeholders ZZ swapped in the bytes)."""
    def chain(x, y, t):
        return [h.make_node("Div", [x, "s2"], [f"d{t}"], doc_string="NODEDOCZZ"), h.make_node("Erf", [f"d{t}"], [f"e{t}"]),
                h.make_node("Add", [f"e{t}", "one"], [f"p{t}"]), h.make_node("Mul", [x, f"p{t}"], [f"q{t}"]),
                h.make_node("Mul", [f"q{t}", "half"], [y])]

    out = [h.make_tensor_value_info("yt", T.FLOAT, ["batchZZ", 4])]
    then_g = h.make_graph(chain("x", "yt", "t"), "thenZZ", [], out)
    else_g = h.make_graph(chain("x", "ye", "e"), "elseZZ", [], [h.make_tensor_value_info("ye", T.FLOAT, ["batchZZ", 4])])
    inits = [nh.from_array(np.array(v, np.float32), n) for n, v in (("s2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    g = h.make_graph([h.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "mainZZ",
                     [h.make_tensor_value_info("x", T.FLOAT, ["batchZZ", 4]), h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, ["batchZZ", 4])], inits, doc_string="graphdocZZ")
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8, producer_name="prodZZ",
                     producer_version="verZZ", doc_string="modeldocZZ")
    e = m.metadata_props.add()
    e.key, e.value = "keyZZ", "valueZZ"
    m.graph.input[0].doc_string = "inputdocZZ"
    data = m.SerializeToString().replace(b"ZZ", ODD)
    assert data.count(ODD) == 16
    return data


def test_non_utf8_strings_in_the_model_are_data(tmp_path):
    src = tmp_path / "odd.onnx"
    src.write_bytes(_odd_strings_model())
    out = tmp_path / "f.onnx"
    for args in (["inspect", src], ["inspect", src, "--json"], ["fuse", src, "-o", out],
                 ["fuse", src, "-o", out, "--json"], ["check", src, out], ["check", src, out, "--json"]):
        r = gelu(*map(str, args), env=STRICT)
        assert r.returncode == 0 and r.stderr == b"", (args, r.stderr)
        if "--json" in args:
            json.loads(r.stdout)
    fused = onnx.load(str(out))
    assert [f.op_type for f in fused.graph.node[0].attribute[0].g.node] == ["GeluErf"]
    # every string kept byte for byte (the two GELUs' nodes with their doc strings are gone)
    assert out.read_bytes().count(ODD) == src.read_bytes().count(ODD) - 2
    assert fused.graph.name == b"main" + ODD and fused.metadata_props[0].value == b"value" + ODD


def test_non_utf8_paths_work_or_are_one_line(tmp_path):
    """A folder and file names holding 0xff: a plain model (its input check
    reads the file), an external-data model (its data beside it, which ONNX
    Runtime is given as /proc/self/fd/N), a model the checker refuses."""
    base = os.fsencode(tmp_path) + b"/dir" + ODD
    os.makedirs(base + b"/ext")
    plain = base + b"/plain" + ODD + b".onnx"
    with open(plain, "wb") as f:
        f.write(gelu_model().SerializeToString())
    src = external_model(tmp_path / "e")
    ext = base + b"/ext/m" + ODD + b".onnx"
    shutil.copy(src, ext)
    shutil.copy(tmp_path / "e" / "w.bin", base + b"/ext/w.bin")
    bad = gelu_model()
    bad.graph.value_info.append(h.make_tensor_value_info(bad.graph.node[1].output[0], T.INT32, None))
    with open(base + b"/bad" + ODD + b".onnx", "wb") as f:
        f.write(bad.SerializeToString())
    for env in (STRICT, {"LC_ALL": "C", "PYTHONIOENCODING": "ascii:strict"}):
        for model in (plain, ext):
            out = base + b"/out" + ODD + b".onnx"
            r = gelu(b"fuse", model, b"-o", out, env=env)
            assert r.returncode == 0 and r.stderr == b"" and b"/out\\xff\\xfe.onnx" in r.stdout, r
            runs = ([b"check", model, out], [b"check", model, out, b"--json"], [b"inspect", out, b"--json"],
                    [b"bench", model, out, b"--warmup", b"1", b"--repeats", b"2", b"--opt-levels", b"basic"])
            for cmd in runs if env is STRICT else runs[:1]:
                r = gelu(*cmd, env=env)
                assert r.returncode == 0 and r.stderr == b"", (cmd, r.stderr)
                if b"--json" in cmd:
                    doc = json.loads(r.stdout)  # the path round-trips through JSON's escape
                    assert os.fsencode(doc["input"]) == cmd[1] if "input" in doc else doc["ok"]
        r = gelu(b"fuse", base + b"/bad" + ODD + b".onnx", b"-o", base + b"/o2.onnx", env=env)
        assert r.returncode == 2 and r.stderr.count(b"\n") == 1, r.stderr
        assert r.stderr.startswith(b"gelu-onnx: error: " + os.fsencode(tmp_path) + b"/dir\\xff\\xfe/bad\\xff\\xfe.onnx: "
                                   b"the input model fails onnx.checker"), r.stderr


def test_fields_protobuf_keeps_as_unknown_are_fused_as_the_clean_model(tmp_path):
    """A known field with another wire type, a group, a value outside a
    closed enum, in each message (model_helpers.unknown_field_models):
    protobuf keeps them as unknown fields, onnx.checker and ONNX Runtime
    never see them, and fuse writes the clean model's nodes (it refused
    such a model as "a name that is not UTF-8": the scanner declined the
    bytes). The one onnx.checker refuses is one line, exit 2, in its words."""
    clean = tmp_path / "clean.onnx"
    clean.write_bytes(constant_gelu_model().SerializeToString())
    assert gelu("fuse", str(clean), "-o", str(tmp_path / "clean-fused.onnx")).returncode == 0
    want = list(onnx.load(str(tmp_path / "clean-fused.onnx")).graph.node)
    assert [n.op_type for n in want] == ["GeluErf"]
    for k, (where, data) in enumerate(unknown_field_models().items()):
        src, out = tmp_path / f"m{k}.onnx", tmp_path / f"f{k}.onnx"
        src.write_bytes(data)
        r = gelu("fuse", str(src), "-o", str(out))
        if where == "attribute type 99":
            assert r.returncode == 2 and r.stderr.count(b"\n") == 1 and not out.exists(), r.stderr
            assert b"fails onnx.checker: Field 'type' of 'attr' is required" in r.stderr, r.stderr
            continue
        assert r.returncode == 0 and r.stderr == b"", (where, r.stderr)
        fused = onnx.load(str(out))
        fused.DiscardUnknownFields()
        assert list(fused.graph.node) == want, where
        assert src.read_bytes() == data
