"""The one-line verdicts lead with the most consequential finding: real replayed scans of the Flash demo checkpoint
on the research target, once with the host RAM the README states and once with too little. A capacity failure
(with its numbers) outranks "replayed"; a replayed plan without one says what its capacity checks found and why
nothing could start. compare shows the capacity checks of both runs side by side."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from onegpu.record.receipt import record_of
from onegpu.record.verdicts import phase_verdicts, run_verdict
from tests_offline.paths import PROFILES, REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
PROFILE = PROFILES / "research-target-rtx-pro-6000-96gb.json"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    work = tmp_path_factory.mktemp("lead")
    ckpt = work / "MiMo-V2.6-Flash"
    done = subprocess.run([sys.executable, str(EXAMPLES / "make_mimo_checkpoint.py"), "--model", "flash", "--out",
                           str(ckpt)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    settings = json.loads((EXAMPLES / "demo-settings.json").read_text())
    settings["model_path"] = str(ckpt)
    (work / "s.json").write_text(json.dumps(settings))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    out = {}
    for name, ram_gib in (("fits", 256), ("short", 64)):
        folder = work / name
        done = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", f"--settings={work / 's.json'}",
                               f"--hardware={PROFILE}", f"--host-ram-gib={ram_gib}", f"--out={folder}"],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
        out[name] = {"folder": folder, "stdout": done.stdout,
                     "receipt": json.loads((folder / "receipt.json").read_text())}
    return out


def test_a_capacity_failure_leads_every_verdict_line_with_its_numbers(runs):
    short = runs["short"]
    receipt = short["receipt"]
    plan = receipt["phases"]["plan"]
    assert plan["code"] == "INSUFFICIENT_HOST_RAM" and plan["codes"][-1] == "HARDWARE_REPLAYED"
    assert receipt["verdict"].startswith("BLOCKED INSUFFICIENT_HOST_RAM in phase plan: ")
    assert "64.00 GiB" in receipt["verdict"] and receipt["verdict"].endswith("also blocked: HARDWARE_REPLAYED")
    assert f"  run      {receipt['verdict']}" in short["stdout"]
    share = (short["folder"] / "summary-share.md").read_text()
    assert "**Verdict: BLOCKED INSUFFICIENT_HOST_RAM in phase plan**" in share
    assert "also blocked: HARDWARE_REPLAYED" in share
    report = (short["folder"] / "report.html").read_text()
    assert 'og-verdict og-blocked">BLOCKED INSUFFICIENT_HOST_RAM in phase plan' in report


def test_a_replayed_plan_without_a_capacity_failure_says_so_and_why_nothing_started(runs):
    receipt = runs["fits"]["receipt"]
    unknown = [c["check"] for c in receipt["capacity"] if c["status"] == "UNKNOWN"]
    assert not any(c["status"] == "BLOCKED" for c in receipt["capacity"])
    assert receipt["verdict"].startswith(
        f"BLOCKED HARDWARE_REPLAYED in phase plan: no definite failure in {len(receipt['capacity'])} capacity "
        f"checks ({len(receipt['capacity']) - len(unknown)} OK, {len(unknown)} UNKNOWN: {', '.join(unknown)}), "
        "but nothing could start here: image ")
    share = (runs["fits"]["folder"] / "summary-share.md").read_text()
    assert "capacity: no definite failure in" in share and "but nothing could start here" in share


def test_compare_shows_capacity_verdicts_and_numbers_side_by_side(runs):
    done = subprocess.run([sys.executable, "-m", "onegpu.report.compare", str(runs["fits"]["folder"]),
                           str(runs["short"]["folder"])], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    host = next(line for line in lines if line.lstrip("=! ").startswith("host_ram:"))
    assert host.startswith("  ! host_ram: A OK (") and "| B BLOCKED INSUFFICIENT_HOST_RAM (" in host
    assert "64.00 GiB" in host.split("| B")[1] and "256.00 GiB" in host.split("| B")[0]
    assert "  = weights: OK in both, same numbers" in lines
    assert "plan     BLOCKED HARDWARE_REPLAYED -> BLOCKED INSUFFICIENT_HOST_RAM" in done.stdout
    assert "every phase has the same verdict" not in done.stdout


def test_within_a_phase_and_across_phases_the_capacity_code_leads():
    tests = {"a": {"phase": "plan", "outcome": "blocked", "code": "HARDWARE_REPLAYED", "message": "replayed"},
             "b": {"phase": "plan", "outcome": "blocked", "code": "KV_DOES_NOT_FIT", "message": "KV 9 GiB > 4 GiB"},
             "c": {"phase": "machine", "outcome": "blocked", "code": "IMAGE_MISSING", "message": "no image"}}
    phases = phase_verdicts(record_of({"tests": tests}).tests)
    assert phases["plan"]["code"] == "KV_DOES_NOT_FIT" and phases["plan"]["codes"] == ["KV_DOES_NOT_FIT",
                                                                                       "HARDWARE_REPLAYED"]
    assert run_verdict(record_of({"phases": phases}).phases) == (
        "BLOCKED KV_DOES_NOT_FIT in phase plan: KV 9 GiB > 4 GiB; also blocked: IMAGE_MISSING, HARDWARE_REPLAYED")


def test_codes_of_equal_consequence_keep_the_test_order_whatever_the_hash_seed():
    """A set's order of strings changes with PYTHONHASHSEED: the receipt's codes must not."""
    script = ("import json; from onegpu.record.entries import TestEntry; "
              "from onegpu.record.verdicts import phase_verdicts; "
              "t = lambda c: TestEntry(phase='machine', outcome='blocked', code=c, message=c); "
              "print(json.dumps(phase_verdicts({'a': t('NO_NVIDIA_DRIVER'), 'b': t('NO_GPU_IN_CONTAINERS'), "
              "'c': t('NO_NVIDIA_DRIVER')})['machine']['codes']))")
    seen = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(8)}
    assert seen == {'["NO_NVIDIA_DRIVER", "NO_GPU_IN_CONTAINERS"]\n'}
