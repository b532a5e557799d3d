"""The serve adapter against a real engine double on a real Unix socket, through real loopback HTTP.

Nothing of the adapter is mocked: the engine double (tests_offline/fake_engine.py) is a separate server
on its own event loop; clients are the standard library's and raw sockets.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import stat
import threading
import time

import pytest

from onegpu.core.uds_http import uds_request
from onegpu.serve import http_rules as rules
from onegpu.serve.adapter import AdapterLimits
from onegpu.serve.thread import AdapterThread
from onegpu.serve.transport_log import read_entries, summarize
from tests_offline.adapter_helpers import LIMITS, completion_body
from tests_offline.fake_engine import KEY, call, raw_exchange


def test_listens_on_loopback_only_on_a_kernel_chosen_port(adapter, engine, tmp_path):
    host, port = adapter.adapter._server.sockets[0].getsockname()
    assert (host, port) == ("127.0.0.1", adapter.port) and port > 0
    with AdapterThread(engine.socket_path, KEY, tmp_path / "second.jsonl", LIMITS) as second:
        assert second.port != adapter.port


def test_health_and_models_are_forwarded_with_status_type_and_bytes(adapter, engine):
    direct = uds_request(engine.socket_path, "GET", "/v1/models")
    status, headers, body = call(adapter.port, "GET", "/v1/models")
    assert (status, headers["content-type"], body) == (200, "application/json", direct.body)
    assert call(adapter.port, "GET", "/health")[0] == 200
    engine.health_status = 503
    assert call(adapter.port, "GET", "/health")[0] == 503  # the engine's status is relayed, not invented


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_request_and_response_bytes_pass_unchanged(adapter, engine, path):
    body = completion_body()
    status, headers, answer = call(adapter.port, "POST", path, body, {"Content-Type": "application/json"})
    assert status == 200
    assert engine.bodies_sha256[-1] == hashlib.sha256(body).hexdigest()
    direct = uds_request(engine.socket_path, "POST", path, body, {"Content-Type": "application/json"})
    assert answer == direct.body  # the same engine answer, byte for byte
    assert f"sha256:{hashlib.sha256(body).hexdigest()}".encode() in answer


def test_key_and_hop_by_hop_headers_stay_at_the_adapter(adapter, engine):
    call(adapter.port, "POST", "/v1/completions", completion_body(),
         {"Connection": "keep-alive, x-hop", "X-Hop": "1", "Keep-Alive": "timeout=5", "TE": "trailers",
          "X-Request-Id": "abc-123", "Content-Type": "application/json"})
    seen = dict(engine.seen_headers[-1])
    assert b"authorization" not in seen and b"x-hop" not in seen and b"keep-alive" not in seen
    assert b"te" not in seen and b"connection" not in seen
    assert seen[b"x-request-id"] == b"abc-123" and seen[b"content-type"] == b"application/json"
    assert seen[b"host"] == b"localhost"


def test_chunked_request_body_is_forwarded_unchanged(adapter, engine):
    body = completion_body()
    conn = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
    conn.request("POST", "/v1/completions", body=iter([body[:10], body[10:]]), encode_chunked=True,
                 headers={"Authorization": f"Bearer {KEY}", "Transfer-Encoding": "chunked"})
    assert conn.getresponse().status == 200
    assert engine.bodies_sha256[-1] == hashlib.sha256(body).hexdigest()


def test_sse_chunks_reach_the_client_before_the_engine_sends_the_last(adapter, engine):
    engine.chunks, engine.token_delay_s = 6, 0.25
    conn = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
    conn.request("POST", "/v1/chat/completions", body=completion_body(stream=True),
                 headers={"Authorization": f"Bearer {KEY}"})
    response = conn.getresponse()
    assert response.getheader("content-type") == "text/event-stream"
    first = response.readline()
    sent_when_first_seen = engine.chunks_sent
    rest = response.read()
    assert first.startswith(b"data: ") and sent_when_first_seen < engine.chunks
    assert rest.endswith(b"data: [DONE]\n\n") and engine.chunks_sent == engine.chunks


def test_keep_alive_serves_several_calls_on_one_connection(adapter, engine):
    conn = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
    for _ in range(3):
        conn.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
        response = conn.getresponse()
        assert response.status == 200 and response.read()
    conn.close()


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/responses"), ("POST", "/v1/embeddings"), ("POST", "/tokenize"), ("GET", "/tokenizer_info"),
    ("POST", "/v1/messages"), ("GET", "/metrics"), ("GET", "/v1/chat/completions"), ("PUT", "/v1/completions"),
    ("POST", "/v1/models"), ("GET", "/"),
])
def test_other_apis_answer_adapter_required_without_reaching_the_engine(adapter, engine, method, path):
    status, headers, body = call(adapter.port, method, path, b"{}" if method != "GET" else None)
    assert status == 501 and headers["content-type"] == "application/json"
    assert "ADAPTER REQUIRED" in json.loads(body)["error"]["message"]
    assert engine.requests == 0


def test_engine_gone_is_a_json_502_not_a_dropped_connection(adapter, engine):
    engine.close()
    status, _, body = call(adapter.port, "POST", "/v1/completions", completion_body())
    assert status == 502 and json.loads(body)["error"]["code"] == "engine_unreachable"


def test_engine_closing_without_an_answer_is_a_json_502(adapter, engine):
    engine.mode = "close_silently"
    status, _, body = call(adapter.port, "GET", "/v1/models")
    assert status == 502 and json.loads(body)["error"]["code"] == "engine_failed"


def test_engine_silent_past_the_upstream_timeout_is_a_json_504(engine, tmp_path):
    engine.response_delay_s = 1.0
    limits = AdapterLimits(upstream_timeout_s=0.3)
    with AdapterThread(engine.socket_path, KEY, tmp_path / "t.jsonl", limits) as running:
        status, _, body = call(running.port, "POST", "/v1/completions", completion_body())
    assert status == 504 and "no progress" in json.loads(body)["error"]["message"]


def test_engine_dying_mid_stream_cuts_the_client_and_logs_why(adapter, engine, tmp_path):
    engine.mode = "die_mid_stream"
    with pytest.raises(http.client.IncompleteRead):
        call(adapter.port, "POST", "/v1/completions", completion_body(stream=True))
    adapter.close(grace_s=0)
    (entry,) = read_entries(tmp_path / "transport.jsonl")
    assert entry["status"] == 200 and entry["outcome"].startswith("cut: the engine's answer broke off")


def test_transport_log_has_one_private_line_per_call_with_hashes_and_tokens(adapter, engine, tmp_path):
    body = completion_body()
    _, _, answer = call(adapter.port, "POST", "/v1/completions", body)
    stream_body = completion_body(stream=True, stream_options={"include_usage": True})
    call(adapter.port, "POST", "/v1/chat/completions", stream_body)
    call(adapter.port, "GET", "/health", key="wrong")
    adapter.close(grace_s=0)
    path = tmp_path / "transport.jsonl"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    plain, streamed, rejected = read_entries(path)
    assert plain["request_sha256"] == hashlib.sha256(body).hexdigest() and plain["request_bytes"] == len(body)
    assert plain["response_sha256"] == hashlib.sha256(answer).hexdigest()
    assert (plain["completion_tokens"], plain["streamed"], plain["status"]) == (5, False, 200)
    assert plain["ttfb_s"] <= plain["elapsed_s"]
    assert streamed["streamed"] and streamed["completion_tokens"] == 5 and streamed["stream_ttft_s"] > 0
    assert (rejected["status"], rejected["adapter_error"], rejected["forwarded"]) == (401, "invalid_api_key", False)
    sums = summarize(read_entries(path))
    assert sums["calls"] == 3 and sums["forwarded"] == 2 and sums["statuses"] == {"200": 2, "401": 1}
    assert "not a model benchmark" in sums["streams"]["label"]


def test_stream_timing_is_measured_from_the_stream(adapter, engine, tmp_path):
    engine.chunks, engine.token_delay_s = 5, 0.1
    call(adapter.port, "POST", "/v1/completions", completion_body(stream=True))  # no usage in the stream
    adapter.close(grace_s=0)
    (entry,) = read_entries(tmp_path / "transport.jsonl")
    # Without usage in the stream no count and no rate: five text chunks are not five tokens.
    assert entry["completion_tokens"] is None and entry["stream_output_tokens_per_s"] is None
    assert "stream_options.include_usage" in entry["completion_tokens_missing"]
    assert entry["stream_ttft_s"] > 0
    assert summarize([entry])["streams_without_token_count"] == 1


def test_a_client_closing_at_done_has_a_complete_answer(adapter, engine, tmp_path):
    """The client reads up to `data: [DONE]` and hangs up before the engine's last write (the chunked body's
    end): its answer was whole, and the call is logged complete, not as a client disconnect."""
    import socket

    engine.chunks, engine.token_delay_s, engine.done_gap_s = 3, 0.0, 0.5
    body = completion_body(stream=True)
    with socket.create_connection(("127.0.0.1", adapter.port)) as sock:
        sock.settimeout(10)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:" + str(adapter.port).encode()
                     + b"\r\nAuthorization: Bearer " + KEY.encode()
                     + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                     + b"\r\n\r\n" + body)
        seen = b""
        while b"data: [DONE]" not in seen:
            chunk = sock.recv(65536)
            assert chunk, seen
            seen += chunk
    adapter.close(grace_s=1)
    (entry,) = read_entries(tmp_path / "transport.jsonl")
    assert entry["outcome"] == "complete", entry


def test_closing_answers_503_and_lets_calls_in_flight_finish(adapter, engine, tmp_path):
    engine.chunks, engine.token_delay_s = 6, 0.15
    idle = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
    idle.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    idle.getresponse().read()
    results = {}
    streaming = threading.Thread(target=lambda: results.update(
        stream=call(adapter.port, "POST", "/v1/completions", completion_body(stream=True))))
    streaming.start()
    while engine.chunks_sent == 0:
        time.sleep(0.01)
    closer = threading.Thread(target=lambda: results.update(closed=adapter.close(grace_s=5)))
    closer.start()
    time.sleep(0.1)
    idle.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    late = idle.getresponse()
    assert late.status == 503 and json.loads(late.read())["error"]["code"] == "window_closed"
    fresh = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)  # a new client, while closing
    fresh.request("POST", "/v1/completions", body=completion_body(), headers={"Authorization": f"Bearer {KEY}"})
    refused = fresh.getresponse()
    assert refused.status == 503 and json.loads(refused.read())["error"]["code"] == "window_closed"
    streaming.join(10), closer.join(10)
    assert results["stream"][0] == 200 and results["stream"][2].endswith(b"data: [DONE]\n\n")
    assert results["closed"] == {"cut_in_flight": 0}
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", adapter.port), timeout=2)


def test_head_requests_get_an_error_head_not_a_dropped_connection(adapter):
    for path in ("/health", "/v1/embeddings"):
        conn = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
        conn.request("HEAD", path, headers={"Authorization": f"Bearer {KEY}"})
        answer = conn.getresponse()
        assert answer.status == 501 and answer.read() == b""  # headers only, as HTTP says for HEAD
    conn = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
    conn.request("HEAD", "/v1/models")  # no key
    assert conn.getresponse().status == 401


def test_closing_cuts_calls_still_running_after_the_grace_period(adapter, engine, tmp_path):
    engine.chunks, engine.token_delay_s = 100, 0.1
    errors = []

    def stream():
        try:
            call(adapter.port, "POST", "/v1/completions", completion_body(stream=True))
        except (http.client.IncompleteRead, ConnectionError) as exc:
            errors.append(exc)
    client = threading.Thread(target=stream)
    client.start()
    while engine.chunks_sent == 0:
        time.sleep(0.01)
    assert adapter.close(grace_s=0.2) == {"cut_in_flight": 1}
    client.join(10)
    assert errors and engine.chunks_sent < 100
    (entry,) = read_entries(tmp_path / "transport.jsonl")
    assert entry["outcome"].startswith("cut: the serve window closed")


def test_socket_path_over_the_kernel_limit_is_reached(engine, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    long_path = deep / "engine.sock"
    os.rename(engine.socket_path, long_path)  # a socket file keeps working when renamed
    engine.socket_path = str(long_path)
    assert len(os.fsencode(long_path)) > 107
    with AdapterThread(long_path, KEY, tmp_path / "t.jsonl", LIMITS) as running:
        assert call(running.port, "GET", "/health")[0] == 200


def test_malformed_http_gets_400_and_reaches_nothing(adapter, engine):
    answer = raw_exchange(adapter.port, b"GARBAGE\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b'"bad_request"' in answer
    assert engine.requests == 0


def test_error_bodies_are_openai_shaped_json():
    body = json.loads(rules.json_error(429, "too_many_outstanding", "busy"))
    assert body == {"error": {"message": "busy", "type": "invalid_request_error", "param": None,
                              "code": "too_many_outstanding"}}


def test_stream_meter_reads_events_split_across_reads_and_crlf():
    from onegpu.serve.transport_log import BodyMeter

    events = (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\r\n\r\n'
              b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\n'
              b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
              b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\ndata: [DONE]\n\n')
    meter = BodyMeter(started_s=10.0, streamed=True)
    for i, piece in enumerate([events[:30], events[30:95], events[95:150], events[150:]]):
        meter.feed(piece, now_s=10.0 + i)
    out = meter.finish()
    assert out["bytes"] == len(events) and out["sha256"] == hashlib.sha256(events).hexdigest()
    assert out["completion_tokens"] == 2 and meter.text_events == 2  # the empty role chunk is no token
    assert out["stream_ttft_s"] == 2.0 and out["stream_output_tokens_per_s"] == 1.0


def test_summary_percentiles_are_nearest_rank_over_forwarded_calls():
    entries = [{"status": 200, "forwarded": True, "elapsed_s": t} for t in (0.1, 0.2, 0.3, 0.4)]
    entries += [{"status": 429, "forwarded": False, "elapsed_s": 9.0}]
    sums = summarize(entries)
    assert sums["latency_forwarded_s"] == {"p50": 0.2, "p95": 0.4}
    assert sums["rejected_429"] == 1 and sums["statuses"] == {"200": 4, "429": 1}
