"""What the commands print with, shared by cli.py and the reports of
cli_check / cli_bench / cli_fuse: JSON, and the --dim pairs as a dict (tables
and counted words: gelu_onnx.texttable)."""
from __future__ import annotations

import json
import math


def json_safe(x):
    """Non-finite floats as the strings 'inf' / '-inf' / 'nan' (strict JSON has none)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def emit_json(doc) -> None:
    try:  # the usual: no non-finite float anywhere (no walk over a big report first)
        text = json.dumps(doc, indent=2, allow_nan=False)
    except ValueError:
        text = json.dumps(json_safe(doc), indent=2)
    print(text)


def dims(args) -> dict:
    return dict(args.dim or [])


def collapse_whitespace(s) -> str:
    """``s`` on one line: every run of whitespace (newlines too) one space."""
    return " ".join(str(s).split())
