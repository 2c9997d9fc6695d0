"""The second hostile suite: attacks on the files a user owns, built at test
time, each an ``attack_judge.Attack`` judged by the same criteria
(tests/attack_judge.py). Groups: ``alias`` (every way an output path can
name something precious), ``save`` (check --save-inputs/--save-outputs),
``device`` (devices, FIFOs, sockets, /proc as inputs), ``fault`` (a full or
read-only tmpfs on the paths tests/test_fault_injection.py does not cover,
the > 2 GB ``.N.data`` rule), ``signal`` (SIGTERM/SIGINT/SIGHUP at named
points of a write, a file truncated while it is read), ``bomb`` (structural
bombs), ``const`` (read what the runtime reads), ``names`` (non-UTF-8 and
over-long paths), ``check`` (hostile feeds and golden files, bench), ``api``
(the Python API). ``CASES`` maps "group/name" to a builder taking the
case's empty folder and returning the Attack."""
from __future__ import annotations

import base64
import io
import json
import math
import os
import shutil
import socket
import stat
import subprocess
import threading
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from attack_judge import Attack
from model_helpers import EXTERNAL_H, external_model, gelu_model, matmul_gelu_model

CASES: dict = {}
ROOT_ONLY = set()   # cases that need root (mount, mknod)
SQRT2 = math.sqrt(2)


def register(name: str, build, root_only: bool = False) -> None:
    assert name not in CASES, name
    CASES[name] = build
    if root_only:
        ROOT_ONLY.add(name)


def case(group: str, root_only: bool = False):
    def add(f):
        register(f"{group}/{f.__name__.lstrip('_')}", f, root_only)
        return f
    return add


# --- models ------------------------------------------------------------------------


def ext(folder: Path, data: str = "w.bin", seed: int = 0) -> Path:
    """folder/model.onnx: x[n, 64] @ W (external, ``data``) -> erf GELU."""
    (folder / data).parent.mkdir(parents=True, exist_ok=True)
    return external_model(folder, data, seed)


def plain(folder: Path, name: str = "model.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_bytes(gelu_model().SerializeToString())
    return p


def raw(path: Path, m: onnx.ModelProto) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(m.SerializeToString())  # as is: no checker
    return path


def erf_chain(x: str, s2: str, y: str = "y", tag: str = "") -> list:
    return [h.make_node("Div", [x, s2], [f"d{tag}"]), h.make_node("Erf", [f"d{tag}"], [f"e{tag}"]),
            h.make_node("Add", [f"e{tag}", "one"], [f"p{tag}"]), h.make_node("Mul", [x, f"p{tag}"], [f"q{tag}"]),
            h.make_node("Mul", [f"q{tag}", "half"], [y])]


def consts(*names) -> list:
    vals = {"one": 1.0, "half": 0.5, "s2": SQRT2}
    return [h.make_tensor(n, T.FLOAT, [], [vals[n]]) for n in names or ("one", "half")]


IO = ([h.make_tensor_value_info("x", T.FLOAT, [3, 4])], [h.make_tensor_value_info("y", T.FLOAT, [3, 4])])


def model(nodes, inits=(), *, inputs=None, outputs=None, opset=17, functions=(), ir=10, domains=()):
    g = h.make_graph(nodes, "g", inputs or IO[0], outputs or IO[1], list(inits))
    ops = [h.make_opsetid("", opset)] + [h.make_opsetid(d, 1) for d in domains]
    return h.make_model(g, opset_imports=ops, functions=list(functions), ir_version=ir)


def npz(path: Path, **arrays) -> Path:
    np.savez(path, **arrays)
    return path


def feeds(n: int = 2) -> dict:
    return {"x": np.random.default_rng(0).standard_normal((n, EXTERNAL_H)).astype(np.float32)}


def fused(root: Path) -> tuple[Path, Path]:
    """(original, fused) of the external model, both in root/m."""
    src = ext(root / "m")
    out = root / "m" / "fused.onnx"
    import gelu_onnx

    gelu_onnx.fuse_file(src, out)
    return src, out


def runs_in_ort(path: Path) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    from gelu_onnx import ortlib

    if ortlib.available():
        so = ortlib.session_options()
        so.log_severity_level = 4
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def same_function(original: Path, out: Path, shape=(3, 4)):
    """after-check: the output computes what the original computes."""
    def check(r):
        from gelu_onnx import verify

        if r.code != 0:
            return
        x = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32) * 3}
        a = verify.run(str(original), x, use_library=False, opt_level="disable")
        b = verify.run(str(out), x)
        for k in a:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-5)
    return check


def api(body: str) -> str:
    """A Python snippet using the library: a GeluOnnxError is one line and its exit code."""
    lines = "\n".join("    " + x for x in body.strip().splitlines())
    return ("import sys\nimport gelu_onnx\nfrom gelu_onnx.errors import GeluOnnxError\ntry:\n" + lines +
            "\nexcept GeluOnnxError as e:\n    print('gelu-onnx: error:', e.message, file=sys.stderr)\n"
            "    sys.exit(e.exit_code)\n")


# --- alias: every way an output path can name something precious -------------------


@case("alias")
def _out_symlink_to_input(root):
    src = ext(root / "m")
    (root / "m" / "link.onnx").symlink_to("model.onnx")
    return Attack(["fuse", src, "-o", root / "m" / "link.onnx"], False)


@case("alias")
def _out_hard_link_to_input(root):
    src = ext(root / "m")
    os.link(src, root / "m" / "hl.onnx")
    return Attack(["fuse", src, "-o", root / "m" / "hl.onnx"], False)


@case("alias")
def _out_dot_slash_input(root):
    ext(root / "m")
    return Attack(["fuse", "model.onnx", "-o", "./model.onnx"], False, cwd=root / "m")


@case("alias")
def _out_dotdot_input(root):
    ext(root / "m")
    (root / "other").mkdir()
    return Attack(["fuse", "../m/model.onnx", "-o", "../other/../m/./model.onnx"], False, cwd=root / "other")


