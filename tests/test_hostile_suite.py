"""The hostile suite (tests/helpers/hostile/suite.py lists its groups):
every attack on a user's files, and every malformed or unsafe model file
through every command, is clean by the criteria of
tests/helpers/hostile/judge.py: no traceback, exit 0 only for valid input
and 1/2/3 otherwise, one stderr line, no byte of any pre-existing file
changed or removed, no temp file left after a signal at any point, memory
bounded by the model.

The cases run as real child processes, a few at a time (one fixture runs
them all, each test reports one case). Cases that mount a tmpfs or a bind
mount need root (CI runs as root); elsewhere they are skipped.
``GELU_ONNX_HOSTILE_CASES=group/name,...`` runs only those;
``GELU_ONNX_FULL_HOSTILE=1`` also runs the opt-in cases (``cases.OPT_IN``):
every malformed file through every command (corpus.py), every command under
every stream state (environment.py); by default each class runs once."""
from __future__ import annotations

import os
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers.hostile import judge, suite

SELECTED = [c for c in os.environ.get("GELU_ONNX_HOSTILE_CASES", "").split(",") if c]
FULL = os.environ.get("GELU_ONNX_FULL_HOSTILE") == "1"
NAMES = [n for n in suite.CASES if (n in SELECTED if SELECTED else FULL or n not in suite.OPT_IN)]
ROOT = os.geteuid() == 0
# child processes at once: the machine's cores, at most 4 (timed signals stay meaningful)
PARALLEL = max(1, min(4, len(os.sched_getaffinity(0))))


def _one(name: str, folder) -> list[str] | str:
    try:
        attack = suite.CASES[name](folder)
    except Exception:  # noqa: BLE001 - a broken case is reported, not a crash of the whole suite
        return [f"building the case failed: {traceback.format_exc(limit=3)}"]
    try:
        before = judge.snapshot(folder)
        result = judge.run(attack)
        return judge.judge(folder, attack, before, result)
    except AssertionError as e:
        return [str(e)]
    finally:
        if attack.cleanup is not None:
            attack.cleanup()


@pytest.fixture(scope="module")
def verdicts(request, tmp_path_factory):
    chosen = {i.callspec.params["name"] for i in request.session.items
              if getattr(i, "originalname", None) == "test_attack_is_clean"}
    todo = [n for n in NAMES if n in chosen and (ROOT or n not in suite.ROOT_ONLY)]
    folders = {n: tmp_path_factory.mktemp(n.replace("/", "-")[:60]) for n in todo}
    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(zip(todo, pool.map(lambda n: _one(n, folders[n]), todo)))


@pytest.mark.parametrize("name", NAMES)
def test_attack_is_clean(verdicts, name):
    if name not in verdicts:
        pytest.skip("needs root (mounts a tmpfs or a bind mount)")
    problems = verdicts[name]
    assert not problems, "\n".join(problems)


def test_the_suite_is_big_enough():
    groups = {n.split("/")[0] for n in suite.CASES}
    default = [n for n in suite.CASES if n not in suite.OPT_IN]
    assert len(suite.CASES) >= 390 and len(groups) >= 24
    assert {n.split("/")[0] for n in default} == groups  # every group runs by default
    states = {tuple(n.rsplit("_", 2)[1:]) for n in default if n.startswith("streams/")}
    assert len(states) == 9  # stdin/stdout/stderr x closed/full/broken, each once
