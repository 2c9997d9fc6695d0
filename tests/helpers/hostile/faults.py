"""The hostile suite, groups fault (a full or read-only tmpfs, the
> 2 GB split's data-file naming) and signal (SIGTERM/SIGINT/SIGHUP at named
points of a write, files truncated while read)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import onnx

from helpers.hostile.judge import Attack
from helpers.hostile.cases import (SPLIT, big_external, big_model, case, ext, fused, npz, plain, register,
                                   runs_in_ort, tmpfs)
from helpers.model_helpers import EXTERNAL_H, matmul_gelu_model


# --- fault: a full or read-only output folder, the > 2 GB split ------------------------

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


def _early(sig: str, delay: float):
    """While the command is still importing numpy and onnx: one line, no
    KeyboardInterrupt traceback (the handlers come first, gelu_onnx/__main__.py)."""
    def build(root):
        src = ext(root / "m")
        (root / "out").mkdir()
        return Attack(["fuse", src, "-o", root / "out" / "f.onnx"], None, signal_after=delay, signal_name=sig,
                      may_change=(root / "out" / "f.onnx", root / "out" / "w.bin"))
    return build


for _sig in ("SIGINT", "SIGTERM"):
    register(f"signal/{_sig.lower()}_during_the_imports", _early(_sig, 0.15))


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