@case("alias")
def _out_trailing_slash(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", str(root / "m" / "new.onnx") + "/"], False)


@case("alias")
def _out_is_a_folder(root):
    src = ext(root / "m")
    (root / "out").mkdir()
    return Attack(["fuse", src, "-o", root / "out"], False)


@case("alias", root_only=True)
def _out_through_a_bind_mount_of_the_input_folder(root):
    src = ext(root / "m")
    (root / "bind").mkdir()
    subprocess.run(["mount", "--bind", str(root / "m"), str(root / "bind")], check=True)
    return Attack(["fuse", src, "-o", root / "bind" / "model.onnx"], False,
                  cleanup=lambda: subprocess.run(["umount", str(root / "bind")], check=True))


@case("alias")
def _out_is_the_inputs_data_file(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", root / "m" / "w.bin"], False)


@case("alias")
def _out_is_the_inputs_data_through_a_folder_link(root):
    src = ext(root / "m")
    (root / "link").symlink_to(root / "m")
    return Attack(["fuse", src, "-o", root / "link" / "w.bin"], False)


@case("alias")
def _out_is_another_models_data_same_folder(root):
    src = ext(root / "m")
    ext(root / "m2", data="other.bin", seed=3)
    shutil.move(root / "m2" / "other.bin", root / "m" / "other.bin")
    shutil.move(root / "m2" / "model.onnx", root / "m" / "other.onnx")
    return Attack(["fuse", src, "-o", root / "m" / "other.bin"], False)


@case("alias")
def _out_is_another_models_data_other_folder(root):
    src = ext(root / "m")
    ext(root / "o", data="weights.bin", seed=4)
    return Attack(["fuse", src, "-o", root / "o" / "weights.bin"], False)


@case("alias")
def _out_is_a_users_text_file(root):
    src = ext(root / "m")
    (root / "notes.txt").write_text("my notes\n")
    return Attack(["fuse", src, "-o", root / "notes.txt"], False)


@case("alias")
def _out_in_a_folder_linked_to_the_input_folder(root):
    src = ext(root / "m")
    (root / "link").symlink_to(root / "m")
    return Attack(["fuse", src, "-o", root / "link" / "model.onnx"], False)


@case("alias")
def _out_new_name_in_a_folder_linked_to_the_input_folder(root):
    src = ext(root / "m")
    (root / "link").symlink_to(root / "m")
    return Attack(["fuse", src, "-o", root / "link" / "f.onnx"], True, may_change=(root / "m" / "f.onnx",),
                  after=lambda r: runs_in_ort(root / "m" / "f.onnx"))


@case("alias")
def _out_dangling_symlink(root):
    src = ext(root / "m")
    (root / "out.onnx").symlink_to(root / "nowhere" / "x.onnx")
    return Attack(["fuse", src, "-o", root / "out.onnx"], False)


@case("alias")
def _out_symlink_to_a_previous_output(root):
    src = ext(root / "m")
    (root / "o").mkdir()
    prev = plain(root / "o", "prev.onnx")
    (root / "o" / "latest.onnx").symlink_to("prev.onnx")
    return Attack(["fuse", src, "-o", root / "o" / "latest.onnx"], True,
                  may_change=(prev, root / "o" / "w.bin"),
                  after=lambda r: (os.path.islink(root / "o" / "latest.onnx") and runs_in_ort(prev)))


@case("alias")
def _out_symlink_to_dev_null(root):
    src = ext(root / "m")
    (root / "out.onnx").symlink_to("/dev/null")

    def still_a_device(_r):
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    return Attack(["fuse", src, "-o", root / "out.onnx"], False, after=still_a_device)


@case("alias")
def _out_is_a_fifo(root):
    src = ext(root / "m")
    os.mkfifo(root / "out.onnx")
    return Attack(["fuse", src, "-o", root / "out.onnx"], False, timeout=60)


@case("alias")
def _out_is_a_socket(root):
    src = ext(root / "m")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "out.onnx"))
    return Attack(["fuse", src, "-o", root / "out.onnx"], False, cleanup=s.close)


@case("alias")
def _data_name_taken_by_a_link_to_the_input_data(root):
    """out/w.bin links to the input's w.bin: the output would point back into
    the input folder (not self-contained; our own loader refuses such links)."""
    src = ext(root / "m")
    (root / "out").mkdir()
    (root / "out" / "w.bin").symlink_to(root / "m" / "w.bin")
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], False)


@case("alias")
def _data_name_taken_by_a_dangling_link(root):
    src = ext(root / "m")
    (root / "out").mkdir()
    (root / "out" / "w.bin").symlink_to(root / "nowhere")
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], False)


@case("alias")
def _data_name_taken_by_a_link_to_a_copy(root):
    """Same bytes, but a link to a file elsewhere: not replaced, not used."""
    src = ext(root / "m")
    (root / "out").mkdir()
    (root / "elsewhere").mkdir()
    shutil.copy(root / "m" / "w.bin", root / "elsewhere" / "w.bin")
    (root / "out" / "w.bin").symlink_to(root / "elsewhere" / "w.bin")
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], False)


@case("alias")
def _data_subfolder_name_is_a_file(root):
    src = ext(root / "m", data="sub/w.bin")
    (root / "out").mkdir()
    (root / "out" / "sub").write_text("a file where the data folder would go")
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], False)


@case("alias")
def _data_subfolder_is_a_link_outside(root):
    src = ext(root / "m", data="sub/w.bin")
    (root / "out").mkdir()
    (root / "elsewhere").mkdir()
    (root / "out" / "sub").symlink_to(root / "elsewhere")
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], False)


@case("alias")
def _data_subfolder_made_for_the_copy(root):
    src = ext(root / "m", data="a/b/w.bin")
    (root / "out").mkdir()
    out = root / "out" / "f.onnx"
    return Attack(["fuse", src, "-o", out], True,
                  may_change=(out, root / "out" / "a", root / "out" / "a" / "b", root / "out" / "a" / "b" / "w.bin"),
                  after=lambda r: runs_in_ort(out))


@case("alias")
def _data_copy_keeps_the_sources_permissions(root):
    src = ext(root / "m")
    os.chmod(root / "m" / "w.bin", 0o600)
    (root / "out").mkdir()
    out = root / "out" / "f.onnx"

    def private(_r):
        assert stat.S_IMODE(os.stat(root / "out" / "w.bin").st_mode) == 0o600
    return Attack(["fuse", src, "-o", out], True, may_change=(out, root / "out" / "w.bin"), after=private)


