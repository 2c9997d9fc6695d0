"""The package's dependencies in the open: no import circle between its
modules, counting every import statement (at module level, inside functions,
under TYPE_CHECKING); imports inside functions (statements, and calls of
importlib.import_module / __import__) only where listed below, each with its
measured reason, at most 20 in the whole package. Read from the source (ast),
nothing imported."""
from __future__ import annotations

import ast
from collections import Counter
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


def _dynamic(n) -> bool:
    """An import by call: importlib.import_module(...), __import__(...)."""
    return isinstance(n, ast.Call) and (getattr(n.func, "attr", None) or getattr(n.func, "id", None)) in (
        "import_module", "__import__")


def _imports():
    """(module, statement, inside a function, targets) for every import in the
    package, the calls that import included (their targets are not followed)."""
    mods = _modules()
    for m, p in mods.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        inner = {id(x) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                 for x in ast.walk(f)}
        for n in ast.walk(tree):
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                yield m, ast.unparse(n), id(n) in inner, _targets(mods, m, n)
            elif _dynamic(n):
                yield m, ast.unparse(n), id(n) in inner, []


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


# Every import inside a function in the package (package, third-party and
# standard library alike), with its reason. Numbers: the smallest cumulative
# time `python -X importtime` gave in 5 runs on the shared 2-core VM (Debian 12,
# Python 3.11), with what the command had imported before it.
INNER_ALLOWED = {
    ("gelu_onnx", "importlib.import_module(f'{__name__}.{_LAZY[name]}')"):
        "the public API loads on first use: `import gelu_onnx` is what __main__ and every submodule import first, "
        "and must not load numpy/onnx (gelu_onnx.cli: 938 ms) before the command's signal handlers",
    ("gelu_onnx.__main__", "from .cli import main as cli_main"):
        "the command's imports (938 ms: numpy, onnx, the package) run after reopen_closed() and the signal "
        "handlers, with signals deferred (interrupts.preload)",
    ("gelu_onnx.interrupts", "importlib.import_module(name)"):
        "preload: the modules __main__ names, imported as one step that a signal cannot cut in two",
    ("gelu_onnx.cli", "importlib.import_module(f'{__package__}.{func[0]}')"):
        "a command's own module, for that command only: check/bench load the parity checker "
        "(gelu_onnx.verify: 64 ms) and onnxruntime, which fuse and --help never need",
    ("gelu_onnx.ortlib", "import onnxruntime"):
        "onnxruntime is optional and fuse needs none (76 ms after the package; 170-220 ms in other runs)",
    ("gelu_onnx.files", "from .verify.pairing import custom_ops_gone"):
        "inspect's warning only: gelu_onnx.verify costs 64 ms on fuse's path, and verify.runners imports "
        "gelu_onnx.files (a circle at module level)",
    ("gelu_onnx.tensorrt", "import tensorrt as trt"): "optional (a GPU machine's): its absence is the answer",
    ("gelu_onnx.tensorrt", "import torch"): "optional: a CUDA torch only hands TensorRT device buffers",
    ("gelu_onnx.tensorrt", "from polygraphy.backend.trt import TrtRunner"): "optional: the engine runner without torch",
    ("gelu_onnx.fusion.targets", "from .opset import upgrade as opset_upgrade"):
        "opset/ only when `standard` raises an opset (35 ms; most models never need it)",
    ("gelu_onnx.verify.runners", "import onnxruntime"):
        "`inspect` imports gelu_onnx.verify (files.inspect_file -> verify.pairing.custom_ops_gone) and makes no "
        "session: onnxruntime at module level would add 0.11-0.31 s (python -X importtime) to every inspect",
}
LIMIT = 20  # issue 34, point 4



def test_imports_inside_functions_are_the_listed_ones():
    found = Counter((m, s) for m, s, inner, _ in _imports() if inner)
    assert found == Counter(list(INNER_ALLOWED))


def test_at_most_20_imports_inside_functions():
    assert len(INNER_ALLOWED) <= LIMIT and all(len(why) > 20 for why in INNER_ALLOWED.values())
