"""Predict the CUDA kernels' speed on an H200 from their compiled code alone:
for each kernel `form/dtype/bias` (16-byte kernel, the benchmark's layout) the
fraction of the copy bandwidth it reaches on a tensor >= 4x the L2.

    python scripts/cuda_predict.py [--json] [--revision REV] [--calibrate]

What it reads (sm_90 SASS of gelu_cuda.cu, ptxas/cuobjdump via scripts/cuda_sass.py):
  * the path that really executes per element: the main loop's cheapest trip
    (cuda_sass.main_loop) plus every other block of the loop (its rare
    regions: branches and predicated paths), weighted by how often a warp's
    step enters them on the benchmark's data (x = 3 randn, bias = randn; the
    trigger of each revision's rare path: RARE below, from its source);
  * XU-pipe work (MUFU and conversions) and FMA/ALU work, per element;
  * registers -> resident blocks -> occupancy, and bytes of loads in flight.
The model (three limits, combined smoothly): memory, bytes in flight over what
the SM needs (Little's law); issue, instructions per element against 4
schedulers x 32 lanes x clock at the copy's element rate; XU, 16 lanes per SM.
Its constants are calibrated on the measured kernels of commit c2ec693
(benchmarks/results/cuda_measured_h200_c2ec693.md, from ../shared/GPU.md);
--calibrate refits them and prints the check (Spearman >= 0.8 and every
kernel within +-0.1: tests/test_cuda_predict.py). A prediction, not a
measurement: say so wherever it is quoted.
"""
from __future__ import annotations

import argparse
import heapq
import json
import math
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cuda_sass  # noqa: E402

ROOT = cuda_sass.ROOT
MEASURED = ROOT / "benchmarks" / "results" / "cuda_measured_h200_c2ec693.md"
PREDICTED = ROOT / "benchmarks" / "results" / "cuda_predicted_h200.md"
CALIBRATED_REV = "c2ec693"
DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}

# H200 (SXM): 132 SMs, 1.98 GHz boost, 64 Ki registers and 2048 threads per
# SM; the copy's bandwidth as measured (../shared/GPU.md, 4.2 TB/s).
SMS, CLOCK, REGS_PER_SM, THREADS_PER_SM, MAX_BLOCKS_PER_SM = 132, 1.98e9, 65536, 2048, 32
COPY_BW = 4.2e12
THREADS = 256
# XU pipe: MUFU (ex2, rcp, ...) and the conversions that run on it.
XU = re.compile(r"^(MUFU|F2F|I2F|F2I|FRND)\b")

# The benchmark's data (benchmarks/bench_cuda.py): x = 3 randn, bias = randn,
# so x + b has sigma sqrt(10). RARE[rev][form or form/dtype]: the |x| beyond
# which an element takes that revision's rare path (its source's fast-range
# tests), or None: no data-dependent path.
RARE = {
    CALIBRATED_REV: {"erf": 12.0, "tanh": 9.49, "sigmoid": 78.0 / 1.702},
    "HEAD": {"erf/f32": 12.0},
}

# Model constants. Fixed from the hardware: need_kb, the loads in flight an
# SM needs (4.8 TB/s x ~700 ns / 132 SMs); eta_xu, the share of the XU pipe's
# peak a kernel can use (no calibrated kernel was XU-bound: ncu's XU pipe was
# at most 46 %, so the data cannot pin it; with the best-fitting 0.47 instead
# the fp16/bf16 predictions drop by ~0.1). Calibrated (--calibrate) on
# CALIBRATED_REV's kernels: eta_issue * occupancy^gamma, the share of the
# issue peak reached (fewer resident warps hide less latency), and power,
# how sharply the limits combine.
FIXED = {"need_kb": 26.0, "eta_xu": 0.8}
PARAMS = {**FIXED, "eta_issue": 0.78, "gamma": 0.35, "power": 6.0}  # --calibrate's fit


@dataclass
class Features:
    key: str          # form/dtype/bias
    regs: int
    hot: float        # instructions per element, the cheapest trip
    rare: float       # instructions per element in the loop's other blocks
    p_rare: float     # fraction of warp steps that enter them
    xu: float         # XU instructions per element executed
    elems: int        # elements per thread per trip
    load_bytes: int   # bytes of x loaded per thread per trip
    esize: int

    @property
    def executed(self) -> float:
        return self.hot + self.p_rare * self.rare


def _dijkstra(start: int, cost, nxt, allowed) -> dict[int, int]:
    """Cheapest path cost (both ends included) from start to every block in allowed."""
    dist, pq = {start: cost(start)}, [(cost(start), start)]
    while pq:
        d, b = heapq.heappop(pq)
        if d > dist[b]:
            continue
        for c in nxt[b]:
            if c in allowed and d + cost(c) < dist.get(c, 1 << 60):
                dist[c] = d + cost(c)
                heapq.heappush(pq, (dist[c], c))
    return dist