@case("alias")
def _replaced_output_keeps_its_permissions(root):
    src = ext(root / "m")
    (root / "out").mkdir()
    out = plain(root / "out", "f.onnx")
    os.chmod(out, 0o600)

    def kept(_r):
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    return Attack(["fuse", src, "-o", out], True, may_change=(out, root / "out" / "w.bin"), after=kept)


@case("alias")
def _umask_is_respected(root):
    src = ext(root / "m")
    os.chmod(root / "m" / "w.bin", 0o644)
    (root / "out").mkdir()
    out = root / "out" / "f.onnx"

    def masked(_r):
        assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(root / "out" / "w.bin").st_mode) == 0o600
    return Attack(["fuse", src, "-o", out], True, may_change=(out, root / "out" / "w.bin"), after=masked,
                  preexec=lambda: os.umask(0o077))


# --- save: check --save-inputs / --save-outputs ---------------------------------------


@case("save")
def _save_inputs_through_a_link_to_the_model(root):
    a, b = fused(root)
    (root / "s.npz").symlink_to(a)
    return Attack(["check", a, b, "--save-inputs", root / "s.npz"], False)


@case("save")
def _save_outputs_over_the_inputs_file(root):
    a, b = fused(root)
    inp = npz(root / "in.npz", **feeds())
    return Attack(["check", a, b, "--inputs", inp, "--save-outputs", inp], False)


@case("save")
def _save_inputs_and_outputs_same_file_through_a_link(root):
    a, b = fused(root)
    (root / "o.json").symlink_to("i.json")
    return Attack(["check", a, b, "--save-inputs", root / "i.json", "--save-outputs", root / "o.json"], False)


@case("save")
def _save_inputs_over_the_models_data_through_a_folder_link(root):
    a, b = fused(root)
    (root / "link").symlink_to(root / "m")
    return Attack(["check", a, b, "--save-inputs", root / "link" / "w.bin"], False)


@case("save")
def _save_inputs_dangling_link(root):
    a, b = fused(root)
    (root / "s.npz").symlink_to(root / "nowhere" / "s.npz")
    return Attack(["check", a, b, "--save-inputs", root / "s.npz"], False)


@case("save")
def _save_outputs_link_to_dev_null(root):
    a, b = fused(root)
    (root / "o.json").symlink_to("/dev/null")
    return Attack(["check", a, b, "--save-outputs", root / "o.json"], False)


@case("save")
def _save_outputs_over_a_users_text_file(root):
    a, b = fused(root)
    (root / "report.txt").write_text("keep me")
    return Attack(["check", a, b, "--save-outputs", root / "report.txt"], False)


@case("save")
def _save_inputs_over_a_previous_save(root):
    a, b = fused(root)
    prev = npz(root / "s.npz", x=np.zeros((1, EXTERNAL_H), np.float32))
    return Attack(["check", a, b, "--save-inputs", prev], True, may_change=(prev,))


@case("save")
def _save_inputs_is_a_folder(root):
    a, b = fused(root)
    (root / "d.npz").mkdir()
    return Attack(["check", a, b, "--save-inputs", root / "d.npz"], False)


@case("save")
def _failed_check_keeps_the_previous_save(root):
    """The fused model is one ONNX Runtime cannot load: the check fails after
    the feeds were made; the previous --save-inputs file stays as it was."""
    a = ext(root / "m")
    b = raw(root / "m" / "bad.onnx", model([h.make_node("Foo", ["x"], ["y"], domain="acme")], domains=["acme"],
                                          inputs=[h.make_tensor_value_info("x", T.FLOAT, ["n", EXTERNAL_H])],
                                          outputs=[h.make_tensor_value_info("y", T.FLOAT, ["n", EXTERNAL_H])]))
    prev = npz(root / "s.npz", x=np.zeros((1, EXTERNAL_H), np.float32))
    return Attack(["check", a, b, "--save-inputs", prev], False)


@case("save")
def _save_outputs_trailing_slash(root):
    a, b = fused(root)
    return Attack(["check", a, b, "--save-outputs", str(root / "o.json") + "/"], False)


# --- device: devices, FIFOs, sockets, /proc as inputs -------------------------------


@case("device")
def _fuse_dev_zero(root):
    return Attack(["fuse", "/dev/zero", "-o", root / "o.onnx"], False)


@case("device")
def _inspect_a_fifo(root):
    os.mkfifo(root / "m.onnx")
    return Attack(["inspect", root / "m.onnx"], False, timeout=60)


@case("device")
def _check_inputs_a_fifo(root):
    a, b = fused(root)
    os.mkfifo(root / "in.npz")
    return Attack(["check", a, b, "--inputs", root / "in.npz"], False, timeout=60)


@case("device")
def _check_golden_dev_urandom(root):
    a, b = fused(root)
    return Attack(["check", b, "--inputs", npz(root / "in.npz", **feeds()), "--reference-outputs", "/dev/urandom"],
                  False)


@case("device")
def _bench_a_fifo(root):
    os.mkfifo(root / "m.onnx")
    return Attack(["bench", root / "m.onnx", "--repeats", "1"], False, timeout=60)


@case("device")
def _fuse_proc_file(root):
    return Attack(["fuse", "/proc/self/status", "-o", root / "o.onnx"], False)


@case("device")
def _check_proc_file_as_fused(root):
    a, _ = fused(root)
    return Attack(["check", a, "/proc/self/cmdline"], False)


@case("device")
def _inspect_a_socket(root):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(root / "m.onnx"))
    return Attack(["inspect", root / "m.onnx"], False, cleanup=s.close)


@case("device")
def _check_inputs_proc_file(root):
    a, b = fused(root)
    return Attack(["check", a, b, "--inputs", "/proc/self/environ"], False)


@case("device")
def _fuse_input_with_trailing_slash(root):
    src = ext(root / "m")
    return Attack(["fuse", str(src) + "/", "-o", root / "o.onnx"], False)


# --- fault: a full or read-only output folder, the > 2 GB split ------------------------

