"""Start-up: `gelu-onnx fuse` of a tiny model and `gelu-onnx --help`, this
checkout against another (the budget docs/design.md states instead of a cap
on imported modules).

  python benchmarks/make_models.py --out /tmp/gelu-bench --only synth --synth 1
  python benchmarks/bench_startup.py --model /tmp/gelu-bench/synth-1.onnx --before /path/to/older/checkout \\
      [--runs 15] [--md benchmarks/results/startup.md]

The two run interleaved, the order alternating each round, each its own
process under `python -X importtime`; the older checkout as `python -S`
with it first on PYTHONPATH (an editable install's import hook would load
this checkout otherwise). Per contender: the child's CPU seconds (user +
system, from getrusage) and the package's own import self time (the
`gelu_onnx.*` lines of -X importtime), min and median over the runs. Both
checkouts are byte-compiled first, as an installed wheel is.
"""
from __future__ import annotations

import argparse
import compileall
import os
import re
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINE = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \|\s+gelu_onnx\S*$", re.M)


def run(argv: list[str], tree: str | None) -> tuple[float, float]:
    """(child CPU s, package import self ms) of one `gelu-onnx ARGV`."""
    code = (f"import sys, runpy; sys.argv = ['gelu-onnx', *{argv!r}]\n"
            "try:\n    runpy.run_module('gelu_onnx', run_name='__main__')\nexcept SystemExit:\n    pass\n")
    cmd = [sys.executable, "-X", "importtime", "-c", code]
    if tree is not None:
        site = sysconfig.get_paths()["purelib"]
        cmd = ["env", f"PYTHONPATH={tree}{os.pathsep}{site}", sys.executable, "-S", *cmd[1:]]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    err = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return cpu, sum(int(m) for m in LINE.findall(err)) / 1000


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a tiny model (make_models.py --only synth --synth 1)")
    ap.add_argument("--before", required=True, help="the other checkout's root (holding gelu_onnx/)")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--md", help="write the table here too")
    ap.add_argument("--note", action="append", default=[], help="a line under the table (machine, commits)")
    a = ap.parse_args(argv)
    for tree in (ROOT, Path(a.before)):
        compileall.compile_dir(str(tree / "gelu_onnx"), quiet=1)
    res: dict[tuple[str, str], list] = {}
    with tempfile.TemporaryDirectory(prefix="gelu-startup-") as d:
        commands = {f"fuse {Path(a.model).name}": ["fuse", a.model, "-o", os.path.join(d, "out.onnx")],
                    "--help": ["--help"]}
        for i in range(a.runs + 1):  # a warm-up round first
            pair = [("this checkout", None), ("before", a.before)]
            for command, argv in commands.items():
                for name, tree in pair if i % 2 else pair[::-1]:
                    got = run(argv, tree)
                    if i:
                        res.setdefault((command, name), []).append(got)
    load = os.getloadavg()[0]
    rows = ["| command | checkout | CPU s min | CPU s median | package import self ms min | median |",
            "|---|---|---:|---:|---:|---:|"]
    for (command, name), v in res.items():
        cpu, imp = [x[0] for x in v], [x[1] for x in v]
        rows.append(f"| `{command}` | {name} | {min(cpu):.3f} | {statistics.median(cpu):.3f} | {min(imp):.1f} | "
                    f"{statistics.median(imp):.1f} |")
    text = "\n".join([f"# Start-up: `gelu-onnx fuse {Path(a.model).name}` and `gelu-onnx --help`", "",
                      f"`python benchmarks/bench_startup.py --runs {a.runs}` against `--before` "
                      f"(the older checkout); {a.runs} interleaved runs each; 1-minute load average after: "
                      f"{load:.1f} (2 = both cores busy).", "", *rows, "", *a.note]) + "\n"
    print(text, end="")
    if a.md:
        Path(a.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
