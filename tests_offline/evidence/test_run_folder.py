"""The run folder and its evidence, from real pytest sessions: created only for kit tests, private, never
overwritten; receipt.json written as outcomes land; a self-contained report.html; the closing summary."""
from __future__ import annotations

import html
import json
import re
import stat
import subprocess

import pytest

import onegpu
from onegpu.evidence import rundir
from onegpu.record.receipt import record_of
from tests_offline.paths import REPO_ROOT

GOOD_SETTINGS = {
    "schema": "onegpu/settings@1",
    "model_id": "XiaomiMiMo/MiMo-V2.6-Pro-RL",
    "model_revision": "0123456789abcdef0123456789abcdef01234567",
    "model_path": "/srv/models/mimo",
    "image": "vllm/vllm-openai:v0.11.0",
    "gpu": 0,
    "context_tokens": 2048,
    "prefill_chunk_tokens": 512,
    "cpu_offload_gib": 512,
    "container_ram_gib": 576,
    "host_headroom_gib": 32,
    "deadline_s": 1800,
}

# One kit test per outcome the receipt keeps apart, plus one acting test that stays deselected.
OUTCOMES = (
    "import pytest\n"
    "from onegpu.session.glue import blocked_as_xfail\n"
    "from onegpu.core.outcomes import Blocked\n"
    "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
    "def test_passes(hardware):\n    pass\n"
    "def test_is_blocked():\n"
    "    with blocked_as_xfail():\n"
    "        raise Blocked('DISK_FULL', 'run folder: 0.50 GiB free, the kit needs at least 1.00 GiB',\n"
    "                      {'free_bytes': 536870912, 'need_bytes': 1073741824})\n"
    "def test_fails():\n    assert 1 + 1 == 3\n"
    "def test_is_skipped():\n    pytest.skip('nothing to check here')\n"
    "@pytest.mark.phase('plan')\n"
    "def test_reads_settings(settings):\n    pass\n"
)
ACTING = ("import pytest\n"
          "pytestmark = [pytest.mark.approve_load, pytest.mark.phase('load')]\n"
          "def test_starts_the_engine():\n    pass\n")


def only_run_folder(pytester):
    folders = list((pytester.path / "runs").iterdir())
    assert len(folders) == 1, folders
    return folders[0]


def receipt_of(folder) -> dict:
    """receipt.json as the session wrote it (plain JSON); it reads as the typed record, which refuses a key or a
    value it does not declare."""
    data = json.loads((folder / "receipt.json").read_text())
    record_of(data)
    return data


