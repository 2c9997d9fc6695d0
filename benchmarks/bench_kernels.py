"""CPU throughput of the gelu-onnx custom-op kernels vs ONNX Runtime's own GELUs.

Everything runs side by side in one process, on one-node models, with the
same thread count and the same measuring method (IO binding: inputs bound once,
outputs written into a preallocated buffer, so allocation and copies are not
timed). Rounds alternate between the contenders so that drift in machine speed
hits all of them alike. Reported: median and best G elements/s and the ratio
of medians (ours / theirs). Both sessions of a pair run with
intra-op spinning off (two live pools would otherwise spin against each other).

  python benchmarks/bench_kernels.py                      # 2 threads, both sizes
  python benchmarks/bench_kernels.py --json out.json --threads 2 --rounds 15
  python benchmarks/bench_kernels.py --per-core   # plus a 1-thread pass
  python benchmarks/bench_kernels.py --vs-relu    # plus erf/tanh against ORT's Relu
  python benchmarks/bench_kernels.py --only-relu  # just that (16 777 216 elements)

Comparisons (the issue's acceptance pairs):
  GeluErf        vs com.microsoft.Gelu        (target >= 1.2x)
  GeluTanh       vs ONNX Gelu-20 tanh         (target >= 1.5x)
  BiasGeluErf    vs com.microsoft.BiasGelu    (target >= 1.3x)
plus, for reference, the decomposed erf graph (Div/Erf/Add/Mul/Mul) and ONNX
Gelu-20 (none). --vs-relu: GeluErf, BiasGeluErf (goal >= 0.9x), GeluTanh and
BiasGeluTanh against ONNX Runtime's Relu, a memory-bound anchor.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from gelu_onnx import contract, ortlib  # noqa: E402
from helpers.kernel_helpers import kernel_library  # noqa: E402

HIDDEN = 768
SIZES = (393216, 16777216)


def _model(nodes, inputs, opsets):
    g = helper.make_graph(nodes, "bench", inputs,
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                             ir_version=10).SerializeToString()


def _x():
    return helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", HIDDEN])


def _b():
    return helper.make_tensor_value_info("B", TensorProto.FLOAT, [HIDDEN])


def ours(form, bias=False):
    op = contract.OP_TYPES[(form, bias)]
    ins = ["X", "B"] if bias else ["X"]
    return _model([helper.make_node(op, ins, ["Y"], domain=contract.DOMAIN)],
                  [_x(), _b()] if bias else [_x()], [("", 17), (contract.DOMAIN, contract.OPSET_VERSION)])


def ms(op, bias=False):
    ins = ["X", "B"] if bias else ["X"]
    return _model([helper.make_node(op, ins, ["Y"], domain=contract.MS_DOMAIN)],
                  [_x(), _b()] if bias else [_x()], [("", 17), (contract.MS_DOMAIN, 1)])


def gelu20(approximate):
    return _model([helper.make_node("Gelu", ["X"], ["Y"], approximate=approximate)], [_x()], [("", 20)])


def relu():
    return _model([helper.make_node("Relu", ["X"], ["Y"])], [_x()], [("", 17)])


def decomposed_erf():
    c = lambda n, v: helper.make_node("Constant", [], [n], value=helper.make_tensor(n, TensorProto.FLOAT, [], [v]))  # noqa: E731
    nodes = [c("s2", contract.SQRT2), c("one", 1.0), c("half", 0.5),
             helper.make_node("Div", ["X", "s2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["X", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["Y"])]
    return _model(nodes, [_x()], [("", 17)])


class Contender:
    def __init__(self, name, model, n, threads, library, bias):
        so = ortlib.session_options() if library else ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Two sessions are alive at once (alternating rounds): with ORT's
        # default spin-waiting, the idle one's pool would burn the cores the
        # running one needs. Same setting for both contenders.
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.name, self.n = name, n
        self.sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((n // HIDDEN, HIDDEN), dtype=np.float32)
        self.y = np.empty_like(self.x)
        self.io = self.sess.io_binding()
        self.io.bind_cpu_input("X", self.x)
        if bias:
            self.b = rng.standard_normal(HIDDEN, dtype=np.float32)
            self.io.bind_cpu_input("B", self.b)
        self.io.bind_output("Y", "cpu", 0, np.float32, list(self.x.shape), self.y.ctypes.data)
        self.times, self.cpu_times = [], []

    def run(self, reps):
        c, t = time.process_time(), time.perf_counter()
        for _ in range(reps):
            self.sess.run_with_iobinding(self.io)
        self.times.append((time.perf_counter() - t) / reps)
        self.cpu_times.append((time.process_time() - c) / reps)  # all threads of the process

    def stats(self):
        med, best = statistics.median(self.times), min(self.times)
        return {"median_gelem_s": self.n / med / 1e9, "best_gelem_s": self.n / best / 1e9,
                "median_us": med * 1e6}


PAIRS = [
    ("erf", "GeluErf", lambda: ours("erf"), "com.microsoft.Gelu", lambda: ms("Gelu"), False, 1.2),
    ("tanh", "GeluTanh", lambda: ours("tanh"), "Gelu-20 tanh", lambda: gelu20("tanh"), False, 1.5),
    ("bias", "BiasGeluErf", lambda: ours("erf", True), "com.microsoft.BiasGelu", lambda: ms("BiasGelu", True), True, 1.3),
    ("erf-vs-decomposed", "GeluErf", lambda: ours("erf"), "decomposed erf graph", decomposed_erf, False, None),
    ("erf-vs-gelu20", "GeluErf", lambda: ours("erf"), "Gelu-20 (none)", lambda: gelu20("none"), False, None),
]


# --vs-relu: ours against ONNX Runtime's Relu (a memory-bound anchor: one
# read, one write per element, no math), all contenders in each round.
RELU_SET = [
    ("GeluErf", lambda: ours("erf"), False),
    ("BiasGeluErf", lambda: ours("erf", True), True),
    ("GeluTanh", lambda: ours("tanh"), False),
    ("BiasGeluTanh", lambda: ours("tanh", True), True),
]


def vs_relu(n, threads, rounds):
    """Each round runs Relu and every kernel of RELU_SET once for ~reps
    calls, in a rotating order; the ratio for a kernel is the median over
    rounds of (Relu's time / its time) in that round, so slow drift and other
    load hit both sides of each ratio alike."""
    anchor = Contender("Relu", relu(), n, threads, False, False)
    cs = [Contender(name, model(), n, threads, True, bias) for name, model, bias in RELU_SET]
    reps = max(1, int(1e7 // n))  # short rounds: ~10M elements per contender
    everyone = [anchor] + cs
    for c in everyone:
        c.run(reps)
        c.times.clear()
        c.cpu_times.clear()
    for r in range(rounds):
        k = r % len(everyone)
        for c in everyone[k:] + everyone[:k]:
            c.run(reps)
    rows = []
    for c in cs:
        ratios = sorted(a / t for a, t in zip(anchor.times, c.times))
        q = lambda f: ratios[min(len(ratios) - 1, int(f * len(ratios)))]  # noqa: E731
        # CPU seconds (both threads) per call: what the kernel costs the cores,
        # far steadier than wall time while other processes share them.
        cpu_ratio = statistics.median(anchor.cpu_times) / statistics.median(c.cpu_times)
        rows.append({"comparison": "vs-relu", "elements": n, "threads": threads, "ours": c.name,
                     "theirs": "Relu", "ours_stats": c.stats(), "theirs_stats": anchor.stats(),
                     "ratio": statistics.median(ratios), "ratio_q25": q(0.25), "ratio_q75": q(0.75),
                     "cpu_time_ratio": cpu_ratio,
                     "target": 0.9 if c.name.endswith("Erf") else None})
        rows[-1]["meets_target"] = None if rows[-1]["target"] is None else rows[-1]["ratio"] >= 0.9
        print(f"{threads}t {n:>9} {c.name:>12} {c.stats()['median_gelem_s']:6.2f} G/s | Relu "
              f"{anchor.stats()['median_gelem_s']:6.2f} G/s | x{rows[-1]['ratio']:.2f} "
              f"(quartiles {q(0.25):.2f}-{q(0.75):.2f}) | CPU time x{cpu_ratio:.2f}", flush=True)
    return rows


def machine():
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "onnx": onnx.__version__, "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            txt = f.read()
        info["cpu"] = next(l.split(":", 1)[1].strip() for l in txt.splitlines() if l.startswith("model name"))
        flags = next(l.split(":", 1)[1].split() for l in txt.splitlines() if l.startswith("flags"))
        info["simd"] = [f for f in ("avx2", "fma", "f16c", "avx512f", "avx512bw") if f in flags]
    except (OSError, StopIteration):
        pass
    info["gelu_onnx_cpu_path"] = kernel_library().gelu_cpu_isa().decode()
    info["isa_cap"] = os.environ.get("GELU_ONNX_CPU_ISA")  # the path a run forced, if any
    info["loadavg_at_start"] = list(os.getloadavg())  # other work on the machine skews 2-thread runs
    return info


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--md", help="write a Markdown table here")
    ap.add_argument("--per-core", action="store_true",
                    help="also run everything with 1 thread (per-core efficiency; robust to a busy machine)")
    ap.add_argument("--vs-relu", action="store_true",
                    help="also: each erf/tanh kernel against ORT's Relu at 16 777 216 elements, "
                         "--relu-rounds short rounds")
    ap.add_argument("--relu-rounds", type=int, default=61)
    ap.add_argument("--only-relu", action="store_true", help="--vs-relu without the GELU pairs")
    a = ap.parse_args(argv)
    a.vs_relu = a.vs_relu or a.only_relu
    results = {"machine": machine(), "threads": a.threads, "rounds": a.rounds, "per_core": a.per_core, "method":
               "io_binding, preallocated output, alternating rounds, median of per-round means",
               "comparisons": [], "outputs": {"json": a.json, "md": a.md}}
    print(json.dumps(results["machine"]))
    runs = [(threads, n) for threads in ([a.threads] + ([1] if a.per_core and a.threads != 1 else []))
            for n in a.sizes]
    for threads, n in [] if a.only_relu else runs:
        reps = max(1, int(4e7 // n))  # ~40M elements per round per contender
        for key, our_name, our_model, their_name, their_model, bias, target in PAIRS:
            c_ours = Contender(our_name, our_model(), n, threads, True, bias)
            c_theirs = Contender(their_name, their_model(), n, threads, False, bias)
            for c in (c_ours, c_theirs):
                c.run(max(1, reps // 4))  # warm-up
                c.times.clear()
            for _ in range(a.rounds):
                c_ours.run(reps)
                c_theirs.run(reps)
            so, st = c_ours.stats(), c_theirs.stats()
            ratio = so["median_gelem_s"] / st["median_gelem_s"]
            row = {"comparison": key, "elements": n, "threads": threads, "ours": our_name, "theirs": their_name,
                   "ours_stats": so, "theirs_stats": st, "ratio": ratio, "target": target,
                   "meets_target": None if target is None or threads != a.threads else ratio >= target}
            results["comparisons"].append(row)
            print(f"{threads}t {n:>9} {our_name:>12} {so['median_gelem_s']:6.2f} G/s | {their_name:>24} "
                  f"{st['median_gelem_s']:6.2f} G/s | x{ratio:.2f}" + (f" (target {target}x)" if target else ""),
                  flush=True)
    if a.vs_relu:
        results["relu_rounds"], results["only_relu"] = a.relu_rounds, a.only_relu
        results["comparisons"] += vs_relu(SIZES[-1], a.threads, a.relu_rounds)
    results["loadavg_at_end"] = list(os.getloadavg())
    if a.json:
        _write(a.json, json.dumps(results, indent=1) + "\n")
    if a.md:
        _write(a.md, markdown(results))
    return 0


def _write(path, text):
    tmp = path + ".tmp"  # never a half-written file
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def markdown(results):
    m = results["machine"]
    lines = [
        "# CPU kernel throughput: gelu-onnx vs ONNX Runtime",
        "",
        f"Machine: {m.get('cpu', '?')}, {m.get('cpus')} CPUs ({', '.join(m.get('simd', []))}), "
        f"kernel path `{m.get('gelu_onnx_cpu_path')}`; onnxruntime {m['onnxruntime']}; "
        f"{results['threads']} threads; {results['rounds']} alternating rounds; {results['method']}.",
        f"Load average (1, 5, 15 min) at start {m.get('loadavg_at_start')}, at end {results.get('loadavg_at_end')}: "
        "anything above ~0.5 means other processes shared the 2 cores and the 2-thread numbers are pessimistic.",
        "Produced by `" + (f"GELU_ONNX_CPU_ISA={m['isa_cap']} " if m.get("isa_cap") else "")
        + "python benchmarks/bench_kernels.py" + (" --per-core" if results.get("per_core") else "")
        + ((" --only-relu" if results.get("only_relu") else " --vs-relu") if results.get("relu_rounds") else "")
        + "".join(f" --{k} {results['outputs'][k]}" for k in ("json", "md") if results.get("outputs", {}).get(k)) + "`.",
        "",
        "| threads | elements | ours | G elem/s | theirs | G elem/s | ratio | target |",
        "| ---: | ---: | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for r in results["comparisons"]:
        if r["comparison"] == "vs-relu":
            continue
        t = "" if r["target"] is None or r["threads"] != results["threads"] else \
            f">= {r['target']}x " + ("met" if r["meets_target"] else "**missed**")
        lines.append(f"| {r['threads']} | {r['elements']:,} | {r['ours']} | {r['ours_stats']['median_gelem_s']:.2f} | {r['theirs']} | "
                     f"{r['theirs_stats']['median_gelem_s']:.2f} | {r['ratio']:.2f}x | {t} |")
    relu = [r for r in results["comparisons"] if r["comparison"] == "vs-relu"]
    if relu:
        lines += [
            "",
            f"Against ONNX Runtime's `Relu` (one read and one write per element, no math), "
            f"{relu[0]['elements']:,} elements, {relu[0]['threads']} threads, {results.get('relu_rounds')} "
            "short rounds, every kernel and Relu in each round (rotating order). Throughput ratio: median "
            "over rounds of Relu's time / ours in the same round (quartiles); CPU-time ratio: Relu's "
            "median process CPU seconds per call / ours (both threads; steadier on a shared machine). "
            "Goal for the erf kernels: >= 0.9.",
            "",
            "| kernel | G elem/s | Relu G elem/s | throughput ratio (quartiles) | CPU-time ratio |",
            "| --- | ---: | ---: | --- | ---: |",
        ]
        for r in relu:
            lines.append(f"| {r['ours']} | {r['ours_stats']['median_gelem_s']:.2f} | "
                         f"{r['theirs_stats']['median_gelem_s']:.2f} | {r['ratio']:.2f} "
                         f"({r['ratio_q25']:.2f}-{r['ratio_q75']:.2f}) | {r['cpu_time_ratio']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
