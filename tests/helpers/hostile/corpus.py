"""The hostile suite, group corpus: every malformed or unsafe model file of
malformed.py through the real CLI, as the file to fuse, to inspect, and as
either model of check. Beyond the judge's criteria, each run is refused with
exit 2 or 3 (never 1), its stderr is exactly one line, there is no traceback
on stdout either, and a --json run (every 4th) prints one JSON document that
says ok false with the exit code. A hang (a FIFO opened) fails through the
judge's timeout.

All files x all commands is 260 runs: by default fuse sees every file and
inspect/check every third (131 runs); GELU_ONNX_FULL_HOSTILE=1 runs the
whole matrix."""
from __future__ import annotations

import json

from helpers.hostile import malformed
from helpers.hostile.cases import register
from helpers.hostile.judge import Attack

COMMANDS = ("fuse", "inspect", "check-original", "check-fused")


def _argv(command: str, bad, out_dir, good) -> list:
    if command == "fuse":
        return ["fuse", bad, "-o", out_dir / "fused.onnx"]
    if command == "inspect":
        return ["inspect", bad]
    if command == "check-original":
        return ["check", bad, good]
    return ["check", good, bad]


def _refused(json_mode: bool):
    """after-check: exit 2 or 3, one line (blank ones count), no traceback, the JSON document."""
    def check(r):
        assert r.code in (2, 3), f"exit {r.code}, expected 2 or 3"
        err = r.stderr.decode("utf-8", "backslashreplace")
        assert len(err.splitlines()) == 1, f"stderr has {len(err.splitlines())} lines"
        assert b"Traceback" not in r.stdout, "traceback on stdout"
        if json_mode:
            doc = json.loads(r.stdout)
            assert doc.get("ok") is False and doc.get("exit_code") == r.code, doc
    return check


def _run(command: str, name: str, json_mode: bool):
    def build(root):
        case = malformed.build_case(name, root)
        out_dir = root / "out"
        out_dir.mkdir()
        good = root / "good.onnx"
        malformed.write_proto(malformed.ffn_model(), good)
        argv = _argv(command, case.model, out_dir, good) + (["--json"] if json_mode else [])
        return Attack(argv, False, after=_refused(json_mode))
    return build


def _output_over_input(root):
    """fuse IN -o IN is refused without --overwrite-input; the input stays as it was."""
    p = root / "m.onnx"
    malformed.write_proto(malformed.ffn_model(), p)
    return Attack(["fuse", p, "-o", p], False, after=_exit_2)


def _exit_2(r):
    assert r.code == 2, f"exit {r.code}, expected 2"


NAMES = sorted(malformed.CASES)
for _command in COMMANDS:
    for _i, _name in enumerate(NAMES):
        register(f"corpus/{_command}/{_name}", _run(_command, _name, _i % 4 == 0),
                 opt_in=_command != "fuse" and _i % 3 != 0)
register("corpus/output-over-input", _output_over_input)
