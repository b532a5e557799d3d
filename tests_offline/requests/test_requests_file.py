"""Request-file validation: OpenAI batch lines, every problem named at once, body bytes kept exactly."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from devkit.request_corpus import BAD_REQUEST_FILES, CONTEXT, GOOD, MAX_REQUESTS, MODEL, chat_line, jsonl
from onegpu.requests import requests_file as rf
from tests_offline.paths import DATA, REPO_ROOT

COMPAT = DATA / "compat"
COMPAT_MODEL = "XiaomiMiMo/MiMo-V2.6-Pro-RL"


def parse(data: bytes, **over) -> rf.RequestFile:
    kw = {"path": "r.jsonl", "model_id": MODEL, "context_tokens": CONTEXT, "max_requests": MAX_REQUESTS, **over}
    return rf.parse_request_bytes(data, **kw)


def test_earlier_kits_canary_loads_unchanged():
    path = COMPAT / "canary.jsonl"
    loaded = rf.load_request_file(path, model_id=COMPAT_MODEL, context_tokens=2048, max_requests=1)
    assert loaded.custom_ids == ["load-canary-not-a-benchmark"]
    assert loaded.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert json.loads(loaded.requests[0].body)["max_tokens"] == 32


def test_valid_file_keeps_order_urls_and_hash():
    loaded = parse(GOOD)
    assert [(r.line, r.custom_id, r.url) for r in loaded.requests] == [(1, "a", rf.CHAT_URL),
                                                                        (2, "b", rf.COMPLETIONS_URL)]
    assert loaded.sha256 == hashlib.sha256(GOOD).hexdigest() and loaded.size_bytes == len(GOOD)


def test_body_bytes_are_the_exact_slice_of_the_file():
    # Odd spacing, key order, \u escapes, raw non-ASCII, a body that is not the last key, a CRLF line end.
    body = ('{ "messages" :[ {"role":"user", "content":"caf\\u00e9 \u00fcber \\ud83d\\ude00 \\"q\\""} ],\t'
            '"model":"org/model-x" ,"max_tokens" :  7 , "temperature": 0.50 }').encode()
    line = b'{"custom_id" : "odd" ,\t"body":' + body + b' , "method":"POST", "url":"/v1/chat/completions"}\r\n'
    last = b'{"url":"/v1/completions","body":{"prompt":[1,2,3],"model":"org/model-x","max_tokens":1},' \
           b'"method":"POST","custom_id":"z"}'
    loaded = parse(line + last)  # the last line has no newline: still a line
    assert loaded.requests[0].body == body
    assert loaded.requests[1].body == b'{"prompt":[1,2,3],"model":"org/model-x","max_tokens":1}'
    assert (line + last).count(loaded.requests[0].body) == 1


def test_value_spans_find_every_top_level_value():
    text = ' { "a" : [1, {"b": "}"}] , "c":"x\\"y" ,"d" :{} }'
    spans = rf.value_spans(text)
    assert {k: text[s:e] for k, (s, e) in spans.items()} == {"a": '[1, {"b": "}"}]', "c": '"x\\"y"', "d": "{}"}


def test_budget_may_be_max_completion_tokens_for_chat():
    line = chat_line(max_completion_tokens=100)
    del line["body"]["max_tokens"]
    assert parse(jsonl(line)).custom_ids == ["r1"]


def test_n_one_and_stream_false_are_accepted():
    assert parse(jsonl(chat_line(n=1, stream=False))).custom_ids == ["r1"]


@pytest.mark.parametrize("name,data,expected", BAD_REQUEST_FILES, ids=[c[0] for c in BAD_REQUEST_FILES])
def test_bad_request_file_is_refused_naming_line_field_and_rule(name, data, expected):
    with pytest.raises(rf.RequestFileError) as refused:
        parse(data)
    errors = refused.value.errors
    for fragments in expected:
        assert any(all(f in e for f in fragments) for e in errors), (fragments, errors)
    assert all(e.startswith(("line ", "file: ")) for e in errors), errors
    assert len(errors) >= len(expected)


def test_every_problem_is_reported_and_the_list_is_capped():
    lines = [chat_line(f"r{i}", model="wrong") for i in range(250)]
    with pytest.raises(rf.RequestFileError) as refused:
        parse(jsonl(*lines), max_requests=1000)
    errors = refused.value.errors
    assert refused.value.total == 250 and len(errors) == rf.MAX_ERRORS_KEPT + 1
    assert errors[0].startswith("line 1: field body.model") and errors[199].startswith("line 200:")
    assert errors[-1] == "... and 50 more problems (the first 200 are listed)"


def test_line_over_16_mib_is_refused_with_its_number():
    huge = chat_line("big")
    huge["body"]["messages"][0]["content"] = "x" * rf.MAX_LINE_BYTES
    with pytest.raises(rf.RequestFileError) as refused:
        parse(jsonl(chat_line("a"), huge))
    assert any(e.startswith("line 2: ") and "at most 16777216 bytes (16 MiB)" in e for e in refused.value.errors)


def test_file_over_256_mib_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.truncate(rf.MAX_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(rf.RequestFileError) as refused:
        rf.load_request_file(path, model_id=MODEL, context_tokens=CONTEXT, max_requests=MAX_REQUESTS)
    assert refused.value.errors == [f"file: {rf.MAX_FILE_BYTES + 1} bytes: a request file may hold at most "
                                    f"{rf.MAX_FILE_BYTES} bytes (256 MiB)"]


def test_missing_and_unreadable_files_are_refused_plainly(tmp_path):
    with pytest.raises(rf.RequestFileError, match="no such file"):
        rf.load_request_file(tmp_path / "nope.jsonl", model_id=MODEL, context_tokens=CONTEXT, max_requests=1)
    with pytest.raises(rf.RequestFileError, match="not a regular file"):
        rf.load_request_file(tmp_path, model_id=MODEL, context_tokens=CONTEXT, max_requests=1)
    if os.getuid() != 0:  # root reads any file
        locked = tmp_path / "locked.jsonl"
        locked.write_bytes(GOOD)
        locked.chmod(0)
        with pytest.raises(rf.RequestFileError, match="cannot read"):
            rf.load_request_file(locked, model_id=MODEL, context_tokens=CONTEXT, max_requests=10)


def test_describe_names_count_kinds_and_hash():
    line = rf.describe(parse(GOOD))
    assert "2 requests (1 chat, 1 completions)" in line and hashlib.sha256(GOOD).hexdigest() in line


# --- through pytest: a bad file blocks its phase with REQUESTS_INVALID before any engine is asked for ---

NO_ENGINE_CONFTEST = '''
import pytest

@pytest.fixture(scope="session")
def live_hardware():
    return None  # the request phases are under test here, not the machine

@pytest.fixture(scope="session")
def engine():
    raise AssertionError("the engine was asked for although a request file is invalid")
'''

REPO = REPO_ROOT


def kit_settings(folder: Path, context: int = CONTEXT) -> str:
    return json.dumps({"schema": "onegpu/settings@1", "model_id": MODEL, "model_revision": "b" * 40,
                       "model_path": str(folder / "ckpt"), "image": "img:1", "gpu": 0, "context_tokens": context,
                       "prefill_chunk_tokens": 64, "cpu_offload_gib": 0, "container_ram_gib": 4,
                       "host_headroom_gib": 1, "deadline_s": 60})


@pytest.fixture
def kit_without_engine(kit_project):
    for name in ("test_6_canary.py", "test_7_batch.py"):
        (kit_project.path / "tests_hw" / name).write_bytes((REPO / "tests_hw" / name).read_bytes())
    (kit_project.path / "tests_hw" / "conftest.py").write_text(NO_ENGINE_CONFTEST)
    return kit_project


def blocked_tests(project, run: str) -> tuple[dict, dict]:
    receipt = json.loads((project.path / run / "receipt.json").read_text())
    return {n.rsplit("::", 1)[1]: t for n, t in receipt["tests"].items() if t["outcome"] == "blocked"}, receipt


def test_bad_request_file_blocks_the_batch_naming_line_and_field(kit_without_engine):
    project = kit_without_engine
    project.path.joinpath("s.json").write_text(kit_settings(project.path))
    project.path.joinpath("r.jsonl").write_bytes(jsonl(chat_line("a"), chat_line("b", model="other/m")))
    project.path.joinpath("p.json").write_text("{}")
    result = project.runpytest("-m", "approve_load", "--settings", "s.json", "--requests", "r.jsonl",
                               "--protocol", "p.json", "--out", "run", "tests_hw/test_7_batch.py")
    blocked, receipt = blocked_tests(project, "run")
    assert set(blocked) == {"test_request_file_is_valid", "test_protocol_binds_the_request_file",
                            "test_every_request_is_answered_or_recorded_as_error",
                            "test_batch_summary_is_shown_unscored"}
    assert {t["code"] for t in blocked.values()} == {"REQUESTS_INVALID"}
    assert "line 2: field body.model" in blocked["test_request_file_is_valid"]["message"]
    assert receipt["request_errors"]["request file"][0].startswith("line 2: field body.model")
    assert result.ret == 0  # blocked is an xfail unless --fail-on-blocked


def test_bad_protocol_blocks_the_batch_naming_every_field(kit_without_engine):
    project = kit_without_engine
    project.path.joinpath("s.json").write_text(kit_settings(project.path))
    project.path.joinpath("r.jsonl").write_bytes(GOOD)
    placeholder = (REPO / "tests_offline" / "data" / "compat" / "protocol.example.json").read_bytes()
    project.path.joinpath("p.json").write_bytes(placeholder)
    project.runpytest("-m", "approve_load", "--settings", "s.json", "--requests", "r.jsonl", "--protocol",
                      "p.json", "--out", "run", "tests_hw/test_7_batch.py")
    blocked, receipt = blocked_tests(project, "run")
    assert "test_request_file_is_valid" not in blocked
    assert blocked["test_protocol_binds_the_request_file"]["code"] == "REQUESTS_INVALID"
    errors = receipt["request_errors"]["protocol"]
    assert len(errors) == 6 and "field context: value 2048: must equal the settings' context of 4096" in errors[4]


def test_canary_that_cannot_fit_the_context_is_refused(kit_without_engine):
    project = kit_without_engine
    project.path.joinpath("s.json").write_text(kit_settings(project.path, context=64))
    project.runpytest("-m", "approve_load", "--settings", "s.json", "--out", "run", "tests_hw/test_6_canary.py")
    blocked, _ = blocked_tests(project, "run")
    assert len(blocked) == 4 and {t["code"] for t in blocked.values()} == {"REQUESTS_INVALID"}
    assert "field body.max_tokens: value 64: must be below the context of 64" in \
        blocked["test_canary_file_is_filled_from_the_settings_and_hashed"]["message"]


def test_needle_too_long_for_the_context_is_refused(kit_without_engine):
    project = kit_without_engine
    project.path.joinpath("s.json").write_text(kit_settings(project.path, context=1024))
    project.runpytest("-m", "approve_load", "--settings", "s.json", "--out", "run", "--needle-chars", "8000",
                      "tests_hw/test_6_canary.py")
    blocked, _ = blocked_tests(project, "run")
    assert "about 2000 prompt tokens plus 64 output tokens do not fit the context of 1024" in \
        blocked["test_canary_file_is_filled_from_the_settings_and_hashed"]["message"]


def test_needle_options_out_of_range_are_usage_errors(kit_without_engine):
    result = kit_without_engine.runpytest("-m", "approve_load", "--needle-chars", "10")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--needle-chars 10: must be from 300" in result.stderr.str()
