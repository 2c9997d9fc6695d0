"""What the commands print with, shared by cli.py and the reports of
cli_check / cli_bench / cli_fuse: JSON, and the --dim pairs as a dict (tables
and counted words: gelu_onnx.texttable)."""
from __future__ import annotations

import json


def emit_json(doc) -> None:
    try:  # the usual: no non-finite float anywhere (no walk over a big report first)
        text = json.dumps(doc, indent=2, allow_nan=False)
    except ValueError:
        from .verify import json_safe  # non-finite floats as "nan" / "inf" strings

        text = json.dumps(json_safe(doc), indent=2)
    print(text)


def dims(args) -> dict:
    return dict(args.dim or [])


def one_line(s) -> str:
    return " ".join(str(s).split())
