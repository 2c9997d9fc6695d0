"""Read the compiled CUDA kernels: per kernel registers, stack, spills, local
memory, FP64 instructions, 128-bit global loads/stores, and the hot-path
instructions per element, from ptxas -v and cuobjdump (pip:
nvidia-cuda-cuobjdump). tests/test_cuda_static.py gates on it and diffs the
table against the committed benchmarks/results/cuda_sass_sm90.md.

Hot path: the main loop of a kernel is the loop (a backward branch) whose
cheapest trip (shortest path through its blocks, in instructions, NOPs
excluded) stores the most elements (the unrolled tile loop that every full
tile goes through; the leftover loops store one pack or one element per trip);
on that path, instructions / elements stored = instructions per element. The
cheapest trip skips only the step's recompute with the exact formulas (taken
when an element is outside the fast range: |x| > 12 for erf, |t| > 78 or a
result below 2^-100 for tanh/sigmoid, NaN).

    python scripts/cuda_sass.py [--arch 90] [--write]   # print (or rewrite) the table
"""
from __future__ import annotations

import argparse
import glob
import heapq
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "plugins" / "common" / "gelu_cuda.cu"
TABLE = ROOT / "benchmarks" / "results" / "cuda_sass_sm{arch}.md"
NVCC_FLAGS = ["-O3", "--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-std=c++17"]  # as plugins/CMakeLists.txt builds it
FP64 = re.compile(r"^(DADD|DMUL|DFMA|DSETP|DSET|DMNMX|DMMA)\b|\.F64|64H\b")
ELEM = {"f": ("f32", 4), "6__half": ("f16", 2), "13__nv_bfloat16": ("bf16", 2)}
FORMS = {"0": "erf", "1": "tanh", "2": "sigmoid"}
# Every kernel template the .cu defines (gelu_kernel, and gelu_exact_kernel: the
# sigmoid form's exact path), mangled (defined_kernels reads their names in the source).
NAME = re.compile(r"(gelu_kernel|gelu_exact_kernel)ILi(\d)E(f|6__half|13__nv_bfloat16)Li(\d+)ELb([01])E")
# A branch's target: its last operand (a predicate may come first: BRA P2, 0x1a40).
BRANCH_TARGET = re.compile(r"(0x[0-9a-f]+)\s*$")
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")


def find_tool(name: str) -> str | None:
    """nvcc: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin; cuobjdump also the pip wheel's."""
    dirs = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for d in dirs:
        if d and Path(d, "bin", name).is_file():
            return str(Path(d, "bin", name))
    found = shutil.which(name)
    if found:
        return found
    for sp in {sysconfig.get_paths()["purelib"], *sys.path}:
        hits = sorted(glob.glob(os.path.join(sp, "nvidia", "cu*", "bin", name)))
        if hits:
            return hits[-1]
    return None


@dataclass
class Kernel:
    form: str
    dtype: str
    esize: int
    vec: int
    bias: bool
    exact: bool = False  # gelu_exact_kernel: the rare exact path, off the speed budget
    regs: int = 0
    stack: int = 0
    local: int = 0
    spills: int = 0
    insns: list = field(default_factory=list)  # (addr, pred, opcode, operands)

    @property
    def key(self) -> str:
        return (f"{self.form} {self.dtype} vec{self.vec} {'bias' if self.bias else 'nobias'}"
                + (" exact" if self.exact else ""))

    def count(self, pred) -> int:
        return sum(1 for i in self.insns if pred(i[2], i[3]))


