"""The kit as a package: pyproject declares every distribution the kit imports, the version is written once, the
plugin is registered once, and a wheel installed into a new virtual environment (which cannot see this source
tree) runs a scan session and the `onegpu-compare` console script.

No package index is reached: the wheel is built here without build isolation, and the new environment borrows
the already-installed dependencies of the environment running the tests through a .pth file."""
from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import onegpu
from tests_offline.paths import REPO_ROOT

REPO = REPO_ROOT
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


# Scripts the kit sends into the engine image and runs there with the image's own Python: their imports (vllm,
# torch) are the image's, never the kit's.
SENT_INTO_IMAGES = {Path("plugin/onegpu/engine/probe_script.py")}


def _imported_top_names() -> dict[str, str]:
    """Every top-level module the kit's code imports (import statements, not scripts it sends elsewhere) that is
    neither the standard library nor the kit: name -> a file importing it."""
    found: dict[str, str] = {}
    for path in sorted((REPO / "plugin").rglob("*.py")):
        if path.relative_to(REPO) in SENT_INTO_IMAGES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "onegpu":
                    found.setdefault(top, str(path.relative_to(REPO)))
    return found


def test_every_imported_distribution_is_declared():
    declared = {Requirement(r).name.lower() for r in PYPROJECT["project"]["dependencies"]}
    providers = importlib.metadata.packages_distributions()
    imported = _imported_top_names()
    assert {"pytest", "docker", "msgspec", "pynvml", "psutil"} <= set(imported)  # the walk sees the imports
    assert all((REPO / p).is_file() for p in SENT_INTO_IMAGES)  # the exemption names a file that exists
    undeclared = {}
    for module, where in imported.items():
        dists = {d.lower() for d in providers.get(module, [])}
        if module == "_pytest":
            dists = {"pytest"}
        if not dists & declared:
            undeclared[module] = (where, sorted(dists))
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_declared_ranges_admit_the_tested_pins():
    pins = {}
    for line in (REPO / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    for text in PYPROJECT["project"]["dependencies"]:
        req = Requirement(text)
        if req.name.lower() in pins:
            assert req.specifier.contains(pins[req.name.lower()]), (text, pins[req.name.lower()])
        else:  # not pinned by the kit: installed with what pins it (packaging comes with pytest)
            assert importlib.metadata.version(req.name) and req.specifier.contains(importlib.metadata.version(req.name))


def test_one_version_and_one_registration():
    assert PYPROJECT["project"]["dynamic"] == ["version"] and "version" not in PYPROJECT["project"]
    assert importlib.metadata.version("onegpu-kit") == onegpu.__version__
    points = [e for e in importlib.metadata.entry_points(group="pytest11") if e.value == "onegpu.plugin"]
    assert len(points) == 1
    conftests = [p for p in REPO.rglob("conftest.py") if ".venv" not in p.parts]
    for path in conftests:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytest_plugins" for t in node.targets):
                assert not any(str(name).startswith("onegpu") for name in ast.literal_eval(node.value)), f"{path} registers the kit a second time"


@pytest.fixture(scope="module")
def installed_kit(tmp_path_factory) -> Path:
    """A new virtual environment holding the kit's wheel; the dependencies come from this one's site-packages."""
    work = tmp_path_factory.mktemp("installed")
    # Built from a copy: setuptools writes its build/ folder beside the sources.
    source, wheels = work / "source", work / "wheels"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source / "pyproject.toml")
    shutil.copytree(REPO / "plugin", source / "plugin", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(wheels), str(source)], check=True, capture_output=True, timeout=300)
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    purelib = Path(subprocess.run([str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                   "['purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
    # After the venv's own folder: the kit comes from the wheel, everything else from here.
    (purelib / "zz_borrowed.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    wheel = next(wheels.glob("onegpu_kit-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "-q", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, timeout=300)
    return venv


def test_installed_wheel_runs_a_scan_session_and_the_console_script(installed_kit, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(REPO / "tests_hw", project / "tests_hw", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pytest.ini", project / "pytest.ini")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run([str(installed_kit / "bin/python"), "-c", "import onegpu; print(onegpu.__file__)"],
                           cwd=project, env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(installed_kit)), where  # the wheel's copy, not this source tree
    assert (Path(where).parent / "py.typed").is_file()  # its types reach a project that imports it (PEP 561)
    done = subprocess.run([str(installed_kit / "bin/python"), "-m", "pytest", "-m", "scan", "-q", "--out=runs/scan"], cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    receipt = json.loads((project / "runs/scan/receipt.json").read_text())
    assert receipt["kit"]["version"] == onegpu.__version__ and (project / "runs/scan/report.html").is_file()
    assert "passed" in done.stdout.splitlines()[-1]
    compare = subprocess.run([str(installed_kit / "bin/onegpu-compare"), "runs/scan", "runs/scan"], cwd=project,
                             env=env, capture_output=True, text=True, timeout=120)
    assert compare.returncode == 0, compare.stderr
    assert compare.stdout.startswith(f"A: runs/scan (scan, started {receipt['started_at']}")
    usage = subprocess.run([str(installed_kit / "bin/onegpu-compare")], cwd=project, env=env, capture_output=True,
                           text=True, timeout=120)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: onegpu-compare ")
