"""The hostile suite, groups check (hostile feeds and golden files for
check and bench) and api (the Python API)."""
from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import zipfile

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

from helpers.hostile.judge import Attack
from helpers.hostile.cases import (case, ext, raw, model, npz, feeds, fused, api)
from helpers.model_helpers import EXTERNAL_H, gelu_model


# --- check: hostile feeds, golden files, and bench ---------------------------------------------


@case("check")
def _nan_and_inf_feeds(root):
    a, b = fused(root)
    x = feeds(4)["x"]
    x[0, :4] = [np.nan, np.inf, -np.inf, np.nan]
    return Attack(["check", a, b, "--inputs", npz(root / "in.npz", x=x)], None)


@case("check")
def _zero_size_dim(root):
    """Every input empty: nothing can be compared, refused (issue 32: it was a PASS)."""
    a, b = fused(root)
    return Attack(["check", a, b, "--dim", "n=0"], False)


@case("check")
def _zero_size_feed_file(root):
    a, b = fused(root)
    return Attack(["check", a, b, "--inputs", npz(root / "in.npz", x=np.zeros((0, EXTERNAL_H), np.float32))], False)


@case("check")
def _big_endian_float_feed(root):
    a, b = fused(root)
    return Attack(["check", a, b, "--inputs", npz(root / "in.npz", x=feeds()["x"].astype(">f4"))], None)


@case("check")
def _json_nested_a_million_deep(root):
    a, b = fused(root)
    (root / "in.json").write_text("[" * 1_000_000 + "]" * 1_000_000)
    return Attack(["check", a, b, "--inputs", root / "in.json"], False)


@case("check")
def _json_with_30_mb_of_base64(root):
    a, b = fused(root)
    (root / "in.json").write_text(json.dumps([{"x": {"array": "QUFB" * (30 << 18), "polygraphy_class": "ndarray"}}]))
    return Attack(["check", a, b, "--inputs", root / "in.json"], False)


@case("check")
def _npz_with_10000_members(root):
    a, b = fused(root)
    with zipfile.ZipFile(root / "in.npz", "w") as z:
        for k in range(10000):
            z.writestr(f"a{k}.npy", b"")
    return Attack(["check", a, b, "--inputs", root / "in.npz"], False)


@case("check")
def _npz_member_named_with_dotdot(root):
    a, b = fused(root)
    buf = io.BytesIO()
    np.save(buf, feeds()["x"])
    with zipfile.ZipFile(root / "in.npz", "w") as z:
        z.writestr("../../x.npy", buf.getvalue())
    return Attack(["check", a, b, "--inputs", root / "in.npz"], False)


@case("check")
def _truncated_npz(root):
    a, b = fused(root)
    p = npz(root / "in.npz", **feeds())
    os.truncate(p, os.path.getsize(p) - 30)
    return Attack(["check", a, b, "--inputs", p], False)


@case("check")
def _dim_of_a_trillion(root):
    a, b = fused(root)
    return Attack(["check", a, b, "--dim", "n=1000000000000"], False)


@case("check")
def _negative_declared_input_dim(root):
    m = model([h.make_node("Gelu", ["x"], ["y"])], opset=20,
              inputs=[h.make_tensor_value_info("x", T.FLOAT, [-5, 4])])
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src], False)


@case("check")
def _bench_with_a_zip_bomb(root):
    src = ext(root / "m")
    z = root / "bomb.npz"
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f4", "fortran_order": False, "shape": (1 << 20, 64)})
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("x.npy", "w", force_zip64=True) as f:
            f.write(hdr.getvalue())
            for _ in range(16):  # 256 MiB of zeros in a 0.25 MiB archive
                f.write(bytes(16 << 20))
    return Attack(["bench", src, "--inputs", z, "--repeats", "1", "--warmup", "0"], False, max_rss_mib=400)


