"""What the commands print with, shared by cli.py and cli_check.py (``check``'s
report): JSON, tables, counted words, and the --dim pairs as a dict."""
from __future__ import annotations

import json


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


def dims(args) -> dict:
    return dict(args.dim or [])
