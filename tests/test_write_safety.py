"""Nothing the user had is destroyed by a write (issue: never lose a file).

Each case runs the real CLI in a child process and compares every
pre-existing file byte for byte afterwards."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from gelu_onnx import onnxio
from helpers.model_helpers import external_model, gelu_model

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


# --- filesystems without hard links (vfat, exFAT, many SMB/FUSE mounts) ---------------

NO_LINK = """import errno, fcntl, os, runpy, sys
def refused(*a, **k):
    with open(os.environ["LINKS_TRIED"], "a") as f:
        f.write("x")
    raise OSError(errno.EPERM, "Operation not permitted")
def no_lock(*a, **k):
    raise OSError(errno.EOPNOTSUPP, "Operation not supported")
os.link = refused
fcntl.flock = no_lock
sys.argv = ["gelu-onnx", *sys.argv[1:]]
runpy.run_module("gelu_onnx", run_name="__main__")
"""


def writes_without_links(root: Path, run) -> None:
    """Where link() fails, every write keeps its guarantees: a first output,
    the same output written again (the previous one set aside as a copy),
    the input overwritten on request; the new output replaces the old in one
    rename, and a failure after the old one was set aside puts it back."""
    src = external_model(root / "in")
    out = root / "out" / "f.onnx"
    out.parent.mkdir()
    for target in ("custom", "standard", "custom"):
        r = run("fuse", src, "-o", out, "--target", target)
        assert r.returncode == 0, r.stderr
        assert sorted(os.listdir(out.parent)) == ["f.onnx", "w.bin"]
        assert onnx.load(str(out), load_external_data=False).opset_import
    before = snapshot(root)
    for point in ("write:checker", "write:data-renamed"):
        r = run("fuse", src, "-o", out, "--target", "standard", env={"GELU_ONNX_TEST_FAULT": f"{point}=SIGTERM"})
        assert r.returncode == 128 + 15, r.stderr
        assert snapshot(root) == before and sorted(os.listdir(out.parent)) == ["f.onnx", "w.bin"]
    plain = root / "p.onnx"
    plain.write_bytes(gelu_model().SerializeToString())
    r = run("fuse", plain, "-o", plain, "--overwrite-input")
    assert r.returncode == 0, r.stderr
    assert any(n.domain == "ai.gelu_onnx" for n in onnx.load(str(plain)).graph.node)
    assert not [n for n in os.listdir(root) if n.startswith(".")], os.listdir(root)


def test_writes_where_link_is_refused(tmp_path):
    """link() refused as vfat refuses it (EPERM), and flock() as some SMB/FUSE
    mounts do, in a child process."""
    tried = tmp_path / "links-tried"
    tried.touch()

    def run(*args, env=None):
        e = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
                 LINKS_TRIED=str(tried), **(env or {}))
        return subprocess.run([sys.executable, "-c", NO_LINK, *map(str, args)], capture_output=True, text=True,
                              env=e, timeout=300)

    root = tmp_path / "fs"
    root.mkdir()
    writes_without_links(root, run)
    assert tried.read_text(), "no write tried link(): this test no longer covers the fallback"


def test_writes_on_a_real_vfat_filesystem(tmp_path):
    """The same on a loop-mounted vfat image, where the kernel offers one."""
    if os.geteuid() != 0:
        pytest.skip("mounting a vfat image needs root")
    if not (shutil.which("mkfs.vfat") and shutil.which("mount")):
        pytest.skip("mkfs.vfat (Debian: dosfstools) or mount is not installed")
    img, mnt = tmp_path / "vfat.img", tmp_path / "mnt"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.vfat", str(img)], check=True, capture_output=True)
    mnt.mkdir()
    r = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"this kernel cannot mount a vfat image: {' '.join(r.stderr.split())}")
    try:
        (mnt / "a").touch()
        with pytest.raises(OSError):
            os.link(mnt / "a", mnt / "b")  # no hard links there, as the test means
        os.unlink(mnt / "a")
        writes_without_links(mnt, gelu)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
