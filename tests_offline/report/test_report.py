"""report.html: the kit's sections in pytest-html's self-contained report, and the end of the terminal output.

The rendering is tested as pure functions on hostile and partial receipts, then on the run folders of real
kit sessions: scans, and approve_load sessions on the real Docker engine with the stub engine image.

WHAT IS SIMULATED in the approve_load sessions: this machine has no NVIDIA GPU, so their project uses
devkit/e2e/conftest_simulated_gpu.py (recorded NVML answers of an H200, no GPU device request),
exactly as tests_offline/sessions/test_approve_e2e.py does. Everything else is the real plugin and phase tests.
"""
from __future__ import annotations

import datetime as dt
import html
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from onegpu.core.outcomes import ADVICE, CODES
from onegpu.record.receipt import record_of
from onegpu.report.summary import REVIEW_LINE, TITLE, sections
from onegpu.report.svg import memory_plot, series, thin
from tests_offline.paths import REPO_ROOT
from tests_offline.report_sessions import HOSTILE, MODEL, kit_sections, partial_receipt

REPO = REPO_ROOT


# -- helpers ------------------------------------------------------------------------------------------------------

def report_of(folder: Path) -> str:
    return (folder / "report.html").read_text(encoding="utf-8")


# -- pure rendering ------------------------------------------------------------------------------------------------

def test_every_value_from_the_receipt_is_escaped():
    receipt = partial_receipt()
    receipt.update(verdict=f"BLOCKED LOAD_OOM in phase load: {HOSTILE}",
                   banners=[f"CHECKPOINT IS SYNTHETIC: {HOSTILE}"],
                   settings={"path": f"/data/{HOSTILE}/s.json", "sha256": "0" * 64, "assumed": {}},
                   limitations=[HOSTILE], warnings=[HOSTILE],
                   boot={"ready": False, "code": "LOAD_OOM", "message": HOSTILE,
                         "failure": {"exit_code": 1, "log_tail": [f"CUDA out of memory {HOSTILE}"]}})
    receipt["tests"]["x"] = {"phase": "load", "outcome": "blocked", "code": "LOAD_OOM", "message": HOSTILE,
                             "numbers": {"exit_code": 1}}
    page = "".join(sections(record_of(receipt), settings={"model_id": HOSTILE}))
    assert "<script>" not in page and "<img" not in page and "onerror=alert(1)>" not in page
    assert html.escape(HOSTILE, quote=True) in page
    assert page.count(html.escape(HOSTILE, quote=True)) >= 8  # verdict, banner, path, model, log, message, ...


def test_sections_of_phases_that_did_not_run_say_not_run():
    found = kit_sections("".join(sections(record_of(partial_receipt()))))
    for key in ("settings", "plan", "checkpoint", "capacity", "probe", "custody", "boot", "memory", "canary",
                "batch", "serve"):
        assert "not run (phase" in found[key], (key, found[key])
    assert "needs approval: -m approve_load" in found["custody"]
    assert found["timings"].count("not run (phase") == 6
    assert "no GPU readable: NVMLError_LibraryNotFound" in found["facts"]


def test_a_blocked_phase_says_not_established_with_its_code():
    receipt = partial_receipt()
    receipt["phases"]["plan"] = {"verdict": "BLOCKED", "code": "NO_SETTINGS", "message": "no --settings file given"}
    found = kit_sections("".join(sections(record_of(receipt))))
    assert "not established: phase plan BLOCKED NO_SETTINGS: no --settings file given" in found["capacity"]


def test_a_receipt_cut_mid_run_still_renders():
    found = kit_sections("".join(sections(record_of({"schema": "onegpu/receipt@1", "tests": {}}))))
    assert "no verdict yet" in found["verdict"] and "not run" in found["custody"]


def test_blocked_reasons_carry_their_numbers_and_meaning():
    receipt = partial_receipt()
    receipt["tests"]["t"] = {"phase": "plan", "outcome": "blocked", "code": "INSUFFICIENT_VRAM",
                             "message": "200.00 GiB on the GPU > budget 73.25 GiB",
                             "numbers": {"gpu_weight_bytes": 214748364800, "budget_bytes": 78651588608}}
    verdict = kit_sections("".join(sections(record_of(receipt))))["verdict"]
    assert "BLOCKED INSUFFICIENT_VRAM" in verdict and "200.00 GiB on the GPU &gt; budget 73.25 GiB" in verdict
    assert "gpu_weight_bytes = 214748364800" in verdict and "exceed the GPU budget" in verdict


