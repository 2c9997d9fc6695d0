"""benchmarks/results holds small tables, never per-node dumps or this
machine's paths: each file is a summary someone reads."""
from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def test_results_are_small_tables():
    files = [p for p in RESULTS.iterdir() if p.is_file()]
    assert files
    assert sum(p.stat().st_size for p in files) < 1 << 20
    for p in files:
        assert p.stat().st_size < 100 << 10, p.name
        text = p.read_text()
        for private in ("/work/", "/root/", "/home/"):
            assert private not in text, (p.name, private)
