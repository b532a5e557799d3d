"""The README's map of the code matches the tree: every subpackage of onegpu has its row, every module of a
subpackage is named in its row, and every name in a row is a module (or a folder) of that subpackage. A module
added, moved or renamed without the map fails here."""
from __future__ import annotations

import re

from tests_offline.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "plugin" / "onegpu"
ROW = re.compile(r"^\| `(?P<name>[a-z_]+(?:\.py)?)` \| (?P<text>.*) \|$")


def _map_rows() -> dict[str, str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Map of the code", 1)[1].split("\n## ", 1)[0]
    return {m["name"]: m["text"] for line in section.splitlines() if (m := ROW.match(line))}


def _subpackages() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def test_every_subpackage_has_a_row_and_every_row_a_subpackage() -> None:
    rows = {name for name in _map_rows() if not name.endswith(".py")}
    assert rows == set(_subpackages())


def test_every_module_is_named_in_its_subpackages_row() -> None:
    rows = _map_rows()
    missing = {sub: sorted(p.stem for p in (PACKAGE / sub).glob("*.py")
                           if p.stem != "__init__" and f"`{p.stem}`" not in rows[sub])
               for sub in _subpackages()}
    assert {sub: names for sub, names in missing.items() if names} == {}


def test_every_name_in_a_row_exists_in_its_subpackage() -> None:
    unknown = {}
    for sub, text in _map_rows().items():
        if sub.endswith(".py"):
            assert (PACKAGE / sub).is_file()
            continue
        names = re.findall(r"`([a-z_]+)`", text)
        gone = [n for n in names if not (PACKAGE / sub / f"{n}.py").is_file() and not (PACKAGE / sub / n).is_dir()]
        if gone:
            unknown[sub] = gone
    assert unknown == {}
