"""The hostile corpus (tests/hostile_corpus.py) through the real CLI
(``python -m gelu_onnx``) in subprocesses: for every file and every command
(fuse, inspect, check with the file as either model) the exit code is 2 or 3,
stderr is exactly one line, there is no traceback, nothing is written and
the input is untouched.  A hang (e.g. a FIFO opened) fails through the
subprocess timeout.

Runs the processes a few at a time; all commands x all files is ~300
processes.  By default fuse sees every file and inspect/check every third;
GELU_ONNX_FULL_HOSTILE=1 runs the whole matrix.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import hostile_corpus as hostile

REPO = Path(__file__).resolve().parents[1]

if importlib.util.find_spec("gelu_onnx.cli") is None:
    pytest.skip("gelu_onnx.cli is not there yet", allow_module_level=True)

NAMES = sorted(hostile.CASES)
FULL = os.environ.get("GELU_ONNX_FULL_HOSTILE") == "1"
COMMANDS = ("fuse", "inspect", "check-original", "check-fused")


def _argv(command: str, bad: Path, out_dir: Path, good: Path) -> list[str]:
    if command == "fuse":
        return ["fuse", str(bad), "-o", str(out_dir / "fused.onnx")]
    if command == "inspect":
        return ["inspect", str(bad)]
    if command == "check-original":
        return ["check", str(bad), str(good)]
    return ["check", str(good), str(bad)]


def _cli(args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("GELU_ONNX_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "gelu_onnx", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def _one(command: str, name: str, root: Path, good: Path, json_mode: bool) -> str | None:
    """Run one (command, file); return a failure description or None."""
    case_root = root / f"{command}-{name}"
    case = hostile.build_case(name, case_root)
    out_dir = case_root / "out"
    out_dir.mkdir()
    before = hostile.snapshot(case_root)
    argv = _argv(command, case.model, out_dir, good) + (["--json"] if json_mode else [])
    try:
        r = _cli(argv)
    except subprocess.TimeoutExpired:
        return f"{command} {name}: hung (timeout) - did it open a FIFO?"
    problems = []
    if r.returncode not in (2, 3):
        problems.append(f"exit {r.returncode}")
    lines = r.stderr.splitlines()
    if len(lines) != 1 or not lines[0].strip():
        problems.append(f"stderr has {len(lines)} lines: {r.stderr[-300:]!r}")
    if "Traceback" in r.stderr or "Traceback" in r.stdout:
        problems.append("traceback")
    if json_mode:
        try:
            doc = json.loads(r.stdout)
            if doc.get("ok") is not False or doc.get("exit_code") != r.returncode:
                problems.append(f"json {doc}")
        except ValueError:
            problems.append(f"stdout is not JSON: {r.stdout[-200:]!r}")
    if hostile.snapshot(case_root) != before:
        problems.append("files changed or written")
    return f"{command} {name}: {'; '.join(problems)}" if problems else None


@pytest.fixture(scope="module")
def good_model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("good")
    hostile.write_proto(hostile.ffn_model(), d / "good.onnx")
    return d / "good.onnx"


@pytest.mark.parametrize("command", COMMANDS)
def test_cli_refuses_hostile_files(command, tmp_path, good_model):
    names = NAMES if (FULL or command == "fuse") else NAMES[::3]
    jobs = [(name, i % 4 == 0) for i, name in enumerate(names)]  # every 4th with --json
    good_before = good_model.read_bytes()
    with ThreadPoolExecutor(max_workers=max(2, min(4, (os.cpu_count() or 2) * 2))) as pool:
        results = list(pool.map(lambda j: _one(command, j[0], tmp_path, good_model, j[1]), jobs))
    failures = [r for r in results if r]
    assert good_model.read_bytes() == good_before
    assert not failures, f"{len(failures)}/{len(jobs)} hostile files mishandled:\n" + "\n".join(failures)


def test_cli_refuses_output_over_input(tmp_path):
    """fuse IN -o IN is refused without --overwrite-input; the input stays as it was."""
    p = tmp_path / "m.onnx"
    hostile.write_proto(hostile.ffn_model(), p)
    before = hostile.snapshot(tmp_path)
    r = _cli(["fuse", str(p), "-o", str(p)])
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert hostile.snapshot(tmp_path) == before
