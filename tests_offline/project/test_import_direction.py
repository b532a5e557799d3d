"""Import direction: a module of the kit that says it is pure (its docstring starts with "Pure") imports, itself
or through any kit module it imports, none of docker, pynvml, psutil, socket, threading or pytest. Read from the
source with ast, so a lazy import inside a function counts too; `if TYPE_CHECKING:` blocks (types only) and the
`if __name__ == "__main__":` entry of a module run with python -m do not."""
from __future__ import annotations

import ast

from tests_offline.paths import REPO_ROOT

SOURCE = REPO_ROOT / "plugin"  # the source folder; the package is onegpu
IMPURE = {"docker", "pynvml", "psutil", "socket", "threading", "pytest", "_pytest"}


def _skipped(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = ast.unparse(node.test)
    return test in ("TYPE_CHECKING", "typing.TYPE_CHECKING", "__name__ == '__main__'")


def _imports(tree: ast.AST) -> set[str]:
    """Modules a module imports by absolute name (the kit imports itself that way); `from a.b import c` counts
    a.b and a.b.c, as c may be a module."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if _skipped(node):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, "the kit imports itself by absolute name"
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _modules() -> dict[str, tuple[bool, set[str]]]:
    out = {}
    for path in sorted(SOURCE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        parts = path.relative_to(SOURCE).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ((ast.get_docstring(tree) or "").startswith("Pure"), _imports(tree))
    return out


def test_pure_modules_reach_no_io_library():
    modules = _modules()
    pure = [name for name, (is_pure, _) in modules.items() if is_pure]
    assert len(pure) >= 30, pure  # the walk finds the pure core (its docstrings say so)
    problems = []
    for name in pure:
        seen, todo = {name}, [name]
        while todo:
            current = todo.pop()
            for imported in sorted(modules[current][1]):
                if imported.split(".")[0] in IMPURE:
                    via = "" if current == name else f" through {current}"
                    problems.append(f"{name} imports {imported}{via}")
                elif imported in modules and imported not in seen:
                    seen.add(imported)
                    todo.append(imported)
    assert not problems, "\n".join(problems)


def test_the_check_sees_an_impure_import(tmp_path):
    """The walk itself: a lazy import in a function counts; a TYPE_CHECKING block does not."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pytest\n"
                     "def f():\n    import socket\n")
    assert _imports(tree) == {"typing", "typing.TYPE_CHECKING", "socket"}


def test_no_test_module_is_imported_by_another_module():
    """Tests share helpers through helper modules and conftest.py, never by importing a test module: that would run
    its tests twice or hide a fixture's origin. Benchmarks and devkit import no test code at all."""
    problems = []
    for folder in ("tests_offline", "benchmarks", "devkit", "tests_hw"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):  # relative ones too: `from .test_x import y`
                    base = "." * node.level + (node.module or "")
                    names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
                else:
                    continue
                for name in names:
                    if (name.split(".")[-1].startswith("test_")
                            or (folder in ("benchmarks", "devkit") and name.startswith("tests_offline"))):
                        problems.append(f"{path.relative_to(REPO_ROOT)} imports {name}")
    assert not problems, "\n".join(problems)