def test_memory_plot_draws_gpu_and_host_series_and_keeps_peaks():
    samples = [{"t": 1000.0 + 2 * i, "gpu_used_bytes": (i % 50) * 2**30, "gpu_total_bytes": 141 * 2**30,
                "host_available_bytes": (500 - i % 7) * 2**30} for i in range(5000)]
    samples[2345]["gpu_used_bytes"] = 140 * 2**30  # one peak among 5,000 samples
    svg = memory_plot(samples)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2 and "<script" not in svg
    assert "card total 141 GiB" in svg and "5000 samples" in svg
    thinned = series(samples, "gpu_used_bytes")
    assert len(thinned) <= 1200 and max(v for _, v in thinned) == 140.0
    assert thin([(0.0, 1.0)], 10) == [(0.0, 1.0)]


def test_memory_plot_without_readings_is_none_and_a_lone_sample_is_a_dot():
    assert memory_plot([]) is None and memory_plot([{"t": 1.0, "errors": ["NVML unavailable"]}]) is None
    svg = memory_plot([{"t": 5.0, "host_available_bytes": 2**35}])
    assert "<circle" in svg and "no readings in the samples" in svg  # the GPU panel says it has none


def test_rendering_a_long_run_stays_cheap():
    samples = [{"t": float(i * 2), "gpu_used_bytes": i * 1000, "gpu_total_bytes": 2**37,
                "host_available_bytes": 2**38 - i, "container_memory_bytes": i} for i in range(43_200)]
    started = time.perf_counter()
    page = "".join(sections(record_of(partial_receipt()), samples))
    assert time.perf_counter() - started < 3.0 and len(page) < 400_000  # a day of samples at one per 2 s


# -- real sessions ---------------------------------------------------------------------------------------------------

def test_report_of_a_blocked_scan_opens_with_the_review_line_and_keeps_the_results_table(real_runs):
    page = report_of(real_runs.folder("blocked-scan"))
    assert re.search(r'<h1 id="title">\s*' + re.escape(html.escape(TITLE)), page)
    assert page.index(html.escape(REVIEW_LINE, quote=True)) < page.index('id="og-verdict"')
    assert 'id="results-table"' in page and "data-jsonblob" in page  # pytest-html's own table stays
    found = kit_sections(page)
    assert "BLOCKED NO_SETTINGS" in found["verdict"] and "not run (phase custody" in found["custody"]
    assert list(found)[:4] == ["top", "verdict", "facts", "settings"]


def test_report_of_an_approval_holds_plan_custody_boot_timings_plot_and_unscored_requests(real_runs):
    folder = real_runs.folder("approve-a")
    receipt = json.loads((folder / "receipt.json").read_text())
    found = kit_sections(report_of(folder))
    assert receipt["image"]["id"] in found["plan"] and "docker run \\\n    --pull=never" in found["plan"]
    assert "/run/onegpu" in found["plan"] and "read-only" in found["plan"] and "cap-drop" in found["plan"]
    assert f"{receipt['custody']['totals']['files']}</td>" in found["custody"]
    facts = receipt["boot"]["facts"]
    assert f"{facts['kv_cache_gib']} GiB = {facts['kv_cache_tokens']:,} tokens" in found["boot"]
    for key in ("hashing", "probe", "load", "canary", "batch"):
        assert f"<td>{receipt['timings_s'][key]:,.3f} s</td>" in found["timings"]  # each phase's own row
    assert "not run (phase serve: NOT RUN)" in found["timings"]
    samples = (folder / "samples.jsonl").read_text().splitlines()
    assert len(samples) >= 2 and "<polyline" in found["memory"] and f"({len(samples)} samples" in found["memory"]
    # the timed phases are shaded on the plot where the samples' wall clock places them (the sampler runs from the
    # boot to the engine's end, so the load, canary and batch phases all fall inside)
    assert set(receipt["timeline"]) == set(receipt["timings_s"])
    for phase in ("load", "canary", "batch"):
        start, end = receipt["timeline"][phase]
        assert end - start == pytest.approx(receipt["timings_s"][phase], abs=0.002)
        assert f'fill="#7e5109">{phase}</text>' in found["memory"]
    first = min(json.loads(line)["t"] for line in samples)
    placed = [phase for phase, (_, end) in receipt["timeline"].items() if end >= first]  # hashing ends before it
    assert found["memory"].count('class="og-phase"') == 2 * len(placed)  # both panels
    # the stub project offloads nothing: the link bounds no rate, and the section says so
    assert "nothing is offloaded" in found["ceiling"] and "UPPER BOUNDS, never predictions" in found["ceiling"]
    assert "UNSCORED" in found["batch"] and "expected 4, received 4" in found["batch"]
    assert "UNSCORED" in found["canary"] and "capacity" in found and "OK" in found["capacity"]