def _loop_paths(k: cuda_sass.Kernel):
    """(hot trip's instructions, slow trip's instructions, elements per trip) of the main loop.
    Hot: its cheapest trip (cuda_sass.main_loop). Slow: the cheapest trip that
    leaves the hot one at one of its conditional branches (the rare path,
    with any branch nested in it not taken), the costliest such exit."""
    insns = k.insns
    blocks, succ = cuda_sass.basic_blocks(insns)
    hot = cuda_sass.main_loop(k)
    if not hot:
        return [], [], 0
    idx = {a: i for i, (a, *_r) in enumerate(insns)}
    block_of = {i: b for b, (s, e) in enumerate(blocks) for i in range(s, e)}
    members = sorted({block_of[idx[o[0]]] for o in hot})
    head, latch = members[0], members[-1]
    pred = {b: [] for b in range(len(blocks))}
    for b, outs in enumerate(succ):
        for c in outs:
            pred[c].append(b)
    body, stack = {head, latch}, [latch]  # the natural loop: reaches the latch without the head
    while stack:
        b = stack.pop()
        for p in pred[b] if b != head else []:
            if p not in body:
                body.add(p)
                stack.append(p)

    def cost(b):
        s, e = blocks[b]
        return sum(1 for i in range(s, e) if insns[i][2] != "NOP")

    from_head = _dijkstra(head, cost, succ, body)
    to_latch = _dijkstra(latch, cost, pred, body)
    slow = len(hot)
    for b in members:
        for alt in succ[b]:
            if alt in body and alt not in members and alt in to_latch and b in from_head:
                slow = max(slow, from_head[b] + to_latch[alt])
    slow_ops = slow
    elems = sum(cuda_sass.stored_elements(k, o[2]) for o in hot if o[2].startswith("STG"))
    rare_blocks = [b for b in body if b not in members]
    rare_ops = [insns[i] for b in rare_blocks for i in range(*blocks[b]) if insns[i][2] != "NOP"]
    return hot, slow_ops, elems, rare_ops


def _p_outside(limit: float | None, sigma: float) -> float:
    return 0.0 if limit is None else math.erfc(limit / sigma / math.sqrt(2))


def features(k: cuda_sass.Kernel, rare_table: dict) -> Features:
    hot, slow, elems, rare_ops = _loop_paths(k)
    key = f"{k.form}/{DTYPES[k.dtype]}/{'bias' if k.bias else 'nobias'}"
    limit = rare_table.get(f"{k.form}/{k.dtype}", rare_table.get(k.form))
    p_el = _p_outside(limit, math.sqrt(10) if k.bias else 3.0)
    p_warp = 1 - (1 - p_el) ** (32 * elems)
    xu_hot = sum(1 for o in hot if XU.match(o[2]))
    # XU work of the rare trip: the rare blocks' XU share, scaled to its length.
    xu_rare = sum(1 for o in rare_ops if XU.match(o[2])) * (slow - len(hot)) / max(len(rare_ops), 1)
    loads = sum(1 for o in hot if o[2].startswith("LDG"))
    load_bytes = loads * (16 if k.vec > 1 else k.esize)
    return Features(key, k.regs, len(hot) / elems, (slow - len(hot)) / elems, p_warp,
                    (xu_hot + p_warp * xu_rare) / elems, elems, load_bytes, k.esize)


def occupancy(regs: int) -> float:
    per_warp = math.ceil(max(regs, 1) / 8) * 8 * 32
    blocks = min(MAX_BLOCKS_PER_SM, THREADS_PER_SM // THREADS, REGS_PER_SM // (per_warp * THREADS // 32))
    return blocks * THREADS / THREADS_PER_SM


def predict(f: Features, p: dict = PARAMS) -> float:
    occ = occupancy(f.regs)
    inflight = occ * THREADS_PER_SM * f.load_bytes * 2  # loads and the stores behind them
    mem = max(min(1.0, inflight / (p["need_kb"] * 1024)), 1e-3)
    rate = COPY_BW / (2 * f.esize)  # elements per second at the copy's speed
    issue = f.executed * rate / (SMS * 4 * 32 * CLOCK) / (p["eta_issue"] * occ ** p["gamma"])
    xu = f.xu * rate / (SMS * 16 * CLOCK) / p["eta_xu"]
    q = p["power"]
    return (mem ** -q + issue ** q + xu ** q) ** (-1 / q)


def compile_revision(rev: str, workdir: Path, arch: str = "90"):
    """The kernels of `rev` ("HEAD": the working tree) compiled for sm_<arch>."""
    if rev == "HEAD":
        source = cuda_sass.SOURCE
    else:
        tree = workdir / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "plugins/common"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        source = tree / "plugins" / "common" / "gelu_cuda.cu"
    res, sass, _ = cuda_sass.compile_and_dump(arch, workdir, source=source)
    return cuda_sass.parse(res, sass)


def all_features(rev: str) -> dict[str, Features]:
    """Features of the 16-byte kernels (the benchmark's aligned tensors), by key."""
    with tempfile.TemporaryDirectory(prefix="gelu-predict-") as d:
        kernels = compile_revision(rev, Path(d))
    table = RARE.get(rev, RARE["HEAD"])
    return {f.key: f for f in (features(k, table) for k in kernels.values() if k.vec > 1 and not k.exact)}


def measured(column: int = 1) -> dict[str, float]:
    """key -> the committed calibration table's column (1: measured fraction
    of copy; 3: ncu's executed instructions per element, where given)."""
    out = {}
    for line in MEASURED.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if re.fullmatch(r"\w+/\w+/\w+", cells[0]) and re.fullmatch(r"[0-9.]+", cells[column]):
            out[cells[0]] = float(cells[column])
    return out


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for t in range(i, j + 1):
                r[order[t]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))


