"""The batch runner against the stub engine image on the real Docker daemon, over the container's Unix socket.

Each test creates its own stub container (network none, a private socket folder bind-mounted, a non-root
uid, labelled onegpu.test=1) and removes it at the end. The stub answers with the SHA-256 of the exact
body bytes it received and counts what it saw (GET /stub/stats).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devkit.request_corpus import CONTEXT, MODEL, chat_line, jsonl
from onegpu.requests import batch
from onegpu.requests.batch_summary import summarize
from onegpu.requests.requests_file import parse_request_bytes
from tests_offline.paths import REPO_ROOT
from tests_offline.stub_container import stub_engine

REPO = REPO_ROOT


def parse(data: bytes):
    return parse_request_bytes(data, path="r.jsonl", model_id=MODEL, context_tokens=CONTEXT, max_requests=100)


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def stub_digest(line: dict) -> str:
    """The body SHA-256 the stub put in its answer text."""
    body = line["response"]["body"]
    text = body["choices"][0].get("message", {}).get("content") or body["choices"][0].get("text")
    return text.split("sha256=")[1].split()[0]


def run(reqs, engine, folder: Path, **kw):
    files = batch.BatchFiles.for_stem(folder, "responses")
    result = batch.run_requests(list(reqs), engine, files, request_timeout_s=kw.pop("request_timeout_s", 20),
                                deadline_at=time.monotonic() + 120, **kw)
    return result, files


ODD_FILE = (
    b'{"custom_id":"spaces","method":"POST","url":"/v1/chat/completions","body":  {  "model" : "org/model-x" ,'
    b'"messages":[ {"role":"user","content":"caf\\u00e9 \xc3\xbc \\ud83d\\ude00 \\"quoted\\" \\/slash"} ] ,'
    b'\t"max_tokens" : 8 , "temperature":0.50}  }\n'
    b'{"body":{"prompt":"Once\\nupon","model":"org/model-x","max_tokens":4},"url":"/v1/completions",'
    b'"method":"POST","custom_id":"body-first"}\r\n'
    b'{"custom_id":"plain","method":"POST","url":"/v1/chat/completions","body":{"model":"org/model-x",'
    b'"messages":[{"role":"user","content":"\xe6\x97\xa5\xe6\x9c\xac"}],"max_completion_tokens":3}}'
)


def test_bodies_arrive_byte_exact_in_file_order_one_at_a_time(docker_client, tmp_path):
    reqs = parse(ODD_FILE).requests
    with stub_engine(docker_client) as engine:
        result, files = run(reqs, engine, tmp_path)
        stats = engine.stats()
    expected = [hashlib.sha256(r.body).hexdigest() for r in reqs]
    assert stats["bodies_sha256"] == expected and stats["max_in_flight"] == 1
    lines = read_lines(files.responses)
    assert [line["custom_id"] for line in lines] == ["spaces", "body-first", "plain"]
    assert [stub_digest(line) for line in lines] == expected
    assert result.answered == 3 and result.errors == {}
    summary = summarize([r.custom_id for r in reqs], lines, [], read_lines(files.timings))
    assert summary["received"] == 3 and summary["length_limited_ids"] == ["spaces", "body-first", "plain"]
    assert summary["output_tokens"] == 15 and summary["measured_requests"] == 3


def test_engine_death_mid_batch_records_the_rest_with_its_state(docker_client, tmp_path):
    reqs = parse(jsonl(*(chat_line(f"r{i}") for i in range(6)))).requests
    with stub_engine(docker_client, {"STUB_FAIL": "die_after_requests:3"}) as engine:
        result, files = run(reqs, engine, tmp_path)
    assert [line["custom_id"] for line in read_lines(files.responses)] == ["r0", "r1", "r2"]
    assert result.engine_death == {"status": "exited", "exit_code": 0, "oom_killed": False}
    assert result.errors == {"ENGINE_DIED": 3} and result.sent == 4
    errors = read_lines(files.errors)
    assert [e["custom_id"] for e in errors] == ["r3", "r4", "r5"]
    assert all(e["error"]["engine_state"] == result.engine_death for e in errors)
    assert "exit code 0" in errors[0]["error"]["message"]


RUNNER = """
import sys, time
from pathlib import Path
import docker
from onegpu.requests import batch
from onegpu.requests.requests_file import load_request_file
from tests_offline.stub_container import StubEngine
folder, requests, container_id, socket_path = sys.argv[1:5]
engine = StubEngine(docker.from_env().containers.get(container_id), socket_path)
loaded = load_request_file(Path(requests), model_id=sys.argv[5], context_tokens=int(sys.argv[6]), max_requests=100)
files = batch.BatchFiles.for_stem(Path(folder), "responses")
todo = batch.pending(loaded.requests, batch.open_records(files).answered)
batch.run_requests(todo, engine, files, request_timeout_s=20, deadline_at=time.monotonic() + 120)
"""


def test_resume_after_sigkill_mid_batch_loses_nothing_and_duplicates_nothing(docker_client, tmp_path):
    request_file = tmp_path / "r.jsonl"
    request_file.write_bytes(jsonl(*(chat_line(f"r{i:02d}", temperature=i / 100) for i in range(12))))
    reqs = parse(request_file.read_bytes()).requests
    folder = tmp_path / "run"
    folder.mkdir()
    responses = folder / "responses.jsonl"
    with stub_engine(docker_client, {"STUB_RESPONSE_DELAY_S": "0.15"}) as engine:
        argv = [sys.executable, "-c", RUNNER, str(folder), str(request_file), engine.container.id,
                engine.socket_path, MODEL, str(CONTEXT)]
        child = subprocess.Popen(argv, cwd=REPO)
        try:
            end = time.monotonic() + 60
            while (not responses.exists() or responses.read_bytes().count(b"\n") < 4) and time.monotonic() < end:
                time.sleep(0.02)
            os.kill(child.pid, signal.SIGKILL)  # mid-batch, most likely while a request is in flight
        finally:
            child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        before = read_lines(responses)
        assert 4 <= len(before) < 12
        # A write cut short by the kill leaves a torn last line; the resume must set it aside.
        with open(responses, "ab") as fh:
            fh.write(json.dumps({"id": "x", "custom_id": reqs[len(before)].custom_id}).encode()[:25])
        resumed = subprocess.run(argv, cwd=REPO, timeout=120)
        stats = engine.stats()
    assert resumed.returncode == 0
    lines = read_lines(responses)
    assert [line["custom_id"] for line in lines] == [r.custom_id for r in reqs]  # all, once, in order
    assert [stub_digest(line) for line in lines] == [hashlib.sha256(r.body).hexdigest() for r in reqs]
    assert len(list(folder.glob("responses.jsonl.torn-*"))) == 1
    # The request in flight at the kill may have reached the engine twice; nothing else did.
    sent = stats["bodies_sha256"]
    assert set(sent) == {hashlib.sha256(r.body).hexdigest() for r in reqs} and len(sent) in (12, 13)


# --- through pytest: the real tests_hw canary and batch modules, with the stub container as the engine ---

ENGINE_CONFTEST = '''
import json, os, pytest
from tests_offline.docker_required import require_docker
from tests_offline.stub_container import stub_engine

@pytest.fixture(scope="session")
def live_hardware():
    return None  # this project is about the request phases; the machine facts are tested elsewhere

@pytest.fixture(scope="session")
def engine():
    with stub_engine(require_docker(), json.loads(os.environ.get("STUB_ENV_JSON", "{}"))) as handle:
        yield handle
'''


def _settings(path: Path) -> dict:
    return {"schema": "onegpu/settings@1", "model_id": MODEL, "model_revision": "a" * 40,
            "model_path": str(path / "checkpoint"), "image": "onegpu-stub-engine:any", "gpu": 0,
            "context_tokens": CONTEXT, "prefill_chunk_tokens": 512, "cpu_offload_gib": 0,
            "container_ram_gib": 4, "host_headroom_gib": 1, "deadline_s": 300, "request_timeout_s": 30}


@pytest.fixture
def kit_with_stub(kit_project, monkeypatch):
    """A kit project holding the real canary and batch phase tests, with the stub engine as `engine`."""
    for name in ("test_6_canary.py", "test_7_batch.py"):
        shutil.copy(REPO / "tests_hw" / name, kit_project.path / "tests_hw" / name)
    (kit_project.path / "tests_hw" / "conftest.py").write_text(ENGINE_CONFTEST)
    (kit_project.path / "s.json").write_text(json.dumps(_settings(kit_project.path)))
    requests = jsonl(*(chat_line(f"q{i}", temperature=i / 10) for i in range(5)))
    (kit_project.path / "r.jsonl").write_bytes(requests)
    protocol = {"schema": "axm/frozen-benchmark-requests@1", "benchmark_id": "smoke split test",
                "harness_revision": "h 1", "dataset_revision": "d 1", "scorer_revision": "s 1",
                "interaction": "independent_requests", "timing_policy": "offline-no-per-request-deadline",
                "context": CONTEXT, "requests_sha256": hashlib.sha256(requests).hexdigest()}
    (kit_project.path / "p.json").write_text(json.dumps(protocol))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return kit_project


def _receipt(project, name: str) -> dict:
    return json.loads((project.path / name / "receipt.json").read_text())


def _outcomes(receipt: dict) -> dict:
    return {nodeid.rsplit("::", 1)[1]: t["outcome"] for nodeid, t in receipt["tests"].items()}


def test_canary_and_batch_phases_run_through_pytest_unscored(kit_with_stub):
    result = kit_with_stub.runpytest_subprocess("-m", "approve_load", "--settings", "s.json", "--requests",
                                                "r.jsonl", "--protocol", "p.json", "--out", "run1",
                                                "--needle-chars", "2000", "--needle-seed", "3")
    receipt = _receipt(kit_with_stub, "run1")
    assert set(_outcomes(receipt).values()) == {"passed"}, receipt["tests"]
    assert result.ret == 0
    canary, batch_section = receipt["canary"], receipt["batch"]
    written = kit_with_stub.path / "run1" / "canary-requests.jsonl"
    assert canary["request_file"]["sha256"] == hashlib.sha256(written.read_bytes()).hexdigest()
    assert "only request body the kit ever writes" in canary["request_file"]["written_by_kit"]
    assert oct(written.stat().st_mode & 0o777) == "0o600"
    assert canary["summary"]["label"] == "UNSCORED" and canary["summary"]["received"] == 2
    assert canary["needle_check"] == "not found"  # the stub only echoes a hash, never the code word
    assert batch_section["summary"]["received"] == 5 and batch_section["summary"]["label"] == "UNSCORED"
    assert set(receipt["timings_s"]) >= {"canary", "batch"}
    out = result.stdout.str()
    assert "onegpu batch (UNSCORED: a transport record, not a score)" in out
    assert "measured through this transport" in out and "NOT FOUND in the reply" in out


def test_engine_death_blocks_the_batch_and_a_resume_completes_it_without_duplicates(kit_with_stub, monkeypatch):
    # The canary takes the first request; the engine dies after the batch's second.
    monkeypatch.setenv("STUB_ENV_JSON", json.dumps({"STUB_FAIL": "die_after_requests:3"}))
    first = kit_with_stub.runpytest_subprocess("-m", "approve_load", "--settings", "s.json", "--requests",
                                               "r.jsonl", "--protocol", "p.json", "--out", "run1")
    receipt = _receipt(kit_with_stub, "run1")
    blocked = [t for t in receipt["tests"].values() if t["outcome"] == "blocked"]
    assert blocked and {t["code"] for t in blocked} == {"ENGINE_DIED"}, receipt["tests"]
    assert "exit code 0" in blocked[0]["message"] and first.ret == 0
    folder = kit_with_stub.path / "run1"
    assert [line["custom_id"] for line in read_lines(folder / "responses.jsonl")] == ["q0", "q1"]
    assert [e["error"]["code"] for e in read_lines(folder / "responses.errors.jsonl")] == ["ENGINE_DIED"] * 3

    monkeypatch.setenv("STUB_ENV_JSON", "{}")
    second = kit_with_stub.runpytest_subprocess("-m", "approve_load", "--settings", "s.json", "--resume-batch",
                                                "run1")
    receipt = _receipt(kit_with_stub, "run1")
    assert set(_outcomes(receipt).values()) == {"passed"}, receipt["tests"]
    assert second.ret == 0 and len(receipt["earlier_sessions"]) == 1
    assert [line["custom_id"] for line in read_lines(folder / "responses.jsonl")] == [f"q{i}" for i in range(5)]
    assert receipt["batch"]["resumed"]["answered_before"] == 2
    assert (folder / "canary-2-requests.jsonl").is_file()  # the resumed session's own canary


def test_resume_with_a_changed_request_file_is_refused_before_anything_is_sent(kit_with_stub):
    kit_with_stub.runpytest_subprocess("-m", "approve_load", "--settings", "s.json", "--requests", "r.jsonl",
                                       "--protocol", "p.json", "--out", "run1", "-k", "batch")
    (kit_with_stub.path / "r.jsonl").write_bytes(jsonl(chat_line("other")))
    kit_with_stub.runpytest_subprocess("-m", "approve_load", "--settings", "s.json", "--requests", "r.jsonl",
                                       "--protocol", "p.json", "--resume-batch", "run1", "-k", "batch")
    tests = _receipt(kit_with_stub, "run1")["tests"]
    refused = tests[next(n for n in tests if n.endswith("test_request_file_is_valid"))]
    assert refused["outcome"] == "blocked" and refused["code"] == "REQUESTS_INVALID"
    assert "differs from" in refused["message"] and "the one this batch started with" in refused["message"]
