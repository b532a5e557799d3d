"""A session cut short never reads PASSED: real pytest sessions cut by Ctrl-C (KeyboardInterrupt in a test) or
by the pytest-timeout backstop; the cut phase and every phase never reached read INTERRUPTED, with what was
done, in the terminal, receipt.json, report.html, summary-share.md and compare. (SIGTERM of a real approve_load
session mid-batch is in test_approve_e2e.py.)"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from onegpu.record.entries import PhaseProgress
from onegpu.record.receipt import record_of
from tests_offline.paths import REPO_ROOT

# Machine passes; the "batch" phase has answered 10 of its 50 requests when Ctrl-C comes; serve is never
# reached. The request file and the answers on disk are what the kit's batch fixtures write.
CUT_MID_BATCH = (
    "import pytest\n"
    "pytestmark = [pytest.mark.scan]\n"
    "@pytest.mark.phase('machine')\n"
    "def test_machine_passes():\n    pass\n"
    "@pytest.mark.phase('batch')\n"
    "def test_request_file_is_valid(kit):\n"
    "    kit.receipt.update('batch', request_file={'requests': 50})\n"
    "@pytest.mark.phase('batch')\n"
    "def test_every_request_is_answered(kit):\n"
    "    with open(kit.run_folder / 'responses.jsonl', 'w') as f:\n"
    "        f.writelines('{\"custom_id\": \"r%02d\"}\\n' % i for i in range(10))\n"
    "        f.write('{\"custom_id\": \"r1')  # a torn line: a write cut by the kill is not an answer\n"
    "    raise KeyboardInterrupt\n"
    "@pytest.mark.phase('serve')\n"
    "def test_window_opens():\n    pass\n"
)


def run_folder(pytester):
    (folder,) = (pytester.path / "runs").iterdir()
    return folder


def receipt_of(folder) -> dict:
    """receipt.json as the session wrote it (plain JSON); it reads as the typed record, which refuses a key or a
    value it does not declare."""
    data = json.loads((folder / "receipt.json").read_text())
    record_of(data)
    return data


def test_ctrl_c_mid_batch_marks_the_batch_and_the_phases_after_it_interrupted(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_cut": CUT_MID_BATCH})
    result = kit_project.runpytest("-m", "scan", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    folder = run_folder(kit_project)
    receipt = receipt_of(folder)
    phases = receipt["phases"]
    assert phases["machine"]["verdict"] == "PASSED"
    assert phases["batch"]["verdict"] == "INTERRUPTED"  # one batch test had passed: the phase still never does
    assert phases["batch"]["progress"] == {"done": 10, "of": 50, "unit": "answered"}
    assert phases["batch"]["message"] == "10 of 50 answered; cut by Ctrl-C (SIGINT) while this test ran"
    assert phases["serve"]["verdict"] == "INTERRUPTED"
    assert phases["serve"]["message"] == "never reached: the session was cut by Ctrl-C (SIGINT) in phase batch"
    assert receipt["verdict"].startswith("INTERRUPTED in phase batch: 10 of 50 answered")
    assert receipt["verdict"].endswith("also interrupted: serve")
    assert receipt["interrupted"]["by"] == "SIGINT" and receipt["interrupted"]["phase"] == "batch"
    record = record_of(receipt)
    assert record.interrupted is not None and (record.interrupted.by, record.interrupted.phase) == ("SIGINT", "batch")
    assert record.phases["batch"].progress == PhaseProgress(done=10, of=50, unit="answered")
    assert record.batch is not None and record.batch.request_file is not None
    assert record.batch.request_file.requests == 50
    tests = {n.split("::")[-1]: t for n, t in receipt["tests"].items()}
    assert tests["test_every_request_is_answered"]["outcome"] == "interrupted"
    assert tests["test_window_opens"]["outcome"] == "interrupted"
    assert tests["test_request_file_is_valid"]["outcome"] == "passed"

    out = result.stdout.str()
    assert "  batch    INTERRUPTED: 10 of 50 answered" in out
    assert "batch    PASSED" not in out and "NO DEFINITE FAILURE" not in out

    share = (folder / "summary-share.md").read_text()
    assert "**Verdict: INTERRUPTED in phase batch** (10 of 50 answered)" in share
    assert "| batch | INTERRUPTED (10 of 50 answered) |" in share and "| serve | INTERRUPTED |" in share
    assert "NO DEFINITE FAILURE" not in share and "| batch | PASSED" not in share

    report = (folder / "report.html").read_text()
    assert "INTERRUPTED in phase batch: 10 of 50 answered" in report
    assert "Interrupted: cut while running, or never reached" in report


def test_compare_shows_the_interrupted_phase_with_what_it_did(kit_project, tmp_path):
    kit_project.makepyfile(**{"tests_hw/test_cut": CUT_MID_BATCH})
    kit_project.runpytest("-m", "scan", "--out=runs/cut", no_reraise_ctrlc=True)
    whole = CUT_MID_BATCH.replace("    raise KeyboardInterrupt\n", "")
    kit_project.makepyfile(**{"tests_hw/test_cut": whole})
    kit_project.runpytest("-m", "scan", "--out=runs/whole")
    out = subprocess.run([sys.executable, "-m", "onegpu.report.compare", str(kit_project.path / "runs/cut"),
                          str(kit_project.path / "runs/whole")], cwd=REPO_ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "batch    INTERRUPTED (10 of 50 answered) -> PASSED" in out.stdout
    assert "serve    INTERRUPTED -> PASSED" in out.stdout
    assert "every phase has the same verdict" not in out.stdout


def test_the_timeout_backstop_cuts_its_phase_and_the_rest_are_never_reached(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_hangs": (
        "import time, pytest\n"
        "pytestmark = [pytest.mark.scan]\n"
        "@pytest.mark.phase('load')\n"
        "def test_boots():\n    time.sleep(30)\n"
        "@pytest.mark.phase('canary')\n"
        "def test_canary():\n    pass\n")})
    result = kit_project.runpytest_subprocess("-m", "scan", "--timeout=1")
    receipt = receipt_of(run_folder(kit_project))
    assert receipt["phases"]["load"]["verdict"] == "INTERRUPTED"
    assert receipt["phases"]["load"]["message"] == "cut by the timeout backstop (>1.0s) while this test ran"
    assert receipt["phases"]["canary"]["verdict"] == "INTERRUPTED"  # not run against what the hang left
    assert receipt["phases"]["canary"]["message"].startswith("never reached: the session was cut by the timeout")
    assert receipt["interrupted"]["by"] == "timeout_backstop"
    assert receipt["verdict"].startswith("INTERRUPTED in phase load")
    assert "canary   INTERRUPTED" in result.stdout.str()


def test_an_uninterrupted_session_has_no_interrupted_phase(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_cut": CUT_MID_BATCH.replace("    raise KeyboardInterrupt\n", "")})
    kit_project.runpytest("-m", "scan")
    receipt = receipt_of(run_folder(kit_project))
    assert {p["verdict"] for p in receipt["phases"].values()} <= {"PASSED", "NOT RUN"}
    assert "interrupted" not in receipt and receipt["verdict"].startswith("NO DEFINITE FAILURE FOUND")
