"""The hostile suite, groups alias (every way an output path can name
something precious), save (check --save-inputs/--save-outputs) and device
(devices, FIFOs, sockets, /proc as inputs)."""
from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

from helpers.hostile.judge import Attack
from helpers.hostile.cases import (case, ext, plain, raw, model, npz, feeds, fused, runs_in_ort)
from helpers.model_helpers import EXTERNAL_H


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
def _out_symlink_to_a_model_in_another_folder(root):
    """A link planted to aim the write elsewhere: never followed out of its folder."""
    src = ext(root / "m")
    (root / "o").mkdir()
    elsewhere = plain(root / "elsewhere", "precious.onnx")
    (root / "o" / "out.onnx").symlink_to(elsewhere)
    return Attack(["fuse", src, "-o", root / "o" / "out.onnx"], False)


@case("alias")
def _out_is_a_symlink_loop(root):
    src = ext(root / "m")
    (root / "b").symlink_to("c")
    (root / "c").symlink_to("b")
    return Attack(["fuse", src, "-o", root / "b"], False)


@case("alias")
def _out_inside_a_symlink_loop(root):
    src = ext(root / "m")
    (root / "b").symlink_to("c")
    (root / "c").symlink_to("b")
    return Attack(["fuse", src, "-o", root / "b" / "x.onnx"], False)


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
