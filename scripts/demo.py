"""The main job on the bundled models: fuse each one for every target with the
real CLI, then check parity of fused vs original with the real CLI.

Prints one row per (model, target) and exits 1 if any fusion count differs
from the manifest's independently computed count or any parity check fails.
Outputs go to build/demo/.
"""
from __future__ import annotations

import json
import subprocess
import sys
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


def main() -> int:
    manifest = json.loads((MODELS / "manifest.json").read_text())
    entries = manifest["models"] if isinstance(manifest, dict) else manifest
    OUT.mkdir(parents=True, exist_ok=True)
    failures = 0
    print(f"{'model':52s} {'target':8s} {'fused':>5s} {'expect':>6s} {'parity':>7s}  max_rel")
    for e in entries:
        src = MODELS / e["file"]
        for target in TARGETS:
            dst = OUT / f"{src.stem}.{target}.onnx"
            rc, res, err = cli("fuse", str(src), "-o", str(dst), "--target", target)
            if rc != 0 or res is None:
                print(f"{e['file']:52s} {target:8s} FUSE FAILED ({rc}): {err}")
                failures += 1
                continue
            fused = res["fused"]
            expect = e["expected_gelus"]
            if target == "standard":
                expect = e.get("expected_gelus_standard", expect)
            rc, chk, err = cli("check", str(src), str(dst))
            ok = rc == 0 and chk is not None and chk.get("ok")
            worst = max((o.get("max_rel", 0.0) for o in (chk or {}).get("outputs", [])), default=float("nan"))
            bad = (fused != expect) or not ok
            failures += bad
            print(f"{e['file']:52s} {target:8s} {fused:5d} {expect:6d} {'PASS' if ok else 'FAIL':>7s}  {worst:.2e}"
                  + ("   <-- MISMATCH" if bad else ""))
    print(f"\n{'all passed' if not failures else f'{failures} failure(s)'}; fused models in {OUT}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
