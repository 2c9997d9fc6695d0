"""`make gpu-check` (scripts/gpu_check.py) without a GPU: it parses, finds no
CUDA device, says so with the reason and writes nothing; its table writer
gives the documented format (one small table naming the device); and the
models its ONNX Runtime step builds (benchmarks/bench_ort_cuda.py: single
contrib ops, a BERT-base encoder) are valid and fuse as expected."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def test_without_a_gpu_it_says_why_and_writes_nothing():
    dev, why = gpu_check.device()
    if dev is not None:
        pytest.skip(f"this machine has a CUDA device ({dev}): run `make gpu-check`")
    before = sorted(p.name for p in RESULTS.iterdir())
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py")], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"gpu-check: SKIPPED: {why}; nothing run, no table written", r.stdout
    assert why in ("torch is not installed", "no CUDA device (torch.cuda.is_available() is False)")
    assert sorted(p.name for p in RESULTS.iterdir()) == before


def test_help_parses():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--help"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "--lib" in r.stdout and "--out" in r.stdout


def test_table_format():
    rows = [{"step": "kernel tests", "result": "PASS", "seconds": 41.2, "figures": "13 passed in 40.1s"},
            {"step": "memcheck", "result": "FAIL", "seconds": 30.0, "figures": "ERROR SUMMARY: 2 errors | x"},
            {"step": "ort ops + bert", "result": "SKIP", "seconds": 0.0, "figures": "needs the library"}]
    text = gpu_check.table("NVIDIA H200", "torch 2.11, CUDA 13.0", "libgelu_onnx_ort.so", rows)
    lines = text.splitlines()
    assert lines[0] == "# gpu-check on NVIDIA H200"
    assert "71 s in all" in lines[2]
    assert lines[4] == "| step | result | seconds | figures |" and lines[5] == "|---|---|---|---|"
    assert lines[6:] == ["| kernel tests | PASS | 41 | 13 passed in 40.1s |",
                         "| memcheck | FAIL | 30 | ERROR SUMMARY: 2 errors / x |",
                         "| ort ops + bert | SKIP | 0 | needs the library |"]
    assert gpu_check.slug("NVIDIA H200") == "nvidia_h200"


def test_figures_from_the_benchmarks_documents():
    bench = {"accuracy": [{"dtype": "float32", "max_ulp": 5.1}, {"dtype": "float16", "over_1_step": 0}],
             "throughput": [{"elements": 2**27, "dtype": "float16", "name": n, "of_copy_bandwidth": v}
                            for n, v in (("ours GeluErf", 0.91), ("ours GeluTanh", 0.95), ("torch gelu", 0.77))]}
    assert gpu_check.bench_figures(bench) == "fp32 max 5.10 ulp, half >1 step: 0; float16 of copy 0.91-0.95 (torch gelu 0.77)"
    ort_doc = {"ops": [{"dtype": "fp16", "op": "bias+tanh", "speedup": 1.23}],
               "bert_base": [{"dtype": "fp16", "custom_vs_original": 1.01}]}
    assert gpu_check.ort_figures(ort_doc) == "vs ORT's own op: fp16 bias+tanh 1.23x; BERT-base vs original (ALL): fp16 custom 1.01x"


def test_the_benchmark_models_are_valid_and_fuse(tmp_path):
    pytest.importorskip("onnxruntime")
    import bench_ort_cuda
    from onnx import TensorProto as T
    for op, dom, bias in (("BiasGeluTanh", "ai.gelu_onnx", True), ("FastGelu", "com.microsoft", True),
                          ("QuickGelu", "com.microsoft", False)):
        onnx.checker.check_model(bench_ort_cuda.single_op(op, dom, T.FLOAT16, 4, 8, bias))
    for fp16 in (False, True):
        src = tmp_path / f"bert_{fp16}.onnx"
        bench_ort_cuda.bert_base(src, fp16, layers=2, batch=1, seq=8)
        onnx.checker.check_model(str(src))
        fused = onnx.load(bench_ort_cuda.fuse(src, "custom"))
        assert [n.op_type for n in fused.graph.node if n.domain == "ai.gelu_onnx"] == ["BiasGeluErf"] * 2
