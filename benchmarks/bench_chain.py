"""Node-heavy graphs: `gelu-onnx fuse` on a chain of N GELUs against a bare
onnx.load + onnx.save of the same file, side by side in one harness.

  python benchmarks/make_models.py --out /tmp/gelu-bench --only synth --synth 10000,100000
  python benchmarks/bench_chain.py --models /tmp/gelu-bench --sizes 10000,100000 --repeats 5 \\
      --json benchmarks/results/chain_speed.json --md benchmarks/results/chain_speed.md \\
      [--before 10000=/path/to/older/checkout]

Each run is its own process (interpreter start and imports included), timed
wall-clock, reaped with os.wait4 for its peak RSS (bench_fuse.measure). The
commands alternate, their order rotating each round (a run right after the
bare one was seen to pay more system time), so each pair sees the same
machine state; the table gives the median of each and the median of the per-pair
ratios (the figure that holds on a shared, drifting machine).

  bare      python -c "onnx.load(IN); onnx.save(model, OUT)"
  gelu-onnx python -m gelu_onnx fuse IN -o OUT (the real CLI, default target;
            its one-line report says how many GELUs it fused)
  --json    (with --with-json) the same with --json: the report lists every
            fusion (a chain of 100 000 GELUs: a 34 MB document)
  before    the same CLI from another checkout (--before), e.g. the commit
            before a speed change (run as python -S with that checkout first
            on PYTHONPATH: an editable install's import hook would otherwise
            load this checkout's package)

The package (and a --before checkout's) is byte-compiled first, as an
installed wheel is (bench_fuse.byte_compile).

Besides wall seconds each run's CPU seconds (user + system, from wait4) are
kept: on a machine shared with other jobs the CPU ratio drifts less.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fuse import BARE, REPO, byte_compile, machine, measure, node_count, warm_cache  # noqa: E402


def bench(path: str, repeats: int, timeout: float, warmup: int = 1, before: str | None = None,
          with_json: bool = False, plain: bool = False) -> dict:
    """``before``: another checkout of gelu-onnx, run as a third contender
    (its CLI from its own folder) to show the change in the same rotation;
    ``with_json``: also time ``fuse --json``."""
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="gelu-chain-") as out_dir:
        out = os.path.join(out_dir, "out.onnx")
        fuse = ["-m", "gelu_onnx", "fuse", path, "-o", out]
        cmds = {"bare": ([py, "-c", BARE, path, out, "embedded"], None),
                "gelu-onnx": ([py, *fuse], None)}
        if with_json:
            cmds["json"] = ([py, *fuse, "--json"], None)
        if before:
            cmds["before"] = ([py, "-S", *fuse], before)
        runs: dict[str, list[dict]] = {k: [] for k in cmds}
        names = list(cmds)
        for rnd in range(repeats + warmup):  # the first `warmup` rounds warm caches and are not counted
            # the order rotates: a run right after the bare one paid up to 0.8 s
            # more system time (page zeroing after its exit), charged to one side when fixed
            for name in names[rnd % len(names):] + names[:rnd % len(names)]:
                argv, cwd = cmds[name]
                warm_cache([path])
                load = os.getloadavg()[0]
                r = _run_in(argv, timeout, cwd)
                r["loadavg_before"] = load
                runs[name].append(r)
                if os.path.exists(out):
                    os.remove(out)
    for name, rs in runs.items():
        bad = [r["error"] for r in rs if "error" in r]
        if bad:
            raise SystemExit(f"{name} on {path}: {bad[0]}")
        del rs[:warmup]
    a = [r["seconds"] for r in runs["gelu-onnx"]]
    b = [r["seconds"] for r in runs["bare"]]
    ac = [r["cpu_seconds"] for r in runs["gelu-onnx"]]
    bc = [r["cpu_seconds"] for r in runs["bare"]]
    au = [r["user_seconds"] for r in runs["gelu-onnx"]]
    bu = [r["user_seconds"] for r in runs["bare"]]
    said = re.match(r"fused (\d+) GELUs", runs["gelu-onnx"][-1].get("stdout", ""))
    fused = int(said.group(1)) if said else None
    rec = {"file": os.path.basename(path), "bytes": os.path.getsize(path), "nodes": node_count(path),
           "fused": fused, "gelu_onnx_s": statistics.median(a), "bare_s": statistics.median(b),
           "ratio_median": statistics.median(x / y for x, y in zip(a, b)),
           "ratio_min": min(x / y for x, y in zip(a, b)), "ratio_max": max(x / y for x, y in zip(a, b)),
           "gelu_onnx_cpu_s": statistics.median(ac), "bare_cpu_s": statistics.median(bc),
           "cpu_ratio_median": statistics.median(x / y for x, y in zip(ac, bc)),
           "user_ratio_median": statistics.median(x / y for x, y in zip(au, bu)),
           "gelu_onnx_peak_rss": max(r["peak_rss"] for r in runs["gelu-onnx"]),
           "bare_peak_rss": max(r["peak_rss"] for r in runs["bare"]),
           "loadavg": [min(r["loadavg_before"] for v in runs.values() for r in v),
                       max(r["loadavg_before"] for v in runs.values() for r in v)],
           "repeats": repeats}
    if with_json:
        j = [r["seconds"] for r in runs["json"]]
        rec.update(json_s=statistics.median(j), json_ratio=statistics.median(x / y for x, y in zip(j, b)))
    if before:
        c = [r["seconds"] for r in runs["before"]]
        cc = [r["cpu_seconds"] for r in runs["before"]]
        rec.update(before_s=statistics.median(c), before_ratio=statistics.median(x / y for x, y in zip(c, b)),
                   before_cpu_ratio=statistics.median(x / y for x, y in zip(cc, bc)))
    return rec


def _run_in(argv: list[str], timeout: float, cwd: str | None) -> dict:
    """bench_fuse.measure, from another checkout when given: run with -S
    (no site hooks) and that checkout, then this interpreter's
    site-packages, on PYTHONPATH."""
    if cwd is None:
        return measure(argv, timeout)
    import site

    path = os.pathsep.join([cwd, *site.getsitepackages()])
    return measure(["env", "-C", cwd, f"PYTHONPATH={path}", *argv], timeout)


def markdown(doc: dict) -> str:
    m = doc["machine"]
    v = m["versions"]
    lines = [
        "# gelu-onnx fuse on node-heavy chains vs bare load+save",
        "",
        f"Command: `{doc['command']}`  ",
        f"Machine: {m['cpu']}, {m['usable_cpus']} usable CPUs, {m['memory_bytes'] / 2**30:.0f} GiB RAM, "
        f"Linux {m['kernel']}; python {v['python']}, onnx {v['onnx']}, onnxruntime {v['onnxruntime']}, "
        f"numpy {v['numpy']}; gelu-onnx {m['gelu_onnx_commit']}  ",
        "Each cell: median over the counted pairs (one process per run, the order rotating each round, a "
        "warm-up round first); ratio = median of gelu-onnx / bare per pair, in wall seconds and in CPU seconds "
        "(user + system; user alone after `user`: system time, mostly the kernel zeroing fresh pages, is the "
        "noisiest part on a shared VM). "
        "The machine is shared: 1-minute load average before the runs is given (2 = both cores busy).",
        "",
        "| GELUs | nodes | file | gelu-onnx s | bare s | ratio (min-max) | CPU s gelu-onnx / bare (ratio) "
        "| µs / node | peak RSS gelu-onnx / bare | with --json s (x bare) | before s (x bare, CPU x bare) | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["results"]:
        before = (f"{r['before_s']:.2f} ({r['before_ratio']:.1f}x, {r['before_cpu_ratio']:.1f}x)"
                  if "before_s" in r else "")
        js = f"{r['json_s']:.2f} ({r['json_ratio']:.1f}x)" if "json_s" in r else ""
        lines.append(
            f"| {r['fused']} {r['file'] if not r['file'].startswith('synth-') else ''}| {r['nodes']} | {r['bytes'] / 1e6:.1f} MB | {r['gelu_onnx_s']:.2f} | {r['bare_s']:.2f} "
            f"| {r['ratio_median']:.1f}x ({r['ratio_min']:.1f}-{r['ratio_max']:.1f}) "
            f"| {r['gelu_onnx_cpu_s']:.2f} / {r['bare_cpu_s']:.2f} ({r['cpu_ratio_median']:.1f}x"
            f"{'; user %.1fx' % r['user_ratio_median'] if 'user_ratio_median' in r else ''}) "
            f"| {r['gelu_onnx_s'] / r['nodes'] * 1e6:.0f} "
            f"| {r['gelu_onnx_peak_rss'] / 2**20:.0f} / {r['bare_peak_rss'] / 2**20:.0f} MiB "
            f"| {js} | {before} | {r['loadavg'][0]:.1f}-{r['loadavg'][1]:.1f} |")
    lines += ["", *[f"- {n}" for n in doc.get("notes", [])]]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="folder with synth-N.onnx (benchmarks/make_models.py)")
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated GELU counts")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--warmup", type=int, default=1, help="uncounted rounds first")
    ap.add_argument("--before", action="append", default=[], metavar="N=DIR",
                    help="for size N, also time the gelu-onnx checkout in DIR (e.g. a `git worktree` of an "
                         "older commit) in the same rotation")
    ap.add_argument("--files", default="", help="comma-separated further model files (e.g. the deep exports "
                    "of make_models.py --only deep), run like the chains")
    ap.add_argument("--with-json", action="store_true", help="also time `fuse --json` (the report of every fusion)")
    ap.add_argument("--note", action="append", default=[], help="a line for the notes under the table")
    ap.add_argument("--json")
    ap.add_argument("--md")
    a = ap.parse_args(argv)
    doc = {"command": "python benchmarks/bench_chain.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "machine": machine(), "notes": a.note, "results": []}
    before = dict(b.split("=", 1) for b in a.before)
    for checkout in (REPO, *before.values()):
        byte_compile(checkout)
    paths = [(str(n), os.path.join(a.models, f"synth-{n}.onnx")) for n in a.sizes.split(",") if n]
    paths += [(os.path.basename(f), f) for f in a.files.split(",") if f]
    for key, path in paths:
        r = bench(path, a.repeats, a.timeout, a.warmup,
                  os.path.abspath(before[key]) if key in before else None, a.with_json)
        print(json.dumps(r), flush=True)
        doc["results"].append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    if a.md:
        with open(a.md, "w") as f:
            f.write(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
