"""Abuse of the serve adapter, with the stub engine container on the real Docker engine behind it.

What reached the engine is read from the stub's own counters on its Unix socket (GET /stub/stats),
never from the adapter's word.
"""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from devkit.stub_serving import stub_serving
from onegpu.serve.adapter import AdapterLimits
from onegpu.serve.http_rules import MAX_BODY_BYTES
from onegpu.serve.thread import AdapterThread
from onegpu.serve.transport_log import read_entries
from tests_offline.fake_engine import KEY, call, raw_exchange

LIMITS = AdapterLimits(header_timeout_s=0.5, idle_timeout_s=1.0, body_timeout_s=0.5, upstream_timeout_s=30)
STUB_ENV = {"STUB_RESPONSE_DELAY_S": 1.0, "STUB_TOKEN_DELAY_S": 0.2, "STUB_ANSWER_TOKENS": 50}


@pytest.fixture(scope="module")
def stub(docker_client):
    with stub_serving(docker_client, STUB_ENV) as serving:
        yield serving


@pytest.fixture
def adapter(stub, tmp_path):
    running = AdapterThread(stub.socket_path, KEY, tmp_path / "transport.jsonl", LIMITS)
    yield running
    running.close(grace_s=0)


def body(model: str, stream: bool = False, max_tokens: int = 4) -> bytes:
    return json.dumps({"model": model, "prompt": "hello", "max_tokens": max_tokens, "stream": stream}).encode()


def request_bytes(port: int, headers: dict, path: str = "/v1/completions", payload: bytes = b"{}") -> bytes:
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode() + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload


def settled(adapter, within_s: float = 3.0) -> bool:
    """Whether the adapter holds no outstanding call within `within_s` (it frees a slot just after the
    client has read the last byte)."""
    end = time.monotonic() + within_s
    while adapter.outstanding and time.monotonic() < end:
        time.sleep(0.02)
    return adapter.outstanding == 0


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_64_concurrent_clients_never_put_more_than_4_calls_on_the_engine(docker_client, tmp_path):
    with stub_serving(docker_client, {"STUB_RESPONSE_DELAY_S": 1.0}) as fresh, \
            AdapterThread(fresh.socket_path, KEY, tmp_path / "t.jsonl", LIMITS) as running:
        start = threading.Barrier(64)

        def client(_):
            start.wait(10)
            return call(running.port, "POST", "/v1/completions", body(fresh.model_id), timeout=30)[0]
        began = time.monotonic()
        with ThreadPoolExecutor(64) as pool:
            statuses = list(pool.map(client, range(64), timeout=60))
        took = time.monotonic() - began
        stats = fresh.stats()
    ok, busy = statuses.count(200), statuses.count(429)
    assert ok + busy == 64 and busy >= 1 and took < 30
    assert stats["max_in_flight"] == 4 and stats["requests"] == ok
    refused = [e for e in read_entries(tmp_path / "t.jsonl") if e["status"] == 429]
    assert len(refused) == busy and max(e["elapsed_s"] for e in refused) < 0.5  # at once, never queued


def test_partial_headers_time_out_without_blocking_other_clients(adapter, stub):
    before = stub.stats()["requests"]
    slow = [socket.create_connection(("127.0.0.1", adapter.port), timeout=5) for _ in range(32)]
    for sock in slow:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthoriz" % adapter.port)
    began = time.monotonic()
    assert call(adapter.port, "GET", "/v1/models")[0] == 200 and time.monotonic() - began < 0.5
    for sock in slow:
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
        assert status_of(answer) == 408  # answered and closed by the adapter, not left hanging
        sock.close()
    assert stub.stats()["requests"] == before


def test_idle_connections_are_closed(adapter):
    with socket.create_connection(("127.0.0.1", adapter.port), timeout=5) as sock:
        began = time.monotonic()
        assert sock.recv(1) == b"" and time.monotonic() - began < 3


def test_stalled_body_times_out_and_frees_its_slot(adapter, stub):
    head = request_bytes(adapter.port, {"Host": f"127.0.0.1:{adapter.port}", "Authorization": f"Bearer {KEY}"},
                         payload=b"")
    stalled = head.replace(b"Content-Length: 0", b"Content-Length: 100") + b'{"model":'
    answers = list(ThreadPoolExecutor(4).map(lambda _: raw_exchange(adapter.port, stalled), range(4)))
    assert [status_of(a) for a in answers] == [408] * 4
    assert call(adapter.port, "GET", "/health")[0] == 200 and settled(adapter)


