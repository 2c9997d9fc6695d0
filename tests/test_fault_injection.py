"""Faults injected into the output folder: a full filesystem and a read-only
one (a real tmpfs, mounted for the test; skipped where mounting is not
permitted, i.e. not root). For the plain path, the external-data path and
the big-file (splice) path, and for `check --save-inputs`: one stderr line,
exit 2, every pre-existing file byte-identical, no temp file left."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gelu_onnx import files
from helpers.model_helpers import gelu_model, matmul_gelu_model

REPO = Path(__file__).resolve().parents[1]


def _model(n: int, path: Path, external: str | None = None) -> Path:
    """x @ W -> erf GELU; W is n x n float32 (n = 4200: 67 MiB, the splice path)."""
    return matmul_gelu_model(np.full((n, n), 0.01, np.float32), path, external)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("fault-inputs")
    big = _model(4200, d / "big.onnx")
    assert files.splice_wanted(big)
    return {"small": _model(64, d / "small.onnx"), "external": _model(512, d / "ext" / "model.onnx", "w.bin"),
            "big": big}


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def mount(size: str):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
        return mnt

    yield mount
    subprocess.run(["umount", str(mnt)], capture_output=True)


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


PREVIOUS = gelu_model().SerializeToString()


def _prepare(mnt: Path, fault: str) -> Path:
    out = mnt / "out.onnx"
    out.write_bytes(PREVIOUS)  # a previous output: an ONNX model (other files are never replaced)
    (mnt / "keep.txt").write_text("a user's file")
    if fault == "full":
        filler = mnt / "filler"
        with open(filler, "wb") as f:
            try:
                f.write(b"\0" * (64 << 20))
            except OSError:  # ENOSPC: the tmpfs is full
                pass
        os.truncate(filler, filler.stat().st_size - (4 << 10))  # 4 KiB left
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
    return out


def _gelu(*args):
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


SIZES = {"small": "256k", "external": "2m", "big": "8m"}


@pytest.mark.parametrize("fault", ["full", "read-only"])
@pytest.mark.parametrize("which", list(SIZES))
def test_fuse_into_a_faulty_folder_changes_nothing(inputs, tmpfs, which, fault):
    mnt = tmpfs(SIZES[which])
    out = _prepare(mnt, fault)
    before = _snapshot(mnt)
    src_before = _snapshot(inputs[which].parent)
    r = _gelu("fuse", inputs[which], "-o", out)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "cannot write it" in lines[0], r.stderr
    assert _snapshot(mnt) == before  # the previous output kept, no temp file, no stray data file
    assert _snapshot(inputs[which].parent) == src_before


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_check_save_inputs_into_a_faulty_folder_changes_nothing(inputs, tmpfs, fault):
    mnt = tmpfs("256k")
    out = _prepare(mnt, fault)
    saved = mnt / "inputs.npz"
    before = _snapshot(mnt)
    r = _gelu("check", inputs["small"], inputs["small"], "--save-inputs", saved, "--dim", "n=512")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "inputs.npz" in lines[0], r.stderr
    assert ("No space left" if fault == "full" else "Read-only") in lines[0], lines
    assert _snapshot(mnt) == before and out.read_bytes() == PREVIOUS
