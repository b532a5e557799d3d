"""The linter and the type checker, as pyproject.toml configures them, hold on the tree: part of the test command."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests_offline.paths import REPO_ROOT

REPO = REPO_ROOT


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]


def test_mypy_finds_nothing(tmp_path):
    # Its cache goes to the test's folder: the checkout gets nothing written.
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Success: no issues found" in done.stdout, done.stdout[-5000:] + done.stderr


def test_the_linter_reads_the_source_only():
    # What `pip install .` leaves (build/, dist/, egg-info) and the virtual environment are not the source:
    # a stale copy of a module there would be linted as if it were the kit.
    shown = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--show-files", "."], cwd=REPO,
                           capture_output=True, text=True, timeout=300, check=True).stdout.split()
    source = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, timeout=60, check=True).stdout.split()
    outside = sorted(set(Path(p).resolve().relative_to(REPO).as_posix() for p in shown) - set(source))
    assert shown and not outside, outside[:20]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", "build/lib/onegpu/plugin.py", "dist/x.whl"],
                             cwd=REPO, capture_output=True, text=True, timeout=60).stdout.split()
    assert ignored == ["build/lib/onegpu/plugin.py", "dist/x.whl"]
