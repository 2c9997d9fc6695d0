"""The main job on the bundled models: fuse each one for every target with the
real CLI, then check parity of fused vs original with the real CLI.

Everything runs in this one process (the CLI's `main` is called directly, so
there is no interpreter start-up and import per job) behind a tqdm progress
bar. By default one export of every bundled model family is fused for every
target (about a minute on 2 cores); `--all` runs the full matrix (every
export x every target). Exits 1 if any fusion count differs from the
manifest's independently computed count or any parity check fails. Outputs go
to build/demo/.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

from tqdm import tqdm

from gelu_onnx.fusion.targets import TARGETS

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
OUT = ROOT / "build" / "demo"


def cli(*args: str) -> tuple[int, dict | None, str]:
    from gelu_onnx.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*args, "--json"])
    try:
        payload = json.loads(out.getvalue()) if out.getvalue().strip() else None
    except json.JSONDecodeError:
        payload = None
    return rc, payload, err.getvalue().strip()


def run_one(e: dict, target: str) -> tuple[str, bool]:
    """Fuse one bundled model for one target and check it; (table row, failed)."""
    src = MODELS / e["file"]
    dst = OUT / f"{src.stem}.{target}.onnx"
    rc, res, err = cli("fuse", str(src), "-o", str(dst), "--target", target)
    if rc != 0 or res is None:
        return f"{e['file']:52s} {target:8s} FUSE FAILED ({rc}): {err}", True
    fused = res["fused"]
    # a target that leaves some GELUs alone has its own count (expected_gelus_<target>)
    expect = e.get(f"expected_gelus_{target}", e["expected_gelus"])
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


def select(entries: list[dict], everything: bool) -> list[dict]:
    """Every export, or the first export of each model family (its name)."""
    if everything:
        return entries
    seen, out = set(), []
    for e in entries:
        if e["name"] not in seen:
            seen.add(e["name"])
            out.append(e)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="every bundled export x every target (a few minutes)")
    args = ap.parse_args(argv)
    manifest = json.loads((MODELS / "manifest.json").read_text())
    entries = select(manifest["models"] if isinstance(manifest, dict) else manifest, args.all)
    OUT.mkdir(parents=True, exist_ok=True)
    jobs = [(e, target) for e in entries for target in TARGETS]
    rows, failures = [], 0
    for e, target in tqdm(jobs, desc="fuse + check", unit="model", file=sys.stderr):
        line, bad = run_one(e, target)
        failures += bad
        rows.append(line)
        if bad:
            tqdm.write(line, file=sys.stderr)
    print(f"{'model':52s} {'target':8s} {'fused':>5s} {'expect':>6s} {'parity':>7s}  max_rel")
    print("\n".join(rows))
    scope = "every bundled export" if args.all else f"{len(entries)} model families (--all: every export)"
    print(f"\n{len(jobs)} fuse + check runs over {scope}: "
          f"{'all passed' if not failures else f'{failures} failure(s)'}; fused models in {OUT}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
