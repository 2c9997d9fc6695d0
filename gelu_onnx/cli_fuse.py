"""``gelu-onnx fuse`` and ``inspect``: their printed reports (the work is
gelu_onnx.files.fuse_file / inspect_file; their arguments: cli.py), and the
folders ``fuse -o`` creates. Imported by those commands only."""
from __future__ import annotations

import contextlib
import os
import sys

from .cliout import collapse_whitespace, emit_json
from .texttable import plural, table
from .errors import InputError
from .files import fuse_file, inspect_file
from .fusion import targets
from .onnxio.fileops import cleanup, makedirs


def cmd_fuse(args) -> int:
    with created_folders(args.output):  # -o into a new folder: made here, removed again on failure
        done = fuse_file(args.input, args.output, target=args.target, overwrite_input=args.overwrite_input)
    res = done.result
    if args.json:
        emit_json({"ok": True, **done.as_dict()})
        return 0
    counts = res.summary()
    forms = ", ".join(f"{k}: {v}" for k, v in sorted(counts["by_form"].items()))
    print(f"fused {plural(counts['fused'], 'GELU')}{f' ({forms})' if forms else ''}{_already_words(res)} "
          f"-> {args.output} [target {args.target}]")
    if args.quiet:
        return 0
    _print_near_misses(res.near_misses, args.verbose, "left unfused")
    for note in done.notes:
        print(f"note: {note}")
    return 0


def _already_words(res) -> str:
    """The GELUs found already written as the target's op, in words."""
    if not res.already:
        return ""
    n = len(res.already)
    ops = sorted({f.op for f in res.already})
    what = (f"{'it is' if n == 1 else 'all are'}" if not res.fusions else f"{n} more {'is' if n == 1 else 'are'}")
    return f"; {what} already {res.target} {'op' if n == 1 else 'ops'} ({', '.join(ops)}), kept as written"


def _print_near_misses(near, verbose: bool, heading: str) -> None:
    """The near-misses worth reading (regions close to a GELU: fusion.report.NearMiss.gelu_like); with
    -v every anchor, the lone Tanh of a BERT pooler included."""
    shown = near if verbose else [n for n in near if n.gelu_like]
    if shown:
        print(f"{plural(len(shown), 'near-miss')} {heading}:")
        for n in shown:
            print(f"  [{_graph(n.graph)}] {n.anchor}: {n.code}: {n.reason}")
    if len(shown) < len(near):
        print(_not_listed(len(near) - len(shown)))


def _not_listed(hidden: int) -> str:
    one = hidden == 1
    return (f"(not listed: {hidden} Tanh/Erf/Sigmoid that compute{'s' if one else ''} no GELU, such as a "
            f"pooler's Tanh; -v lists {'it' if one else 'them'})")


def cmd_inspect(args) -> int:
    found = inspect_file(args.input, args.target or targets.DEFAULT)
    for w in found.warnings:
        print(f"gelu-onnx: warning: {w}", file=sys.stderr)
    if args.json:
        emit_json({"ok": True, **found.as_dict()})
        return 0
    res = found.result
    fusions, already, near = res.fusions, res.already, res.near_misses
    listed = near if args.verbose else [n for n in near if n.gelu_like]
    shown = f" [target {args.target}]" if args.target else ""
    gelus = len(fusions) + len(already)
    ops = f"{res.target} {'op' if len(already) == 1 else 'ops'}"
    if already and not fusions:
        head = f"{plural(gelus, 'GELU')} found, {'already a' if gelus == 1 else 'all already'} {ops}: nothing to fuse"
    elif already:
        head = f"{plural(gelus, 'GELU')} found: {len(fusions)} to fuse, {len(already)} already {ops}"
    else:
        head = f"{plural(gelus, 'GELU')} found"
    print(f"{args.input}: {head}, {plural(len(listed), 'near-miss')}{shown}")
    if args.quiet:
        return 0
    if fusions or already:
        def row(f, action):
            return [_graph(f.graph), f.root, f.form, "yes" if f.bias else "no",
                    "" if f.alpha is None else f"{f.alpha:g}", f.dtype, len(f.nodes or []), action]

        rows = [row(f, f.op if args.target else "fuse") for f in fusions] + [row(f, "already") for f in already]
        print()
        print(table(rows, ["graph", "root", "form", "bias", "alpha", "dtype", "nodes",
                           "becomes" if args.target else "action"]))
    if listed:
        print()
        print(table([[_graph(n.graph), n.anchor, n.code, n.reason] for n in listed],
                    ["graph", "anchor", "code", "reason"]))
    if len(listed) < len(near):
        print()
        print(_not_listed(len(near) - len(listed)))
    return 0


def _graph(g: str) -> str:
    return g or "main"


@contextlib.contextmanager
def created_folders(output: str):
    """Create the missing folders above ``output``; if the body fails, remove
    them again (deepest first, each only if empty), so a failed command leaves
    the filesystem as it was."""
    made: list[str] = []
    try:
        makedirs(os.path.dirname(os.path.abspath(output)), os.sep, made)
    except ValueError:  # an unusable path: the writer's own checks name it
        pass
    except OSError as e:
        cleanup([], made)
        raise InputError(f"{collapse_whitespace(output)}: cannot create its folder "
                         f"{collapse_whitespace(e.filename or output)} "
                         f"({e.strerror or e})") from None
    try:
        yield
    except BaseException:
        cleanup([], made)
        raise
