"""`python -m onegpu.report.compare RUN_A RUN_B` on the run folders of real kit sessions (tests_offline/report_sessions.py):
two scans with different settings, two approvals with different request files, and folders that are not runs."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests_offline.paths import REPO_ROOT

REPO = REPO_ROOT


def compare(a, b) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "onegpu.report.compare", str(a), str(b)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def test_two_scans_with_another_context_share_image_and_checkpoint_layout(real_runs):
    done = compare(real_runs.folder("scan-a"), real_runs.folder("scan-b"))
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    image = json.loads((real_runs.folder("scan-a") / "receipt.json").read_text())["image"]["id"]
    assert out[0].startswith(f"A: {real_runs.folder('scan-a')} (scan, started ")
    assert ("same checkpoint manifest?   UNKNOWN: no manifest.json in "
            f"{real_runs.folder('scan-a')} and {real_runs.folder('scan-b')} (custody did not run); by the headers "
            "only: same file list and header bytes (names and sizes, not contents)") in out
    assert f"same image ID?              YES: {image}" in out
    assert "same protocol?              UNKNOWN: no batch protocol in A and B" in out
    assert "same settings file?         NO: " in done.stdout and "    context_tokens 8192 -> 4096" in out
    assert "  every phase has the same verdict" in out


def test_two_approvals_with_other_request_files_say_what_differs(real_runs):
    a, b = real_runs.folder("approve-a"), real_runs.folder("approve-b")
    ra, rb = (json.loads((f / "receipt.json").read_text()) for f in (a, b))
    done = compare(a, b)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    manifest = next(line for line in out if line.startswith("same checkpoint manifest?"))
    assert manifest.startswith("same checkpoint manifest?   YES: 6 files, ")
    assert f"same image ID?              YES: {ra['image']['id']}" in out
    assert (f"same protocol?              NO: A {ra['batch']['protocol']['sha256']}, B "
            f"{rb['batch']['protocol']['sha256']}") in out
    assert (f"same request hash?          NO: A {ra['batch']['request_file']['sha256']}, B "
            f"{rb['batch']['request_file']['sha256']}") in out
    assert "same settings file?         YES: " + ra["settings"]["sha256"] in out
    load = f"  load: {ra['timings_s']['load']} -> {rb['timings_s']['load']} "
    assert any(line.startswith(load) for line in out), out  # the boot delays differ: 4.5 s vs 0.5 s
    batch = out.index("batch (UNSCORED counts and transport times)")
    assert "  expected: 4 -> 3" in out[batch:]


def test_a_changed_file_in_the_manifest_is_named(real_runs, tmp_path):
    a = real_runs.folder("approve-a")
    b = tmp_path / "copy"
    shutil.copytree(a, b, ignore=shutil.ignore_patterns("sock"))
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["files"][0]["sha256"] = "0" * 64
    (b / "manifest.json").write_text(json.dumps(manifest))
    done = compare(a, b)
    assert done.returncode == 0 and (f"same checkpoint manifest?   NO: 1 file(s) with other contents: "
                                     f"{manifest['files'][0]['path']}") in done.stdout.splitlines()


@pytest.mark.parametrize("make, says", [
    (lambda p: p, "no such folder"),
    (lambda p: (p.mkdir(), p)[1], "not a run folder (no receipt.json in it)"),
    (lambda p: (p.write_text("x"), p)[1], "not a folder"),
    (lambda p: (p.mkdir(), (p / "receipt.json").write_text("{not json"), p)[2], "not a readable receipt"),
    (lambda p: (p.mkdir(), (p / "receipt.json").write_text('{"schema": "other@1"}'), p)[2],
     "field 'schema' must be 'onegpu/receipt@1'"),
    (lambda p: (p.mkdir(), (p / "receipt.json").write_text('{"schema": "onegpu/receipt@1"}'),
                (p / "manifest.json").write_text("[]"), p)[3], "field 'schema' must be 'onegpu/manifest@1'"),
])
def test_a_folder_that_is_not_a_run_folder_is_refused_by_name(real_runs, tmp_path, make, says):
    bad = make(tmp_path / "not-a-run")
    done = compare(real_runs.folder("blocked-scan"), bad)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"onegpu compare: {bad}") and says in done.stderr
    assert "Traceback" not in done.stderr


def test_usage_is_explained_without_two_folders():
    done = subprocess.run([sys.executable, "-m", "onegpu.report.compare"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "RUN_A" not in done.stdout and "run_a" in done.stderr


def test_compare_and_calibration_read_a_run_folder_through_one_reader(real_runs, tmp_path):
    """The same folder gives compare and calibration the same receipt and manifest, and the same refusal."""
    from onegpu.options import calibration_run
    from onegpu.plan.calibrate import CalibrationError
    from onegpu.report import compare_cli, run_reader

    folder = real_runs.folder("scan-a")
    run = run_reader.read_run(folder)
    evidence = compare_cli.load_run(folder)
    assert evidence.receipt == run.receipt and evidence.manifest == run.manifest
    assert evidence.settings == run.shown_settings and run.shown_settings
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "receipt.json").write_text('{"schema": "something else"}')
    with pytest.raises(run_reader.NotARunFolder) as compared:
        compare_cli.load_run(broken)
    with pytest.raises(CalibrationError) as calibrated:
        calibration_run(broken)
    assert str(compared.value) in str(calibrated.value)


# The committed run folders of tests_offline/data/runs: receipts (schema onegpu/receipt@1) that an earlier version of
# the kit wrote, read by today's record. The expected text is what the kit printed for them before the receipt was
# read as a typed record, so it must not change by one byte.
STUB_RUNS = "tests_offline/data/runs"
READY, OOM = f"{STUB_RUNS}/stub-ready-8k", f"{STUB_RUNS}/stub-load-oom"
NOT_FINISHED = "no verdict (the session did not finish)"
HOST_RAM = ("container_ram_cap_bytes 9.00 GiB, host_headroom_bytes 1.00 GiB, need_bytes 10.00 GiB, "
            "host_available_bytes {} GiB")
STUB_COMPARISON = [
    f"A: {READY} (approve, started None, one-GPU protocol)",
    f"B: {OOM} (approve, started None, one-GPU protocol)",
    "",
    "same checkpoint manifest?   YES: 6 files, 17,311,075 bytes, every path, size and SHA-256 equal (content digest "
    "bca7af1a15c56071065120807982d9f7ae2344a0f70ce0c9db0b4a0f232d7b69)",
    "same image ID?              YES: sha256:23f729813c38dd2cfcfabcb66a37e01413f2ddea8a4cad4ccda848e77367f6eb",
    "same protocol?              UNKNOWN: no batch protocol in A and B",
    "same request hash?          UNKNOWN: no batch request file in A and B",
    "same canary requests?       UNKNOWN: no canary in A and B",
    "same settings file?         YES: ae4b6694050a7826287ca60c654371a1e41ef96fe2f9652ec5d668ad442993d8",
    "  settings that differ: none",
    "",
    "verdicts",
    f"  A: {NOT_FINISHED}",
    f"  B: {NOT_FINISHED}",
    "  every phase has the same verdict",
    "capacity (A | B)",
    *(f"  = {check}: OK in both, same numbers" for check in ("weights", "quantization", "gpu_free", "gpu_budget",
                                                            "gpu_weights", "kv_cache", "host_offload")),
    f"  ! host_ram: A OK ({HOST_RAM.format('22.93')}) | B OK ({HOST_RAM.format('22.91')})",
    "  = cgroup: OK in both, same numbers",
    "  = pinned_pow2: OK in both, same numbers",
    "  ! disk: A OK (free_bytes 77.81 GiB, need_bytes 1.00 GiB) | B OK (free_bytes 77.80 GiB, need_bytes 1.00 GiB)",
    "",
    "boot facts",
    "  ready: True -> False",
    "  recorded in A only",
    "memory peaks (samples)",
    "  host_available_bytes_min: 22.91 GiB -> 22.91 GiB",
    "  container_memory_bytes_max: 0.02 GiB -> 0.01 GiB",
    "timings (s, each phase's own)",
    "  no timed phase in either run",
    "link ceiling (UPPER BOUNDS) and measured shares",
    "  the same",
]


def test_run_folders_an_earlier_kit_wrote_compare_as_they_always_did():
    done = compare(READY, OOM)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.splitlines() == STUB_COMPARISON
    swapped = compare(OOM, READY).stdout.splitlines()
    assert swapped[:2] == [f"A: {OOM} (approve, started None, one-GPU protocol)",
                           f"B: {READY} (approve, started None, one-GPU protocol)"]
    assert "  ready: False -> True" in swapped and "  recorded in B only" in swapped
    assert f"  ! host_ram: A OK ({HOST_RAM.format('22.91')}) | B OK ({HOST_RAM.format('22.93')})" in swapped