SPLIT = {"GELU_ONNX_TEST_MAX_PROTO_BYTES": "8192"}  # the > 2 GB path, on a 16 KiB model


def tmpfs(root: Path, size: str, fault: str | None):
    """root/mnt: a real tmpfs of ``size``, made full (4 KiB left) or read-only
    once the case's files are in place (call the returned function)."""
    mnt = root / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)

    def arm():
        if fault == "full":
            with open(mnt / "filler", "wb") as f:
                try:
                    f.write(b"\0" * (64 << 20))
                except OSError:
                    pass
            os.truncate(mnt / "filler", os.path.getsize(mnt / "filler") - (4 << 10))
        elif fault == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    return mnt, arm, lambda: subprocess.run(["umount", str(mnt)], capture_output=True)


def _split_into(fault):
    def build(root):
        src = matmul_gelu_model(np.full((64, 64), 0.01, np.float32), root / "m" / "model.onnx")
        mnt, arm, umount = tmpfs(root, "256k", fault)
        prev = plain(mnt, "f.onnx")
        arm()
        return Attack(["fuse", src, "-o", prev], False, env=SPLIT, cleanup=umount)
    return build


for _fault in ("full", "read-only"):
    register(f"fault/split_path_into_a_{_fault.replace('-', '_')}_folder", _split_into(_fault), root_only=True)


@case("fault", root_only=True)
def _data_subfolders_into_a_full_folder(root):
    src = ext(root / "m", data="a/b/w.bin")
    mnt, arm, umount = tmpfs(root, "256k", "full")
    arm()
    return Attack(["fuse", src, "-o", mnt / "f.onnx"], False, cleanup=umount)


@case("fault", root_only=True)
def _save_outputs_into_a_full_folder(root):
    a, b = fused(root)
    mnt, arm, umount = tmpfs(root, "256k", "full")
    (mnt / "o.json").write_text("{}")
    arm()
    return Attack(["check", a, b, "--save-outputs", mnt / "o.json", "--dim", "n=64"], False, cleanup=umount)


@case("fault")
def _split_data_name_taken_by_a_users_file(root):
    """<out>.data exists but is no companion of <out>: a new .1.data name."""
    src = matmul_gelu_model(np.full((64, 64), 0.01, np.float32), root / "m" / "model.onnx")
    (root / "out").mkdir()
    (root / "out" / "f.onnx.data").write_bytes(b"a user's file")
    out = root / "out" / "f.onnx"

    def named(_r):
        m = onnx.load(str(out), load_external_data=False)
        locs = {e.value for t in m.graph.initializer for e in t.external_data if e.key == "location"}
        assert locs == {"f.onnx.1.data"}, locs
        runs_in_ort(out)
    return Attack(["fuse", src, "-o", out], True, env=SPLIT, may_change=(out, root / "out" / "f.onnx.1.data"),
                  after=named)


@case("fault")
def _split_data_name_of_a_model_that_does_not_use_it(root):
    """<out> exists but does not reference <out>.data: the data file is someone else's."""
    src = matmul_gelu_model(np.full((64, 64), 0.01, np.float32), root / "m" / "model.onnx")
    (root / "out").mkdir()
    out = plain(root / "out", "f.onnx")
    (root / "out" / "f.onnx.data").write_bytes(b"another model's weights")
    return Attack(["fuse", src, "-o", out], True, env=SPLIT, may_change=(out, root / "out" / "f.onnx.1.data"),
                  after=lambda r: runs_in_ort(out))


@case("fault")
def _split_replaces_its_own_companion(root):
    src = matmul_gelu_model(np.full((64, 64), 0.01, np.float32), root / "m" / "model.onnx")
    (root / "out").mkdir()
    out = root / "out" / "f.onnx"
    subprocess.run([os.sys.executable, "-m", "gelu_onnx", "fuse", str(src), "-o", str(out)], check=True,
                   capture_output=True, env={**os.environ, **SPLIT})
    assert (root / "out" / "f.onnx.data").is_file()
    return Attack(["fuse", src, "-o", out, "--target", "standard"], True, env=SPLIT,
                  may_change=(out, root / "out" / "f.onnx.data"), after=lambda r: runs_in_ort(out))


# --- signal: SIGTERM / SIGINT / SIGHUP at named points of a write -----------------------


def _previous_output(root: Path) -> tuple[Path, Path]:
    """An external model and a previous output in root/out (a model file:
    this write copies the data file there and replaces the model)."""
    src = ext(root / "m")
    out = root / "out" / "f.onnx"
    out.parent.mkdir()
    plain(out.parent, "f.onnx")
    return src, out


def _at(point: str, sig: str, *, previous: bool = True, target: str = "custom"):
    def build(root):
        if previous:
            src, out = _previous_output(root)
        else:
            src, out = ext(root / "m"), root / "out" / "f.onnx"
            out.parent.mkdir()
        return Attack(["fuse", src, "-o", out, "--target", target], None, signalled=True,
                      env={"GELU_ONNX_TEST_FAULT": f"{point}={sig}"})
    return build


for _point, _sig, _prev in (("write:start", "SIGTERM", True), ("write:data-copied", "SIGINT", True),
                            ("write:before-rename", "SIGHUP", True), ("write:data-renamed", "SIGTERM", True),
                            ("write:checker", "SIGTERM", True), ("write:data-renamed", "SIGINT", False),
                            ("write:checker", "SIGHUP", False)):
    _n = f"signal/{_sig}_at_{_point.replace(':', '_').replace('-', '_')}" + ("" if _prev else "_new_output")
    register(_n, _at(_point, _sig, previous=_prev))


@case("signal")
def _second_signal_during_the_rollback(root):
    src, out = _previous_output(root)
    return Attack(["fuse", src, "-o", out], None, signalled=True,
                  env={"GELU_ONNX_TEST_FAULT": "write:checker=SIGTERM,write:rollback=SIGINT"})


@case("signal")
def _sigterm_mid_copy_on_the_splice_path(root):
    src = big_model(root / "m")
    (root / "out").mkdir()
    prev = plain(root / "out", "f.onnx")
    return Attack(["fuse", src, "-o", prev], None, signalled=True, env={"GELU_ONNX_TEST_FAULT": "write:copy=SIGTERM"},
                  max_rss_mib=400)


