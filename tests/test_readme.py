"""The README's Python snippet runs as written and prints what it says."""
from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gelu_onnx import ortlib

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_snippet_runs_as_written(tmp_path):
    if not ortlib.available():
        pytest.skip("the snippet registers the custom-op library, which this build lacks")
    text = README.read_text()
    section = text[text.index("## Python"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["erf", "['ai.gelu_onnx.GeluErf']"], lines
    gelu_1 = 0.5 * (1 + math.erf(1 / math.sqrt(2)))  # float64 reference
    assert np.float32(lines[2]) == np.float32(gelu_1), (lines[2], gelu_1)  # correctly rounded (printed shortest)
    assert (tmp_path / "fused.onnx").is_file()
    assert lines[3] == "com.microsoft.Gelu ort.onnx", lines  # gelu_onnx.fuse_file, the CLI's pipeline
    assert (tmp_path / "ort.onnx").is_file()
