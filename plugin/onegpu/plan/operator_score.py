"""Pure: validate a native score the operator obtained with their own scorer (`--operator-score FILE.json`,
schema onegpu/operator-score@1) and shape the receipt's "operator_score" section.

The kit never computes, checks or rescores it: the record is carried as the operator's statement, labelled
OPERATOR_SUPPLIED everywhere it appears. Every rule a file breaks is reported at once (field, value, rule).
"""
from __future__ import annotations

import hashlib
import math
import re

from onegpu.core import strict_json
from onegpu.core.shown import cut

SCHEMA = "onegpu/operator-score@1"
LABEL = "operator-supplied, not computed by the kit"
MAX_BYTES = 100_000
MAX_TEXT = 500
MAX_NOTES = 4000
_REVISION = re.compile(r"^\S{1,200}$")
_MODEL_REVISION = re.compile(r"^[0-9a-f]{40}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")

# field -> (required, kind)
FIELDS = {
    "schema": (True, "schema"),
    "benchmark": (True, "text"),  # what was scored, e.g. "gsm8k / test"
    "metric": (True, "text"),  # e.g. "exact_match, strict"
    "value": (True, "number"),
    "scorer": (True, "scorer"),  # {"name": ..., "revision": ...}
    "sample_count": (True, "count"),
    "model_id": (False, "text"),  # the model the score is of, when the operator states it
    "model_revision": (False, "model_revision"),
    "scored_run": (False, "run_id"),  # the run folder name whose serve window was scored
    "obtained_at": (False, "text"),
    "notes": (False, "notes"),
}


class OperatorScoreError(ValueError):
    """Every rule an operator score file breaks, one line each."""

    def __init__(self, path: str, errors: list[str]):
        self.path, self.errors = path, errors
        super().__init__(f"{path}: " + "; ".join(errors))


def _text_rule(value, limit: int) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty string"
    if len(value) > limit or any(ord(c) < 32 and c not in "\n\t" for c in value):
        return f"must be printable text of at most {limit} characters"
    return None


def _rule(kind: str, value) -> str | None:
    """The rule `value` breaks for its kind, or None."""
    if kind == "schema":
        return None if value == SCHEMA else f"must be {SCHEMA!r}"
    if kind == "text":
        return _text_rule(value, MAX_TEXT)
    if kind == "notes":
        return _text_rule(value, MAX_NOTES)
    if kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else "must be a finite number (a boolean is not)"
    if kind == "count":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else "must be an integer >= 1 (how many samples the scorer scored)"
    if kind == "model_revision":
        return None if isinstance(value, str) and _MODEL_REVISION.match(value) else \
            "must be the 40-character lowercase hex commit of the model repository"
    if kind == "run_id":
        return None if isinstance(value, str) and _RUN_ID.match(value) else "must be a run folder name"
    return None


def _scorer_errors(value) -> list[str]:
    if not isinstance(value, dict):
        return [f"field 'scorer': value {value!r}: must be an object {{\"name\": ..., \"revision\": ...}}"]
    errors = [f"field 'scorer.{k}': value {v!r}: unknown field" for k, v in value.items() if k not in ("name",
                                                                                                    "revision")]
    for key in ("name", "revision"):
        if key not in value:
            errors.append(f"field 'scorer.{key}': required (the scorer's identity and the exact revision run)")
            continue
        rule = _text_rule(value[key], MAX_TEXT)
        if rule is None and key == "revision" and not _REVISION.match(value[key]):
            rule = "must be one token (a version, tag or commit) without spaces"
        if rule:
            errors.append(f"field 'scorer.{key}': value {value[key]!r}: {rule}")
    return errors


def parse_operator_score(data, path: str) -> dict:
    """The validated record (a plain dict of the file's fields); raises OperatorScoreError listing every rule."""
    if not isinstance(data, dict):
        raise OperatorScoreError(path, [f"the document must be a JSON object, found {type(data).__name__}"])
    errors = [f"field {k!r}: value {v!r}: unknown field (not in {SCHEMA})" for k, v in data.items()
              if k not in FIELDS]
    for key, (required, kind) in FIELDS.items():
        if key not in data:
            if required:
                errors.append(f"field {key!r}: required")
            continue
        if kind == "scorer":
            errors += _scorer_errors(data[key])
            continue
        rule = _rule(kind, data[key])
        if rule:
            shown = cut(data[key]) if isinstance(data[key], str) else data[key]
            errors.append(f"field {key!r}: value {shown!r}: {rule}")
    if errors:
        raise OperatorScoreError(path, errors)
    return {k: data[k] for k in FIELDS if k in data and k != "schema"}


def load_operator_score(raw: bytes, path: str) -> tuple[dict, str]:
    """(record, SHA-256 of the file's bytes); raises OperatorScoreError (never a traceback for bad input)."""
    if len(raw) > MAX_BYTES:
        raise OperatorScoreError(path, [f"{len(raw):,} bytes: an operator score file must be under {MAX_BYTES:,}"])
    try:
        data = strict_json.loads(raw)
    except (strict_json.StrictJSONError, UnicodeDecodeError) as exc:
        raise OperatorScoreError(path, [str(exc)]) from None
    return parse_operator_score(data, path), hashlib.sha256(raw).hexdigest()


def receipt_section(record: dict, path: str, sha256: str, model_id: str | None = None,
                    model_revision: str | None = None) -> dict:
    """The receipt's "operator_score" section: the record, its file and digest, the label, and any mismatch
    with the model the session's settings name."""
    mismatches = []
    if model_id and record.get("model_id") and record["model_id"] != model_id:
        mismatches.append(f"the score names model {record['model_id']}, the settings {model_id}")
    if model_revision and record.get("model_revision") and record["model_revision"] != model_revision:
        mismatches.append(f"the score names revision {record['model_revision']}, the settings {model_revision}")
    return {"label": LABEL, "operator_supplied": True, "computed_by_kit": False, "file": path, "file_sha256": sha256,
            "record": dict(record), "mismatches": mismatches}


def describe(section: dict) -> list[str]:
    """Fact lines: the score as the operator stated it, labelled."""
    r = section["record"]
    lines = [f"OPERATOR-SUPPLIED SCORE ({LABEL}): {r['benchmark']} {r['metric']} = {r['value']} over "
             f"{r['sample_count']:,} samples, scored by {r['scorer']['name']} {r['scorer']['revision']}",
             f"  from {section['file']} (sha256 {section['file_sha256']})"
             + (f"; scored run {r['scored_run']}" if r.get("scored_run") else "")]
    lines += [f"  MISMATCH: {m}" for m in section["mismatches"]]
    return lines