@case("signal")
def _sigterm_on_the_split_path(root):
    src = matmul_gelu_model(np.full((64, 64), 0.01, np.float32), root / "m" / "model.onnx")
    (root / "out").mkdir()
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], None, signalled=True,
                  env={**SPLIT, "GELU_ONNX_TEST_FAULT": "write:before-rename=SIGTERM"})


@case("signal")
def _sigterm_after_the_split_data_replaced_its_companion(root):
    """A previous split output (f.onnx + f.onnx.data) is replaced: the signal
    lands after the new .data took the old one's place; both come back."""
    src = matmul_gelu_model(np.full((64, 64), 0.01, np.float32), root / "m" / "model.onnx")
    (root / "out").mkdir()
    out = root / "out" / "f.onnx"
    subprocess.run([os.sys.executable, "-m", "gelu_onnx", "fuse", str(src), "-o", str(out), "--target", "standard"],
                   check=True, capture_output=True, env={**os.environ, **SPLIT})
    return Attack(["fuse", src, "-o", out], None, signalled=True,
                  env={**SPLIT, "GELU_ONNX_TEST_FAULT": "write:data-renamed=SIGTERM"})


@case("signal")
def _sigterm_while_saving_inputs(root):
    a, b = fused(root)
    prev = npz(root / "s.npz", x=np.zeros((1, EXTERNAL_H), np.float32))
    return Attack(["check", a, b, "--save-inputs", prev], None, signalled=True,
                  env={"GELU_ONNX_TEST_FAULT": "save:written=SIGTERM"})


@case("signal")
def _sighup_ignored_by_nohup_is_ignored(root):
    src = ext(root / "m")
    out = root / "out" / "f.onnx"
    out.parent.mkdir()
    import signal as s

    return Attack(["fuse", src, "-o", out], True, may_change=(out, root / "out" / "w.bin"),
                  env={"GELU_ONNX_TEST_FAULT": "write:data-copied=SIGHUP"},
                  preexec=lambda: s.signal(s.SIGHUP, s.SIG_IGN))


@case("signal")
def _library_write_killed_by_sigterm_leaves_nothing(root):
    """No CLI: a program using fuse_file gets SIGTERM mid-write; it still dies
    of SIGTERM, and no temp file is left."""
    src, out = _previous_output(root)
    return Attack([], None, signalled=True, env={"GELU_ONNX_TEST_FAULT": "write:data-copied=SIGTERM"},
                  python=f"import gelu_onnx\ngelu_onnx.fuse_file({str(src)!r}, {str(out)!r})\n")


def _timed(delay: float):
    def build(root):
        src = big_external(root / "m")
        out = root / "out" / "f.onnx"
        out.parent.mkdir()

        def whole(_r):  # nothing new, or the complete output (the signal came after the commit)
            if (root / "out" / "w.bin").exists() or out.exists():
                runs_in_ort(out)
        return Attack(["fuse", src, "-o", out], None, signal_after=delay,
                      may_change=(out, root / "out" / "w.bin"), max_rss_mib=500, after=whole)
    return build


for _d in (0.4, 0.8, 1.2):
    register(f"signal/sigterm_after_{int(_d * 1000)}ms", _timed(_d))


@case("signal")
def _model_truncated_while_it_is_read(root):
    src = ext(root / "m")
    return Attack(["inspect", src], False, env={"GELU_ONNX_TEST_FAULT": "read:opened=SIGSTOP"},
                  while_stopped=lambda: os.truncate(src, os.path.getsize(src) // 2), mutated=(src,))


@case("signal")
def _big_model_truncated_after_its_scan(root):
    src = big_model(root / "m")
    (root / "out").mkdir()
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], False,
                  env={"GELU_ONNX_TEST_FAULT": "read:scanned=SIGSTOP"},
                  while_stopped=lambda: os.truncate(src, 1 << 20), mutated=(src,), max_rss_mib=400)


@case("signal")
def _data_file_truncated_before_the_copy(root):
    src = ext(root / "m")
    (root / "out").mkdir()
    data = root / "m" / "w.bin"
    return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], False,
                  env={"GELU_ONNX_TEST_FAULT": "write:start=SIGSTOP"},
                  while_stopped=lambda: os.truncate(data, 100), mutated=(data,))


_BIG: dict = {}
_BIG_LOCK = threading.Lock()


def _cached(key: str, make, folder: Path, names: tuple) -> Path:
    """Big inputs are made once per session and copied (reflink where possible)."""
    with _BIG_LOCK:
        _make_once(key, make)
    folder.mkdir(parents=True, exist_ok=True)
    for n in names:
        subprocess.run(["cp", "--reflink=auto", str(_BIG[key] / n), str(folder / n)], check=True)
    return folder / names[0]


def _make_once(key: str, make) -> None:
    if key not in _BIG:
        import tempfile

        import atexit

        d = Path(tempfile.mkdtemp(prefix=f"gelu-onnx-{key}-"))
        atexit.register(shutil.rmtree, d, True)
        make(d)
        _BIG[key] = d


def big_model(folder: Path) -> Path:
    """67 MiB single-file model: the splice path."""
    return _cached("splice", lambda d: matmul_gelu_model(np.full((4200, 4200), 0.01, np.float32), d / "model.onnx"),
                   folder, ("model.onnx",))


def big_external(folder: Path) -> Path:
    """64 MiB of external data: the copy takes a while."""
    return _cached("external", lambda d: matmul_gelu_model(np.full((4096, 4096), 0.01, np.float32),
                                                            d / "model.onnx", "w.bin"), folder,
                   ("model.onnx", "w.bin"))


# --- bomb: structural bombs ---------------------------------------------------------------