def compile_and_dump(arch: str, workdir: Path, flags: list[str] = NVCC_FLAGS,
                     source: Path = SOURCE) -> tuple[str, str, str]:
    """(ptxas -v and resource usage, SASS, nvcc release) of gelu_cuda.cu (or `source`) built with flags."""
    nvcc, cuobjdump = find_tool("nvcc"), find_tool("cuobjdump")
    if not nvcc or not cuobjdump:
        raise FileNotFoundError(f"nvcc: {nvcc}, cuobjdump: {cuobjdump} (pip install nvidia-cuda-cuobjdump)")
    cubin = workdir / f"gelu_cuda_sm{arch}.cubin"
    r = subprocess.run([nvcc, "-cubin", f"-arch=sm_{arch}", *flags, "-Xptxas", "-v",
                        f"-I{source.parent}", str(source), "-o", str(cubin)],
                       capture_output=True, text=True, check=True)
    ver = re.search(r"release (\d+\.\d+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout)
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    res = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    return r.stderr + r.stdout + "\n" + res, sass, ver.group(1) if ver else "?"


def parse(ptxas_and_res: str, sass: str) -> dict[str, Kernel]:
    kernels: dict[str, Kernel] = {}

    def kernel(mangled: str) -> Kernel | None:
        m = NAME.search(mangled)
        if not m:
            return None
        if mangled not in kernels:
            dtype, esize = ELEM[m.group(3)]
            kernels[mangled] = Kernel(FORMS[m.group(2)], dtype, esize, int(m.group(4)), m.group(5) == "1",
                                      m.group(1) == "gelu_exact_kernel")
        return kernels[mangled]

    cur = None
    for line in ptxas_and_res.splitlines():
        m = re.search(r"Function properties for (\S+)|Compiling entry function '(\S+)'|Function (\S+):", line)
        if m:
            cur = kernel(next(g for g in m.groups() if g))
            continue
        if cur is None:
            continue
        if m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
            cur.stack = max(cur.stack, int(m.group(1)))
            cur.spills = max(cur.spills, int(m.group(2)) + int(m.group(3)))
        if m := re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", line):
            cur.regs, cur.stack, cur.local = int(m.group(1)), max(cur.stack, int(m.group(2))), int(m.group(3))
    cur = None
    for line in sass.splitlines():
        if m := re.search(r"Function : (\S+)", line):
            cur = kernel(m.group(1))
        elif cur is not None and (m := INSN.search(line)):
            pred = (m.group(2) or "").strip()
            cur.insns.append((int(m.group(1), 16), pred, m.group(3), m.group(4).strip()))
    return kernels


def defined_kernels(source: Path = SOURCE) -> set[str]:
    """The names of the __global__ functions ``source`` defines (past a
    __launch_bounds__(...) of nested parentheses)."""
    text, names = source.read_text(), set()
    for m in re.finditer(r"__global__\s+void\s+", text):
        i = m.end()
        if text.startswith("__launch_bounds__", i):
            i, depth = text.index("(", i), 0
            while True:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
                if depth == 0:
                    break
        names.add(re.match(r"\s*(\w+)", text[i:]).group(1))
    return names


def basic_blocks(insns):
    """Basic blocks (index ranges) and successor lists."""
    addr_idx = {a: i for i, (a, *_rest) in enumerate(insns)}
    leaders = {0}
    for i, (_a, _p, op, args) in enumerate(insns):
        if op.startswith(("BRA", "EXIT", "RET", "JMP", "BRX")):
            leaders.add(i + 1)
            t = BRANCH_TARGET.search(args)
            if t and int(t.group(1), 16) in addr_idx:
                leaders.add(addr_idx[int(t.group(1), 16)])
    starts = sorted(x for x in leaders if x < len(insns))
    block_of = {}
    blocks = []
    for b, s in enumerate(starts):
        e = starts[b + 1] if b + 1 < len(starts) else len(insns)
        blocks.append((s, e))
        for i in range(s, e):
            block_of[i] = b
    succ = []
    for b, (s, e) in enumerate(blocks):
        _a, pred, op, args = insns[e - 1]
        out = []
        uncond = pred in ("", "@PT")
        if op.startswith(("BRA", "JMP")):
            t = BRANCH_TARGET.search(args)
            if t and int(t.group(1), 16) in addr_idx:
                out.append(block_of[addr_idx[int(t.group(1), 16)]])
            if not uncond and e < len(insns):
                out.append(b + 1)
        elif op.startswith(("EXIT", "RET")):
            if not uncond and e < len(insns):
                out.append(b + 1)
        elif e < len(insns):
            out.append(b + 1)
        succ.append(out)
    return blocks, succ


def stored_elements(k: Kernel, op: str) -> int:
    """Elements one global store writes."""
    width = 16 if ".128" in op else 8 if ".64" in op else 2 if "16" in op else 4
    return width // k.esize


def main_loop(k: Kernel) -> list:
    """The instructions (addr, pred, opcode, operands) of the main loop's cheapest trip."""
    insns = k.insns
    blocks, succ = basic_blocks(insns)

    def cost(b):
        s, e = blocks[b]
        return sum(1 for i in range(s, e) if insns[i][2] != "NOP")

    best, best_key = [], (0, 0, 0)  # key: (elements stored, memory ops, -instructions)
    for u, outs in enumerate(succ):
        for h in outs:
            if h > u:
                continue
            # Dijkstra from h to u inside [h, u]; path cost includes both ends.
            dist, prev = {h: cost(h)}, {}
            pq = [(cost(h), h)]
            while pq:
                d, b = heapq.heappop(pq)
                if d > dist.get(b, 1 << 60) or b == u:
                    continue
                for c in succ[b]:
                    if h <= c <= u and d + cost(c) < dist.get(c, 1 << 60):
                        dist[c], prev[c] = d + cost(c), b
                        heapq.heappush(pq, (d + cost(c), c))
            if u not in dist:
                continue
            path, b = [u], u
            while b != h:
                b = prev[b]
                path.append(b)
            ops = [insns[i] for b in sorted(path) for i in range(*blocks[b]) if insns[i][2] != "NOP"]
            elems = sum(stored_elements(k, o[2]) for o in ops if o[2].startswith("STG"))
            mem = sum(1 for o in ops if o[2].startswith(("LDG", "STG")))
            if elems and (elems, mem, -len(ops)) > best_key:
                best, best_key = ops, (elems, mem, -len(ops))
    return best


def hot_path(k: Kernel) -> tuple[int, int, int]:
    """(instructions, elements stored, 128-bit global accesses) on the main loop's cheapest trip."""
    ops = main_loop(k)
    elems = sum(stored_elements(k, o[2]) for o in ops if o[2].startswith("STG"))
    wide = sum(1 for o in ops if o[2].startswith(("LDG", "STG")) and ".128" in o[2])
    return len(ops), elems, wide


def table(kernels: dict[str, Kernel], arch: str, nvcc_version: str) -> str:
    lines = [f"# CUDA kernels, sm_{arch} (nvcc {nvcc_version}, {' '.join(NVCC_FLAGS)})", "",
             "Generated by `python scripts/cuda_sass.py --arch " + arch + " --write`; "
             "tests/test_cuda_static.py diffs it. Hot path: the main loop's cheapest trip "
             "(scripts/cuda_sass.py).", "",
             "| kernel | registers | stack B | spill B | local ld/st | FP64 | 128-bit ld/st in loop | hot-path instr | elements/trip | instr/element |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for k in sorted(kernels.values(), key=lambda k: (k.form, k.dtype, k.vec, k.bias, k.exact)):
        n, e, wide = hot_path(k)
        local = k.count(lambda op, a: op.startswith(("LDL", "STL")))
        fp64 = k.count(lambda op, a: bool(FP64.search(op)))
        per = f"{n / e:.2f}" if e else "-"
        lines.append(f"| {k.key} | {k.regs} | {k.stack} | {k.spills} | {local} | {fp64} | {wide} | {n} | {e} | {per} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="90")
    ap.add_argument("--write", action="store_true", help="rewrite benchmarks/results/cuda_sass_sm<arch>.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gelu-sass-") as d:
        res, sass, ver = compile_and_dump(args.arch, Path(d))
    text = table(parse(res, sass), args.arch, ver)
    if args.write:
        Path(str(TABLE).format(arch=args.arch)).write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
