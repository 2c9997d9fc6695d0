"""What the gelu-onnx commands share: argument types, tables, JSON."""
from __future__ import annotations

import argparse
import codecs
import json

# The error handler the command's stdout and stderr write with: a path (or
# any text) holding bytes that are not UTF-8 reaches us as lone surrogates
# (os.fsdecode's surrogateescape); each is printed as the byte it stands
# for, \xff, and a character the locale cannot encode as \u00e9 (Python's
# backslashreplace). Never a UnicodeEncodeError. JSON keeps its own escape
# (\udcff), which json.loads and os.fsencode turn back into the same bytes.
ESCAPE = "gelu-onnx-escape"


def _escape(err: UnicodeError):
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = []
    for c in err.object[err.start:err.end]:
        o = ord(c)
        out.append(f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else c.encode("ascii", "backslashreplace").decode())
    return "".join(out), err.end


codecs.register_error(ESCAPE, _escape)


def emit_json(doc) -> None:
    try:  # the usual: no non-finite float anywhere (no walk over a big report first)
        text = json.dumps(doc, indent=2, allow_nan=False)
    except ValueError:
        from .verify import json_safe  # non-finite floats as "nan" / "inf" strings

        text = json.dumps(json_safe(doc), indent=2)
    print(text)


def table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[("" if c is None else str(c)) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in cells)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "es" if word.endswith("s") else "s")


def dim_arg(s: str):
    name, sep, val = s.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{s}'")
    try:
        v = int(val)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': VALUE must be an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"'{s}': VALUE must be >= 0")
    return name, v


def tol_arg(s: str):
    """VALUE (every float dtype) or DTYPE=VALUE."""
    from .contract import PARITY_TOLERANCE

    dtype, sep, val = s.rpartition("=")
    if sep and dtype not in PARITY_TOLERANCE:
        raise argparse.ArgumentTypeError(f"'{dtype}' is not a float dtype (use one of {', '.join(PARITY_TOLERANCE)})")
    try:
        v = float(val)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected VALUE or DTYPE=VALUE, got '{s}'") from None
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"'{s}': tolerance must be a finite number >= 0")
    return (dtype or None), v


def tolerances(args) -> dict:
    from .contract import PARITY_TOLERANCE

    out: dict = {}
    for key, given in (("rtol", args.rtol), ("atol", args.atol)):
        for dtype, v in given or []:
            for dt in [dtype] if dtype else PARITY_TOLERANCE:
                out.setdefault(dt, {})[key] = v
    return out


def tol_by_name(s: str):
    """NAME:RTOL,ATOL (one output or GELU tensor)."""
    name, sep, vals = s.rpartition(":")
    parts = vals.split(",")
    if not sep or not name or len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected NAME:RTOL,ATOL, got '{s}'")
    try:
        rtol, atol = float(parts[0]), float(parts[1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{s}': RTOL and ATOL must be numbers") from None
    if not (0 <= rtol < float("inf") and 0 <= atol < float("inf")):
        raise argparse.ArgumentTypeError(f"'{s}': tolerances must be finite numbers >= 0")
    return name, {"rtol": rtol, "atol": atol}


def providers_arg(s: str) -> list[str]:
    from .contract import PROVIDERS

    ps = [p.strip() for p in s.split(",") if p.strip()]
    bad = [p for p in ps if p not in PROVIDERS]
    if not ps or bad:
        raise argparse.ArgumentTypeError(f"'{s}': choose a comma-separated list from {', '.join(PROVIDERS)}")
    return ps


def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{s}'") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def nonneg_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{s}'") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {v}")
    return v


def dims(args) -> dict:
    return dict(args.dim or [])


def fmt(x, spec=".3g") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)


def add_input_args(p, dim_default: int) -> None:
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--inputs", metavar="FILE", help="feed these arrays instead of random ones: .npz, or Polygraphy "
                                                    "saved inputs (JSON, e.g. polygraphy run --save-inputs)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="UNSAFE: let --inputs/--reference-outputs hold pickled object arrays (pickle can run code)")
    p.add_argument("--dim", type=dim_arg, action="append", metavar="NAME=VALUE",
                   help="size of a named (symbolic) input dimension; repeatable")
    p.add_argument("--dim-default", type=nonneg_int, default=dim_default, metavar="N",
                   help=f"size of named dims not given by --dim and of unknown dims (default {dim_default})")
    p.add_argument("--no-library", action="store_true",
                   help="do not register the gelu-onnx custom-op library (the fused model then runs its model-local functions)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also show ONNX Runtime's own warnings (hidden by default: they describe the model)")


def one_line(s: str) -> str:
    return " ".join(str(s).split())
