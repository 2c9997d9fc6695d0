"""CUDA kernels on a GPU: accuracy against a float64 reference and throughput
against the device's copy bandwidth and torch.nn.functional.gelu, side by side
in one process.

    python benchmarks/bench_cuda.py [--lib PATH/libgelu_onnx_ort.so] \
        [--json benchmarks/results/cuda_kernels.json] [--md benchmarks/results/cuda_kernels.md]

Needs only numpy, torch with a CUDA device, and the library built with CUDA
(`--lib`, else $GELU_ONNX_ORT_LIBRARY, else the installed package's), so a
device machine with nothing else installed can run it. The library's C entry
point gelu_cuda_launch is called through ctypes on torch's current stream.

Accuracy: every 97th float32 bit pattern of either sign (plus +-inf) and all
65 536 fp16 / bf16 inputs, every form, against float64 computed by torch on
the device (torch.special.erfc / sigmoid in float64: an independent
implementation). Reported as the max ulp error where the reference is a normal
float (fp32; for tanh/sigmoid also divided by 1 + |t|, the bound's form) and
the number of half-type results more than 1 ulp from the correctly rounded
value.

Throughput: fp32 / fp16 / bf16 at 16 Mi elements and at a size whose input
alone is >= 4x the device's L2 (H100: 50 MB L2 -> >= 200 MB per tensor), so
neither x nor y is served from cache between rounds; bytes moved = read +
write of the tensor; CUDA events, median over interleaved rounds. The
kernels' goal is >= 90% of the copy bandwidth at the large size.

Sanitizers (the same library, small sizes, every kernel variant):
    compute-sanitizer --tool memcheck  python -m pytest -q tests/test_cuda_kernels.py -k "not 2_31"
    compute-sanitizer --tool racecheck python -m pytest -q tests/test_cuda_kernels.py -k "not 2_31"
    compute-sanitizer --tool initcheck python -m pytest -q tests/test_cuda_kernels.py -k "not 2_31"

First run on an H200 with the kernels of c2ec693 (figures:
benchmarks/results/cuda_measured_h200_c2ec693.md); `make gpu-check`
(scripts/gpu_check.py) runs it with the rest of the GPU checks.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
FORMS = {"erf": 0, "tanh": 1, "sigmoid": 2}
KDT = {"float32": 0, "float16": 1, "bfloat16": 2}
SMALL = 16 * 2**20
BIAS_LEN = 1024  # divides every size below (powers of two >= 2^20)


def sizes(torch, element_size: int) -> tuple[int, int]:
    """16 Mi elements, and the smallest power of two >= 64 Mi whose bytes are >= 4x the L2."""
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 * 2**20)
    big = 64 * 2**20
    while big * element_size < 4 * l2:
        big *= 2
    return SMALL, big
TANH_C3 = 0.044715
DEVICE = "cuda"


def quick_gelu_alpha() -> float:
    """From the C mirror of the contract (the value the kernels are built with)."""
    text = (REPO / "plugins" / "common" / "gelu_contract.h").read_text()
    return float(re.search(r"QUICK_GELU_ALPHA\s+([0-9.]+)", text).group(1))


def load_library(path: str | None):
    if path is None:
        path = os.environ.get("GELU_ONNX_ORT_LIBRARY")
    if path is None:
        from gelu_onnx import ortlib

        path = str(ortlib.library_path())
    lib = ctypes.CDLL(path)
    i64, vp = ctypes.c_int64, ctypes.c_void_p
    lib.gelu_cuda_launch.argtypes = [ctypes.c_int, ctypes.c_int, vp, vp, i64, vp, i64, ctypes.c_float, vp]
    lib.gelu_cuda_launch.restype = ctypes.c_int
    return lib, path


class Gelu:
    def __init__(self, lib, torch, alpha):
        self.lib, self.torch, self.alpha = lib, torch, alpha

    def __call__(self, form, x, y, bias=None):
        kdt = KDT[str(x.dtype).replace("torch.", "")]
        rc = self.lib.gelu_cuda_launch(FORMS[form], kdt, x.data_ptr(), None if bias is None else bias.data_ptr(),
                                       0 if bias is None else bias.numel(), y.data_ptr(), x.numel(), self.alpha,
                                       ctypes.c_void_p(self.torch.cuda.current_stream().cuda_stream))
        if rc != 0:
            raise RuntimeError(f"gelu_cuda_launch returned {rc} (6: library built without CUDA)")


def reference(torch, form, v, alpha):
    v = v.double()
    if form == "erf":
        r = v * 0.5 * torch.special.erfc(-v / 2**0.5)
        t = torch.zeros_like(v)
    elif form == "tanh":
        t = 2 * (2 / torch.pi) ** 0.5 * (v + TANH_C3 * v**3)
        r = v * torch.sigmoid(t)
    else:
        t = float(np.float32(alpha)) * v
        r = v * torch.sigmoid(t)
    r = torch.where(torch.isinf(v), torch.where(v > 0, v, torch.zeros_like(v)), r)
    return r, t.abs()


def accuracy(torch, gelu, alpha) -> list[dict]:
    rows = []
    bits = torch.arange(0, 0x7F800000, 97, dtype=torch.int64, device=DEVICE)
    pos = bits.to(torch.int32).view(torch.float32)
    x32 = torch.cat([pos, -pos, torch.tensor([float("inf"), -float("inf")], device=DEVICE)])
    for form in FORMS:
        y = torch.empty_like(x32)
        gelu(form, x32, y)
        ref, t = reference(torch, form, x32, alpha)
        normal = ref.abs() >= 2.0**-126
        ulp = torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(2.0**-126))) - 23)
        err = torch.where(y.double() == ref, torch.zeros_like(ref), (y.double() - ref).abs() / ulp)[normal]
        rows.append({"dtype": "float32", "form": form, "inputs": x32.numel(), "max_ulp": err.max().item(),
                     "max_ulp_over_1_plus_t": (err / (1 + t[normal])).max().item()})
    for dname in ("float16", "bfloat16"):
        tdt = getattr(torch, dname)
        x = torch.arange(-32768, 32768, dtype=torch.int32, device=DEVICE).to(torch.int16).view(tdt)
        for form in FORMS:
            y = torch.empty_like(x)
            gelu(form, x, y)
            ref, _ = reference(torch, form, x.float(), alpha)
            rounded = ref.to(tdt)  # float64 -> half type: one rounding
            ok = ~torch.isnan(ref)
            yi, ri = y.view(torch.int16).int(), rounded.view(torch.int16).int()
            # sign-magnitude bits -> ordered integers, then the distance in steps
            oy, orr = (torch.where(v < 0, -(v & 0x7FFF), v) for v in (yi, ri))
            steps = (oy - orr).abs()[ok]
            nan_match = bool(torch.equal(torch.isnan(y.float()), ~ok))
            rows.append({"dtype": dname, "form": form, "inputs": 65536, "max_steps_from_rounded": steps.max().item(),
                         "over_1_step": int((steps > 1).sum().item()), "nan_where_reference_nan": nan_match})
    return rows


def timed(torch, fn, reps=20) -> float:
    """ms per call of `reps` back-to-back calls, CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def _contenders(F, gelu, x, y, b, xb) -> dict:
    return {
        "copy (y.copy_(x))": lambda: y.copy_(x),
        "ours GeluErf": lambda: gelu("erf", x, y),
        "ours GeluTanh": lambda: gelu("tanh", x, y),
        "ours BiasGeluErf": lambda: gelu("erf", x, y, b),
        "torch gelu": lambda: F.gelu(x),
        "torch gelu tanh": lambda: F.gelu(x, approximate="tanh"),
        "torch gelu(x + bias)": lambda: F.gelu(xb + b),
    }