@case("check")
def _bench_absurd_declared_dims(root):
    m = model([h.make_node("Gelu", ["x"], ["y"])], opset=20,
              inputs=[h.make_tensor_value_info("x", T.FLOAT, [1 << 30, 1 << 30])])
    src = raw(root / "m.onnx", m)
    return Attack(["bench", src, "--repeats", "1", "--warmup", "0"], False)


@case("check")
def _bench_zero_size_dim(root):
    src = ext(root / "m")
    return Attack(["bench", src, "--dim", "n=0", "--repeats", "1", "--warmup", "0", "--opt-levels", "basic"], None)


@case("check")
def _bench_nan_feeds(root):
    src = ext(root / "m")
    x = feeds()["x"]
    x[:] = np.nan
    return Attack(["bench", src, "--inputs", npz(root / "in.npz", x=x), "--repeats", "1", "--warmup", "0",
                   "--opt-levels", "basic"], None)


@case("check")
def _check_a_model_against_itself(root):
    src = ext(root / "m")
    return Attack(["check", src, src], True)


@case("check")
def _check_against_the_models_own_data_file(root):
    src = ext(root / "m")
    return Attack(["check", src, root / "m" / "w.bin"], False)


@case("check")
def _saved_inputs_given_as_golden_outputs(root):
    a, b = fused(root)
    subprocess.run([os.sys.executable, "-m", "gelu_onnx", "check", str(a), str(b), "--save-inputs",
                    str(root / "in.json")], check=True, capture_output=True)
    return Attack(["check", b, "--inputs", root / "in.json", "--reference-outputs", root / "in.json"], False)


@case("check")
def _nan_in_golden_outputs(root):
    a, b = fused(root)
    inp = npz(root / "in.npz", **feeds())
    gold = root / "gold.json"
    subprocess.run([os.sys.executable, "-m", "gelu_onnx", "check", str(a), str(b), "--inputs", str(inp),
                    "--save-outputs", str(gold)], check=True, capture_output=True)
    doc = json.loads(gold.read_text())
    enc = doc["lst"][0][1][0]["outputs"]["y"]["values"]
    arr = np.load(io.BytesIO(base64.b64decode(enc["array"])))
    arr[0, 0] = np.nan
    buf = io.BytesIO()
    np.save(buf, arr)
    enc["array"] = base64.b64encode(buf.getvalue()).decode()
    gold.write_text(json.dumps(doc))
    return Attack(["check", b, "--inputs", inp, "--reference-outputs", gold], False)


@case("check")
def _string_input_model(root):
    m = model([h.make_node("Identity", ["s"], ["t"])], inputs=[h.make_tensor_value_info("s", T.STRING, [2])],
              outputs=[h.make_tensor_value_info("t", T.STRING, [2])])
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src], None)


@case("check")
def _sequence_input_model(root):
    seq = h.make_tensor_sequence_value_info("s", T.FLOAT, [2])
    m = model([h.make_node("SequenceLength", ["s"], ["n"])], inputs=[seq],
              outputs=[h.make_tensor_value_info("n", T.INT64, [])])
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src], False)


@case("check")
def _stdout_is_a_full_device(root):
    src = ext(root / "m")
    code = ("import os, runpy, sys\nfd = os.open('/dev/full', os.O_WRONLY)\nos.dup2(fd, 1)\n"
            f"sys.argv = ['gelu-onnx', 'inspect', {str(src)!r}]\nrunpy.run_module('gelu_onnx', run_name='__main__')\n")
    # the report is lost, the work (here: none) is done: exit 0 and one warning (docs/cli.md)
    return Attack([], True, python=code, warnings_ok=True, after=_report_lost)


def _report_lost(r) -> None:
    assert r.stderr.count(b"the report could not be written to standard output") == 1, r.stderr


@case("check")
def _onnxruntime_warning_about_an_overridable_initializer(root):
    """An initializer listed as a graph input (IR >= 4): ONNX Runtime warns at load."""
    m = model([h.make_node("Add", ["x", "b"], ["y"])], [h.make_tensor("b", T.FLOAT, [4], [1, 2, 3, 4])])
    m.graph.input.append(h.make_tensor_value_info("b", T.FLOAT, [4]))
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src], True)