def check(feats: dict[str, Features], meas: dict[str, float], p: dict = PARAMS) -> dict:
    rows = [{"kernel": k, "measured": v, "predicted": round(predict(feats[k], p), 3)} for k, v in meas.items()]
    worst = max(abs(r["measured"] - r["predicted"]) for r in rows)
    rho = spearman([r["measured"] for r in rows], [r["predicted"] for r in rows])
    return {"revision": CALIBRATED_REV, "spearman": round(rho, 3), "max_abs_error": round(worst, 3), "rows": rows}


def fit(feats: dict[str, Features], meas: dict[str, float]) -> dict:
    """Grid search of the calibrated constants: the smallest worst-case error."""
    best, best_err = dict(PARAMS), 9.0
    for eta in [x / 100 for x in range(50, 121, 2)]:
        for gamma in [x / 20 for x in range(0, 21)]:
            for power in (3.0, 4.0, 5.0, 6.0, 8.0):
                p = {**FIXED, "eta_issue": eta, "gamma": gamma, "power": power}
                err = max(abs(predict(feats[k], p) - v) for k, v in meas.items())
                if err < best_err - 1e-9:
                    best, best_err = p, err
    return best


def markdown(feats: dict[str, Features], calib: dict) -> str:
    lines = ["# CUDA kernels: PREDICTED speed on an H200 (no GPU ran them)", "",
             "Generated by `python scripts/cuda_predict.py --write` from the sm_90 SASS of the working tree's",
             "`plugins/common/gelu_cuda.cu` (nvcc flags of the build). Predicted fraction of the copy",
             "bandwidth at a tensor >= 4x the L2, the benchmark's data (x = 3 randn, bias row 1024),",
             "16-byte kernels. The model and its calibration: `scripts/cuda_predict.py`; on the measured",
             f"kernels of {calib['revision']} (`cuda_measured_h200_c2ec693.md`) it ranks them with Spearman",
             f"{calib['spearman']:.3f} and is off by at most {calib['max_abs_error']:.3f}. A prediction, not a measurement:",
             "`make gpu-check` measures.", "",
             "| kernel | predicted of copy | executed instr/elem | XU/elem | registers | occupancy |",
             "|---|---|---|---|---|---|"]
    for k, f in sorted(feats.items()):
        lines.append(f"| {k} | {predict(f):.3f} | {f.executed:.1f} | {f.xu:.2f} | {f.regs} | {occupancy(f.regs):.2f} |")
    lines += ["", f"Calibration ({calib['revision']}, measured vs predicted):", "",
              "| kernel | measured | predicted |", "|---|---|---|"]
    lines += [f"| {r['kernel']} | {r['measured']:.3f} | {r['predicted']:.3f} |" for r in calib["rows"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print {kernel: predicted fraction of copy} as JSON")
    ap.add_argument("--revision", default="HEAD", help="git revision to compile (HEAD: the working tree)")
    ap.add_argument("--calibrate", action="store_true",
                    help=f"compile {CALIBRATED_REV}, refit the constants, print the check against the measured table")
    ap.add_argument("--write", action="store_true", help=f"write {PREDICTED.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    if args.calibrate:
        feats, meas = all_features(CALIBRATED_REV), measured()
        p = fit(feats, meas)
        print(json.dumps({"params": p, **check(feats, meas, p)}, indent=1))
        return 0
    feats = all_features(args.revision)
    if args.json:
        print(json.dumps({k: round(predict(f), 3) for k, f in sorted(feats.items())}, indent=1))
        return 0
    text = markdown(feats, check(all_features(CALIBRATED_REV), measured()))
    if args.write:
        PREDICTED.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