def _nested_if(depth: int) -> onnx.ModelProto:
    """A GELU inside ``depth`` nested If branches (each If: cond -> then/else)."""
    inner = h.make_graph(erf_chain("x", "s2", "y0"), "b0", [], [h.make_tensor_value_info("y0", T.FLOAT, [3, 4])])
    for k in range(1, depth + 1):
        other = h.make_graph([h.make_node("Identity", ["x"], [f"z{k}"])], f"e{k}", [],
                             [h.make_tensor_value_info(f"z{k}", T.FLOAT, [3, 4])])
        node = h.make_node("If", ["c"], [f"y{k}"], then_branch=inner, else_branch=other, name=f"if{k}")
        inner = h.make_graph([node], f"b{k}", [], [h.make_tensor_value_info(f"y{k}", T.FLOAT, [3, 4])])
    top = [h.make_node("Identity", [f"y{depth}"], ["y"])]
    return model(inner.node[:] + top, consts("one", "half", "s2"),
                 inputs=[IO[0][0], h.make_tensor_value_info("c", T.BOOL, [])])


@case("bomb")
def _gelu_in_20_nested_ifs(root):
    src = raw(root / "m.onnx", _nested_if(20))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",))


def _ld(field: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (protobuf's Python API refuses to
    build messages this deep, so the bomb is written by hand)."""
    def varint(v):
        out = bytearray()
        while v >= 0x80:
            out.append(v & 0x7F | 0x80)
            v >>= 7
        return bytes(out + bytes([v]))
    return varint(field << 3 | 2) + varint(len(payload)) + payload


@case("bomb")
def _200_nested_ifs(root):
    vi = lambda n: _ld(1, n.encode())  # noqa: E731 - ValueInfoProto.name
    graph = _ld(1, _ld(1, b"x") + _ld(2, b"y0") + _ld(4, b"Identity")) + _ld(2, b"g0") + _ld(12, vi("y0"))
    for k in range(1, 201):  # GraphProto{node: If(c, then_branch=<graph>), output}
        attr = _ld(1, b"then_branch") + _ld(6, graph) + bytes([0xA0, 0x01, 5])  # type = GRAPH
        node = _ld(1, b"c") + _ld(2, f"y{k}".encode()) + _ld(4, b"If") + _ld(5, attr)
        graph = _ld(1, node) + _ld(2, f"g{k}".encode()) + _ld(12, vi(f"y{k}"))
    head = model([h.make_node("Identity", ["x"], ["y"])])
    head.ClearField("graph")
    (root / "m.onnx").write_bytes(head.SerializeToString() + _ld(7, graph))
    return Attack(["fuse", root / "m.onnx", "-o", root / "f.onnx"], False)


@case("bomb")
def _100k_inputs_and_outputs(root):
    n = 100_000
    ins = [h.make_tensor_value_info(f"i{k}", T.FLOAT, [1]) for k in range(n)]
    outs = [h.make_tensor_value_info(f"o{k}", T.FLOAT, [1]) for k in range(n)]
    nodes = [h.make_node("Identity", [f"i{k}"], [f"o{k}"]) for k in range(n)]
    src = raw(root / "m.onnx", model(nodes, inputs=ins, outputs=outs))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",), timeout=120)


@case("bomb")
def _a_million_ints_in_one_attribute(root):
    shape = h.make_node("Constant", [], ["shape"], value_ints=[1] * 1_000_000)
    nodes = [shape, h.make_node("Identity", ["shape"], ["z"])] + erf_chain("x", "s2")
    src = raw(root / "m.onnx", model(nodes, consts("one", "half", "s2"),
                                     outputs=[IO[1][0], h.make_tensor_value_info("z", T.INT64, [1_000_000])]))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",))


@case("bomb")
def _value_info_declaring_2_to_62(root):
    m = model(erf_chain("x", "s2"), consts("one", "half", "s2"))
    m.graph.value_info.append(h.make_tensor_value_info("d", T.FLOAT, [1 << 62, 1 << 62]))
    return Attack(["fuse", raw(root / "m.onnx", m), "-o", root / "f.onnx"], False)


@case("bomb")
def _tensor_dims_past_2_to_63(root):
    w = onnx.TensorProto(name="W", data_type=T.FLOAT, dims=[1 << 32, 1 << 32, 4])
    m = model([h.make_node("Add", ["x", "W"], ["y"])], [w])
    return Attack(["fuse", raw(root / "m.onnx", m), "-o", root / "f.onnx"], False)


def _external_entry(root, **entries):
    src = ext(root / "m")
    m = onnx.load(str(src), load_external_data=False)
    t = m.graph.initializer[0]
    info = {e.key: e.value for e in t.external_data}
    info.update(entries)
    del t.external_data[:]
    for k, v in info.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return raw(src, m)


@case("bomb")
def _external_offset_near_2_to_63(root):
    src = _external_entry(root, offset=str(2**63 - 16))
    return Attack(["fuse", src, "-o", root / "f.onnx"], False)


@case("bomb")
def _external_length_2_to_64(root):
    src = _external_entry(root, length=str(2**64))
    return Attack(["inspect", src], False)


@case("bomb")
def _external_offset_negative(root):
    src = _external_entry(root, offset="-4096")
    return Attack(["check", src, src], False)


def _function_chain(n: int, recursive_via_if: bool = False) -> onnx.ModelProto:
    fs = []
    for k in range(n):
        if k == n - 1:
            body = [h.make_node("Constant", [], [c], value_float=v) for c, v in (("s2", SQRT2), ("one", 1.0),
                                                                                   ("half", 0.5))]
            body += erf_chain("a", "s2", "b")
            if recursive_via_if:
                call = h.make_graph([h.make_node("F0", ["a"], ["r"], domain="loc")], "g",
                                    [], [h.make_tensor_value_info("r", T.FLOAT, None)])
                body = [h.make_node("Constant", [], ["c"], value=h.make_tensor("c", T.BOOL, [], [False])),
                        h.make_node("If", ["c"], ["b"], then_branch=call,
                                    else_branch=h.make_graph(body, "e", [], [h.make_tensor_value_info("b", T.FLOAT,
                                                                                                    None)]))]
        else:
            body = [h.make_node(f"F{k + 1}", ["a"], ["b"], domain="loc")]
        fs.append(h.make_function("loc", f"F{k}", ["a"], ["b"], body, [h.make_opsetid("", 17),
                                                                     h.make_opsetid("loc", 1)]))
    return model([h.make_node("F0", ["x"], ["y"], domain="loc")], functions=fs, domains=["loc"])


@case("bomb")
def _3000_functions_calling_each_other(root):
    src = raw(root / "m.onnx", _function_chain(3000))
    return Attack(["fuse", src, "-o", root / "f.onnx"], None, may_change=(root / "f.onnx",), timeout=120)


@case("bomb")
def _function_recursion_through_a_subgraph(root):
    src = raw(root / "m.onnx", _function_chain(3, recursive_via_if=True))
    return Attack(["fuse", src, "-o", root / "f.onnx"], False)


@case("bomb")
def _a_10_mb_tensor_name(root):
    name = "n" * (10 << 20)
    m = model(erf_chain("x", "s2", name) + [h.make_node("Identity", [name], ["y"])], consts("one", "half", "s2"))
    src = raw(root / "m.onnx", m)
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",),
                  after=same_function(src, root / "f.onnx"))


@case("bomb")
def _a_10_mb_name_in_an_error(root):
    name = "\n" + "n" * (10 << 20)
    m = model([h.make_node("Identity", [name], ["y"])])
    src = raw(root / "m.onnx", m)
    return Attack(["inspect", src], False, after=lambda r: _short(r.stderr))


def _short(err: bytes):
    assert len(err) < 4096, f"an error line of {len(err)} bytes"


@case("bomb")
def _sqrt2_behind_20000_identities(root):
    nodes = [h.make_node("Constant", [], ["s0"], value_float=SQRT2)]
    nodes += [h.make_node("Identity", [f"s{k}"], [f"s{k + 1}"]) for k in range(20000)]
    src = raw(root / "m.onnx", model(nodes + erf_chain("x", "s20000"), consts()))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",),
                  after=same_function(src, root / "f.onnx"))


@case("bomb")
def _sparse_initializer_of_2_to_40_elements(root):
    sp = h.make_sparse_tensor(h.make_tensor("big", T.FLOAT, [1], [1.0]), h.make_tensor("i", T.INT64, [1], [0]),
                              [1 << 40])
    m = model(erf_chain("x", "s2"), consts("one", "half", "s2"))
    m.graph.sparse_initializer.append(sp)
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src], None, max_rss_mib=800)


@case("bomb")
def _sqrt2_expanded_to_2_to_40_elements(root):
    nodes = [h.make_node("Constant", [], ["shape"], value_ints=[1 << 20, 1 << 20]),
             h.make_node("Expand", ["c", "shape"], ["s2"])]
    m = model(nodes + erf_chain("x", "s2"), consts() + [h.make_tensor("c", T.FLOAT, [], [SQRT2])])
    m.graph.output[0].type.tensor_type.shape.Clear()
    src = raw(root / "m.onnx", m)
    return Attack(["fuse", src, "-o", root / "f.onnx"], None, may_change=(root / "f.onnx",))


@case("bomb")
def _constant_of_shape_2_to_40(root):
    nodes = [h.make_node("Constant", [], ["shape"], value_ints=[1 << 40]),
             h.make_node("ConstantOfShape", ["shape"], ["half"], value=h.make_tensor("v", T.FLOAT, [1], [0.5]))]
    m = model(nodes + erf_chain("x", "s2"), consts("one", "s2"))
    m.graph.output[0].type.tensor_type.shape.Clear()
    src = raw(root / "m.onnx", m)
    return Attack(["inspect", src], None)


@case("bomb")
def _deep_add_chain_of_20000_nodes(root):
    nodes = [h.make_node("Add", [f"t{k}" if k else "x", "one"], [f"t{k + 1}"]) for k in range(20000)]
    nodes += erf_chain("t20000", "s2")
    src = raw(root / "m.onnx", model(nodes, consts("one", "half", "s2")))
    return Attack(["fuse", src, "-o", root / "f.onnx"], True, may_change=(root / "f.onnx",), timeout=120)


# --- const: read what the runtime reads ------------------------------------------------------


def _fuse_and_compare(root, m, valid=True, shape=(3, 4)):
    src = raw(root / "m.onnx", m)
    out = root / "f.onnx"
    return Attack(["fuse", src, "-o", out], valid, may_change=(out,), after=same_function(src, out, shape))


@case("const")
def _float_data_longer_than_dims(root):
    t = onnx.TensorProto(name="s2", data_type=T.FLOAT, dims=[])
    t.float_data.extend([SQRT2, 3.0])
    return _fuse_and_compare(root, model(erf_chain("x", "s2"), consts() + [t]), False)


@case("const")
def _raw_data_longer_than_dims(root):
    t = onnx.TensorProto(name="s2", data_type=T.FLOAT, dims=[], raw_data=np.array([SQRT2, 3], np.float32).tobytes())
    return _fuse_and_compare(root, model(erf_chain("x", "s2"), consts() + [t]), False)


@case("const")
def _raw_data_and_float_data_both(root):
    t = h.make_tensor("s2", T.FLOAT, [], [3.0])
    t.raw_data = np.float32(SQRT2).tobytes()
    return _fuse_and_compare(root, model(erf_chain("x", "s2"), consts() + [t]), False)


@case("const")
def _constant_with_value_twice(root):
    c = h.make_node("Constant", [], ["s2"], value=h.make_tensor("v", T.FLOAT, [], [3.0]))
    c.attribute.append(h.make_attribute("value", h.make_tensor("v", T.FLOAT, [], [SQRT2])))
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()), False)


@case("const")
def _sqrt2_as_a_sparse_constant(root):
    sp = h.make_sparse_tensor(h.make_tensor("v", T.FLOAT, [1], [SQRT2]), h.make_tensor("i", T.INT64, [1], [0]), [1])
    c = h.make_node("Constant", [], ["s2"], sparse_value=sp)
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()))


@case("const")
def _sqrt2_as_value_floats(root):
    c = h.make_node("Constant", [], ["s2"], value_floats=[SQRT2])
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()))


@case("const")
def _branch_initializer_shadows_the_outer_constant(root):
    """Inside the branch, s2 is the branch's own initializer (3.0), not the outer sqrt(2)."""
    branch = h.make_graph(erf_chain("x", "s2", "yb"), "b", [], [h.make_tensor_value_info("yb", T.FLOAT, [3, 4])],
                          [h.make_tensor("s2", T.FLOAT, [], [3.0])])
    nodes = [h.make_node("Constant", [], ["c"], value=h.make_tensor("c", T.BOOL, [], [True])),
             h.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    return _fuse_and_compare(root, model(nodes, consts("one", "half", "s2")), None)


@case("const")
def _constant_value_in_an_external_file(root):
    root.mkdir(exist_ok=True)
    (root / "c.bin").write_bytes(np.float32(SQRT2).tobytes())
    t = onnx.TensorProto(name="v", data_type=T.FLOAT, dims=[], data_location=T.EXTERNAL)
    for k, v in (("location", "c.bin"), ("offset", "0"), ("length", "4")):
        e = t.external_data.add()
        e.key, e.value = k, v
    c = h.make_node("Constant", [], ["s2"], value=t)
    a = _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()))
    return a


