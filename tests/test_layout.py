"""The package's shape (issue 11), read from its source with ast: every
Python module (package, benchmarks, scripts, models, tests) <= 500 lines, no
private name imported across modules, target names compared only inside
gelu_onnx/fusion/targets.py, op names listed only in fusion/ops.py (issue
24), the CLI's --target choices are the registry's, and every test file a
source or doc cites exists."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gelu_onnx import cli
from gelu_onnx.fusion import ops, targets

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = sorted((ROOT / "gelu_onnx").rglob("*.py"))
# the code that fuses or reports on fused models: the package and its tools
SOURCES = PACKAGE + sorted(p for d in ("benchmarks", "scripts", "models") for p in (ROOT / d).rglob("*.py"))
TARGETS_MODULE = ROOT / "gelu_onnx" / "fusion" / "targets.py"
OPS_MODULE = ROOT / "gelu_onnx" / "fusion" / "ops.py"


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.parametrize("path", SOURCES + sorted((ROOT / "tests").rglob("*.py")), ids=rel)
def test_module_is_at_most_500_lines(path):
    assert len(path.read_text().splitlines()) <= 500


@pytest.mark.parametrize("path", SOURCES, ids=rel)
def test_no_private_name_crosses_a_module(path):
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    bad = []
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom):
            imported.update(a.asname or a.name for a in n.names)
            bad += [f"{n.lineno}: from {n.module} import {a.name}" for a in n.names if private(a.name)]
        elif isinstance(n, ast.Import):
            imported.update((a.asname or a.name).split(".")[0] for a in n.names)
    bad += [f"{n.lineno}: {n.value.id}.{n.attr}" for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and private(n.attr) and isinstance(n.value, ast.Name)
            and n.value.id in imported]
    assert not bad


def _compares_a_target_name(node: ast.AST) -> bool:
    """`x == "custom"`, `x != "ort"`, `x in ("standard", ...)`."""
    if not isinstance(node, ast.Compare):
        return False
    names = set(targets.TARGETS)
    for side in [node.left, *node.comparators]:
        if isinstance(side, ast.Constant) and side.value in names:
            return True
        if isinstance(side, (ast.Tuple, ast.List, ast.Set)) and any(
                isinstance(e, ast.Constant) and e.value in names for e in side.elts):
            return True
    return False


@pytest.mark.parametrize("path", [p for p in SOURCES if p != TARGETS_MODULE], ids=rel)
def test_target_names_are_compared_only_in_the_targets_module(path):
    tree = ast.parse(path.read_text())
    assert [n.lineno for n in ast.walk(tree) if _compares_a_target_name(n)] == []


def test_the_detector_sees_a_target_test():
    assert _compares_a_target_name(ast.parse('target == "standard"', mode="eval").body)
    assert _compares_a_target_name(ast.parse('t in ("custom", "ort")', mode="eval").body)
    assert not _compares_a_target_name(ast.parse('t == "float16"', mode="eval").body)


def test_cli_target_choices_are_the_registry():
    parser = cli.build_parser()
    # argparse has no public accessor for a parser's options
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in ("fuse", "inspect", "bench"):
        (opt,) = [a for a in sub.choices[name]._actions if "--target" in a.option_strings]
        assert tuple(opt.choices) == targets.TARGETS
    assert [targets.get(n).name for n in targets.TARGETS] == list(targets.TARGETS)
    assert targets.DEFAULT in targets.TARGETS


def _lists_ops(node) -> bool:
    """A set, tuple, list or dict literal naming two or more of the matcher's ops."""
    elts = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", None)
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or elts is None:
        return False
    return sum(isinstance(e, ast.Constant) and e.value in ops.OPS for e in elts) >= 2


@pytest.mark.parametrize("path", [p for p in (ROOT / "gelu_onnx" / "fusion").rglob("*.py") if p != OPS_MODULE],
                         ids=rel)
def test_the_op_vocabulary_is_written_only_in_the_op_table(path):
    tree = ast.parse(path.read_text())
    assert [n.lineno for n in ast.walk(tree) if _lists_ops(n)] == []


def test_the_detector_sees_an_op_list():
    assert _lists_ops(ast.parse('{"Erf", "Tanh"}', mode="eval").body)
    assert _lists_ops(ast.parse('{"Add": 1, "Mul": 2}', mode="eval").body)
    assert not _lists_ops(ast.parse('("Pow", 12)', mode="eval").body)


def test_cited_test_files_exist():
    """A comment or doc that names a test file names one that exists."""
    texts = SOURCES + sorted((ROOT / "plugins").rglob("*.[ch]*")) + sorted((ROOT / "docs").rglob("*.md"))
    cited = {(rel(p), c) for p in texts for c in re.findall(r"tests/[\w/]+\.py", p.read_text(errors="replace"))}
    assert sorted(c for c in cited if not (ROOT / c[1]).exists()) == []