def report_data(folder) -> dict:
    """The JSON pytest-html embeds in report.html (its environment table, its tests)."""
    text = (folder / "report.html").read_text()
    blob = re.search(r'data-jsonblob="([^"]*)"', text)
    assert blob, "report.html carries no data blob"
    return json.loads(html.unescape(blob.group(1)))


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def outcomes_project(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_1_outcomes": OUTCOMES, "tests_hw/test_5_load": ACTING})
    (kit_project.path / "s.json").write_text(json.dumps(GOOD_SETTINGS))
    return kit_project


def test_plain_session_writes_no_run_folder_and_no_cache(kit_project, monkeypatch):
    kit_project.makepyfile(**{"tests_offline/test_plain": "def test_plain():\n    pass\n"})
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    result = kit_project.runpytest_subprocess("tests_offline")
    result.assert_outcomes(passed=1)
    assert not (kit_project.path / "runs").exists()
    assert [p for p in kit_project.path.rglob(".pytest_cache")] == []


def test_kit_session_writes_private_files_and_no_cache(outcomes_project, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    result = outcomes_project.runpytest_subprocess("-m", "scan", "--settings", "s.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # test_fails fails, as written
    folder = only_run_folder(outcomes_project)
    assert mode(folder) == 0o700
    names = sorted(p.name for p in folder.iterdir())
    assert {"hardware.json", "receipt.json", "report.html", "settings.json"} <= set(names)
    assert all(mode(folder / n) == 0o600 for n in names)
    assert (folder / "settings.json").read_bytes() == (outcomes_project.path / "s.json").read_bytes()
    assert [p for p in outcomes_project.path.rglob(".pytest_cache")] == []


def test_receipt_keeps_each_kit_tests_outcome(outcomes_project):
    result = outcomes_project.runpytest("-m", "scan", "--settings", "s.json")
    result.assert_outcomes(passed=2, failed=1, skipped=1, xfailed=1, deselected=1)
    receipt = receipt_of(only_run_folder(outcomes_project))
    tests = {nodeid.rsplit("::", 1)[1]: entry for nodeid, entry in receipt["tests"].items()}
    assert tests["test_passes"]["outcome"] == "passed"
    assert tests["test_reads_settings"] == {**tests["test_reads_settings"], "outcome": "passed", "phase": "plan"}
    blocked = tests["test_is_blocked"]
    assert (blocked["outcome"], blocked["code"]) == ("blocked", "DISK_FULL")
    assert blocked["message"] == "run folder: 0.50 GiB free, the kit needs at least 1.00 GiB"
    assert blocked["numbers"] == {"free_bytes": 536870912, "need_bytes": 1073741824}
    assert tests["test_fails"]["outcome"] == "failed" and "assert (1 + 1) == 3" in tests["test_fails"]["message"]
    assert tests["test_is_skipped"] == {**tests["test_is_skipped"], "outcome": "skipped",
                                        "message": "Skipped: nothing to check here"}
    assert tests["test_starts_the_engine"]["outcome"] == "deselected"
    assert "approve_load" in tests["test_starts_the_engine"]["message"]


def test_receipt_header_names_schema_kit_commit_command_and_facts(outcomes_project):
    outcomes_project.runpytest("-m", "scan", "--settings", "s.json")
    receipt = receipt_of(only_run_folder(outcomes_project))
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert receipt["schema"] == "onegpu/receipt@1"
    assert receipt["kit"] == {"name": "onegpu", "version": onegpu.__version__, "git_commit": head.stdout.strip()}
    assert receipt["command_line"][1:3] == ["-m", "pytest"]  # in-process pytester: argv is not pytest's own
    assert receipt["working_folder"] == str(outcomes_project.path)
    assert "-m scan --settings s.json" in " ".join(receipt["command_line"])
    assert receipt["hardware_source"] == "live"
    assert receipt["hardware"]["schema"] == "onegpu/hardware@1"
    assert receipt["hardware"]["host"]["ram_total_bytes"] > 0
    assert receipt["settings"]["sha256"] and receipt["finished_at"] and receipt["started_at"]
    assert receipt["phases"]["machine"]["verdict"] == "FAILED"  # the worst outcome of the phase
    assert receipt["verdict"].startswith("FAILED in phase machine")


def test_receipt_is_written_as_outcomes_arrive(kit_project):
    # The second test reads the receipt from disk (receipt.json and its journal) while the session still runs.
    kit_project.makepyfile(**{"tests_hw/test_1_live": (
        "import json, pytest\n"
        "from onegpu.evidence.journal import read_receipt\n"
        "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_first():\n    pass\n"
        "def test_second_sees_the_first(kit):\n"
        "    on_disk = read_receipt(kit.run_folder)\n"
        "    first = [e for n, e in on_disk['tests'].items() if n.endswith('::test_first')]\n"
        "    assert first and first[0]['outcome'] == 'passed'\n"
        "    assert not [n for n in on_disk['tests'] if n.endswith('::test_second_sees_the_first')]\n"
        "    assert on_disk['finished_at'] is None\n")})
    result = kit_project.runpytest("-m", "scan")
    result.assert_outcomes(passed=2)


def test_out_names_the_run_folder_and_an_existing_one_is_refused(outcomes_project):
    target = outcomes_project.path / "evidence" / "first"
    outcomes_project.runpytest("-m", "scan", "--out", str(target))
    assert mode(target) == 0o700 and (target / "receipt.json").is_file()
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    again = outcomes_project.runpytest("-m", "scan", "--out", str(target))
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines([f"*--out {target}: the folder already exists; run folders are never overwritten*"])
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before


def test_out_refuses_an_existing_empty_folder_too(outcomes_project):
    target = outcomes_project.mkdir("mine")
    result = outcomes_project.runpytest("-m", "scan", "--out", str(target))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert list(target.iterdir()) == []


def test_two_sessions_in_the_same_second_get_their_own_folders(outcomes_project, monkeypatch):
    # The clock is pinned so both sessions certainly start "in the same second".
    monkeypatch.setattr(rundir, "utc_stamp", lambda now=None: "20260101T000000Z")
    outcomes_project.runpytest("-m", "scan")
    outcomes_project.runpytest("-m", "scan")
    names = sorted(p.name for p in (outcomes_project.path / "runs").iterdir())
    assert names == ["20260101T000000Z-scan", "20260101T000000Z-scan-2"]
    assert all(receipt_of(outcomes_project.path / "runs" / n)["tests"] for n in names)


def test_report_is_self_contained_and_has_the_environment_rows(outcomes_project):
    outcomes_project.runpytest("-m", "scan")
    folder = only_run_folder(outcomes_project)
    text = (folder / "report.html").read_text()
    tags = re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", text, flags=re.I)
    fetched = [t for t in tags if re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", t, flags=re.I)]
    assert fetched == []
    env = report_data(folder)["environment"]
    assert env["onegpu run"] == str(folder)
    assert env["GPU"].startswith("none readable (NVMLError")  # no NVIDIA driver on this machine
    assert env["Host RAM"].endswith("GiB total")
    assert env["Docker"]


def test_report_environment_lists_gpus_and_driver_of_a_profile(outcomes_project):
    outcomes_project.mkdir("profiles")
    profile = REPO_ROOT / "profiles" / "research-target-rtx-pro-6000-96gb.json"
    (outcomes_project.path / "profiles" / profile.name).write_bytes(profile.read_bytes())
    outcomes_project.runpytest("-m", "scan", f"--hardware=profiles/{profile.name}")
    env = report_data(only_run_folder(outcomes_project))["environment"]
    assert env["GPU 0"] == env["GPU 1"] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition 95.6 GiB"
    assert env["NVIDIA driver"] == "580.95.05 (CUDA 13.0)"
    assert env["Host RAM"] == "unknown (not stated)"
    assert env["Docker"] == "28.3.3 at unix:///var/run/docker.sock"
    assert env["Hardware facts"].startswith("REPLAYED")


def test_terminal_summary_ends_with_the_verdict_table_and_the_run_folder(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_1_ok": (
        "import pytest\n"
        "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_ok():\n    pass\n")})
    result = kit_project.runpytest("-m", "scan")
    folder = only_run_folder(kit_project)
    lines = result.outlines
    last = len(lines) - 1
    assert re.match(r"=+ 1 passed(, \d+ warnings?)? in [\d.]+s =+$", lines[last])
    assert lines[last - 2:last] == [f"run folder: {folder}", f"report:     {folder / 'report.html'}"]
    table = lines[last - 12:last - 2]
    assert table[0] == "onegpu verdicts (one line per phase)"
    assert [row.split()[0] for row in table[1:]] == ["machine", "plan", "probe", "custody", "load", "canary",
                                                     "batch", "serve", "run"]
    assert table[1].split()[1] == "PASSED" and table[2].split()[1:] == ["NOT", "RUN"]


def test_blocked_session_exits_zero_unless_fail_on_blocked(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_1_blocked": (
        "import pytest\n"
        "from onegpu.machine.checks import require_docker\n"
        "from onegpu.machine.docker_facts import unreachable\n"
        "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_docker_answers(fact):\n"
        "    fact(require_docker, unreachable('unix:///nowhere.sock', 'FileNotFoundError: no socket'))\n")})
    default = kit_project.runpytest("-m", "scan")
    default.assert_outcomes(xfailed=1)
    assert default.ret == pytest.ExitCode.OK
    strict = kit_project.runpytest("-m", "scan", "--fail-on-blocked")
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    receipts = sorted((kit_project.path / "runs").iterdir())
    assert [receipt_of(f)["exit_status"] for f in receipts] == [0, 1]
    assert receipt_of(receipts[1])["phases"]["machine"]["code"] == "NO_DOCKER"


