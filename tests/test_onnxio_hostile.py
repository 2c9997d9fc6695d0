"""Hostile inputs: every malformed or unsafe model file gets one clear error
line, nothing is written, the input is untouched and nothing outside the
model's folder is read.

The corpus (``CASES``, ``build_case``) is in tests/helpers/hostile/malformed.py;
the hostile suite (tests/test_hostile_suite.py, group ``corpus``) runs the same
files through every command of the CLI.
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path

import onnx
import pytest

from gelu_onnx import onnxio
from gelu_onnx.errors import InputError, UnsafeModelError
from helpers.hostile.judge import snapshot
from helpers.hostile.malformed import (CASES, FILE_ONLY, VALID, assert_one_line, build_case, ffn_model, layout,
                                       no_hang, save_external, set_location, write_proto)

# --- tests -----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_load_refused(name, tmp_path):
    case = build_case(name, tmp_path)
    before = snapshot(tmp_path)
    with no_hang():
        with pytest.raises(InputError) as ei:
            onnxio.load_model(case.model)
    msg = str(ei.value)
    assert_one_line(msg)
    assert re.search(case.expect, msg), f"{name}: {msg}"
    assert ei.value.exit_code == 2
    if case.unsafe:
        assert isinstance(ei.value, UnsafeModelError), msg
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n][0] not in FILE_ONLY))
def test_hostile_bytes_refused_in_memory(name, tmp_path):
    """The same files given as bytes (the Python API path)."""
    case = build_case(name, tmp_path)
    data = case.model.read_bytes()
    with no_hang():
        with pytest.raises(InputError) as ei:
            onnxio.load_model_proto(data, base_dir=case.model.parent)
    assert_one_line(str(ei.value))


def test_every_truncation_refused(tmp_path):
    """Each proper prefix of a valid model is refused (the model ends with opset_import,
    so no prefix is itself a complete model)."""
    data = VALID
    p = tmp_path / "m.onnx"
    refused = 0
    for cut in range(1, len(data)):
        p.write_bytes(data[:cut])
        with pytest.raises(InputError) as ei:
            onnxio.load_model(p)
        assert_one_line(str(ei.value))
        refused += 1
    p.write_bytes(data)
    onnxio.load_model(p)  # and the whole file is fine
    assert refused == len(data) - 1


def test_fuzzed_models_never_crash(tmp_path):
    """Seeded byte flips / insertions / deletions of a valid model: each either loads
    (and then saves and reloads) or is refused with InputError - no other exception."""
    rng = random.Random(20240501)
    base = bytearray(VALID)
    src, out = tmp_path / "in", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    loaded = refused = 0
    for i in range(300):
        b = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            op, pos = rng.random(), rng.randrange(len(b))
            if op < 0.6:
                b[pos] = rng.randrange(256)
            elif op < 0.8:
                b[pos:pos] = bytes([rng.randrange(256)])
            else:
                del b[pos]
        p = src / f"f{i}.onnx"
        p.write_bytes(bytes(b))
        try:
            lm = onnxio.load_model(p)
        except InputError as e:
            assert_one_line(str(e))
            refused += 1
            continue
        loaded += 1
        saved = onnxio.save_model(lm.model, out / f"f{i}.onnx", source=lm)
        onnxio.load_model(saved.path)
    assert loaded + refused == 300 and refused > 100


def test_valid_model_not_refused(tmp_path):
    """The corpus' base models are fine: the refusals above come from the damage."""
    mdir, _ = layout(tmp_path)
    write_proto(ffn_model(), mdir / "a.onnx")
    save_external(ffn_model(hidden=32), mdir / "b.onnx")
    onnxio.load_model(mdir / "a.onnx")
    lm = onnxio.load_model(mdir / "b.onnx")
    assert lm.external_files == (str((mdir / "weights.bin").resolve()),)


# Each odd tensor validation refuses (helpers.model_helpers.odd_tensors), with its
# line: "{name}" is the tensor's name, "{tmp}" the model's folder (main at b277e52 gave these)
ODD_TENSOR_REFUSALS = {
    "raw-long": (InputError, "tensor {name}: raw_data holds 24 bytes, its dims and type need 8"),
    "float-data-long": (InputError, "tensor {name}: float_data holds 3 values, its dims need 2"),
    "unknown-type": (InputError, "tensor {name} has an unknown element type 99"),
    "external-escape": (UnsafeModelError, "external data '../outside.bin' of tensor {name} contains '..'; "
                                          "only paths inside the model's folder are allowed"),
    "external-missing": (InputError, "external data 'w.bin' of tensor {name}: file not found in {tmp}"),
    "external-entries-inside": (UnsafeModelError, "tensor {name} has external_data entries but is not marked "
                                                  "as external (data_location)"),
}