@case("check")
def _huge_scale_on_an_fp16_model(root):
    """N(0,1) * 1e6 overflows float16: numpy's overflow warning stays off stderr."""
    m = gelu_model(dtype=T.FLOAT16)
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src, "--scale", "1e6"], None)


# --- api: the Python API ---------------------------------------------------------------------


@case("api")
def _fuse_file_to_a_path_with_nul(root):
    src = ext(root / "m")
    return Attack([], False, python=api(f"gelu_onnx.fuse_file({str(src)!r}, {str(root / 'o')!r} + chr(0))"))


@case("api")
def _fuse_file_with_bytes_paths(root):
    src = ext(root / "m")
    out = root / "o.onnx"
    return Attack([], True, may_change=(out, root / "w.bin"),
                  python=api(f"gelu_onnx.fuse_file({bytes(src)!r}, {bytes(out)!r})"))


@case("api")
def _save_to_dev_null(root):
    return Attack([], False, python=api("from onnx import load\n"
                                        f"gelu_onnx.save(load({str(ext(root / 'm'))!r}), '/dev/null')"))


@case("api")
def _save_over_the_models_data(root):
    src = ext(root / "m")
    return Attack([], False, python=api(f"import onnx\nm = onnx.load({str(src)!r}, load_external_data=False)\n"
                                        f"gelu_onnx.save(m, {str(root / 'm' / 'w.bin')!r}, "
                                        f"base_dir={str(root / 'm')!r})"))


@case("api")
def _save_external_model_without_its_folder(root):
    src = ext(root / "m")
    return Attack([], False, python=api(f"import onnx\nm = onnx.load({str(src)!r}, load_external_data=False)\n"
                                        f"gelu_onnx.save(m, {str(root / 'o.onnx')!r})"))


@case("api")
def _save_into_a_folder_path(root):
    return Attack([], False, python=api(f"gelu_onnx.save(gelu_onnx.onnxio.load_model({str(ext(root / 'm'))!r}).model,"
                                        f" {str(root)!r})"))


@case("api")
def _check_against_a_data_file(root):
    src = ext(root / "m")
    return Attack([], False, python=api(f"gelu_onnx.check({str(src)!r}, {str(root / 'm' / 'w.bin')!r})"))


@case("api")
def _check_saving_inputs_over_the_original(root):
    a, b = fused(root)
    return Attack([], False, python=api(f"gelu_onnx.check({str(a)!r}, {str(b)!r}, save_inputs={str(a)!r})"))


@case("api")
def _fuse_file_over_a_users_file(root):
    src = ext(root / "m")
    (root / "keep.txt").write_text("mine")
    return Attack([], False, python=api(f"gelu_onnx.fuse_file({str(src)!r}, {str(root / 'keep.txt')!r})"))


@case("api")
def _inspect_file_of_a_fifo(root):
    os.mkfifo(root / "m.onnx")
    return Attack([], False, python=api(f"gelu_onnx.inspect_file({str(root / 'm.onnx')!r})"), timeout=60)


@case("api")
def _check_with_wrong_dtype_feeds_in_memory(root):
    a, b = fused(root)
    return Attack([], False, python=api("import numpy as np\n"
                                        f"gelu_onnx.check({str(a)!r}, {str(b)!r}, "
                                        "inputs={'x': np.zeros((2, 64), np.int32)})"))


@case("api")
def _save_something_that_is_not_a_model(root):
    return Attack([], False, python=api(f"gelu_onnx.save('not a model', {str(root / 'o.onnx')!r})"))


@case("api")
def _check_with_an_empty_list_of_iterations(root):
    a, b = fused(root)
    return Attack([], False, python=api(f"gelu_onnx.check({str(a)!r}, {str(b)!r}, inputs=[])"))
