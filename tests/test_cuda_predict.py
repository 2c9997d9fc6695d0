"""The CUDA speed predictor (scripts/cuda_predict.py), calibrated on the
kernels of commit c2ec693 as measured on an H200 (../shared/GPU.md, copied to
benchmarks/results/cuda_measured_h200_c2ec693.md): compiled again here, with
the committed constants it must order the measured kernels as measured
(Spearman >= 0.8) and predict each within +-0.1 of its fraction of the copy
bandwidth; its executed instructions per element must match ncu's within 15 %
where ncu measured them. Then `--json` must predict every kernel of the
working tree (form/dtype/bias), each at >= 0.90 of copy (issue 27's goal,
predicted), and the committed results table must be what it predicts now.

Skips, saying why, without nvcc or cuobjdump (test extras), or when the
checkout lacks commit c2ec693 (a shallow clone).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import cuda_predict  # noqa: E402
import cuda_sass  # noqa: E402


@pytest.fixture(scope="module")
def calibrated():
    for tool in ("nvcc", "cuobjdump"):
        if not cuda_sass.find_tool(tool):
            pytest.skip(f"no {tool} (nvcc: CUDA toolkit; cuobjdump: pip install nvidia-cuda-cuobjdump)")
    has = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{cuda_predict.CALIBRATED_REV}^{{commit}}"],
                         capture_output=True)
    if has.returncode != 0:
        pytest.skip(f"commit {cuda_predict.CALIBRATED_REV} is not in this checkout (shallow clone?)")
    return cuda_predict.all_features(cuda_predict.CALIBRATED_REV)


def test_calibration_table_is_complete():
    meas = cuda_predict.measured()
    assert len(meas) == 13 and all(0 < v <= 1 for v in meas.values()), meas


def test_predictor_orders_and_predicts_the_measured_kernels(calibrated):
    result = cuda_predict.check(calibrated, cuda_predict.measured())
    assert result["spearman"] >= 0.8, result
    assert result["max_abs_error"] <= 0.1, result


def test_executed_instructions_match_ncu(calibrated):
    """The path model (hot trip + rare trips weighted by how often a warp's
    step takes them) against what ncu counted on the H200."""
    ncu = cuda_predict.measured(column=3)
    assert len(ncu) >= 8
    off = {k: (calibrated[k].executed, v) for k, v in ncu.items() if abs(calibrated[k].executed / v - 1) > 0.15}
    assert not off, off


def test_json_predicts_every_kernel_and_the_committed_table_is_current(calibrated):
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "cuda_predict.py"), "--json"],
                       capture_output=True, text=True, check=True)
    preds = json.loads(r.stdout)
    want = {f"{f}/{d}/{b}" for f in ("erf", "tanh", "sigmoid") for d in ("float32", "float16", "bfloat16")
            for b in ("bias", "nobias")}
    assert set(preds) == want and all(0 < v <= 1 for v in preds.values()), preds
    # Issue 27's goal, as predicted (not measured): >= 0.90 of copy everywhere.
    slow = {k: v for k, v in preds.items() if v < 0.90}
    assert not slow, slow
    table = cuda_predict.PREDICTED.read_text()
    for k, v in preds.items():
        assert f"| {k} | {v:.3f} |" in table, (k, v, "run `python scripts/cuda_predict.py --write`")
