"""HTTP/1.x framing at the serve adapter, on raw loopback sockets: pipelining, HTTP/1.0, oversized or
malformed input, an engine that breaks its framing. The engine double is a real server on a Unix socket.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import socket
import tempfile
import threading
import time

from onegpu.serve.adapter import AdapterLimits
from onegpu.serve.thread import AdapterThread
from onegpu.serve.transport_log import read_entries
from tests_offline.adapter_helpers import LIMITS
from tests_offline.fake_engine import KEY, raw_exchange


def head(port: int, method: str, path: str, version: str = "1.1", extra: str = "") -> bytes:
    return (f"{method} {path} HTTP/{version}\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
            f"{extra}\r\n").encode()


def post(port: int, path: str, body: bytes, version: str = "1.1", extra: str = "") -> bytes:
    return head(port, "POST", path, version, f"Content-Length: {len(body)}\r\n{extra}") + body


def read_answers(sock: socket.socket, count: int, timeout_s: float = 10) -> list[tuple[int, bytes]]:
    """Read `count` length-framed answers from a kept-alive connection: [(status, body)]."""
    buffered = b""
    answers: list[tuple[int, bytes]] = []
    sock.settimeout(timeout_s)
    while len(answers) < count:
        head_end = buffered.find(b"\r\n\r\n")
        if head_end >= 0:
            lines = buffered[:head_end].split(b"\r\n")
            length = next(int(line.split(b":", 1)[1]) for line in lines[1:]
                          if line.lower().startswith(b"content-length:"))
            end = head_end + 4 + length
            if len(buffered) >= end:
                answers.append((int(lines[0].split()[1]), buffered[head_end + 4:end]))
                buffered = buffered[end:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(answers)} answers"
        buffered += chunk
    return answers


def test_pipelined_requests_are_answered_in_order_on_one_connection(adapter, engine):
    body = json.dumps({"model": "fake-org/fake-model", "prompt": "p"}).encode()
    with socket.create_connection(("127.0.0.1", adapter.port)) as sock:
        sock.sendall(head(adapter.port, "GET", "/v1/models") + post(adapter.port, "/v1/completions", body)
                     + head(adapter.port, "GET", "/health"))
        answers = read_answers(sock, 3)
    assert [status for status, _ in answers] == [200, 200, 200]
    assert json.loads(answers[0][1])["object"] == "list" and json.loads(answers[1][1])["object"] == "text_completion"
    assert answers[2][1] == b"" and engine.requests == 3


def test_an_http_1_0_client_gets_the_stream_ended_by_the_close(adapter, engine):
    body = json.dumps({"model": "fake-org/fake-model", "prompt": "p", "stream": True}).encode()
    answer = raw_exchange(adapter.port, post(adapter.port, "/v1/completions", body, version="1.0"))
    answer_head, _, answer_body = answer.partition(b"\r\n\r\n")
    assert answer_head.startswith(b"HTTP/1.1 200 ") and b"connection: close" in answer_head.lower()
    assert b"transfer-encoding" not in answer_head.lower()  # an HTTP/1.0 client cannot read chunks
    events = [e for e in answer_body.split(b"\n\n") if e]
    assert len(events) == engine.chunks + 1 and events[-1] == b"data: [DONE]"


def test_a_chunked_client_gets_the_events_unchanged_inside_chunks(adapter, engine):
    body = json.dumps({"model": "fake-org/fake-model", "prompt": "p", "stream": True}).encode()
    answer = raw_exchange(adapter.port, post(adapter.port, "/v1/completions", body, extra="Connection: close\r\n"))
    answer_head, _, framed = answer.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in answer_head.lower() and framed.endswith(b"0\r\n\r\n")
    unframed, rest = b"", framed
    while True:
        size, _, rest = rest.partition(b"\r\n")
        if int(size, 16) == 0:
            break
        unframed, rest = unframed + rest[:int(size, 16)], rest[int(size, 16) + 2:]
    assert unframed.count(b"data: ") == engine.chunks + 1 and unframed.endswith(b"data: [DONE]\n\n")


def test_http_versions_other_than_1_x_get_505(adapter, engine):
    answer = raw_exchange(adapter.port, head(adapter.port, "GET", "/health", version="2.0"))
    assert answer.startswith(b"HTTP/1.1 505 ") and engine.requests == 0


def test_a_request_head_over_64_kib_gets_431(adapter, engine):
    answer = raw_exchange(adapter.port, b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431 ") and engine.requests == 0


def test_malformed_chunked_body_gets_400_and_frees_the_slot(adapter, engine, tmp_path):
    bad = head(adapter.port, "POST", "/v1/completions", extra="Transfer-Encoding: chunked\r\n") + b"5\r\nab"
    answer = raw_exchange(adapter.port, bad + b"zz\r\nnot-hex\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"malformed HTTP" in answer
    assert adapter.outstanding == 0 and engine.requests == 0
    adapter.log.flush()
    [entry] = read_entries(tmp_path / "transport.jsonl")
    assert entry["status"] == 400 and entry["adapter_error"] == "bad_request" and entry["path"] == "/v1/completions"


def test_engine_answer_without_framing_is_complete_when_the_engine_closes(tmp_path):
    """An engine answer with neither length nor chunks ends with the connection: relayed whole, then 200."""
    folder = tempfile.mkdtemp(prefix="fe-")  # short: socket paths are limited to 107 bytes

    async def answer(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{\"ok\": true}")
        await writer.drain()
        writer.close()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(asyncio.start_unix_server(answer, f"{folder}/e.sock"), loop).result(10)
    try:
        with AdapterThread(f"{folder}/e.sock", KEY, tmp_path / "t.jsonl", LIMITS) as running:
            request = head(running.port, "GET", "/v1/models", extra="Connection: close\r\n")
            status_line, _, rest = raw_exchange(running.port, request).partition(b"\r\n")
            assert status_line.startswith(b"HTTP/1.1 200 ") and rest.endswith(b"0\r\n\r\n")
            assert b'{"ok": true}' in rest
            running.log.flush()
            [entry] = read_entries(tmp_path / "t.jsonl")
            assert entry["status"] == 200 and entry["outcome"] == "complete" and running.outstanding == 0
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_client_that_stops_reading_stalls_the_engine_instead_of_filling_memory(adapter, engine):
    """Flow control: past the adapter's write buffer it stops reading the engine, so the engine blocks."""
    engine.chunks, engine.chunk_pad = 2000, 12_000  # 24 MB: far more than the sockets on the way buffer (~4 MiB)
    body = json.dumps({"model": "fake-org/fake-model", "prompt": "p", "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", adapter.port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)  # no room for the answer on its side
        sock.sendall(post(adapter.port, "/v1/completions", body, extra="Connection: close\r\n"))
        seen, deadline = -1, time.monotonic() + 30
        while engine.chunks_sent != seen and engine.chunks_sent < engine.chunks and time.monotonic() < deadline:
            seen = engine.chunks_sent
            time.sleep(0.5)
        assert 0 < engine.chunks_sent < engine.chunks  # stalled, not finished, while nobody reads
        sock.settimeout(30)
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answer.count(b"data: ") == engine.chunks + 1 and answer.endswith(b"0\r\n\r\n")


def test_a_client_that_reads_nothing_for_the_timeout_is_cut_and_frees_its_slot(engine, tmp_path):
    engine.chunks, engine.chunk_pad = 2000, 12_000
    limits = AdapterLimits(upstream_timeout_s=0.5)
    body = json.dumps({"model": "fake-org/fake-model", "prompt": "p", "stream": True}).encode()
    with AdapterThread(engine.socket_path, KEY, tmp_path / "t.jsonl", limits) as running:
        with socket.create_connection(("127.0.0.1", running.port)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            sock.sendall(post(running.port, "/v1/completions", body))
            deadline = time.monotonic() + 10
            while not engine.chunks_sent and time.monotonic() < deadline:  # the call is under way
                time.sleep(0.01)
            while running.outstanding and time.monotonic() < deadline:
                time.sleep(0.05)
            assert engine.chunks_sent and running.outstanding == 0 and engine.chunks_sent < engine.chunks
        running.log.flush()
        [entry] = read_entries(tmp_path / "t.jsonl")
    assert entry["outcome"] == "cut: the client read nothing for 0.5 s" and entry["status"] == 200
