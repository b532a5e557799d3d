"""The linter and the type checker, as pyproject.toml configures them, hold on the tree: part of the test command."""
from __future__ import annotations

import subprocess
import sys
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
