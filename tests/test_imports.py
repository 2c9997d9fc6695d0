"""The package's dependencies in the open: no import circle between its
modules, counting every import statement (at module level, inside functions,
under TYPE_CHECKING); imports inside functions only where listed below, each
with its measured reason. Read from the source (ast), nothing imported."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "gelu_onnx"


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _targets(mods: dict, here: str, node) -> list[str]:
    """The package modules one import statement in module ``here`` loads."""
    pkg = here if mods[here].name == "__init__.py" else here.rpartition(".")[0]
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in mods]
    base = pkg.split(".")[:len(pkg.split(".")) - (node.level - 1)] if node.level else []
    b = ".".join(base + ([node.module] if node.module else []))
    return [f"{b}.{a.name}" if f"{b}.{a.name}" in mods else b for a in node.names if f"{b}.{a.name}" in mods or b in mods]


def _imports():
    """(module, statement, inside a function, targets) for every import in the package."""
    mods = _modules()
    for m, p in mods.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        inner = {id(x) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for x in ast.walk(f)}
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                yield m, ast.unparse(n), id(n) in inner, _targets(mods, m, n)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles():
    # Every module imports the package root (gelu_onnx/__init__.py, the public
    # API whose names load lazily) on its way: edges to the root are not deps.
    edges: dict[str, set[str]] = {}
    for m, _, _, targets in _imports():
        edges.setdefault(m, set()).update(t for t in targets if t not in (m, "gelu_onnx"))
    assert _cycles(edges) == []


def test_the_detector_sees_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# Package imports inside functions in the fusion/ and onnxio/ modules, each
# with its reason (`python -X importtime`, docs/design.md "Start-up"):
# those left are modules a fuse of most models never runs.
INNER_ALLOWED = {
    ("gelu_onnx.fusion.targets", "from .opset import upgrade as opset_upgrade"),  # opset/: only when raised
}


def test_imports_inside_functions_in_fusion_and_onnxio_are_the_listed_ones():
    found = {(m, s) for m, s, inner, targets in _imports()
             if inner and targets and m.startswith(("gelu_onnx.fusion", "gelu_onnx.onnxio"))
             and not m.startswith(("gelu_onnx.onnxio.load", "gelu_onnx.onnxio.save", "gelu_onnx.onnxio.fileops"))}
    assert found == INNER_ALLOWED


# Imports inside functions in verify/ and the check/bench commands' modules
# (package and third-party alike), each with its measured reason.
VERIFY_INNER_ALLOWED = {
    # `inspect` imports gelu_onnx.verify (files.inspect_file -> verify.pairing.custom_ops_gone) and makes no
    # session: onnxruntime at module level would add its import to every inspect (python -X importtime:
    # 0.11-0.31 s cumulative, shared 2-core VM, loaded; `import gelu_onnx.verify` without it: 397-400 modules)
    ("gelu_onnx.verify.runners", "import onnxruntime"),
}
_VERIFY_MODULES = ("gelu_onnx.verify", "gelu_onnx.cli_check", "gelu_onnx.cli_bench", "gelu_onnx.testing",
                   "gelu_onnx.cliout", "gelu_onnx.texttable")


def test_imports_inside_functions_in_verify_and_the_check_commands_are_the_listed_ones():
    found = {(m, s) for m, s, inner, _ in _imports() if inner and m.startswith(_VERIFY_MODULES)}
    assert found == VERIFY_INNER_ALLOWED
