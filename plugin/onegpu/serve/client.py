"""One client connection of the serve adapter: parse its requests, check them, relay the engine's answers.

Requests come from a RequestReader (httptools); the connection is an asyncio Protocol, so relaying costs
one callback per read on each side and no task, future or stream object per call. Calls on one connection
run one after another (keep-alive); a pipelined request waits, and reading pauses behind it, until the call
before it is answered. While a call runs, the connection keeps reading: a client that leaves frees its slot
at once and the engine's connection is closed, which stops the engine's work. One Deadline per connection
times it out.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

from onegpu.serve import http_rules as rules
from onegpu.serve.deadline import Deadline
from onegpu.serve.request_reader import HEAD_TOO_LARGE, Request, RequestReader
from onegpu.serve.transport_log import CallRecord
from onegpu.serve.upstream import EngineConnection

if TYPE_CHECKING:
    from onegpu.serve.adapter import Adapter

LINGER_S = 2.0  # after an error answer, read and drop what the client still sends, so it sees the answer
_VERSIONS = (b"1.1", b"1.0")

# What the connection's one deadline is for.
_IDLE, _HEAD, _BODY, _ENGINE, _LINGER = "idle", "head", "body", "engine", "linger"


class ClientConnection(asyncio.Protocol):
    """The state of one client connection; `adapter` owns the slots, the pool and the log."""

    def __init__(self, adapter: "Adapter"):
        self.adapter, self.limits = adapter, adapter.limits
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport  # set by connection_made, which asyncio calls before anything else
        self._reader = RequestReader(self.limits.max_body_bytes)
        self._requests = self._reader.requests  # parsed or being parsed, oldest first
        self.call: CallRecord | None = None  # the call holding one of the adapter's slots
        self._request: Request | None = None  # that call's request
        self._engine: EngineConnection | None = None
        self._connecting: asyncio.Task | None = None
        self._head: bytes | None = None  # the answer's head, until it is written
        self._body: list[bytes] = []  # the answer's body bytes from the current engine read
        self._framing = b""  # b"length", b"chunked" or b"close": how the answer's body is framed to the client
        self._head_sent = False
        self._answered = False  # the engine's answer is complete
        self._keep_alive = True
        self._ended = False  # answered with an error or closed: what the client sends is dropped
        self._paused = False
        self._client_full = False  # the client's write buffer is full: the engine is not being read
        self._client_buffered = 0  # its size when last looked at (a shrinking buffer is a client reading)
        self._deadline = Deadline(self.loop, self._expired)

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = self.transport = cast(asyncio.Transport, transport)  # a TCP server's: a full Transport
        if not self.adapter.admit(self):
            transport.write(rules.error_response(503, rules.json_error(503, "unavailable", "too many open "
                                                                                           "connections")))
            self._ended = True
            transport.close()
            return
        self._deadline.set(_IDLE, self.limits.idle_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._ended:
            return
        reader = self._reader
        relaying = self._engine is not None or self._connecting is not None
        if reader.awaiting_head and not reader.head_bytes and self.call is None:
            self._deadline.set(_HEAD, self.limits.header_timeout_s)  # the first bytes of a head
        elif self.call is not None and not relaying:
            self._deadline.progress()  # a piece of the request body
        reader.feed(data)
        # A request behind the one being served (pipelined): read no further until its turn.
        if len(self._requests) > (0 if relaying else 1):
            self._pause_reading()
        if reader.bad is not None and not relaying:
            self._refuse_bad_input()
            return
        self._advance()

    def eof_received(self) -> bool:
        self._client_left()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._client_left()
        self._ended = True
        self._deadline.cancel()
        self.adapter.release_connection(self)

    def pause_writing(self) -> None:  # the client reads slower than the engine answers: slow the engine down
        self._client_full = True
        self._client_buffered = self.transport.get_write_buffer_size()
        if self._engine is not None and not self._engine.lost:
            self._engine.transport.pause_reading()

    def resume_writing(self) -> None:
        self._client_full = False
        self._deadline.progress()  # the client read: the answer moves again
        if self._engine is not None and not self._engine.lost:
            self._engine.transport.resume_reading()

    # -- one call after another

    def _advance(self) -> None:
        """Move the oldest request on as far as what has arrived allows."""
        if self._ended or self._engine is not None or self._connecting is not None:
            return
        if self.call is None:
            if not self._requests or not self._requests[0].head_done:
                return
            if not self._begin(self._requests[0]):
                return
        request = self._request
        assert request is not None  # set with self.call, by _begin
        if request.body_bytes > self.limits.max_body_bytes:
            self._fail(rules.too_large(self.limits.max_body_bytes))
        elif request.complete:
            self._requests.popleft()
            self._forward(request)

    def _begin(self, request: Request) -> bool:
        """Check a complete head; take a slot for it (True) or answer it with an error (False)."""
        verdict: rules.Reject | None
        if request.version not in _VERSIONS:
            verdict = rules.Reject(505, "http_version", "only HTTP/1.1 and HTTP/1.0 are served")
        else:
            verdict = rules.check_request(request.method, request.target, request.headers, port=self.adapter.port,
                                          key=self.adapter.key, is_closing=self.adapter.closing,
                                          max_body_bytes=self.limits.max_body_bytes)
        if verdict is None and self.adapter.outstanding >= self.limits.max_outstanding:
            verdict = rules.busy(self.limits.max_outstanding)
        if verdict is not None:
            self._requests.popleft()
            call = CallRecord(request.method, request.target, request.headers, request.started, forwarded=False)
            self._answer_error(call, verdict, head_only=request.method == b"HEAD")
            self.adapter.log.record(call.entry(time.monotonic()))
            return False
        self.adapter.take_slot(self)
        self.call = CallRecord(request.method, request.target, request.headers, request.started)
        self._request = request
        if not request.complete:
            if not request.body_bytes and any(k == b"expect" and v.lower() == b"100-continue"
                                              for k, v in request.headers):
                self.transport.write(rules.CONTINUE)
            self._deadline.set(_BODY, self.limits.body_timeout_s, sliding=True)
        return True

    def _forward(self, request: Request) -> None:
        body = b"".join(request.body)
        length = None if request.method == b"GET" and not body else len(body)
        data = rules.request_head(request.method, request.target, rules.upstream_headers(request.headers, length))
        data = data + body if body else data
        self._head_sent = self._answered = False
        self._head, self._body = None, []
        self._deadline.set(_ENGINE, self.limits.upstream_timeout_s, sliding=True)
        call, pool = self.call, self.adapter.pool
        assert call is not None and pool is not None  # _begin took the slot; start() makes the pool before it listens
        engine = pool.take_idle()
        if engine is not None:
            self._engine = engine
            engine.send(self, data)
        else:
            self._connecting = self.loop.create_task(self._connect_and_send(data))
        call.request.feed(body, time.monotonic())  # hashed once it is on its way

    async def _connect_and_send(self, data: bytes) -> None:
        pool = self.adapter.pool
        assert pool is not None  # start() makes the pool before it listens
        try:
            engine = await pool.connect()
        except (OSError, asyncio.TimeoutError) as exc:
            self._connecting = None
            if self.call is not None:
                self._fail(rules.Reject(502, "engine_unreachable", "the engine's socket does not answer "
                                                                   f"({type(exc).__name__}: {exc})"))
            return
        self._connecting = None
        if self.call is None:  # the client left, or the window cut the call, while connecting
            engine.transport.close()
            return
        self._engine = engine
        engine.send(self, data)

    # -- the engine's answer (called by the engine connection)

    def engine_head(self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], has_body: bool,
                    has_length: bool) -> None:
        call, request = self.call, self._request
        assert call is not None and request is not None  # the engine calls back only while it carries our call
        call.respond(status, headers)
        out = rules.client_headers(headers)
        if not has_body or has_length:
            self._framing = b"length"
        elif request.version == b"1.1":
            self._framing = b"chunked"
            out.append((b"transfer-encoding", b"chunked"))
        else:  # an HTTP/1.0 client: the body ends where the connection does
            self._framing = b"close"
        self._keep_alive = request.keep_alive and self._framing != b"close"
        if not self._keep_alive:
            out.append((b"connection", b"close"))
        self._head = rules.response_head(status, reason, out)

    def engine_body(self, data: bytes) -> None:
        self._body.append(data)

    def engine_done(self) -> None:
        self._answered = True

    def engine_flush(self) -> None:
        """Write what one engine read brought, in one write; end the call if the answer is complete.

        The body bytes of one read go out as one chunk: chunk boundaries are framing of one hop, the bytes
        and their order are unchanged, and nothing waits for a later read. One exception: the head of a
        length-framed answer (a whole JSON answer) waits for the first body bytes, which engines send a
        moment later; the client can do nothing with that head alone, and every write costs a system call
        and a wake-up of the client, the largest part of what relaying costs.
        """
        call = self.call
        if call is None:
            return
        self._deadline.progress()
        data = None
        if self._body:
            data = self._body[0] if len(self._body) == 1 else b"".join(self._body)
            self._body.clear()
        out = []
        if self._head is not None:
            if data is None and not self._answered and self._framing == b"length":
                return
            out.append(self._head)
            self._head = None
        if data is not None:
            out.append(rules.chunk(data) if self._framing == b"chunked" else data)
        if self._answered and self._framing == b"chunked":
            out.append(rules.LAST_CHUNK)
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
            self._head_sent = True
            now = time.monotonic()
            call.ttfb(now)
            if data is not None:  # hashed and read after it is on its way: the client does not wait for it
                call.response.feed(data, now)
        if self._answered:
            self._end_call(reusable=True)
            if self._keep_alive:
                self._next_cycle()
            else:
                self._ended = True
                self.transport.close()

    def engine_broken(self, why: str, status: int = 502) -> None:
        """The engine's answer cannot be completed; `status` is what the client gets if nothing was sent yet."""
        if self.call is None:
            return
        if not self._head_sent:
            self._fail(rules.Reject(status, "engine_failed", f"the engine failed: {why}"))
            return
        # The head is out: nothing honest can be added; the client sees an incomplete answer.
        self.call.outcome = f"cut: the engine's answer broke off ({why})"
        self._end_call(reusable=False)
        self._ended = True
        self.transport.close()

    # -- ends

    def _end_call(self, reusable: bool) -> None:
        """Release the slot and the engine connection, and log the call."""
        call, engine, connecting = self.call, self._engine, self._connecting
        assert call is not None  # every caller ends a call that holds the slot
        self.call = self._request = self._engine = self._connecting = None
        if engine is not None:
            assert self.adapter.pool is not None  # it made the engine connection
            self.adapter.pool.give_back(engine, reusable=reusable and self._answered)
        if connecting is not None:
            connecting.cancel()
        self.adapter.release_slot(self)
        self.adapter.log.record(call.entry(time.monotonic()))

    def _next_cycle(self) -> None:
        """Keep-alive: wait for (or take up) the next request."""
        self._deadline.set(_IDLE, self.limits.idle_timeout_s)
        if self._reader.bad is not None:
            self._refuse_bad_input()
            return
        if self._paused:
            self._paused = False
            self.transport.resume_reading()
        self._advance()

    def _client_left(self) -> None:
        if self.call is not None:
            if self.call.outcome == "complete" and not self.call.response.done_seen:
                self.call.outcome = "client disconnected"
            # A client that closes at `data: [DONE]` has its whole answer; the engine may still log its own
            # last write to it as a disconnect, which is not the answer's fate.
            self._end_call(reusable=False)

    def cut(self, reason: str) -> None:
        """The serve window closed with this call still running: end it now, with the reason logged."""
        if self.call is not None:
            self.call.outcome = reason
            self._end_call(reusable=False)
        self.close()

    def close(self) -> None:
        self._ended = True
        self.transport.close()

    def _fail(self, reject: rules.Reject) -> None:
        """Answer the call holding the slot with an error of our own, log it, and close the connection."""
        call = self.call
        assert call is not None  # every caller fails a call that holds the slot
        self._answer_error(call, reject, head_only=call.method == b"HEAD")
        self._end_call(reusable=False)

    def _refuse_bad_input(self) -> None:
        bad = self._reader.bad
        assert bad is not None  # called only once the reader has seen bad input
        if self.call is not None:
            self._fail(rules.Reject(400, "bad_request", bad))
            return
        status = 431 if bad == HEAD_TOO_LARGE else 400
        request = self._requests[-1] if self._requests and self._requests[-1].head_done else None
        call = (CallRecord(request.method, request.target, request.headers, request.started, forwarded=False)
                if request is not None else CallRecord(b"", b"", [], time.monotonic(), forwarded=False))
        self._answer_error(call, rules.Reject(status, "bad_request", bad))
        self.adapter.log.record(call.entry(time.monotonic()))

    def _answer_error(self, call: CallRecord, reject: rules.Reject, head_only: bool = False) -> None:
        """Send a JSON error with `Connection: close`, then linger: the client gets to read the answer."""
        body = rules.json_error(reject.status, reject.code, reject.message)
        call.respond(reject.status, [], adapter_error=reject.code)
        call.response.feed(body, time.monotonic())
        self.transport.write(rules.error_response(reject.status, body, head_only))
        call.ttfb(time.monotonic())
        call.finished_s = time.monotonic()
        self._linger()

    def _linger(self) -> None:
        """Half-close, then drop what the client still sends for a moment before closing.

        Closing with unread request bytes in the kernel makes it send RST, which can destroy the error
        answer before the client reads it (the classic lingering close of HTTP servers).
        """
        self._ended = True
        if self._paused:
            self._paused = False
            self.transport.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._deadline.set(_LINGER, LINGER_S)

    def _pause_reading(self) -> None:
        if not self._paused:
            self._paused = True
            self.transport.pause_reading()

    # -- timeouts

    def _expired(self, kind: str) -> None:
        if kind == _LINGER or kind == _IDLE:
            self.close()
        elif kind == _HEAD:
            if self.call is None and self._requests and not self._requests[-1].head_done:
                call = CallRecord(b"", b"", [], time.monotonic(), forwarded=False)
                self._answer_error(call, rules.Reject(408, "header_timeout", "request head not complete within "
                                                      f"{self.limits.header_timeout_s:g} s"))
                self.adapter.log.record(call.entry(time.monotonic()))
            elif self.call is None:
                self.close()
        elif kind == _BODY and self.call is not None:
            self._fail(rules.Reject(408, "body_timeout", f"request body stalled for {self.limits.body_timeout_s:g} s"))
        elif kind == _ENGINE and self.call is not None and self._client_full:
            buffered = self.transport.get_write_buffer_size()
            if buffered < self._client_buffered:  # a slow client, still reading: not a stall
                self._client_buffered = buffered
                self._deadline.progress()
                self._deadline.set(_ENGINE, self.limits.upstream_timeout_s, sliding=True)
                return
            self.call.outcome = f"cut: the client read nothing for {self.limits.upstream_timeout_s:g} s"
            self._end_call(reusable=False)
            self.close()
        elif kind == _ENGINE and self.call is not None:
            self.engine_broken(f"no progress from the engine for {self.limits.upstream_timeout_s:g} s", status=504)
