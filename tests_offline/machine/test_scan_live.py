"""`pytest -m scan` on this very machine, run the way an operator runs it: fast, exit 0, evidence written."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pynvml
import pytest

from onegpu.machine.nvml import read_raw
from tests_offline.docker_required import require_docker
from tests_offline.paths import REPO_ROOT

HOST_FACTS = ("test_host_ram_is_known", "test_cgroup_limits_are_read", "test_memlock_and_hugepages_are_read",
              "test_usable_cpus_are_counted", "test_run_folder_has_free_disk")
DOCKER_FACTS = ("test_docker_daemon_answers", "test_docker_daemon_is_local", "test_docker_enforces_swap_limits")


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """One real `python -m pytest -m scan` from the repository root into a temporary runs folder."""
    runs = tmp_path_factory.mktemp("runs")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "DOCKER_HOST")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", f"--runs-dir={runs}"], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    wall_s = time.monotonic() - started
    (folder,) = runs.iterdir()
    receipt = json.loads((folder / "receipt.json").read_text())
    outcomes = {nodeid.rsplit("::", 1)[1]: entry for nodeid, entry in receipt["tests"].items()}
    return {"done": done, "wall_s": wall_s, "folder": folder, "receipt": receipt, "outcomes": outcomes}


def test_scan_exits_zero_within_ten_seconds(scan):
    assert scan["done"].returncode == 0, scan["done"].stdout[-3000:] + scan["done"].stderr[-2000:]
    assert scan["wall_s"] < 10, f"pytest -m scan took {scan['wall_s']:.1f} s"


def test_scan_never_errors(scan):
    bad = {name: e for name, e in scan["outcomes"].items() if e["outcome"] in ("failed", "error")}
    assert bad == {}


def test_missing_nvidia_driver_is_a_blocked_fact_not_an_error(scan):
    driver = scan["outcomes"]["test_nvidia_driver_answers"]
    if read_raw(pynvml)["nvml_loaded"]:
        assert driver["outcome"] == "passed"  # a machine with a driver: nothing to block
    else:
        assert (driver["outcome"], driver["code"]) == ("blocked", "NO_NVIDIA_DRIVER")
        assert "xfailed" in scan["done"].stdout.splitlines()[-1]


def test_host_facts_pass(scan):
    assert {name: scan["outcomes"][name]["outcome"] for name in HOST_FACTS} == dict.fromkeys(HOST_FACTS, "passed")


def test_docker_facts_pass_and_gpu_hand_off_is_said(scan):
    require_docker().close()
    assert {name: scan["outcomes"][name]["outcome"] for name in DOCKER_FACTS} == dict.fromkeys(DOCKER_FACTS,
                                                                                               "passed")
    handoff = scan["outcomes"]["test_docker_can_hand_gpus_to_containers"]
    assert handoff["outcome"] == "passed" or handoff["code"] == "NO_GPU_IN_CONTAINERS"


def test_run_folder_is_written_and_named_last(scan):
    folder = scan["folder"]
    files = {p.name: p for p in folder.iterdir()}
    assert {"receipt.json", "hardware.json", "report.html"} <= set(files)
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in files.values())
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert scan["receipt"]["hardware_source"] == "live" and scan["receipt"]["finished_at"]
    lines = scan["done"].stdout.splitlines()
    assert lines[-3:-1] == [f"run folder: {folder}", f"report:     {folder / 'report.html'}"]
    assert not (REPO_ROOT / ".pytest_cache").exists()


def test_receipt_keeps_the_exact_command_and_folder(scan):
    assert scan["receipt"]["command_line"][1:] == ["-m", "scan", f"--runs-dir={scan['folder'].parent}"]
    assert scan["receipt"]["working_folder"] == str(REPO_ROOT)
