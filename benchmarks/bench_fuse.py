"""How long `gelu-onnx fuse` takes, against a bare onnx.load + onnx.save of the same
file and against ONNX Runtime's transformer optimizer restricted to its GELU fusions.

  python benchmarks/make_models.py --out /tmp/gelu-bench          # the models (once)
  python benchmarks/bench_fuse.py --models /tmp/gelu-bench \\
      --json benchmarks/results/fuse_speed.json --md benchmarks/results/fuse_speed.md

Every measurement is its own process (interpreter start and imports included,
as a user sees them, the package byte-compiled as an installed wheel is), timed wall-clock, with its own peak RSS from os.wait4.
Before each one the input files are read once (warm page cache, like the
second run of a CI job) and os.sync() flushes the previous run's writes, so no
run pays for another's write-back. Contenders alternate within a repeat; the
table shows medians.

  bare      onnx.load(IN) + onnx.save(model, OUT). External-data model: the
            weights are loaded and saved as external data next to OUT (what a
            bare round trip of that model costs); "bare graph only" loads with
            load_external_data=False and writes OUT next to IN.
  gelu-onnx python -m gelu_onnx fuse IN -o OUT (the real CLI, default target);
            "splice off": the same with GELU_ONNX_SPLICE=0 (full parse + serialize).
            External-data model: OUT next to IN (data files referenced in
            place), and "other folder" where the data files must come along.
  ORT       onnx.load + onnxruntime.transformers OnnxModel with FusionGelu,
            FusionFastGelu, FusionQuickGelu, FusionBiasGelu (both kinds) —
            the GELU part of optimizer.optimize_model — then
            save_model_to_file (external data for the external model).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BARE = r"""
import json, os, sys, time
t0 = time.perf_counter()
import onnx
t1 = time.perf_counter()
src, dst, ext = sys.argv[1], sys.argv[2], sys.argv[3]
m = onnx.load(src, load_external_data=(ext != "graph"))
t2 = time.perf_counter()
if ext == "weights":
    onnx.save(m, dst, save_as_external_data=True, all_tensors_to_one_file=True,
              location=os.path.basename(dst) + ".data")
else:
    onnx.save(m, dst)
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "save": t3 - t2}))
"""

ORT = r"""
import json, os, sys, time, logging
t0 = time.perf_counter()
import onnx
from onnxruntime.transformers.onnx_model import OnnxModel
from onnxruntime.transformers.fusion_gelu import FusionGelu
from onnxruntime.transformers.fusion_fastgelu import FusionFastGelu
from onnxruntime.transformers.fusion_quickgelu import FusionQuickGelu
from onnxruntime.transformers.fusion_biasgelu import FusionBiasGelu
logging.disable(logging.WARNING)
t1 = time.perf_counter()
src, dst, ext = sys.argv[1], sys.argv[2], sys.argv[3] == "weights"
m = OnnxModel(onnx.load(src))
t2 = time.perf_counter()
crashed = []
for f in (FusionGelu(m), FusionFastGelu(m), FusionQuickGelu(m), FusionBiasGelu(m, True), FusionBiasGelu(m, False)):
    try:  # FusionQuickGelu crashes on Mul(alpha, x) (constant first): skip it, as a user would have to
        f.apply()
    except Exception as e:
        crashed.append(f"{type(f).__name__}: {type(e).__name__}: {e}")
m.prune_graph()
t3 = time.perf_counter()
fused = sum(1 for n in m.nodes() if n.op_type in ("Gelu", "FastGelu", "BiasGelu", "QuickGelu"))
m.save_model_to_file(dst, use_external_data_format=ext)
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "fuse": t3 - t2, "save": t4 - t3, "fused": fused,
                  "crashed": crashed}))
