"""Plain-text tables, as every command and gelu_onnx.testing print them."""
from __future__ import annotations


def table(rows: list[list], header: list[str]) -> str:
    cells = [header] + [[("" if c is None else str(c)) for c in r] for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in cells)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "es" if word.endswith("s") else "s")


def fmt(x, spec=".3g") -> str:
    if x is None:
        return "-"
    return format(x, spec) if isinstance(x, float) else str(x)


def clip(s: str, width: int | None) -> str:
    """``s`` cut to ``width`` characters (None: whole), the cut marked with '~' (keeps its end: names differ there)."""
    return s if width is None or len(s) <= width else "~" + s[len(s) - width + 1:]
