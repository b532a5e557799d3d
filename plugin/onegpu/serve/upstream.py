"""Connections from the serve adapter to the engine's Unix socket, kept alive between calls while fresh.

Each connection parses the engine's answers with httptools (llhttp, the C parser of Node.js: framing,
chunked bodies and malformed input are its job) and hands every piece to the client connection whose call
it carries, as it arrives. Reusing a connection saves a connect, a close and the engine's per-connection
setup on every call. A connection goes back to the pool only after a complete exchange that both sides
left reusable, and is reused only within FRESH_S of its last use, well inside the keep-alive window servers
keep open (vLLM's uvicorn: 5 s), so the engine closing an idle connection under a request is not a
practical case. The adapter never retries: a reused connection that fails is answered 502 like any other.
"""
from __future__ import annotations

import asyncio
import os
import time
from typing import Protocol, cast

import httptools

from onegpu.core.uds_http import SUN_PATH_MAX

FRESH_S = 1.0  # reuse an idle connection only this soon after its last use (s)
MAX_IDLE = 8
MAX_ENGINE_HEAD_BYTES = 64 * 1024  # an engine answer head past this is a broken answer


class EngineListener(Protocol):
    """What a client connection receives from the engine connection that carries its call."""

    def engine_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], has_body: bool,
                    has_length: bool) -> None: ...

    def engine_body(self, data: bytes) -> None: ...

    def engine_done(self) -> None: ...

    def engine_flush(self) -> None: ...

    def engine_broken(self, why: str, status: int = 502) -> None: ...


class EngineConnection(asyncio.Protocol):
    """One connection to the engine, with its response parser; carries one call at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport  # set by connection_made, which asyncio calls before anything else
        self.listener: EngineListener | None = None
        self.idle_since = 0.0
        self.lost = False
        self.complete = False  # the current answer ended cleanly
        self.keep_alive = False  # the engine lets this connection carry another call
        self._parser = httptools.HttpResponseParser(self)
        self._reason = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._head_done = False
        self._framed = False  # the answer states its length (Content-Length or chunked)
        self.broken: str | None = None  # why the current answer cannot be completed

    # -- the call it carries

    def send(self, listener: EngineListener, data: bytes) -> None:
        """Start a call: write the request; the answer goes to `listener` as it arrives."""
        self.listener, self.complete, self.keep_alive = listener, False, False
        self._head_done, self._head_bytes = False, 0
        self.transport.write(data)

    def detach(self) -> None:
        self.listener = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a Unix socket's: a full Transport

    def data_received(self, data: bytes) -> None:
        listener = self.listener
        if listener is None or self.broken is not None:  # nothing asked: the connection is unusable
            self.transport.close()
            return
        if not self._head_done:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.broken = self.broken or f"malformed answer: {exc}"
        if not self._head_done and self._head_bytes > MAX_ENGINE_HEAD_BYTES:
            self.broken = f"answer head over {MAX_ENGINE_HEAD_BYTES} bytes"
        listener.engine_flush()
        if self.broken is not None and self.listener is listener:
            listener.engine_broken(self.broken)

    def eof_received(self) -> bool:
        return False  # close: the engine will not answer on this connection any more

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        listener = self.listener
        if listener is None or self.complete:
            return
        if self._head_done and not self._framed and self.broken is None:
            # An answer delimited by the connection's end (no length, not chunked): the end completes it.
            self.complete = True
            listener.engine_done()
            listener.engine_flush()
            return
        why = f"{type(exc).__name__}: {exc}" if exc else "the engine closed the connection"
        listener.engine_broken(why if self._head_done or self._head_bytes else f"no answer: {why}")

    # -- httptools callbacks

    def on_message_begin(self) -> None:
        if self.complete:  # one request, one answer: anything after it is not ours to relay
            self.broken = self.broken or "the engine sent bytes after its answer"
        self._reason, self._headers, self._head_done, self._framed = b"", [], False, False

    def on_status(self, reason: bytes) -> None:
        self._reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value.strip()))

    def on_headers_complete(self) -> None:
        self._head_done, self._head_bytes = True, 0
        if self.broken is not None:
            return
        status = self._parser.get_status_code()
        if status < 200:
            self.broken = f"unexpected informational answer {status}"
            return
        has_length = any(k == b"content-length" for k, _ in self._headers)
        self._framed = has_length or any(k == b"transfer-encoding" for k, _ in self._headers)
        self.keep_alive = self._parser.should_keep_alive() and self._framed
        has_body = status not in (204, 304)
        listener = self.listener
        assert listener is not None  # the parser runs only in data_received, once it has checked the listener
        listener.engine_head(status, self._reason, self._headers, has_body, has_length)

    def on_body(self, data: bytes) -> None:
        if self.broken is None:
            listener = self.listener
            assert listener is not None  # as in on_headers_complete
            listener.engine_body(data)

    def on_message_complete(self) -> None:
        if self.broken is None:
            listener = self.listener
            assert listener is not None  # as in on_headers_complete
            self.complete = True
            listener.engine_done()


class EnginePool:
    """Idle keep-alive connections to one engine socket (LIFO: the most recently used first)."""

    def __init__(self, socket_path: str, connect_timeout_s: float):
        self.socket_path, self.connect_timeout_s = socket_path, connect_timeout_s
        self._idle: list[EngineConnection] = []
        self._dirfd: int | None = None
        self._connect_path = self._reachable(socket_path)

    def _reachable(self, socket_path: str) -> str:
        """The socket's path, or for one over the kernel's 107-byte limit a short alias of it through
        /proc/self/fd of its folder (the folder stays open while the pool lives)."""
        path = os.fsencode(socket_path)
        if len(path) <= SUN_PATH_MAX:
            return socket_path
        folder, name = os.path.split(path)
        self._dirfd = os.open(folder or b".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{self._dirfd}/{os.fsdecode(name)}"

    def take_idle(self) -> EngineConnection | None:
        """A fresh idle connection, or None (then `connect`)."""
        now = time.monotonic()
        while self._idle:
            up = self._idle.pop()
            if now - up.idle_since < FRESH_S and not up.lost and not up.transport.is_closing():
                return up
            up.transport.close()
        return None

    async def connect(self) -> EngineConnection:
        """A new connection; raises OSError or TimeoutError if the engine is unreachable."""
        loop = asyncio.get_running_loop()
        _, up = await asyncio.wait_for(loop.create_unix_connection(EngineConnection, self._connect_path),
                                       self.connect_timeout_s)
        return up

    def give_back(self, up: EngineConnection, reusable: bool) -> None:
        """Keep the connection if the exchange completed cleanly on both sides; close it otherwise."""
        up.detach()
        if (reusable and up.complete and up.keep_alive and not up.lost and up.broken is None
                and len(self._idle) < MAX_IDLE and self._dirfd != -1):
            up.transport.resume_reading()  # a slow client may have paused it; a no-op otherwise
            up.idle_since = time.monotonic()
            self._idle.append(up)
        else:
            up.transport.close()

    def close(self) -> None:
        for up in self._idle:
            up.transport.close()
        self._idle.clear()
        if self._dirfd is not None and self._dirfd >= 0:
            os.close(self._dirfd)
        self._dirfd = -1  # closed: nothing goes back into the pool any more
