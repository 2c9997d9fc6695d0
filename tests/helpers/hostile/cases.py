"""What the hostile suite's cases share (suite.py lists the groups): the
case registry, the small models each case builds in
its own folder, the big ones made once per session, a real tmpfs made full
or read-only, and after-checks (the output runs in ONNX Runtime and
computes what the original computes)."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

from helpers.model_helpers import EXTERNAL_H, external_model, gelu_model, matmul_gelu_model

CASES: dict = {}
ROOT_ONLY = set()   # cases that need root (mount, mknod)
# cases run only with GELU_ONNX_FULL_HOSTILE=1 (the rest of a matrix whose
# default run keeps one case of each class; tests/README.md)
OPT_IN = set()
SQRT2 = math.sqrt(2)


def register(name: str, build, root_only: bool = False, opt_in: bool = False) -> None:
    assert name not in CASES, name
    CASES[name] = build
    if root_only:
        ROOT_ONLY.add(name)
    if opt_in:
        OPT_IN.add(name)


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


_BIG: dict = {}
_BIG_LOCK = threading.Lock()


def cached(key: str, make, folder: Path, names: tuple) -> Path:
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
    return cached("splice", lambda d: matmul_gelu_model(np.full((4200, 4200), 0.01, np.float32), d / "model.onnx"),
                   folder, ("model.onnx",))


def big_external(folder: Path) -> Path:
    """64 MiB of external data: the copy takes a while."""
    return cached("external", lambda d: matmul_gelu_model(np.full((4096, 4096), 0.01, np.float32),
                                                            d / "model.onnx", "w.bin"), folder,
                   ("model.onnx", "w.bin"))
