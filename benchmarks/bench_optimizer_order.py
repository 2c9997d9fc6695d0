"""gelu-onnx together with ONNX Runtime's transformer optimizer: which order,
which target. For BERT (erf GELUs) and GPT-2 (tanh GELUs), each order of the
two tools is run on the same export and compared with the optimizer alone:

- attention nodes the result keeps (com.microsoft Attention / MultiHeadAttention),
- the GELU ops it holds, by type (approximate="tanh" marked),
- `gelu_onnx.check` against the ORIGINAL export (reference-relative verdict),
- ONNX Runtime CPU time at ORT_ENABLE_ALL, side by side with the optimizer's
  output in one process (gelu_onnx.verify.bench: interleaved blocks, median).

    python benchmarks/bench_optimizer_order.py [--layers 4] [--hidden 256] [--exporter torchscript|dynamo]
        [--md benchmarks/results/optimizer_order.md]

Weights are random with non-zero biases and norms (models/params.py). The
optimizer is onnxruntime.transformers.optimizer.optimize_model (CPU), at
opt_level 0 (its Python fusions only) and 1 (plus ONNX Runtime's basic
session optimizations, which inline model-local functions).
"""
from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

import onnx

import gelu_onnx
from gelu_onnx import contract
from gelu_onnx.verify import bench

ROOT = Path(__file__).resolve().parents[1]
GELU_OPS = {"Gelu", "BiasGelu", "FastGelu", "QuickGelu", *contract.FORM_OF_OP_TYPE}
ATTENTION_OPS = {"Attention", "MultiHeadAttention", "GroupQueryAttention"}


