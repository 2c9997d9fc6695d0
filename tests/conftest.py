"""Fixtures shared by the test files. Shared helpers that are not fixtures
live in their own modules: kernel_helpers.py (the CPU kernels' C ABI and
their float64 judge), model_helpers.py (small hand-built models),
hostile_corpus.py (malformed and unsafe model files), graph_build.py /
corpus_frames.py / gelu_corpus.py / corpus_checks.py (the hand-built corpus:
how its graphs are built, the frames a case puts them in, the cases, how the
fuser is checked on them).
No test module imports another."""
from __future__ import annotations

import pytest

from gelu_onnx import ortlib


@pytest.fixture(scope="session")
def lib():
    """The custom-op library's kernels through their C ABI (ctypes)."""
    return ortlib.kernel_library()
