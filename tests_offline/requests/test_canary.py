"""The canary: shipped template filled from the settings; needle generator deterministic; checker honest."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from onegpu.requests import canary
from onegpu.requests.requests_file import parse_request_bytes
from tests_offline.paths import REPO_ROOT

MODEL = "XiaomiMiMo/MiMo-V2.6-Pro-RL"
RECORDED_NEEDLE_SHA256 = "53d9990bcb40ac798319702ce63e5f4c3241e97d0dbd611151e348f5ba5cc975"


def validate(data: bytes, context: int = 32768, max_requests: int = 10):
    return parse_request_bytes(data, path="canary", model_id=MODEL, context_tokens=context,
                               max_requests=max_requests)


def test_shipped_template_filled_with_the_model_id_passes_the_request_rules():
    filled = canary.canary_file(MODEL)
    loaded = validate(filled, context=2048, max_requests=1)  # fits the earlier kit's example settings
    assert len(loaded.requests) == 1 and "not-a-benchmark" in loaded.custom_ids[0]
    assert json.loads(loaded.requests[0].body)["model"] == MODEL
    assert filled == canary.default_template().replace(canary.MODEL_PLACEHOLDER, json.dumps(MODEL).encode())


def test_only_the_placeholder_changes_when_filling():
    template = canary.default_template()
    filled = canary.fill_template(template, "a/b")
    before, _, after = template.partition(canary.MODEL_PLACEHOLDER)
    assert filled == before + b'"a/b"' + after


def test_template_without_its_placeholder_is_a_kit_error():
    with pytest.raises(ValueError, match="placeholder exactly once"):
        canary.fill_template(b'{"body":{"model":"x"}}\n', MODEL)


def test_same_seed_gives_identical_bytes_and_another_seed_does_not():
    one, needle = canary.needle_request(MODEL, 42, 5000, 0.3)
    two, _ = canary.needle_request(MODEL, 42, 5000, 0.3)
    other, other_needle = canary.needle_request(MODEL, 43, 5000, 0.3)
    assert one == two and one != other and needle.code_word != other_needle.code_word


def test_needle_bytes_are_the_same_in_another_process_and_hash_seed():
    # A recorded digest: the generator must not drift between processes, hash seeds or kit versions.
    script = ("import hashlib; from onegpu.requests import canary; "
              f"print(hashlib.sha256(canary.needle_request({MODEL!r}, 7, 1000, 0.5)[0]).hexdigest())")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True,
                         cwd=REPO_ROOT)
    assert out.stdout.strip() == RECORDED_NEEDLE_SHA256
    line, needle = canary.needle_request(MODEL, 7, 1000, 0.5)
    assert hashlib.sha256(line).hexdigest() == RECORDED_NEEDLE_SHA256 and needle.code_word == "HOLLOW-FERRY-6333"


@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_fact_is_planted_once_at_the_asked_depth_in_a_message_of_the_asked_length(depth):
    text, code_word, actual = canary.needle_text(5, 20_000, depth)
    assert len(text) == 20_000 and text.count(code_word) == 1
    filler_len = 20_000 - len(f"The secret code word is {code_word}. ") - len(canary.QUESTION)
    offset = text.index(f"The secret code word is {code_word}.")
    assert offset / filler_len == pytest.approx(actual) and abs(actual - depth) < 0.01
    assert text.endswith(canary.QUESTION)


def test_needle_line_is_a_valid_request_and_joins_the_canary_file():
    line, needle = canary.needle_request(MODEL, 1, 4000, 0.5)
    loaded = validate(canary.canary_file(MODEL, line))
    assert loaded.custom_ids[-1] == needle.custom_id and "load-smoke-check" in needle.custom_id
    assert len(json.loads(loaded.requests[-1].body)["messages"][0]["content"]) == 4000


@pytest.mark.parametrize("chars,depth", [(10, 0.5), (canary.NEEDLE_MAX_CHARS + 1, 0.5), (1000, 1.5)])
def test_needle_out_of_range_is_refused(chars, depth):
    with pytest.raises(ValueError, match="must be from"):
        canary.needle_text(0, chars, depth)


def _chat(content, reasoning=None):
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def test_checker_looks_for_the_code_word_in_the_reply():
    _, needle = canary.needle_request(MODEL, 9, 2000, 0.5)
    assert canary.check_needle(_chat(f"The code word is {needle.code_word.lower()}."), needle) == "found"
    assert canary.check_needle(json.dumps(_chat(needle.code_word)).encode(), needle) == "found"
    assert canary.check_needle(_chat("I do not know."), needle) == "not found"
    assert canary.check_needle(_chat(None, f"maybe {needle.code_word}"), needle) == "only in the reasoning text"
    assert canary.check_needle({"choices": [{"text": needle.code_word}]}, needle) == "found"
    assert canary.check_needle(b"not json", needle) == "not found"


def test_needle_is_labelled_a_load_smoke_check_everywhere():
    _, needle = canary.needle_request(MODEL, 9, 2000, 0.5)
    assert "LOAD SMOKE CHECK, not a benchmark" in canary.describe_needle(needle, "found")
    assert needle.as_json()["label"] == canary.LABEL and "UNSCORED" in canary.LABEL
