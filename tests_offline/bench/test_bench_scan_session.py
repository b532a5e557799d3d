"""The scan-session benchmark's floor is a session of the scan's shape: pytest run on the suite it writes closes
with the same counts as the session it copies, so the floor's CPU is comparable with the session's; with parts of
it left out, it runs the same tests without them.
"""
from __future__ import annotations

import re
import subprocess

from benchmarks.bench_scan_session import FLOOR, FLOOR_LEFT_OUT, REPO, session_counts, write_floor_suite


def test_the_closing_line_is_read_as_counts():
    assert session_counts("..x.\n23 passed, 29 deselected, 15 xfailed in 0.58s\n") == {
        "passed": 23, "deselected": 29, "xfailed": 15}


def test_a_floor_suite_run_by_pytest_closes_with_the_counts_it_copied(tmp_path):
    counts = {"passed": 23, "xfailed": 15, "deselected": 29}
    write_floor_suite(tmp_path / "floor", counts)
    assert len(list((tmp_path / "floor").glob("test_*.py"))) == len(list((REPO / "tests_hw").glob("test_*.py")))
    ran = subprocess.run(FLOOR, cwd=tmp_path / "floor", capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert session_counts(ran.stdout) == counts


def test_the_one_test_floor_is_one_module_with_one_passing_test(tmp_path):
    write_floor_suite(tmp_path / "floor", {"passed": 1}, modules=1)
    assert [p.name for p in (tmp_path / "floor").glob("test_*.py")] == ["test_0.py"]
    ran = subprocess.run(FLOOR, cwd=tmp_path / "floor", capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert session_counts(ran.stdout) == {"passed": 1}


def test_each_floor_with_parts_left_out_runs_the_same_tests_without_those_plugins(tmp_path):
    counts = {"passed": 3, "xfailed": 2, "deselected": 1}
    write_floor_suite(tmp_path / "floor", counts)
    plugins_line = re.compile(r"^plugins: (.*)$", re.MULTILINE)
    for name, flags in {"whole": [], **FLOOR_LEFT_OUT}.items():
        # -v after the floor's -q brings back pytest's header, whose "plugins:" line names what was loaded.
        ran = subprocess.run([*FLOOR, *flags, "-v"], cwd=tmp_path / "floor", capture_output=True, text=True,
                             timeout=120)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert session_counts(ran.stdout) == counts, name
        loaded = plugins_line.search(ran.stdout)
        names = {p.rsplit("-", 1)[0] for p in loaded.group(1).split(", ")} if loaded else set()
        left_out = {flag.removeprefix("no:").split("_")[0] for flag in flags if flag.startswith("no:")}
        assert not names & left_out, (name, names)
        assert names >= {"html", "metadata", "timeout"} - left_out, (name, names)