def export(kind: str, path: Path, layers: int, hidden: int, seq: int, exporter: str) -> None:
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    sys.path.insert(0, str(ROOT))
    from models.params import randomize_params

    heads = max(1, hidden // 64)
    if kind == "bert":
        cfg = BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         intermediate_size=4 * hidden)
    else:  # gpt2: gelu_new, the tanh GELU
        cfg = GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, n_positions=max(seq, 128))
    # eager attention: the graph ONNX Runtime's attention fusion knows (it fuses no SDPA export)
    cfg._attn_implementation = "eager"
    net = (BertModel(cfg, add_pooling_layer=False) if kind == "bert" else GPT2Model(cfg)).eval()

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask):
            return self.net(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    torch.manual_seed(0)
    model = randomize_params(Wrapper().eval(), 0)
    ids = torch.randint(0, 1000, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    kw = dict(input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
              dynamic_axes={"input_ids": axes, "attention_mask": axes})
    if exporter == "torchscript":
        torch.onnx.export(model, (ids, mask), str(path), dynamo=False, opset_version=17, **kw)
    else:
        torch.onnx.export(model, (ids, mask), str(path), dynamo=True, **kw)
    m = onnx.load(str(path))
    m.ir_version = min(m.ir_version, 10)
    onnx.save(m, str(path))


def optimize(src: Path, dst: Path, kind: str, hidden: int, level: int) -> None:
    from onnxruntime.transformers import optimizer

    opt = optimizer.optimize_model(str(src), model_type=kind, num_heads=max(1, hidden // 64), hidden_size=hidden,
                                   opt_level=level, use_gpu=False)
    opt.save_model_to_file(str(dst))


def fuse(src: Path, dst: Path, target: str) -> None:
    gelu_onnx.fuse_file(src, dst, target=target)


def census(path: Path) -> tuple[int, str]:
    """(attention nodes, GELU ops by type) of the main graph and its functions' callers."""
    m = onnx.load(str(path), load_external_data=False)
    ops: collections.Counter = collections.Counter()
    attention = 0
    for n in m.graph.node:
        if n.op_type in ATTENTION_OPS:
            attention += 1
        if n.op_type in GELU_OPS:
            tanh = any(a.name == "approximate" and a.s == b"tanh" for a in n.attribute)
            ops[f"{n.op_type}{'(tanh)' if tanh else ''}"] += 1
    return attention, ", ".join(f"{v} {k}" for k, v in sorted(ops.items())) or "none (decomposed)"


CONTROL = "optimizer alone, a copy of the file timed against it (control)"
ORDERS = [  # (name, steps); "opt1" = optimizer at opt_level 1, "fuse:T" = gelu-onnx fuse --target T
    ("optimizer alone (opt_level 1)", ["opt1"]),
    (CONTROL, ["opt1"]),
    ("gelu-onnx fuse alone (custom)", ["fuse:custom"]),
    ("optimizer 1 -> fuse custom", ["opt1", "fuse:custom"]),
    ("optimizer 1 -> fuse standard", ["opt1", "fuse:standard"]),
    ("optimizer 1 -> fuse ort", ["opt1", "fuse:ort"]),
    ("fuse custom -> optimizer 0", ["fuse:custom", "opt0"]),
    ("fuse custom -> optimizer 1", ["fuse:custom", "opt1"]),
    ("fuse standard -> optimizer 0", ["fuse:standard", "opt0"]),
    ("fuse standard -> optimizer 1", ["fuse:standard", "opt1"]),
]


def run_order(src: Path, work: Path, kind: str, hidden: int, name: str, steps: list[str]) -> Path:
    cur = src
    for i, step in enumerate(steps):
        out = work / f"{kind}.{'_'.join(s.replace(':', '-') for s in steps[:i + 1])}.onnx"
        if not out.exists():
            if step.startswith("opt"):
                optimize(cur, out, kind, hidden, int(step[3:]))
            else:
                fuse(cur, out, step.split(":")[1])
        cur = out
    return cur


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--exporter", choices=("torchscript", "dynamo"), default="torchscript")
    ap.add_argument("--models", default="bert,gpt2")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--md", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for kind in args.models.split(","):
            src = work / f"{kind}.onnx"
            export(kind, src, args.layers, args.hidden, args.seq, args.exporter)
            base = run_order(src, work, kind, args.hidden, *ORDERS[0])
            for name, steps in ORDERS:
                out = run_order(src, work, kind, args.hidden, name, steps)
                attention, gelus = census(out)
                rep = gelu_onnx.check(src, out, dims={"batch": 1, "sequence": args.seq})
                diff = max((o.max_abs for o in rep.outputs), default=float("nan"))
                if name == ORDERS[0][0]:
                    ratio = "1 (anchor)"
                else:
                    if name == CONTROL:  # the same bytes under another name: what the timing's noise is
                        out = work / f"{kind}.control.onnx"
                        shutil.copyfile(base, out)
                    t = bench.bench(base, out, opt_levels=["all"], threads=1, warmup=5, repeats=args.repeats,
                                    dims={"batch": 1, "sequence": args.seq}).results[0]
                    ratio = f"{t.ratio:.3f}"
                rows.append([kind, name, attention, gelus, "pass" if rep.ok else "FAIL", f"{diff:.2g}", ratio])
                print(" | ".join(map(str, rows[-1])), flush=True)
    import onnxruntime as ort
    import platform

    head = ["model", "order", "attention nodes", "GELU ops", "check vs export", "max abs diff",
            "ORT CPU time / optimizer alone"]
    lines = [f"# gelu-onnx with ONNX Runtime's transformer optimizer ({args.exporter} exports)", "",
             f"`python benchmarks/bench_optimizer_order.py --layers {args.layers} --hidden {args.hidden} "
             f"--seq {args.seq} --exporter {args.exporter}` ({time.strftime('%Y-%m-%d')}): random weights with "
             f"non-zero biases and norms, batch 1 x {args.seq}; onnxruntime {ort.__version__}, CPU EP, 1 intra-op "
             f"thread, ORT_ENABLE_ALL, median of {args.repeats} runs in interleaved blocks against the optimizer's "
             f"output in the same process; {platform.processor() or platform.machine()}, shared 2-core VM. "
             "`check` compares each result with the export itself (docs/verdict.md).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    if args.md:
        args.md.write_text("\n".join(lines) + "\n")
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
