"""Imports point down only: every first-party import in plugin/ (lazy ones inside functions and type-only ones
under TYPE_CHECKING included: both tie a module to the one it names) goes to the importer's own subpackage or to
a layer below it. The layer order is written once, in the README's map of the code, and read from there."""
from __future__ import annotations

import ast
import re

from tests_offline.paths import REPO_ROOT

SOURCE = REPO_ROOT / "plugin"
PACKAGE = SOURCE / "onegpu"


def declared_layers() -> list[set[str]]:
    """The README's layer block, top to bottom: one set of subpackage (or top-level module) names per line."""
    section = (REPO_ROOT / "README.md").read_text(encoding="utf-8").split("## Map of the code", 1)[1]
    block = re.search(r"\n\n((?:    [a-z_. ]+\n)+)", section)
    assert block, "the map of the code has no indented block of layers"
    return [set(line.split()) for line in block.group(1).splitlines()]


def top_files() -> set[str]:
    """The modules that sit directly in the package, beside its subpackages (plugin.py, options.py)."""
    return {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}


def unit_of(module: str) -> str:
    """The layered unit a module of onegpu belongs to: its subpackage, or its file directly in the package."""
    parts = module.split(".")
    if len(parts) == 1:
        return "onegpu"
    return f"{parts[1]}.py" if f"{parts[1]}.py" in top_files() else parts[1]


def _root_name(name: str) -> str:
    """`from onegpu import name`: a subpackage or plugin.py, or a value of the package's own __init__."""
    is_module = (PACKAGE / name / "__init__.py").is_file() or (PACKAGE / f"{name}.py").is_file()
    return f"onegpu.{name}" if is_module else "onegpu"


def first_party_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "onegpu"]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "the kit imports itself by absolute name"
            if node.module and node.module.split(".")[0] == "onegpu":
                # `from onegpu.x import y`: y may be a module of x; either way it lies in x's unit
                found += [(node.lineno, node.module if node.module != "onegpu" else _root_name(a.name))
                          for a in node.names]
    return found


def upward_imports(layers: list[set[str]]) -> list[str]:
    rank = {unit: depth for depth, units in enumerate(layers) for unit in units}  # 0 is the top
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        source = unit_of(module)
        if source == "onegpu":
            continue  # the package's own __init__ imports nothing (test_packaging checks it)
        for line, imported in first_party_imports(ast.parse(path.read_text(), str(path))):
            target = unit_of(imported)
            if target in (source, "onegpu"):
                continue  # its own subpackage, or the package's __init__ (which imports nothing: the bottom)
            if target not in rank or source not in rank:
                problems.append(f"{path.relative_to(REPO_ROOT)}:{line}: {imported}: "
                                f"{target if target not in rank else source} is in no layer of the README")
            elif rank[target] <= rank[source]:
                where = "a neighbour in its layer" if rank[target] == rank[source] else "a layer above"
                problems.append(f"{path.relative_to(REPO_ROOT)}:{line}: {source} imports {imported}, {where}")
    return problems


def test_every_subpackage_stands_in_exactly_one_layer():
    layers = declared_layers()
    named = [unit for units in layers for unit in units]
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(named) == sorted(subpackages | top_files())


def test_imports_point_down_only():
    assert upward_imports(declared_layers()) == []


def test_the_check_sees_an_upward_import():
    """The walk itself: with machine moved to the top, engine's imports of machine go up."""
    layers = [{"machine"}, *(units - {"machine"} for units in declared_layers())]
    problems = upward_imports([units for units in layers if units])
    assert any(" engine imports onegpu.machine." in p and p.endswith("a layer above") for p in problems), problems
    assert not any(p.startswith("plugin/onegpu/machine/") for p in problems), problems