def test_a_boot_failure_shows_its_code_and_the_escaped_log_tail(real_runs):
    found = kit_sections(report_of(real_runs.folder("oom")))
    assert "BLOCKED LOAD_OOM" in found["boot"] and "CUDA out of memory" in found["boot"]
    assert "not run" not in found["custody"]  # custody ran before the load failed
    # the engine's own line, what the code means and what to do about it (onegpu.core.outcomes)
    quote = json.loads((real_runs.folder("oom") / "receipt.json").read_text())["boot"]["failure"]["quote"]
    assert f"<td>{html.escape(quote)}</td>" in found["boot"]
    assert f"<td>{html.escape(CODES['LOAD_OOM'])}</td>" in found["boot"]
    assert f"<td>{html.escape(ADVICE['LOAD_OOM'])}</td>" in found["boot"]


def test_replayed_and_synthetic_banners_are_on_top(tmp_path):
    """A replayed scan of the shipped research profile with a synthetic checkpoint, in-process."""
    from devkit.e2e.harness import LLAMA, llama_tensors
    from devkit.synth import SYNTHETIC_METADATA, write_checkpoint

    ckpt = write_checkpoint(tmp_path / "ckpt", LLAMA, llama_tensors(), shards=1, metadata=SYNTHETIC_METADATA)
    settings = {"schema": "onegpu/settings@1", "model_id": MODEL, "model_revision": "e" * 40,
                "model_path": str(ckpt), "image": "onegpu-no-such-image:1", "gpu": 0, "context_tokens": 4096,
                "prefill_chunk_tokens": 1024, "cpu_offload_gib": 0, "container_ram_gib": 8, "host_headroom_gib": 1,
                "deadline_s": 600}
    (tmp_path / "s.json").write_text(json.dumps(settings))
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", f"--settings={tmp_path / 's.json'}",
                           f"--hardware={REPO / 'profiles' / 'research-target-rtx-pro-6000-96gb.json'}",
                           "--host-ram-gib=256", f"--out={out}", "-p", "no:randomly"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
    top = kit_sections(report_of(out))["top"]
    banners = re.findall(r'<p class="og-banner">([^<]*)</p>', top)
    assert [b.split(":")[0] for b in banners] == [
        "HARDWARE FACTS REPLAYED from profile research-target-rtx-pro-6000-96gb", "CHECKPOINT IS SYNTHETIC"]


@pytest.mark.parametrize("name", ["blocked-scan", "approve-a", "oom"])
def test_the_session_ends_with_the_verdict_table_the_run_folder_and_the_report(real_runs, name):
    folder = real_runs.folder(name)
    lines = real_runs.stdout(name).splitlines()
    assert re.match(r"=+ .* in [\d.]+s( \(.*\))? =+$", lines[-1]), lines[-5:]
    assert lines[-3:-1] == [f"run folder: {folder}", f"report:     {folder / 'report.html'}"]
    table = lines[-13:-3]
    assert table[0] == "onegpu verdicts (one line per phase)" and table[-1].startswith("  run ")
    assert [row.split()[0] for row in table[1:-1]] == ["machine", "plan", "probe", "custody", "load", "canary",
                                                       "batch", "serve"]
    assert lines[-15] == (f"public summary: {folder / 'summary-share.md'} (the one to post; review report.html "
                          "before sharing it)")
    assert not any("Generated html report" in line for line in lines)  # pytest-html prints nothing of its own


def test_a_session_with_a_failure_also_ends_with_the_run_folder_and_the_report(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_1_fails": (
        "import pytest\npytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_broken():\n    assert 1 == 2\n")})
    result = kit_project.runpytest("-m", "scan")
    (folder,) = (kit_project.path / "runs").iterdir()
    assert result.outlines[-2] == f"report:     {folder / 'report.html'}"


def test_scan_with_a_report_stays_fast(real_runs):
    receipt = json.loads((real_runs.folder("scan-a") / "receipt.json").read_text())
    took = dt.datetime.fromisoformat(receipt["finished_at"]) - dt.datetime.fromisoformat(receipt["started_at"])
    assert took.total_seconds() < 10, took  # the whole scan, report and summary included
