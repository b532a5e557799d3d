"""The advice and measurements in report.html and summary-share.md: the proposal, the calibration, the
consistency checks, the landing at READY and the operator-supplied score.

Rendered from the run folders of real kit sessions: scans with --propose, --calibrate-from (the recorded run
tests_offline/data/runs/stub-ready-8k) and --operator-score over synthetic checkpoints and replayed profiles,
and an approval whose engine landed under the free-memory floor. WHAT IS SIMULATED in that approval: the engine
container and NVML (no NVIDIA driver here), exactly as tests_offline/plan/test_landing.py does; the kit's Sampler,
landing record and reports are its own. Partial and hostile receipts are rendered as pure functions.
"""
from __future__ import annotations

import hashlib
import html
import json
import re

from onegpu.record.receipt import record_of
from onegpu.report.summary import sections
from tests_offline.report_sessions import HOSTILE, kit_sections, partial_receipt

GIB = 2**30


def text_of(fragment: str) -> str:
    """What a reader sees: tags dropped, entities unescaped, white space folded."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def report_texts(page: str) -> dict[str, str]:
    return {key: text_of(body) for key, body in kit_sections(page).items()}


# -- report.html of real sessions ------------------------------------------------------------------------------------

def test_the_sections_sit_beside_what_they_are_about(insight_runs):
    order = list(kit_sections(insight_runs.report("insight")))
    assert order[order.index("checkpoint"):order.index("probe")] == ["checkpoint", "consistency", "capacity",
                                                                      "ceiling", "calibration", "proposal"]
    assert order[order.index("boot"):order.index("boot") + 2] == ["boot", "landing"]
    assert order[order.index("batch"):order.index("batch") + 3] == ["batch", "score", "serve"]


def test_the_calibration_says_calibrated_from_with_the_reserve_and_how_it_was_measured(insight_runs):
    receipt = insight_runs.receipt("insight")
    cal, text = receipt["calibration"], report_texts(insight_runs.report("insight"))["calibration"]
    budget = next(r for r in receipt["capacity"] if r["check"] == "gpu_budget")["numbers"]
    assert budget["reserve_calibrated_from"] == "stub-ready-8k"
    assert text.startswith("GPU reserve calibration CALIBRATED FROM stub-ready-8k")
    assert f"non-weight GPU reserve {cal['reserve_bytes'] / GIB:,.2f} GiB ({cal['reserve_bytes']:,} bytes)" in text
    assert f"how it was measured {cal['how']}" in text and cal["rows"][0] in text
    boot_log = cal["estimates"]["boot_log_bytes"]
    assert f"vLLM's accounting in the boot log {boot_log / GIB:,.2f} GiB ({boot_log:,} bytes)" in text
    assert f"= {budget['budget_bytes'] / GIB:,.2f} GiB" in text  # the plan's budget uses it
    assert str(insight_runs.scan_project / "earlier" / "stub-ready-8k") in text  # private: the folder's path


def test_the_proposal_shows_its_file_budgets_reserve_and_every_derivation(insight_runs):
    receipt, folder = insight_runs.receipt("insight"), insight_runs.folder("insight")
    text = report_texts(insight_runs.report("insight"))["proposal"]
    path = folder / "settings-proposed.json"
    doc = json.loads(path.read_text())
    assert f"settings-proposed.json {path} its SHA-256 {hashlib.sha256(path.read_bytes()).hexdigest()}" in text
    assert "proposed yes: copy the values below into your settings" in text
    assert f"cpu_offload_gib {doc['settings']['cpu_offload_gib']}" in text
    assert f"container_ram_gib {doc['settings']['container_ram_gib']}" in text
    assert "CALIBRATED FROM stub-ready-8k" in text and "nothing is offloaded" in text
    for row in doc["derivation"]:
        assert f"{row['quantity']} {row['value']} {row['derivation']}" in text
    assert receipt["proposal"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_offloading_proposal_shows_its_alternatives_as_choices_to_measure(insight_runs):
    alt = insight_runs.receipt("offload")["proposal"]["alternatives"][0]
    text = report_texts(insight_runs.report("offload"))["proposal"]
    assert alt["name"] == "exact pinning" and alt["confirmed"] is False
    assert (f"Alternative to measure, not a result: exact pinning container_ram_gib {alt['container_ram_gib']} GiB "
            f"engine arguments none settings offload_pinning exact, container_ram_gib {alt['container_ram_gib']} "
            f"pinned {alt['pinned_bytes'] / GIB:,.2f} GiB ({alt['pinned_bytes']:,} bytes) "
            f"offloaded parameters {alt['parameters']}") in text
    assert "UNCONFIRMED" in text
    assert "non-weight reserve used 8.00 GiB ASSUMED" in text


def test_a_proposal_no_budget_can_satisfy_names_the_blocking_fact_and_its_numbers(insight_runs):
    blocker = insight_runs.receipt("no-ram")["proposal"]["blockers"][0]
    text = report_texts(insight_runs.report("no-ram"))["proposal"]
    assert "proposed NO: a fact blocks every budget" in text
    assert f"BLOCKED INSUFFICIENT_HOST_RAM ({blocker['check']}): {blocker['message']}" in text
    assert "short by" in blocker["message"]
    numbers = [f"{k} = {v:,}" for k, v in blocker["numbers"].items() if isinstance(v, int)]
    assert numbers and all(shown in text for shown in numbers)


def test_consistency_rows_carry_their_status_and_the_vllm_version_they_used(insight_runs):
    checks = insight_runs.receipt("insight")["consistency"]["checks"]
    page = kit_sections(insight_runs.report("insight"))["consistency"]
    text = text_of(page)
    assert "0.11.0 (the probe of run stub-ready-8k, same image ID)" in text
    for row in checks:
        assert f"{row['check']} {row['status'].upper()} {row['message']}" in text
    assert '<td class="og-unknown">UNKNOWN</td>' in page  # tied_embeddings is not stated by this config


def test_the_operator_score_is_labelled_operator_supplied_with_its_scorer_and_file(insight_runs):
    receipt = insight_runs.receipt("insight")
    page = kit_sections(insight_runs.report("insight"))["score"]
    text = text_of(page)
    assert '<span class="og-operator">OPERATOR-SUPPLIED</span>' in page
    assert "operator-supplied, not computed by the kit: the operator's statement" in text
    for wanted in ("value 0.8731", "metric exact_match, strict", "benchmark gsm8k / test",
                   "scorer / revision lm-evaluation-harness / v0.4.8", "samples scored 1,319",
                   f"score file {receipt['operator_score']['file']}",
                   f"its SHA-256 {receipt['operator_score']['file_sha256']}"):
        assert wanted in text, wanted


def test_a_scan_says_the_landing_was_not_run_and_an_absent_option_was_not_given(insight_runs):
    found = report_texts(insight_runs.report("offload"))
    assert "no landing (measured once the engine is READY): not run (phase load" in found["landing"]
    assert "not given: no --operator-score SCORE_JSON in this session" in found["score"]
    assert "not given: no --calibrate-from RUN_FOLDER in this session" in found["calibration"]


def test_a_landing_under_the_floor_is_a_warning_on_top_and_in_its_section(insight_runs):
    receipt = insight_runs.receipt("under-floor")
    assert receipt["landing"]["floor"]["status"] == "UNDER"
    page = insight_runs.report("under-floor")
    found = report_texts(page)
    alarm = "LANDED UNDER THE FREE-MEMORY FLOOR: GPU free at READY is 1.00 GiB, under the floor 2.00 GiB (ASSUMED)"
    assert alarm in found["top"] and alarm in found["landing"]
    assert '<p class="og-alarm">LANDED UNDER' in kit_sections(page)["landing"]
    free = next(r for r in receipt["landing"]["errors"] if r["quantity"] == "GPU free after boot")
    assert (f"GPU free after boot (bytes) 1.00 GiB {free['projected'] / GIB:,.2f} GiB "
            f"-{abs(free['error']) / GIB:,.2f} GiB ({free['error_percent']:+.1f}%)") in found["landing"]
    assert "GPU-resident weights (bytes) 41.25 GiB" in found["landing"]
    assert "KV pool (tokens) 15,000,000 tokens" in found["landing"]
    assert "floor status UNDER by 1.00 GiB" in found["landing"]


def test_a_stub_engine_landing_without_nvml_says_not_measured_never_a_number(real_runs):
    found = report_texts((real_runs.folder("approve-a") / "report.html").read_text())
    assert re.search(r"GPU free after boot \(bytes\) not measured [\d.,]+ GiB no NVML reading", found["landing"])
    assert "floor status not checked: GPU free memory not measured" in found["landing"]
    assert "LANDED UNDER" not in found["top"]


# -- summary-share.md of real sessions ----------------------------------------------------------------------------

def test_the_summary_carries_score_calibration_proposal_and_consistency_as_numbers(insight_runs):
    receipt, text = insight_runs.receipt("insight"), insight_runs.share("insight")
    cal, settings = receipt["calibration"], receipt["proposal"]["settings"]
    wanted = [
        "- **OPERATOR-SUPPLIED** (operator-supplied, not computed by the kit): exact_match, strict = 0.8731 on "
        "gsm8k / test, over 1,319 samples, scored by lm-evaluation-harness v0.4.8; of `stub-org/e2e-model` at "
        f"revision `{'e' * 40}`",
        f"- non-weight GPU reserve CALIBRATED FROM run stub-ready-8k: {cal['reserve_bytes'] / GIB:,.2f} GiB, the "
        f"larger of vLLM's boot-log accounting {cal['estimates']['boot_log_bytes'] / GIB:,.2f} GiB and NVML at "
        "READY (not measured)",
        f"- proposed budgets (a proposal: nothing ran from it): CPU offload {settings['cpu_offload_gib']} GiB, "
        f"container RAM cap {settings['container_ram_gib']} GiB, host headroom {settings['host_headroom_gib']} GiB",
        "CALIBRATED FROM stub-ready-8k; 0 unknown",
        "- checkpoint consistency: 7 check(s), 0 warning(s), 1 unknown (tied_embeddings); what each found is in "
        "the private report"]
    assert [w for w in wanted if w not in text] == [], text
    for private in (receipt["operator_score"]["file"], cal["folder"], receipt["proposal"]["path"],
                    str(insight_runs.scan_project)):
        assert private not in text


def test_the_summary_gives_the_landing_errors_and_the_floor_as_numbers(insight_runs):
    landing, text = insight_runs.receipt("under-floor")["landing"], insight_runs.share("under-floor")
    weights = landing["errors"][0]
    assert (f"- GPU-resident weights (bytes): measured 41.25 GiB vs projected {weights['projected'] / GIB:,.2f} GiB, "
            f"prediction error {'+' if weights['error'] >= 0 else '-'}{abs(weights['error']) / GIB:,.2f} GiB") in text
    assert "- KV pool (tokens): measured 15,000,000 tokens vs projected" in text
    assert "- **LANDED UNDER THE FREE-MEMORY FLOOR**: free-memory floor 2.00 GiB ASSUMED: UNDER by 1.00 GiB" in text


def test_the_summary_of_a_blocked_proposal_gives_its_code_and_numbers(insight_runs):
    blocker = insight_runs.receipt("no-ram")["proposal"]["blockers"][0]
    text = insight_runs.share("no-ram")
    assert f"- no budget proposed: BLOCKED INSUFFICIENT_HOST_RAM ({blocker['check']}), numbers: " in text
    assert blocker["message"] not in text  # the message is free text: codes and numbers only


# -- pure rendering --------------------------------------------------------------------------------------------------

def test_without_the_options_each_section_says_not_run_or_not_given():
    found = report_texts("".join(sections(record_of(partial_receipt()))))
    assert "not given: no --propose REQUEST_JSON" in found["proposal"]
    assert "not given: no --calibrate-from RUN_FOLDER" in found["calibration"]
    assert "not given: no --operator-score SCORE_JSON" in found["score"]
    assert "not run (phase plan" in found["consistency"]
    assert "not run (phase load" in found["landing"]
    given = {**partial_receipt(), "command_line": ["pytest", "--propose=r.json", "--operator-score", "s.json"]}
    # asked for, but the session stopped before recording it
    found = report_texts("".join(sections(record_of(given))))
    assert "not run (phase plan" in found["proposal"] and "not run (phase plan" in found["score"]


def hostile_receipt() -> dict:
    """Every text field of the five sections hostile (a number field holds a number: the record refuses text)."""
    receipt = partial_receipt()
    row = {"quantity": HOSTILE, "unit": "bytes", "projected": 1, "measured": None, "error": None,
           "error_percent": None, "status": "not measured", "why": HOSTILE}
    receipt.update(
        proposal={"path": HOSTILE, "sha256": HOSTILE, "proposed": False, "settings": None,
                  "alternatives": [{"name": HOSTILE, "container_ram_gib": 1, "why": HOSTILE}],
                  "derivation": [{"quantity": HOSTILE, "value": HOSTILE, "derivation": HOSTILE}],
                  "blockers": [{"check": HOSTILE, "code": "INSUFFICIENT_HOST_RAM", "message": HOSTILE,
                                "numbers": {HOSTILE: 1}}], "unknown": [HOSTILE], "warnings": [HOSTILE],
                  "reserve": {"source": HOSTILE, "bytes": 1}},
        calibration={"run_id": HOSTILE, "folder": HOSTILE, "reserve_bytes": 1, "how": HOSTILE, "estimates": {},
                     "rows": [HOSTILE], "warnings": [HOSTILE], "image_id": HOSTILE, "vllm_version": HOSTILE,
                     "gpu_name": HOSTILE},
        consistency={"checks": [{"check": HOSTILE, "status": "warning", "message": HOSTILE}],
                     "vllm_version": HOSTILE, "vllm_version_source": HOSTILE,
                     "kv_dtype_at_probe": [{"check": HOSTILE, "status": HOSTILE, "message": HOSTILE}],
                     "probe_vllm_version": HOSTILE},
        landing={"errors": [row], "warnings": [HOSTILE], "at": HOSTILE, "measured": {},
                 "projected": {"reserve_source": HOSTILE},
                 "floor": {"bytes": 1, "assumed": True, "status": "not checked", "why": HOSTILE}},
        operator_score={"label": HOSTILE, "file": HOSTILE, "file_sha256": HOSTILE, "mismatches": [HOSTILE],
                        "record": {"benchmark": HOSTILE, "metric": HOSTILE, "value": 0.5,
                                   "scorer": {"name": HOSTILE, "revision": HOSTILE}, "notes": HOSTILE}})
    return receipt


def test_every_value_of_these_sections_is_escaped():
    found = kit_sections("".join(sections(record_of(hostile_receipt()))))
    escaped = html.escape(HOSTILE, quote=True)
    for key, least in (("proposal", 8), ("calibration", 6), ("consistency", 6), ("landing", 4), ("score", 7)):
        assert "<script>" not in found[key] and "<img" not in found[key], key
        assert found[key].count(escaped) >= least, (key, found[key].count(escaped))