def throughput(torch, gelu, rounds) -> list[dict]:
    F = torch.nn.functional
    rows = []
    for dname in KDT:
        tdt = getattr(torch, dname)
        for n in sizes(torch, torch.empty(0, dtype=tdt).element_size()):
            x = (torch.randn(n, device=DEVICE) * 3).to(tdt)
            y = torch.empty_like(x)
            b = torch.randn(BIAS_LEN, device=DEVICE).to(tdt)
            contenders = _contenders(F, gelu, x, y, b, x.view(-1, BIAS_LEN))
            for fn in contenders.values():  # warm up (and allocator caches)
                timed(torch, fn, 3)
            times = {k: [] for k in contenders}
            for r in range(rounds):
                names = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
                for k in names:
                    times[k].append(timed(torch, contenders[k]))
            nbytes = 2 * n * x.element_size()
            med = {k: statistics.median(v) for k, v in times.items()}
            copy_bw = nbytes / med["copy (y.copy_(x))"] / 1e6  # GB/s
            for k, ms in med.items():
                bw = nbytes / ms / 1e6
                rows.append({"elements": n, "dtype": dname, "name": k, "ms": ms, "GB_per_s": bw,
                             "of_copy_bandwidth": bw / copy_bw})
            for ours, theirs in (("ours GeluErf", "torch gelu"), ("ours GeluTanh", "torch gelu tanh"),
                                 ("ours BiasGeluErf", "torch gelu(x + bias)")):
                rows.append({"elements": n, "dtype": dname, "name": f"{ours} vs {theirs}",
                             "speedup": med[theirs] / med[ours]})
    return rows