@case("const")
def _half_as_a_rank_5_ones_tensor(root):
    """[1,1,1,1,1] broadcasts y to rank 5: fusing it as a scalar would change the output shape."""
    m = model(erf_chain("x", "s2"), [h.make_tensor("half", T.FLOAT, [1, 1, 1, 1, 1], [0.5]),
                                     *consts("one", "s2")])
    m.graph.output[0].type.tensor_type.shape.Clear()
    return _fuse_and_compare(root, m, None)


@case("const")
def _half_broadcasting_to_a_new_leading_dim(root):
    m = model(erf_chain("x", "s2"), [h.make_tensor("half", T.FLOAT, [2, 1, 1], [0.5, 0.5]), *consts("one", "s2")])
    m.graph.output[0].type.tensor_type.shape.Clear()
    return _fuse_and_compare(root, m, None)


@case("const")
def _sqrt2_as_a_double_constant_in_a_float_graph(root):
    c = h.make_node("Constant", [], ["s2"], value=h.make_tensor("v", T.DOUBLE, [], [SQRT2]))
    return _fuse_and_compare(root, model([c] + erf_chain("x", "s2"), consts()), False)


# --- names: non-UTF-8 and over-long paths, strict output encodings ----------------------------

STRICT = {"LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8:strict"}