@pytest.mark.parametrize("authorization", [
    None, "", "Bearer", "Bearer ", "Bearer wrong", f"Basic {KEY}", f"Bearer {KEY[:-1]}", f"Bearer {KEY}x",
    f"Bearer {KEY.upper()}", f"{KEY}",
])
def test_no_request_without_the_key_reaches_the_engine(adapter, stub, authorization):
    before = stub.stats()["requests"]
    headers = {"Host": f"127.0.0.1:{adapter.port}"}
    if authorization is not None:
        headers["Authorization"] = authorization
    answer = raw_exchange(adapter.port, request_bytes(adapter.port, headers, payload=body(stub.model_id)))
    assert status_of(answer) == 401 and b"invalid_api_key" in answer
    assert stub.stats()["requests"] == before


def test_a_second_authorization_header_is_refused(adapter, stub):
    before = stub.stats()["requests"]
    raw = request_bytes(adapter.port, {"Host": f"127.0.0.1:{adapter.port}", "Authorization": f"Bearer {KEY}"},
                        payload=body(stub.model_id)).replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer x\r\n\r\n", 1)
    assert status_of(raw_exchange(adapter.port, raw)) == 401 and stub.stats()["requests"] == before


@pytest.mark.parametrize("host,origin", [
    ("evil.example:{port}", None), ("evil.example", None), ("127.0.0.1", None), ("localhost:1", None),
    ("0.0.0.0:{port}", None), ("127.0.0.2:{port}", None), ("[::1]:{port}", None),
    ("127.0.0.1:{port}.evil.example", None), (None, None),
    ("127.0.0.1:{port}", "http://evil.example"), ("127.0.0.1:{port}", "http://127.0.0.1:{port}"),
    ("localhost:{port}", "null"),
])
def test_rebinding_hosts_and_any_origin_are_refused(adapter, stub, host, origin):
    before = stub.stats()["requests"]
    headers = {"Authorization": f"Bearer {KEY}"}
    if host is not None:
        headers["Host"] = host.format(port=adapter.port)
    if origin is not None:
        headers["Origin"] = origin.format(port=adapter.port)
    raw = request_bytes(adapter.port, headers, payload=body(stub.model_id))
    if host is None:  # HTTP/1.1 requires a Host; an HTTP/1.0 request may omit it, and is refused too
        raw = raw.replace(b"HTTP/1.1", b"HTTP/1.0", 1)
    assert status_of(raw_exchange(adapter.port, raw)) == 403
    assert stub.stats()["requests"] == before


def test_declared_oversized_body_is_refused_before_it_is_sent(adapter, stub):
    before = stub.stats()["requests"]
    with socket.create_connection(("127.0.0.1", adapter.port), timeout=5) as sock:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{adapter.port}\r\nAuthorization: Bearer "
                     f"{KEY}\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
        assert status_of(sock.recv(4096)) == 413  # answered without waiting for the 16 MiB
    assert stub.stats()["requests"] == before


def test_chunked_body_growing_past_the_cap_is_refused(adapter, stub):
    before = stub.stats()["requests"]
    conn = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
    piece = b"x" * 2**20
    try:
        conn.request("POST", "/v1/completions", body=iter([piece] * 17), encode_chunked=True,
                     headers={"Authorization": f"Bearer {KEY}", "Transfer-Encoding": "chunked"})
    except (BrokenPipeError, ConnectionResetError):
        pass  # the adapter stops reading once the cap is passed; the answer is still there to read
    assert conn.getresponse().status == 413
    assert stub.stats()["requests"] == before


def test_a_body_of_exactly_16_mib_is_forwarded(adapter, stub):
    before = stub.stats()["requests"]
    status, _, answer = call(adapter.port, "POST", "/v1/completions", b" " * MAX_BODY_BYTES, timeout=30)
    assert status == 400 and b"JSON decode error" in answer  # the engine's own verdict on the bytes
    assert stub.stats()["requests"] == before + 1


def test_clients_leaving_mid_stream_free_their_slots(adapter, stub, tmp_path):
    leavers = []
    for _ in range(4):
        conn = http.client.HTTPConnection("127.0.0.1", adapter.port, timeout=10)
        conn.request("POST", "/v1/completions", body=body(stub.model_id, stream=True, max_tokens=50),
                     headers={"Authorization": f"Bearer {KEY}"})
        response = conn.getresponse()
        assert response.readline().startswith(b"data: ")  # streaming: 50 tokens take ~10 s
        leavers.append((conn, response))
    assert adapter.outstanding == 4
    for conn, response in leavers:
        response.close()
        conn.close()
    assert settled(adapter)
    statuses = list(ThreadPoolExecutor(4).map(
        lambda _: call(adapter.port, "GET", "/v1/models")[0], range(4)))
    assert statuses == [200] * 4
    adapter.close(grace_s=0)
    left = [e for e in read_entries(tmp_path / "transport.jsonl") if e["outcome"] == "client disconnected"]
    assert len(left) == 4 and all(e["streamed"] for e in left)