def test_a_blocked_report_carries_its_reason_and_origin_not_a_traceback(outcomes_project):
    # pytest would format (and parse the source of) every frame of the XFailed only for the xfail to hide it.
    outcomes_project.runpytest("-m", "scan", "--settings", "s.json", "-rx", "--junitxml", "junit.xml")
    result = outcomes_project.runpytest("-m", "scan", "--settings", "s.json", "-rx")
    result.assert_outcomes(passed=2, failed=1, skipped=1, xfailed=1)
    reason = "BLOCKED DISK_FULL: run folder: 0.50 GiB free, the kit needs at least 1.00 GiB"
    result.stdout.fnmatch_lines([f"XFAIL tests_hw/test_1_outcomes.py::test_is_blocked - {reason}"])
    folder = sorted((outcomes_project.path / "runs").iterdir())[-1]
    (row,) = [t for t in report_data(folder)["tests"].values() for t in t if t["result"] == "XFailed"]
    log = html.unescape(row["log"])
    assert re.search(r"test_1_outcomes\.py:\d+: " + re.escape(reason), log), log
    assert "Traceback" not in log and "raise Blocked" not in log  # no source lines quoted
    junit = (outcomes_project.path / "junit.xml").read_text()
    assert f'type="pytest.xfail" message="{reason}"' in junit
    assert receipt_of(folder)["tests"]["tests_hw/test_1_outcomes.py::test_is_blocked"]["code"] == "DISK_FULL"


