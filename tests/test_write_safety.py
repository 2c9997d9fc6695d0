"""Nothing the user had is destroyed by a write (issue: never lose a file).

Each case runs the real CLI in a child process and compares every
pre-existing file byte for byte afterwards."""
from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from gelu_onnx import onnxio
from helpers.model_helpers import external_model

REPO = Path(__file__).resolve().parents[1]


def gelu(*args, env=None):
    e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True,
                          env=e, timeout=300)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def one_line_exit2(r):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


def test_output_named_as_the_models_data_file_is_refused(tmp_path):
    src = external_model(tmp_path / "in")
    (tmp_path / "out").mkdir()
    before = snapshot(tmp_path)
    one_line_exit2(gelu("fuse", src, "-o", tmp_path / "out" / "w.bin"))
    assert snapshot(tmp_path) == before


def test_another_models_data_file_in_the_output_folder_is_never_replaced(tmp_path):
    src = external_model(tmp_path / "in")
    other = external_model(tmp_path / "out", seed=1)  # out/w.bin: another model's weights
    before = snapshot(tmp_path)
    r = gelu("fuse", src, "-o", tmp_path / "out" / "fused.onnx")
    one_line_exit2(r)
    assert "not this model's data" in r.stderr
    assert snapshot(tmp_path) == before and other.is_file()


def test_same_data_file_already_there_is_reused(tmp_path):
    src = external_model(tmp_path / "in")
    (tmp_path / "out").mkdir()
    for _ in range(2):  # the second run finds its own copy of w.bin from the first
        r = gelu("fuse", src, "-o", tmp_path / "out" / "fused.onnx")
        assert r.returncode == 0, r.stderr
    onnx.checker.check_model(str(tmp_path / "out" / "fused.onnx"))


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a device node needs root")
def test_a_device_as_output_is_refused(tmp_path):
    src = external_model(tmp_path / "in")
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    for args in (("fuse", src, "-o", dev), ("check", src, src, "--save-inputs", dev)):
        r = gelu(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr)
        assert stat.S_ISCHR(os.lstat(dev).st_mode), args  # still the device


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_signal_mid_write_leaves_nothing_and_keeps_the_previous_output(tmp_path, sig):
    src = external_model(tmp_path / "in")
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    assert gelu("fuse", src, "-o", out).returncode == 0
    before = snapshot(tmp_path)
    r = gelu("fuse", src, "-o", out, env={"GELU_ONNX_TEST_FAULT": f"write:before-rename={sig}"})
    assert r.returncode in (130, 128 + 15, 128 + 1), (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert snapshot(tmp_path) == before  # every temp file removed, previous output intact
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]


def test_rollback_restores_what_a_write_replaced(tmp_path):
    """A failure after writing (the CLI's checker on a big model) puts the
    previous output and data files back: save_model keeps them until commit."""
    src = external_model(tmp_path / "in")
    out = tmp_path / "out" / "fused.onnx"
    out.parent.mkdir()
    assert gelu("fuse", src, "-o", out).returncode == 0
    before = snapshot(tmp_path / "out")
    loaded = onnxio.load_model(str(src))
    m = loaded.model
    m.graph.node[-1].name = "changed"
    saved = onnxio.save_model(m, str(out), keep_backups=True, source=loaded)
    assert snapshot(tmp_path / "out") != {k: v for k, v in before.items() if not k.startswith(".")}
    saved.rollback()
    assert snapshot(tmp_path / "out") == before


def test_a_data_file_name_is_claimed_once(tmp_path):
    """What keeps writers apart where a folder cannot be locked (some network
    filesystems): a new data file takes its name with a hard link, which
    fails where a rename would replace the file another writer just put
    there; the loser's temp file stays for its own cleanup."""
    from gelu_onnx.onnxio.fileops import claim, folder_lock

    a, b, final = tmp_path / ".a.tmp", tmp_path / ".b.tmp", tmp_path / "w.bin"
    a.write_bytes(b"weights of a")
    b.write_bytes(b"weights of b")
    assert claim(str(a), str(final)) and not a.exists()
    assert not claim(str(b), str(final)) and b.exists()
    assert final.read_bytes() == b"weights of a" and final.stat().st_nlink == 1
    # the folder lock is taken again by the same process (save_model inside write_model)
    with folder_lock(str(tmp_path)), folder_lock(str(tmp_path)):
        probe = subprocess.run([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY);"
                                "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(tmp_path)], capture_output=True)
        assert probe.returncode != 0 and b"BlockingIOError" in probe.stderr  # held against other processes
    probe = subprocess.run([sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY);"
                            "fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(tmp_path)])
    assert probe.returncode == 0  # released
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.tmp", "w.bin"]  # no lock file