"""


PHASES = r"""
import json, sys, time
t0 = time.perf_counter()
import onnx
from gelu_onnx import onnxio
from gelu_onnx.fusion import plan as fusion, targets
from gelu_onnx.fusion.report import FuseResult
t1 = time.perf_counter()
src, dst = sys.argv[1], sys.argv[2]
loaded = onnxio.load_model(src)
t2 = time.perf_counter()
plans = fusion.plan(loaded.model, loaded.base_dir)
t3 = time.perf_counter()
res = FuseResult(loaded.model, "custom")
fusion.rewrite(loaded.model, plans, targets.get("custom"), res)
t4 = time.perf_counter()
onnxio.lower_ir_version(res.model)
onnx.checker.check_model(res.model)
t5 = time.perf_counter()
onnxio.save_model(res.model, dst, source=loaded)
t6 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "match": t3 - t2, "rewrite": t4 - t3, "check": t5 - t4,
                  "save": t6 - t5, "fused": len(res.fusions)}))
"""


def measure(argv: list[str], timeout: float) -> dict:
    """Like _run, but the process is our direct child reaped with os.wait4, so its
    own peak RSS is known (RUSAGE_CHILDREN would be the max over all runs)."""
    t = time.perf_counter()
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        p = subprocess.Popen(argv, stdout=so, stderr=se, cwd=REPO)
        deadline = t + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                p.returncode = -9
                return {"error": f"timeout after {timeout:.0f} s"}
            time.sleep(0.01)
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        out, err = so.read().decode(errors="replace"), se.read().decode(errors="replace")
    rec: dict = {"seconds": wall, "cpu_seconds": ru.ru_utime + ru.ru_stime, "user_seconds": ru.ru_utime,
                 "peak_rss": ru.ru_maxrss * 1024,
                 "stdout": out[:200]}
    if p.returncode != 0:
        rec["error"] = (err.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        return rec
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                rec["child"] = json.loads(line)
                break
            except ValueError:
                continue
    if "child" not in rec and out.strip().startswith("{"):
        try:  # the CLI's --json document spans several lines
            rec["child"] = json.loads(out)
        except ValueError:
            pass
    return rec


def _files_of(path: str) -> list[str]:
    """The model file and the data files next to it that it uses (by name)."""
    d = os.path.dirname(path)
    out = [path]
    if os.path.basename(d) == "ext":
        out += [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".data")]
    return out


def byte_compile(checkout: str = REPO) -> None:
    """Byte-compile the checkout's package, as pip does when it installs the
    wheel: where PYTHONDONTWRITEBYTECODE is set (this project's machines set
    it), every run would otherwise compile gelu_onnx from source (~0.06 s of
    CPU), a cost no installed user pays; onnx, the bare side, is compiled in
    site-packages. The runs still see the variable, so nothing else is written."""
    import compileall

    compileall.compile_dir(os.path.join(checkout, "gelu_onnx"), quiet=1)


def warm_cache(paths: list[str]) -> None:
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.read(1 << 24):
                pass
    os.sync()


def _clean(folder: str) -> None:
    for f in os.listdir(folder):
        p = os.path.join(folder, f)
        if os.path.isfile(p):
            os.remove(p)
    os.sync()


def _contenders(name: str, path: str, out_dir: str, ext: bool, synth: bool) -> list[tuple[str, list[str]]]:
    py = sys.executable
    near = os.path.join(os.path.dirname(path), "fused.onnx")  # next to IN (ext: data in place)
    out = os.path.join(out_dir, "out.onnx")
    cli = [py, "-m", "gelu_onnx", "fuse", path, "--json"]
    if not ext:
        return [("bare", [py, "-c", BARE, path, out, "embedded"]),
                ("gelu-onnx", cli + ["-o", out]),
                *([("gelu-onnx phases", [py, "-c", PHASES, path, out])] if synth else
                  [("gelu-onnx splice off", ["env", "GELU_ONNX_SPLICE=0", *cli, "-o", out])]),
                ("ort", [py, "-c", ORT, path, out, "embedded"])]
    return [("bare", [py, "-c", BARE, path, out, "weights"]),
            ("bare graph only", [py, "-c", BARE, path, near, "graph"]),
            ("gelu-onnx", cli + ["-o", near]),
            ("gelu-onnx other folder", cli + ["-o", out]),
            ("ort", [py, "-c", ORT, path, out, "weights"])]


def bench_model(name: str, path: str, out_dir: str, repeats: int, timeout: float, only=None,
                synth: bool = False, skip: dict | None = None) -> dict:
    ext = os.path.basename(os.path.dirname(path)) == "ext"
    files = _files_of(path)
    size = sum(os.path.getsize(f) for f in files)
    skip = skip or {}
    cont = [c for c in _contenders(name, path, out_dir, ext, synth)
            if (only is None or c[0] in only) and c[0] not in skip]
    runs: dict[str, list[dict]] = {c: [] for c, _ in cont}
    near = os.path.join(os.path.dirname(path), "fused.onnx")
    for r in range(repeats):
        order = cont if r % 2 == 0 else cont[::-1]
        for label, argv in order:
            _clean(out_dir)
            if os.path.exists(near):
                os.remove(near)
            warm_cache(files)
            load = os.getloadavg()[0]
            rec = measure(argv, timeout)
            rec["loadavg_before"] = load
            runs[label].append(rec)
            print(f"  {name} {label} #{r}: " + (rec.get("error") or
                  f"{rec['seconds']:.2f} s, {rec['peak_rss'] / 2**20:.0f} MiB"), flush=True)
            if "error" in rec and "timeout" in rec["error"]:
                break
    _clean(out_dir)
    if os.path.exists(near):
        os.remove(near)
    # results stay small tables: the model's name, not this machine's path
    res = {"path": os.path.basename(path), "file_bytes": os.path.getsize(path), "total_bytes": size,
           "external_data": ext, "contenders": {}}
    for label, rs in runs.items():
        ok = [x for x in rs if "error" not in x]
        row: dict = {"runs": rs}
        if ok:
            row["seconds"] = statistics.median(x["seconds"] for x in ok)
            row["peak_rss"] = max(x["peak_rss"] for x in ok)
            fused = (ok[0].get("child") or {}).get("fused")  # the CLI's --json / the ORT script's count
            row["fused"] = fused if isinstance(fused, int) else None
            phases = {k: statistics.median(x["child"][k] for x in ok if k in x.get("child", {}))
                      for k in ("import", "load", "match", "rewrite", "fuse", "check", "save")
                      if all(k in x.get("child", {}) for x in ok)}
            if phases:
                row["phases"] = phases
        else:
            row["error"] = rs[0].get("error") if rs else "not run"
        row["runs"] = [slim(x) for x in rs]  # the child's per-GELU report is not a result
        res["contenders"][label] = row
    for label, why in skip.items():
        res["contenders"][label] = {"error": why}
    crashed = sorted({c for x in runs.get("ort", []) for c in (x.get("child") or {}).get("crashed", [])})
    if crashed:
        res["contenders"]["ort"]["crashed"] = crashed
    base = res["contenders"].get("bare", {}).get("seconds")
    for row in res["contenders"].values():
        if base and "seconds" in row:
            row["ratio_to_bare"] = row["seconds"] / base
        if "peak_rss" in row:
            row["rss_to_file"] = row["peak_rss"] / res["file_bytes"]
            row["rss_to_total"] = row["peak_rss"] / size
    return res


def slim(run: dict) -> dict:
    """One run as the results file keeps it: timings, memory, load, error."""
    return {k: run[k] for k in ("seconds", "peak_rss", "loadavg_before", "error") if k in run}


def node_count(path: str) -> int:
    import onnx

    return len(onnx.load(path, load_external_data=False).graph.node)


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    vers = {"python": platform.python_version()}
    for mod in ("onnx", "onnxruntime", "numpy", "google.protobuf"):
        try:
            vers[mod] = __import__(mod, fromlist=["__version__"]).__version__
        except Exception:  # noqa: BLE001 — a missing module is reported, not fatal
            vers[mod] = None
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = None
    return {"cpu": cpu, "usable_cpus": len(os.sched_getaffinity(0)), "memory_bytes": mem,
            "kernel": platform.release(), "versions": vers, "gelu_onnx_commit": commit}


def _fs(path: str) -> str:
    best = ("", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                _, mnt, fstype = line.split()[:3]
                if path.startswith(mnt) and len(mnt) > len(best[0]):
                    best = (mnt, fstype)
    except OSError:
        pass
    return best[1]


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def _loads(doc: dict) -> str:
    loads = [x["loadavg_before"] for r in [*doc["models"].values(), *doc.get("synthetic", [])]
             for c in r["contenders"].values() for x in c.get("runs", []) if "loadavg_before" in x]
    return f"{min(loads):.1f}-{max(loads):.1f} (2 = both cores busy)" if loads else "not recorded"


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [
        "# gelu-onnx fuse speed",
        "",
        *[f"Command: `{c}`  " for c in doc.get("commands", [doc["command"]])],
        f"Machine: {m['cpu']}, {m['usable_cpus']} usable CPUs, {(m['memory_bytes'] or 0) / 2**30:.0f} GiB RAM, "
        f"Linux {m['kernel']}, models on {doc['filesystem']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items()) + f"; gelu-onnx {m['gelu_onnx_commit']}  ",
        f"Each cell: median of {doc['repeats']} runs, one process per run (imports included), "
        "warm page cache, os.sync() before each run; peak RSS from wait4. "
        f"The machine was shared: 1-minute load average before the runs {_loads(doc)}.",
        "",
        "| model | file | contender | seconds | x bare | peak RSS | RSS / file | GELUs fused | in-process phases (s) |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in doc["models"].items():
        size = _size(r["file_bytes"]) + (f" + {_size(r['total_bytes'] - r['file_bytes'])} data"
                                          if r["external_data"] else "")
        for label, row in r["contenders"].items():
            if "error" in row:
                lines.append(f"| {name} | {size} | {label} | {row['error']} | | | | | |")
                continue
            ratio = f"{row['ratio_to_bare']:.2f}" if "ratio_to_bare" in row else ""
            rss = row["rss_to_total"] if r["external_data"] else row["rss_to_file"]
            fused = "" if row.get("fused") is None else str(row["fused"])
            lines.append(f"| {name} | {size} | {label} | {row['seconds']:.2f} | {ratio} | "
                         f"{row['peak_rss'] / 2**20:.0f} MiB | {rss:.2f}{' of all' if r['external_data'] else ''} "
                         f"| {fused} | {', '.join(f'{k} {v:.2f}' if v >= 0.01 else f'{k} {v:.3f}' for k, v in row.get('phases', {}).items())} |")
    if doc.get("synthetic"):
        lines += ["", "## Synthetic chains of N GELUs (bias Add + one of five spellings each)", "",
                  "`gelu-onnx` is the CLI end to end; the phase columns (µs per node) come from a separate "
                  "in-process run of the same steps (onnxio.load_model, match = fusion.plan, fusion.rewrite, "
                  "onnx.checker, onnxio save).", "",
                  "| GELUs | nodes | gelu-onnx s | µs / node | µs / GELU | load | match | rewrite | check | save "
                  "| bare s | ORT s | ORT fused |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for row in doc["synthetic"]:
            ours = row["contenders"].get("gelu-onnx", {})
            bare = row["contenders"].get("bare", {})
            ortr = row["contenders"].get("ort", {})
            fmt = lambda x: f"{x['seconds']:.2f}" if "seconds" in x else x.get("error", "-")
            per_node = f"{ours['seconds'] / row['nodes'] * 1e6:.1f}" if "seconds" in ours else "-"
            per_gelu = f"{ours['seconds'] / row['gelus'] * 1e6:.0f}" if "seconds" in ours else "-"
            ph = row["contenders"].get("gelu-onnx phases", {}).get("phases", {})
            phs = " | ".join(f"{ph[k] / row['nodes'] * 1e6:.1f}" if k in ph else "-"
                             for k in ("load", "match", "rewrite", "check", "save"))
            lines.append(f"| {row['gelus']} | {row['nodes']} | {fmt(ours)} | {per_node} | {per_gelu} | {phs} | "
                         f"{fmt(bare)} | {fmt(ortr)} | "
                         f"{ortr.get('fused', '') if ortr.get('fused') is not None else ''} |")
    crashes = sorted({c for r in [*doc["models"].values(), *doc.get("synthetic", [])]
                      for c in r["contenders"].get("ort", {}).get("crashed", [])})
    notes = [*doc.get("notes", []), *(f"ORT fusion that raised (skipped, the others ran): {c}" for c in crashes)]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _write(doc: dict, json_path: str | None, md_path: str | None) -> None:
    """The results as JSON and Markdown (each through a temp file + rename); prints the Markdown."""
    text = markdown(doc)
    for path, data in ((json_path, json.dumps(doc, indent=1)), (md_path, text)):
        if path:
            with open(path + ".tmp", "w") as f:
                f.write(data)
            os.replace(path + ".tmp", path)
    print(text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="/tmp/gelu-bench", help="folder written by make_models.py")
    ap.add_argument("--which", default="bert-base,bert-large,ext,synth", help="comma-separated subset")
    ap.add_argument("--synth", default="1000,10000,100000", help="GELU counts of the synthetic series")
    ap.add_argument("--repeats", type=int, default=3, help="runs per contender for the big models (default 3)")
    ap.add_argument("--synth-repeats", type=int, default=1, help="runs per contender for synthetic graphs")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before one run is abandoned")
    ap.add_argument("--ort-max-gelus", type=int, default=10000,
                    help="skip ORT on larger synthetic graphs (its GELU fusions are quadratic; default 10000)")
    ap.add_argument("--contenders", default=None, help="comma-separated subset of contender labels")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--md", help="write a markdown table here")
    ap.add_argument("--render", metavar="JSON", help="only re-render the markdown of an earlier --json file")
    ap.add_argument("--note", action="append", default=[], help="a line for the notes (repeatable)")
    ap.add_argument("--merge", action="store_true",
                    help="keep what the existing --json file has for models not measured in this run")
    a = ap.parse_args(argv)
    if a.render:
        with open(a.render) as f:
            doc = json.load(f)
        doc["notes"] = [*doc.get("notes", []), *a.note]
        _write(doc, a.json if a.note else None, a.md)
        return 0
    models = os.path.abspath(a.models)
    byte_compile()
    which = set(a.which.split(","))
    only = set(a.contenders.split(",")) if a.contenders else None
    out_dir = tempfile.mkdtemp(prefix="fuse-out-", dir=models)
    doc = {"command": "python " + " ".join([os.path.relpath(__file__, REPO)] + (argv if argv is not None else sys.argv[1:])),
           "machine": machine(), "filesystem": _fs(models), "repeats": a.repeats, "models": {}, "synthetic": [],
           "notes": list(a.note)}
    try:
        for name, rel in (("bert-base", "bert-base.onnx"), ("bert-large", "bert-large.onnx"), ("ext", "ext/ext.onnx")):
            path = os.path.join(models, rel)
            if name in which:
                if not os.path.exists(path):
                    doc["notes"].append(f"{name}: {path} missing (run make_models.py)")
                    continue
                print(f"{name}: {path}", flush=True)
                doc["models"][name] = bench_model(name, path, out_dir, a.repeats, a.timeout, only)
        if "synth" in which:
            for n in (int(s) for s in a.synth.split(",") if s):
                path = os.path.join(models, f"synth-{n}.onnx")
                if not os.path.exists(path):
                    doc["notes"].append(f"synth-{n}: {path} missing (run make_models.py)")
                    continue
                print(f"synth-{n}: {path}", flush=True)
                skip = {"ort": f"skipped (> {a.ort_max_gelus} GELUs; quadratic)"} if n > a.ort_max_gelus else {}
                r = bench_model(f"synth-{n}", path, out_dir, a.synth_repeats, a.timeout, only, True, skip)
                r.update(gelus=n, nodes=node_count(path))
                doc["synthetic"].append(r)
    finally:
        _clean(out_dir)
        os.rmdir(out_dir)
    if a.merge and a.json and os.path.exists(a.json):
        with open(a.json) as f:
            old = json.load(f)
        doc["commands"] = [*old.get("commands", [old["command"]]), doc["command"]]
        doc["models"] = {**old["models"], **doc["models"]}
        have = {r["gelus"] for r in doc["synthetic"]}
        doc["synthetic"] = sorted([r for r in old.get("synthetic", []) if r["gelus"] not in have] + doc["synthetic"],
                                  key=lambda r: r["gelus"])
        doc["notes"] = [*old.get("notes", []), *doc["notes"]]
    _write(doc, a.json, a.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