def test_unexpected_exception_in_a_kit_test_is_a_failure_not_a_blocked_xfail(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_1_broken": (
        "import pytest\n"
        "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_check_raises(fact):\n"
        "    fact(lambda: {}['missing'])\n")})
    result = kit_project.runpytest("-m", "scan")
    result.assert_outcomes(failed=1)
    entry = next(iter(receipt_of(only_run_folder(kit_project))["tests"].values()))
    assert entry["outcome"] == "failed" and "KeyError" in entry["message"]


def test_receipt_json_is_atomic_private_and_readable_back(tmp_path):
    folder = rundir.create_run_folder(tmp_path / "runs", "scan")
    rundir.write_json(folder / "receipt.json", {"a": 1})
    rundir.write_json(folder / "receipt.json", {"a": 2})
    assert json.loads((folder / "receipt.json").read_text()) == {"a": 2}
    assert mode(folder / "receipt.json") == 0o600
    assert [p.name for p in folder.iterdir()] == ["receipt.json"]  # no temp file left behind


def test_json_evidence_reads_as_json_dumps_would_write_it(tmp_path):
    folder = rundir.create_run_folder(tmp_path / "runs", "scan")
    doc = {"kit": "0.1.0", "tests": {"a::b": {"outcome": "xfailed", "seconds": 0.25, "codes": ["NO_GPU"]}},
           "empty": {}, "none": [], "bytes": 2**70, "share": -0.0, "folder": tmp_path}
    rundir.write_json(folder / "receipt.json", doc)
    text = (folder / "receipt.json").read_text(encoding="ascii")
    assert text == json.dumps(doc, indent=2, default=str) + "\n"  # the same text where both are plain ASCII
    rundir.write_json(folder / "names.json", {"model": "MiMo-V2.6 \u00e9\u4e2d"})
    raw = (folder / "names.json").read_bytes()
    assert "MiMo-V2.6 \u00e9\u4e2d".encode() in raw  # written as UTF-8, read back the same
    assert json.loads(raw) == {"model": "MiMo-V2.6 \u00e9\u4e2d"}


def test_ini_settings_name_the_runs_folder_and_fail_on_blocked(kit_project):
    with (kit_project.path / "pytest.ini").open("a") as ini:
        ini.write("onegpu_runs_dir = evidence\nonegpu_fail_on_blocked = true\n")
    kit_project.makepyfile(**{"tests_hw/test_1_blocked": (
        "import pytest\n"
        "from onegpu.session.glue import blocked_as_xfail\n"
        "from onegpu.core.outcomes import Blocked\n"
        "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_blocked():\n"
        "    with blocked_as_xfail():\n"
        "        raise Blocked('NO_DOCKER', 'no Docker daemon answers at unix:///nowhere.sock')\n")})
    result = kit_project.runpytest("-m", "scan")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert not (kit_project.path / "runs").exists()
    (folder,) = (kit_project.path / "evidence").iterdir()
    assert receipt_of(folder)["exit_status"] == 1


def test_an_interrupted_session_says_so_in_its_verdict(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_1_stops": (
        "import pytest\npytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_passes():\n    pass\n"
        "def test_is_interrupted():\n    raise KeyboardInterrupt\n")})
    result = kit_project.runpytest("-m", "scan", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    receipt = receipt_of(only_run_folder(kit_project))
    assert receipt["verdict"] == ("INTERRUPTED in phase machine: cut by Ctrl-C (SIGINT) while this test ran")
    assert receipt["exit_status"] == int(pytest.ExitCode.INTERRUPTED)
