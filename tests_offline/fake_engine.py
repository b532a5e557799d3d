"""An in-process engine double on a real Unix socket, speaking vLLM's OpenAI endpoints (stream and not).

It runs its own event loop thread, like a separate process would, and counts what reaches it (requests,
calls in flight, the most in flight at once, the SHA-256 of every body, the headers it saw), so tests of
the adapter check what the engine really received. Knobs are plain attributes: token_delay_s,
response_delay_s, chunks, chunk_pad, mode ("ok", "die_mid_stream", "close_silently").
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import h11

MODEL = "fake-org/fake-model"


class FakeEngine:
    def __init__(self, chunks: int = 5, token_delay_s: float = 0.0, response_delay_s: float = 0.0):
        self.dir = Path(tempfile.mkdtemp(prefix="fe-"))
        self.socket_path = str(self.dir / "engine.sock")
        self.chunks, self.token_delay_s, self.response_delay_s = chunks, token_delay_s, response_delay_s
        self.mode = "ok"
        self.chunk_pad = 0  # spaces added to every streamed token after the first (large answers)
        # Pause between `data: [DONE]` and the end of the chunked body: vLLM writes them apart, so a client can
        # close at [DONE] before the engine's last write.
        self.done_gap_s = 0.0
        self.health_status = 200
        self.chunks_sent = 0
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies_sha256: list[str] = []
        self.seen_headers: list[list[tuple[bytes, bytes]]] = []
        self.last_chunk_sent_s: float | None = None
        self.cancelled = 0  # streams whose client went away before the end
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_unix_server(self._on_connection, self.socket_path), self._loop).result(10)

    def stats(self) -> dict:
        return {"requests": self.requests, "in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
                "bodies_sha256": list(self.bodies_sha256)}

    def close(self) -> None:
        """Stop serving and remove the socket (idempotent)."""
        if self._loop.is_closed():
            return

        async def stop():
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        shutil.rmtree(self.dir, ignore_errors=True)

    async def _on_connection(self, reader, writer):
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await self._read_request(conn, reader)
                if request is None:
                    return
                await self._answer(conn, writer, request, body)
                if conn.our_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, h11.ProtocolError, asyncio.CancelledError):
            pass  # a cancelled connection task at close() ends quietly
        finally:
            writer.close()

    @staticmethod
    async def _read_request(conn, reader):
        request, parts = None, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                parts.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return request, b"".join(parts)
            else:
                return None, b""

    async def _answer(self, conn, writer, request, body):
        path = request.target.split(b"?")[0]
        if path == b"/stub/stats":
            return await self._send(conn, writer, 200, json.dumps(self.stats()).encode())
        self.requests += 1
        self.seen_headers.append(list(request.headers))
        self.bodies_sha256.append(hashlib.sha256(body).hexdigest())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.mode == "close_silently":
                writer.close()
                return
            if path == b"/health":
                return await self._send(conn, writer, self.health_status, b"")
            if path == b"/v1/models":
                return await self._send(conn, writer, 200, json.dumps(
                    {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}).encode())
            doc = json.loads(body)
            digest = hashlib.sha256(body).hexdigest()
            chat = path == b"/v1/chat/completions"
            if doc.get("stream"):
                return await self._stream(conn, writer, chat, digest, doc)
            await asyncio.sleep(self.response_delay_s)
            text = f"sha256:{digest} " + " ".join(f"t{i}" for i in range(self.chunks))
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                      if chat else {"index": 0, "text": text, "finish_reason": "stop"})
            out = {"id": "cmpl-1", "object": "chat.completion" if chat else "text_completion", "model": MODEL,
                   "choices": [choice], "usage": {"prompt_tokens": 3, "completion_tokens": self.chunks,
                                                  "total_tokens": 3 + self.chunks}}
            await self._send(conn, writer, 200, json.dumps(out).encode())
        finally:
            self.in_flight -= 1

    async def _stream(self, conn, writer, chat, digest, doc):
        writer.write(conn.send(h11.Response(status_code=200, headers=[(b"content-type", b"text/event-stream")])))
        try:
            for i in range(self.chunks):
                if self.mode == "die_mid_stream" and i == 2:
                    writer.transport.abort()
                    return
                text = f"sha256:{digest}" if i == 0 else f" t{i}" + " " * self.chunk_pad
                choice = ({"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text})
                writer.write(conn.send(h11.Data(data=b"data: " + json.dumps({"choices": [choice]}).encode() + b"\n\n")))
                await writer.drain()
                self.chunks_sent += 1
                self.last_chunk_sent_s = time.monotonic()
                await asyncio.sleep(self.token_delay_s)
            if (doc.get("stream_options") or {}).get("include_usage"):
                usage = {"prompt_tokens": 3, "completion_tokens": self.chunks, "total_tokens": 3 + self.chunks}
                writer.write(conn.send(h11.Data(data=b"data: " + json.dumps({"choices": [], "usage": usage}).encode()
                                                + b"\n\n")))
            if self.done_gap_s:
                writer.write(conn.send(h11.Data(data=b"data: [DONE]\n\n")))
                await writer.drain()
                await asyncio.sleep(self.done_gap_s)
                writer.write(conn.send(h11.EndOfMessage()))
            else:
                writer.write(conn.send(h11.Data(data=b"data: [DONE]\n\n")) + conn.send(h11.EndOfMessage()))
            await writer.drain()
            self.last_chunk_sent_s = time.monotonic()
        except (ConnectionError, asyncio.CancelledError):
            self.cancelled += 1
            raise

    @staticmethod
    async def _send(conn, writer, status, body, content_type=b"application/json"):
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
        writer.write(conn.send(h11.Response(status_code=status, headers=headers)) + conn.send(h11.Data(data=body))
                     + conn.send(h11.EndOfMessage()))
        await writer.drain()


# ---- helpers shared by the adapter tests -------------------------------------------------------------

KEY = "test-key-" + "x" * 34


def call(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
         key: str | None = KEY, timeout: float = 10.0):
    """One request through the adapter with the stdlib client: (status, {lower header: value}, body)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        sent = {"Authorization": f"Bearer {key}"} if key is not None else {}
        sent.update(headers or {})
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def raw_exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes on a fresh loopback connection and read until the adapter closes it."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        parts: list[bytes] = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return b"".join(parts)
            parts.append(chunk)
