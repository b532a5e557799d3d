"""An operator-supplied native score (--operator-score): validated like settings (field, value, rule), recorded in
the receipt as operator-supplied and never computed, checked or rescored by the kit."""
from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from onegpu.plan.operator_score import (
    LABEL,
    SCHEMA,
    OperatorScoreError,
    describe,
    load_operator_score,
    parse_operator_score,
    receipt_section,
)
from tests_offline.paths import REPO_ROOT

SCORE = {"schema": SCHEMA, "benchmark": "gsm8k / test", "metric": "exact_match, strict", "value": 0.8731,
         "scorer": {"name": "lm-evaluation-harness", "revision": "v0.4.8"}, "sample_count": 1319}


def parsed(**changes) -> dict:
    return parse_operator_score({**SCORE, **changes}, "/tmp/score.json")


def test_a_complete_record_is_kept_as_stated():
    record = parsed(model_id="org/m", scored_run="20261202T101010Z-serve", notes="8-shot, chat template")
    assert record["value"] == 0.8731 and record["scorer"] == SCORE["scorer"] and "schema" not in record
    assert record["scored_run"] == "20261202T101010Z-serve"


@pytest.mark.parametrize("changes, named", [
    ({"value": float("nan")}, "field 'value': value nan: must be a finite number"),
    ({"value": True}, "field 'value': value True: must be a finite number (a boolean is not)"),
    ({"value": "87%"}, "field 'value': value '87%': must be a finite number"),
    ({"sample_count": 0}, "field 'sample_count': value 0: must be an integer >= 1"),
    ({"sample_count": 12.0}, "field 'sample_count': value 12.0: must be an integer >= 1"),
    ({"scorer": "lm-eval"}, "field 'scorer': value 'lm-eval': must be an object"),
    ({"scorer": {"name": "lm-eval"}}, "field 'scorer.revision': required"),
    ({"scorer": {"name": "lm-eval", "revision": "v 1"}}, "field 'scorer.revision': value 'v 1': must be one token"),
    ({"scorer": {"name": "", "revision": "1"}}, "field 'scorer.name': value '': must be a non-empty string"),
    ({"scorer": {"name": "x", "revision": "1", "url": "u"}}, "field 'scorer.url': value 'u': unknown field"),
    ({"model_revision": "main"}, "field 'model_revision': value 'main': must be the 40-character"),
    ({"scored_run": "../x"}, "field 'scored_run': value '../x': must be a run folder name"),
    ({"computed_by": "kit"}, "field 'computed_by': value 'kit': unknown field"),
    ({"schema": "onegpu/score@2"}, f"field 'schema': value 'onegpu/score@2': must be '{SCHEMA}'"),
])
def test_a_bad_record_names_the_field_the_value_and_the_rule(changes, named):
    with pytest.raises(OperatorScoreError) as err:
        parsed(**changes)
    assert any(e.startswith(named) for e in err.value.errors), err.value.errors


def test_every_missing_field_is_listed_at_once():
    with pytest.raises(OperatorScoreError) as err:
        parse_operator_score({"schema": SCHEMA}, "/tmp/s.json")
    assert err.value.errors == [f"field {k!r}: required" for k in ("benchmark", "metric", "value", "scorer",
                                                                    "sample_count")]


def test_duplicate_keys_and_non_finite_numbers_in_the_file_are_refused():
    with pytest.raises(OperatorScoreError, match="duplicate"):
        load_operator_score(b'{"value": 1, "value": 2}', "/tmp/s.json")
    with pytest.raises(OperatorScoreError, match="NaN|Infinity"):
        load_operator_score(b'{"value": Infinity}', "/tmp/s.json")


def test_the_receipt_section_is_labelled_and_names_a_model_mismatch():
    record, sha = load_operator_score(json.dumps({**SCORE, "model_id": "org/other"}).encode(), "/tmp/s.json")
    section = receipt_section(record, "/tmp/s.json", sha, model_id="org/m", model_revision="a" * 40)
    assert section["label"] == LABEL == "operator-supplied, not computed by the kit"
    assert (section["operator_supplied"], section["computed_by_kit"]) == (True, False)
    assert section["mismatches"] == ["the score names model org/other, the settings org/m"]
    lines = describe(section)
    assert lines[0].startswith(f"OPERATOR-SUPPLIED SCORE ({LABEL}): gsm8k / test exact_match, strict = 0.8731 over "
                               "1,319 samples, scored by lm-evaluation-harness v0.4.8")
    assert lines[-1] == "  MISMATCH: the score names model org/other, the settings org/m"


# ---- sessions ----------------------------------------------------------------------------------------------------

@pytest.fixture
def project(kit_project):
    shutil.copy(REPO_ROOT / "tests_hw" / "test_2_plan_insight.py", kit_project.path / "tests_hw")
    return kit_project


def test_a_scan_records_the_score_as_operator_supplied(project):
    raw = json.dumps(SCORE).encode()
    (project.path / "score.json").write_bytes(raw)
    result = project.runpytest("-m", "scan", "--operator-score", "score.json", "--out", "runs/s")
    receipt = json.loads((project.path / "runs/s/receipt.json").read_text())
    section = receipt["operator_score"]
    assert section["label"] == LABEL and section["record"]["value"] == 0.8731
    assert section["file_sha256"] == hashlib.sha256(raw).hexdigest()
    entry = next(e for n, e in receipt["tests"].items() if n.endswith("recorded_as_operator_supplied"))
    assert entry["outcome"] == "passed"
    result.stdout.fnmatch_lines(["*OPERATOR-SUPPLIED SCORE (operator-supplied, not computed by the kit)*"])


def test_a_bad_score_file_is_a_usage_error_naming_the_field(project):
    (project.path / "score.json").write_text(json.dumps({**SCORE, "sample_count": -3}))
    result = project.runpytest("-m", "scan", "--operator-score", "score.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--operator-score *score.json: field 'sample_count': value -3: must be an integer*"])


def test_without_a_score_nothing_is_recorded(project):
    project.runpytest("-m", "scan", "--out", "runs/n")
    receipt = json.loads((project.path / "runs/n/receipt.json").read_text())
    assert "operator_score" not in receipt
    assert [t["outcome"] for n, t in receipt["tests"].items()
            if n.endswith("recorded_as_operator_supplied")] == ["deselected"]
