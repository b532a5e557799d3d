"""The scan-session benchmark's floor is a session of the scan's shape: pytest run on the suite it writes closes
with the same counts as the session it copies, so the floor's CPU is comparable with the session's.
"""
from __future__ import annotations

import subprocess
import sys

from benchmarks.bench_scan_session import REPO, session_counts, write_floor_suite


def test_the_closing_line_is_read_as_counts():
    assert session_counts("..x.\n23 passed, 29 deselected, 15 xfailed in 0.58s\n") == {
        "passed": 23, "deselected": 29, "xfailed": 15}


def test_a_floor_suite_run_by_pytest_closes_with_the_counts_it_copied(tmp_path):
    counts = {"passed": 23, "xfailed": 15, "deselected": 29}
    write_floor_suite(tmp_path / "floor", counts)
    assert len(list((tmp_path / "floor").glob("test_*.py"))) == len(list((REPO / "tests_hw").glob("test_*.py")))
    ran = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:onegpu", "-m", "scan", "-q"],
                         cwd=tmp_path / "floor", capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert session_counts(ran.stdout) == counts
