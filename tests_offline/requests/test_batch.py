"""The batch runner over a real Unix-socket HTTP server; record repair, resume and the UNSCORED summary.

The server here is a small engine double on a real socket (the Docker tests use the stub engine image);
its handle reports alive/state from the server itself, as the engine handle does from Docker.
"""
from __future__ import annotations

import hashlib
import json
import os
import socketserver
import stat
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import msgspec
import pytest

from devkit.request_corpus import CONTEXT, MODEL, chat_line, completion_line, jsonl
from onegpu.record.sections_requests import RequestSummary
from onegpu.report.request_lines import IncompleteSummary, summary_lines
from onegpu.requests import batch
from onegpu.requests.batch_summary import not_answered, summarize, unaccounted
from onegpu.requests.requests_file import parse_request_bytes


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["content-length"]))
        server = self.server
        with server.lock:
            server.received.append(body)
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
        try:
            req = json.loads(body)
            key = req["messages"][0]["content"] if "messages" in req else req.get("prompt")
            behaviour = server.behaviour.get(key, "")  # chosen by the request's text
            if behaviour == "slow":
                time.sleep(server.slow_s)
            if behaviour == "cut":
                self.connection.shutdown(2)  # close without an answer
                return
            digest = hashlib.sha256(body).hexdigest()
            if behaviour == "bad":
                status, answer = 400, {"error": {"message": "bad request", "code": 400}}
            else:
                content = "" if behaviour == "empty" else f"sha256={digest}"
                reason = "length" if behaviour == "long" else "stop"
                status, answer = 200, {"id": f"chatcmpl-{digest[:8]}", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": reason}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15}}
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if behaviour != "no-request-id":
                self.send_header("x-request-id", f"req-{len(server.received)}")
            self.end_headers()
            self.wfile.write(data)
        finally:
            with server.lock:
                server.in_flight -= 1


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    received: list[bytes]  # every request body, in order
    lock: threading.Lock
    in_flight: int
    max_in_flight: int
    behaviour: dict
    slow_s: float


class LocalEngine:
    """A running engine double: socket_path, alive(), state(), like the engine handle."""

    def __init__(self, folder: Path, behaviour: dict | None = None, slow_s: float = 0.0):
        self.socket_path = str(folder / "e.sock")
        self.server = _Server(self.socket_path, _Handler)
        self.server.received, self.server.lock = [], threading.Lock()
        self.server.in_flight = self.server.max_in_flight = 0
        self.server.behaviour, self.server.slow_s = behaviour or {}, slow_s
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.dead_state: dict | None = None

    def die(self, state: dict) -> None:
        self.server.shutdown()
        self.server.server_close()
        os.unlink(self.socket_path)
        self.dead_state = state

    def alive(self) -> bool:
        return self.dead_state is None

    def state(self) -> dict:
        return self.dead_state or {"status": "running", "exit_code": None, "oom_killed": False}


@pytest.fixture
def engine(tmp_path):
    eng = LocalEngine(tmp_path)
    yield eng
    if eng.alive():
        eng.server.shutdown()
        eng.server.server_close()


def requests_of(*lines: dict):
    return list(parse_request_bytes(jsonl(*lines), path="r", model_id=MODEL, context_tokens=CONTEXT,
                                    max_requests=100).requests)


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def run(reqs, engine, folder, **kw):
    files = batch.BatchFiles.for_stem(folder, "responses")
    kw.setdefault("request_timeout_s", 10)
    kw.setdefault("deadline_at", time.monotonic() + 60)
    return batch.run_requests(reqs, engine, files, death_grace_s=0.5, **kw), files


def test_bodies_go_byte_for_byte_in_file_order_one_at_a_time(engine, tmp_path):
    reqs = requests_of(*(chat_line(f"r{i}", temperature=0.1 * i) for i in range(5)), completion_line("c"))
    result, files = run(reqs, engine, tmp_path)
    assert engine.server.received == [r.body for r in reqs] and engine.server.max_in_flight == 1
    assert (result.sent, result.answered, result.errors) == (6, 6, {})
    lines = read_lines(files.responses)
    assert [line["custom_id"] for line in lines] == [r.custom_id for r in reqs]
    for line, req in zip(lines, reqs):
        assert set(line) == {"id", "custom_id", "response", "error"} and line["error"] is None
        assert set(line["response"]) == {"status_code", "request_id", "body"}
        assert line["response"]["body"]["choices"][0]["message"]["content"] == \
            f"sha256={hashlib.sha256(req.body).hexdigest()}"
    assert lines[0]["response"]["request_id"] == "req-1" and lines[0]["id"].startswith("batch_req_")


def test_timings_are_kept_beside_the_responses(engine, tmp_path):
    reqs = requests_of(chat_line("a"), chat_line("b"))
    _, files = run(reqs, engine, tmp_path)
    timings = read_lines(files.timings)
    assert [t["custom_id"] for t in timings] == ["a", "b"]
    for t, req in zip(timings, reqs):
        assert t["sent"] is True and t["status_code"] == 200 and 0 <= t["ttfb_s"] <= t["elapsed_s"]
        assert t["request_sha256"] == hashlib.sha256(req.body).hexdigest()
        assert t["usage"] == {"prompt_tokens": 5, "completion_tokens": 10, "total_tokens": 15}
        assert t["finish_reasons"] == ["stop"]
    for path in files.all():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_http_errors_are_answers_and_the_request_id_falls_back_to_the_body_id(tmp_path):
    eng = LocalEngine(tmp_path, {"bad": "bad", "plain": "no-request-id"})
    try:
        reqs = requests_of(chat_line("x", messages=[{"role": "user", "content": "bad"}]),
                           chat_line("y", messages=[{"role": "user", "content": "plain"}]))
        result, files = run(reqs, eng, tmp_path)
    finally:
        eng.server.shutdown()
    lines = read_lines(files.responses)
    assert result.errors == {} and lines[0]["response"]["status_code"] == 400
    assert lines[1]["response"]["request_id"].startswith("chatcmpl-") and not read_lines(files.errors)


def test_per_request_timeout_is_recorded_and_not_retried(tmp_path):
    eng = LocalEngine(tmp_path, {"slow": "slow"}, slow_s=1.5)
    try:
        reqs = requests_of(chat_line("slow", messages=[{"role": "user", "content": "slow"}]), chat_line("next"))
        result, files = run(reqs, eng, tmp_path, request_timeout_s=0.3)
    finally:
        eng.server.shutdown()
    assert result.errors == {"TIMEOUT": 1} and result.answered == 1
    errors = read_lines(files.errors)
    assert errors[0]["custom_id"] == "slow" and errors[0]["response"] is None
    assert errors[0]["error"]["code"] == "TIMEOUT" and "not retried" in errors[0]["error"]["message"]
    assert len(eng.server.received) == 2  # the slow one once, then the next


def test_deadline_records_the_rest_as_errors_without_sending_them(tmp_path):
    eng = LocalEngine(tmp_path, {"slow": "slow"}, slow_s=1.0)
    try:
        reqs = requests_of(chat_line("a"), chat_line("slow", messages=[{"role": "user", "content": "slow"}]),
                           chat_line("c"), chat_line("d"))
        result, files = run(reqs, eng, tmp_path, deadline_at=time.monotonic() + 0.5)
    finally:
        eng.server.shutdown()
    assert result.deadline_hit and result.errors == {"DEADLINE": 3} and result.sent == 2
    errors = read_lines(files.errors)
    assert [(e["custom_id"], e["error"]["code"]) for e in errors] == [("slow", "DEADLINE"), ("c", "DEADLINE"),
                                                                      ("d", "DEADLINE")]
    assert [t["sent"] for t in read_lines(files.timings)] == [True, True, False, False]


def test_engine_death_records_the_rest_with_the_engine_state(engine, tmp_path):
    reqs = requests_of(*(chat_line(f"r{i}") for i in range(4)))

    def die_after_second(req, index, code):
        if index == 1:
            engine.die({"status": "exited", "exit_code": 137, "oom_killed": True})

    result, files = run(reqs, engine, tmp_path, on_done=die_after_second)
    assert result.engine_death == {"status": "exited", "exit_code": 137, "oom_killed": True}
    assert result.errors == {"HOST_OOM_KILLED": 2} and result.sent == 3  # r2 found the engine gone
    errors = read_lines(files.errors)
    assert [e["custom_id"] for e in errors] == ["r2", "r3"]
    assert all(e["error"]["engine_state"]["exit_code"] == 137 for e in errors)
    assert batch.engine_death_code({"oom_killed": False}) == "ENGINE_DIED"


def test_a_cut_connection_to_a_live_engine_is_a_transport_error_not_retried(tmp_path):
    eng = LocalEngine(tmp_path, {"cut": "cut"})
    try:
        reqs = requests_of(chat_line("cut", messages=[{"role": "user", "content": "cut"}]), chat_line("ok"))
        result, files = run(reqs, eng, tmp_path)
    finally:
        eng.server.shutdown()
    assert result.errors == {"TRANSPORT": 1} and result.answered == 1 and len(eng.server.received) == 2
    assert "still running" in read_lines(files.errors)[0]["error"]["message"]


def test_a_torn_last_line_is_set_aside_and_cut_off(tmp_path):
    path = tmp_path / "responses.jsonl"
    whole = b'{"custom_id":"a","response":{}}\n{"custom_id":"b","response":{}}\n'
    path.write_bytes(whole + b'{"custom_id":"c","resp')
    files = batch.BatchFiles.for_stem(tmp_path, "responses")
    recorded = batch.open_records(files)
    assert recorded.answered == {"a", "b"} and recorded.cut == {"responses.jsonl": 22}
    assert path.read_bytes() == whole
    aside = list(tmp_path.glob("responses.jsonl.torn-*"))
    assert len(aside) == 1 and aside[0].read_bytes() == b'{"custom_id":"c","resp'
    assert stat.S_IMODE(aside[0].stat().st_mode) == 0o600


def test_a_changed_complete_line_refuses_the_resume(tmp_path):
    (tmp_path / "responses.jsonl").write_bytes(b'{"custom_id":"a"}\nnot json\n')
    with pytest.raises(batch.BatchRecordError, match="line 2: not a JSON record"):
        batch.open_records(batch.BatchFiles.for_stem(tmp_path, "responses"))


def test_resume_sends_only_what_is_missing_and_never_duplicates(engine, tmp_path):
    reqs = requests_of(*(chat_line(f"r{i}") for i in range(5)))
    run(reqs[:2], engine, tmp_path)
    files = batch.BatchFiles.for_stem(tmp_path, "responses")
    todo = batch.pending(reqs, batch.open_records(files).answered)
    assert [r.custom_id for r in todo] == ["r2", "r3", "r4"]
    run(todo, engine, tmp_path)
    assert [line["custom_id"] for line in read_lines(files.responses)] == [f"r{i}" for i in range(5)]
    assert batch.pending(reqs, batch.open_records(files).answered) == []


def test_resume_is_refused_when_the_files_differ():
    binding = {"requests_sha256": "a" * 64, "protocol_sha256": "b" * 64}
    assert batch.resume_problems(binding, requests_sha256="a" * 64, protocol_sha256="b" * 64) == []
    problems = batch.resume_problems(binding, requests_sha256="c" * 64)
    assert problems == [f"the request file's SHA-256 {'c' * 64} differs from {'a' * 64}, the one this batch "
                        "started with"]


def test_binding_is_written_private_and_read_back(tmp_path):
    written = batch.write_binding(tmp_path, "/r.jsonl", "a" * 64, 3, "/p.json", "b" * 64)
    assert batch.read_binding(tmp_path) == written
    assert stat.S_IMODE((tmp_path / batch.BINDING_NAME).stat().st_mode) == 0o600
    assert batch.read_binding(tmp_path / "nowhere") is None


def _answer(cid, content="x", reason="stop", status=200, completion=10):
    body = {"choices": [{"index": 0, "message": {"content": content}, "finish_reason": reason}],
            "usage": {"completion_tokens": completion}}
    return {"custom_id": cid, "response": {"status_code": status, "body": body}, "error": None}


def test_summary_counts_everything_and_calls_nothing_a_score():
    responses = [_answer("a"), _answer("b", reason="length"), _answer("c", content="  "),
                 _answer("d", status=400), _answer("a", content="duplicate ignored")]
    errors = [{"custom_id": "e", "error": {"code": "TIMEOUT"}}, {"custom_id": "f", "error": {"code": "DEADLINE"}}]
    timings = [{"custom_id": c, "status_code": 200, "elapsed_s": 2.0, "ttfb_s": 1.0} for c in "abc"]
    s = summarize(["a", "b", "c", "d", "e", "f", "g"], responses, errors, timings)
    assert (s["label"], s["expected"], s["received"], s["answered_2xx"], s["missing"]) == ("UNSCORED", 7, 4, 3, 3)
    assert s["error_ids"] == {"TIMEOUT": ["e"], "DEADLINE": ["f"], "NO RECORD (never sent)": ["g"],
                              "HTTP 400": ["d"]}
    assert (s["length_limited_ids"], s["empty_generation_ids"]) == (["b"], ["c"])
    assert (s["output_tokens"], s["measured_requests"], s["output_tokens_per_s"]) == (30, 3, 5.0)
    assert "measured through this transport" in s["rate_label"] and "over 3 requests" in s["rate_label"]
    lines = summary_lines(msgspec.convert(s, RequestSummary))
    assert lines[0].startswith("UNSCORED") and not any("score" in line.lower() for line in lines[1:])
    assert "5.00 (30 tokens in 6.0 s)" in lines[5]
    assert unaccounted(s) == ["g"] and not_answered(s)[0] == "TIMEOUT: e" and len(not_answered(s)) == 4


def test_summary_without_usage_says_no_rate():
    s = summarize(["a"], [{"custom_id": "a", "response": {"status_code": 200, "body": "text"}}], [], [])
    assert s["output_tokens_per_s"] is None and s["empty_generations"] == 1
    assert "n/a" in summary_lines(msgspec.convert(s, RequestSummary))[5]


def test_summary_lines_refuse_a_summary_that_lacks_a_figure():
    s = summarize(["a"], [_answer("a")], [], [])
    del s["length_limited"]
    with pytest.raises(IncompleteSummary, match="length_limited"):
        summary_lines(msgspec.convert(s, RequestSummary))
