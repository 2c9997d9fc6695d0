"""The main job on the bundled models: fuse each one for every target with the
real CLI, then check parity of fused vs original with the real CLI.

Prints one row per (model, target) and exits 1 if any fusion count differs
from the manifest's independently computed count or any parity check fails.
Outputs go to build/demo/.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
OUT = ROOT / "build" / "demo"
TARGETS = ("custom", "standard", "ort")


def cli(*args: str) -> tuple[int, dict | None, str]:
    p = subprocess.run([sys.executable, "-m", "gelu_onnx", *args, "--json"], capture_output=True, text=True)
    try:
        payload = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        payload = None
    return p.returncode, payload, p.stderr.strip()


def run_one(e: dict, target: str) -> tuple[str, bool]:
    """Fuse one bundled model for one target and check it; (table row, failed)."""
    src = MODELS / e["file"]
    dst = OUT / f"{src.stem}.{target}.onnx"
    rc, res, err = cli("fuse", str(src), "-o", str(dst), "--target", target)
    if rc != 0 or res is None:
        return f"{e['file']:52s} {target:8s} FUSE FAILED ({rc}): {err}", True
    fused = res["fused"]
    expect = e["expected_gelus"]
    if target == "standard":
        expect = e.get("expected_gelus_standard", expect)
    # symbolic dims at the sizes the export was tested with (a conv stem
    # needs more than the checker's default of 4 samples)
    dims = []
    for spec in e.get("inputs", {}).values():
        for axis, dim_name in spec.get("dynamic_axes", {}).items():
            dims += ["--dim", f"{dim_name}={spec['shape'][int(axis)]}"]
    rc, chk, err = cli("check", str(src), str(dst), *dims)
    ok = rc == 0 and chk is not None and chk.get("ok")
    worst = max((o.get("max_rel", 0.0) for o in (chk or {}).get("outputs", [])), default=float("nan"))
    bad = (fused != expect) or not ok
    return (f"{e['file']:52s} {target:8s} {fused:5d} {expect:6d} {'PASS' if ok else 'FAIL':>7s}  {worst:.2e}"
            + ("   <-- MISMATCH" if bad else "")), bad


def main() -> int:
    manifest = json.loads((MODELS / "manifest.json").read_text())
    entries = manifest["models"] if isinstance(manifest, dict) else manifest
    OUT.mkdir(parents=True, exist_ok=True)
    jobs = [(e, target) for e in entries for target in TARGETS]
    # subprocesses, so one per core
    print(f"{'model':52s} {'target':8s} {'fused':>5s} {'expect':>6s} {'parity':>7s}  max_rel", flush=True)
    failures = 0
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for line, bad in pool.map(lambda job: run_one(*job), jobs):
            failures += bad
            print(line, flush=True)
    print(f"\n{'all passed' if not failures else f'{failures} failure(s)'}; fused models in {OUT}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