def markdown(doc) -> str:
    out = [f"# CUDA kernels on {doc['device']}", "",
           (f"torch {doc['torch']}, CUDA {doc['cuda']}; library {doc['library']}. "
            f"Command: `{doc['command']}`."), "", "## Accuracy against float64 (torch, on the device)", "",
           "| dtype | form | inputs | max ulp | max ulp / (1+abs(t)) | half: max steps from rounded | > 1 step |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["accuracy"]:
        fmt = lambda k, r=r: "-" if k not in r else f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k])
        out.append(f"| {r['dtype']} | {r['form']} | {r['inputs']:,} | {fmt('max_ulp')} | "
                   f"{fmt('max_ulp_over_1_plus_t')} | {fmt('max_steps_from_rounded')} | {fmt('over_1_step')} |")
    out += ["", "## Throughput (read + write bytes; median of interleaved rounds)", "",
            "| elements | dtype | kernel | ms | GB/s | of copy bandwidth |", "| ---: | --- | --- | ---: | ---: | ---: |"]
    for r in doc["throughput"]:
        if "ms" in r:
            out.append(f"| {r['elements']:,} | {r['dtype']} | {r['name']} | {r['ms']:.4f} | {r['GB_per_s']:.0f} | "
                       f"{r['of_copy_bandwidth']:.3f} |")
    out += ["", "| elements | dtype | comparison | speedup |", "| ---: | --- | --- | ---: |"]
    out += [f"| {r['elements']:,} | {r['dtype']} | {r['name']} | {r['speedup']:.3f}x |"
            for r in doc["throughput"] if "speedup" in r]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=None, help="path of libgelu_onnx_ort.so (built with CUDA)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--rounds", type=int, default=15)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("bench_cuda: no CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    lib, path = load_library(a.lib)
    alpha = quick_gelu_alpha()
    gelu = Gelu(lib, torch, alpha)
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "library": os.path.basename(path), "command": "python " + " ".join([os.path.relpath(__file__, REPO)] + sys.argv[1:]),
           "accuracy": accuracy(torch, gelu, alpha), "throughput": throughput(torch, gelu, a.rounds)}
    text = markdown(doc)
    for p, data in ((a.json, json.dumps(doc, indent=1)), (a.md, text)):
        if p:
            with open(p + ".tmp", "w") as f:
                f.write(data)
            os.replace(p + ".tmp", p)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
