"""``gelu-onnx bench``: its printed report and progress (the work is
gelu_onnx.verify.bench.bench; its arguments: cli.py). Imported by that
command only."""
from __future__ import annotations

import sys

from .cliout import dims, emit_json
from .cli_check import progress
from .files import require_file
from .texttable import plural, table
from .verify import bench


def cmd_bench(args) -> int:
    for path in (args.original, args.fused or None, args.inputs):
        if path is not None:
            require_file(path)
    levels = [s.strip() for s in args.opt_levels.split(",") if s.strip()]
    with progress(args, "bench") as step:
        runs = [0]

        def tick(n: int = 1) -> None:  # the runs so far, on the progress line
            runs[0] += n
            step(f"{plural(runs[0], 'session run')}", None)

        rep = bench.bench(
            args.original, args.fused, target=args.target, opt_levels=levels, threads=args.threads,
            warmup=args.warmup, repeats=args.repeats, provider=args.provider,
            use_library=False if args.no_library else None, seed=args.seed, inputs=args.inputs,
            dims=dims(args), dim_default=args.dim_default, allow_pickle=args.allow_pickle, progress=tick,
            max_seconds=args.max_seconds or None, custom_op_libraries=args.custom_op_library,
            input_shapes=dict(args.input_shapes or []), steps=step,
        )
    for w in rep.warnings:
        print(f"gelu-onnx: warning: {w}", file=sys.stderr)
    if args.json:
        emit_json(rep.to_dict())
        return 0
    rows = [[t.opt_level, f"{t.original_ms:.3f}", f"{t.fused_ms:.3f}", f"{t.ratio:.3f}", t.repeats,
             "ok" if t.parity_ok else "MISMATCH"] for t in rep.results]
    header = ["opt level", "original ms", "fused ms", "fused/original", "runs", "parity"]
    if args.quiet:  # the result only
        print(table(rows, header))
        return 0
    m, v = rep.machine, rep.versions
    what = rep.fused + (f" ({plural(rep.fusions, 'GELU')} fused)" if rep.fusions is not None else "")
    print(f"bench {rep.original} vs {what}")
    print(f"machine: {m['cpu']}, {m['usable_cpus']} usable CPUs, intra-op threads {rep.threads}, provider {rep.provider}")
    print(f"versions: onnxruntime {v['onnxruntime']}, onnx {v['onnx']}, numpy {v['numpy']}, python {v['python']}, "
          f"gelu-onnx {v['gelu_onnx']}; custom-op library {'yes' if rep.library else 'no'}")
    print("inputs: " + ", ".join(f"{i['name']} {i['dtype']} {i['shape']}" for i in rep.inputs))
    print(f"median of the timed runs (at most {rep.repeats}, after at most {rep.warmup} warmup; "
          f"{'no time budget' if rep.max_seconds is None else f'budget {rep.max_seconds:g} s'}), interleaved blocks:")
    print(table(rows, header))
    for n in rep.notes:
        print(f"note: {n}")
    return 0