def _odd(root: Path, name: bytes) -> bytes:
    src = ext(root / "m")
    odd = os.fsencode(root / "m") + b"/" + name
    os.rename(src, odd)
    return odd


@case("names")
def _fuse_a_non_utf8_path_under_a_strict_locale(root):
    odd = _odd(root, b"\xff\xfe.onnx")
    out = os.fsencode(root / "m") + b"/\xfe-out.onnx"
    return Attack([b"fuse", odd, b"-o", out], True, env=STRICT, may_change=(os.fsdecode(out),))


@case("names")
def _inspect_json_of_a_non_utf8_path(root):
    odd = _odd(root, b"mod\xe9le.onnx")
    return Attack([b"inspect", odd, b"--json"], True, env=STRICT, after=lambda r: json.loads(r.stdout))


@case("names")
def _check_saving_to_a_non_utf8_path(root):
    a, b = fused(root)
    save = os.fsencode(root) + b"/\xff.npz"
    return Attack([b"check", os.fsencode(a), os.fsencode(b), b"--save-inputs", save], True, env=STRICT,
                  may_change=(os.fsdecode(save),))


@case("names")
def _missing_file_with_a_newline_in_its_name(root):
    return Attack(["inspect", str(root / "a\nb.onnx")], False, env=STRICT)


@case("names")
def _output_name_of_250_characters(root):
    src = ext(root / "m")
    out = root / ("o" * 245 + ".onnx")
    return Attack(["fuse", src, "-o", out], True, may_change=(out, root / "w.bin"))


@case("names")
def _output_name_of_300_characters(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", root / ("o" * 295 + ".onnx")], False)


@case("names")
def _output_path_of_5000_characters(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", str(root) + "/a" * 2500 + ".onnx"], False)


@case("names")
def _ascii_locale_and_a_utf8_path(root):
    odd = _odd(root, "modèle-µ.onnx".encode())
    return Attack([b"fuse", odd, b"-o", os.fsencode(root) + "/sortie-é.onnx".encode()], True,
                  env={"LC_ALL": "C", "LANG": "C", "PYTHONIOENCODING": "ascii:strict"},
                  may_change=(os.fsdecode(os.fsencode(root) + "/sortie-é.onnx".encode()), root / "w.bin"))


@case("names")
def _non_utf8_bytes_in_a_node_name(root):
    m = model([h.make_node("Identity", ["x"], ["y"])])
    data = m.SerializeToString().replace(b"Identity", b"Ident\xffty")
    (root / "m.onnx").write_bytes(data)
    return Attack(["inspect", root / "m.onnx"], False, env=STRICT)


@case("names")
def _usage_error_is_one_line(root):
    src = ext(root / "m")
    return Attack(["fuse", src], False)


@case("names")
def _unknown_target_is_one_line(root):
    src = ext(root / "m")
    return Attack(["fuse", src, "-o", root / "f.onnx", "--target", "nope"], False)


# --- check: hostile feeds, golden files, and bench ---------------------------------------------


@case("check")
def _nan_and_inf_feeds(root):
    a, b = fused(root)
    x = feeds(4)["x"]
    x[0, :4] = [np.nan, np.inf, -np.inf, np.nan]
    return Attack(["check", a, b, "--inputs", npz(root / "in.npz", x=x)], None)


@case("check")
def _zero_size_dim(root):
    a, b = fused(root)
    return Attack(["check", a, b, "--dim", "n=0"], True)


@case("check")
def _zero_size_feed_file(root):
    a, b = fused(root)
    return Attack(["check", a, b, "--inputs", npz(root / "in.npz", x=np.zeros((0, EXTERNAL_H), np.float32))], True)


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
    return Attack([], False, python=code)


@case("check")
def _onnxruntime_warning_about_an_overridable_initializer(root):
    """An initializer listed as a graph input (IR >= 4): ONNX Runtime warns at load."""
    m = model([h.make_node("Add", ["x", "b"], ["y"])], [h.make_tensor("b", T.FLOAT, [4], [1, 2, 3, 4])])
    m.graph.input.append(h.make_tensor_value_info("b", T.FLOAT, [4]))
    src = raw(root / "m.onnx", m)
    return Attack(["check", src, src], True)


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