@pytest.mark.parametrize("where", ["constant", "initializer"])
def test_odd_tensors_validated_from_the_scan(where, tmp_path):
    """Every way of storing a tensor, as a Constant's value and as an
    initializer: validation (the scanner's columns checked vectorised, the
    odd ones by Validator.tensor) accepts the valid ones and keeps the
    scanned graph for the fuse pass (an ArrayTable), and refuses the rest
    with their lines."""
    from gelu_onnx.onnxio import wire
    from gelu_onnx.onnxio.arraytable import ArrayTable
    from gelu_onnx.onnxio.validate import validate_model
    from helpers.model_helpers import odd_tensors

    for name, t in odd_tensors().items():
        m = ffn_model()
        if where == "constant":
            m.graph.node.append(onnx.helper.make_node("Constant", [], ["k"], value=t))
        else:
            t.name = "k"
            m.graph.initializer.append(t)
        if name not in ODD_TENSOR_REFUSALS:
            _, table = validate_model(m, base_dir=str(tmp_path), where="m.onnx",
                                            scan=wire.scan(m.SerializeToString()))
            assert isinstance(table, ArrayTable), name
            continue
        cls, line = ODD_TENSOR_REFUSALS[name]
        with pytest.raises(cls) as e:
            validate_model(m, base_dir=str(tmp_path), where="m.onnx", scan=wire.scan(m.SerializeToString()))
        assert type(e.value) is cls
        assert str(e.value) == "m.onnx: " + line.format(name=repr(t.name), tmp=repr(str(tmp_path))), name


# --- output side -------------------------------------------------------------------


def _src(tmp_path: Path, external: bool = True):
    mdir, outside = layout(tmp_path)
    if external:
        save_external(ffn_model(hidden=32), mdir / "m.onnx")
    else:
        write_proto(ffn_model(), mdir / "m.onnx")
    return onnxio.load_model(mdir / "m.onnx")


def _refused_save(tmp_path, lm, out, expect, **kw):
    before = snapshot(tmp_path)
    with pytest.raises(InputError) as ei:
        onnxio.save_model(lm.model, out, source=lm, **kw)
    assert_one_line(str(ei.value))
    assert re.search(expect, str(ei.value)), str(ei.value)
    assert snapshot(tmp_path) == before


def test_output_equal_to_input_refused(tmp_path):
    lm = _src(tmp_path)
    _refused_save(tmp_path, lm, lm.path, r"refusing to overwrite the input model")


def test_output_symlink_or_hardlink_to_input_refused(tmp_path):
    lm = _src(tmp_path, external=False)
    alias = tmp_path / "alias.onnx"
    alias.symlink_to(lm.path)
    _refused_save(tmp_path, lm, alias, r"refusing to overwrite the input model")
    alias.unlink()
    os.link(lm.path, alias)
    _refused_save(tmp_path, lm, alias, r"refusing to overwrite the input model")


def test_output_over_input_data_file_refused(tmp_path):
    lm = _src(tmp_path)
    data = Path(lm.base_dir) / "weights.bin"
    _refused_save(tmp_path, lm, data, r"external data file", overwrite_input=True)


def test_output_folder_missing_or_is_a_file(tmp_path):
    lm = _src(tmp_path)
    _refused_save(tmp_path, lm, tmp_path / "no" / "such" / "o.onnx", r"does not exist")
    (tmp_path / "afile").write_bytes(b"x")
    _refused_save(tmp_path, lm, tmp_path / "afile" / "o.onnx", r"does not exist")
    (tmp_path / "adir.onnx").mkdir()
    _refused_save(tmp_path, lm, tmp_path / "adir.onnx", r"is a directory")


def test_permission_denied_output_folder(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root: folder permissions do not stop root from writing")
    lm = _src(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        _refused_save(tmp_path, lm, ro / "o.onnx", r"cannot write|permission")
    finally:
        ro.chmod(0o700)


def test_failure_midway_leaves_nothing(tmp_path):
    """Data file in a subfolder whose name is taken by a file in the output folder:
    the write fails after temp files were made; none may remain."""
    mdir, _ = layout(tmp_path)
    save_external(ffn_model(hidden=32), mdir / "m.onnx", location="w/weights.bin")
    lm = onnxio.load_model(mdir / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    (out / "w").write_bytes(b"in the way")
    _refused_save(tmp_path, lm, out / "o.onnx", r"cannot write")


def test_save_refuses_escaping_references(tmp_path):
    """save_model copies data files: a hand-made proto pointing outside must not
    make it copy anything (same checks as loading)."""
    mdir, outside = layout(tmp_path)
    save_external(ffn_model(hidden=32), mdir / "m.onnx")
    set_location(mdir / "m.onnx", location="../outside/secret.bin")
    m = onnx.load(str(mdir / "m.onnx"), load_external_data=False)
    out = tmp_path / "out"
    out.mkdir()
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeModelError):
        onnxio.save_model(m, out / "o.onnx", source_dir=mdir)
    assert snapshot(tmp_path) == before

