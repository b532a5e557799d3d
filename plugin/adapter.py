"""The loopback serve adapter: HTTP on 127.0.0.1 in front of the engine's Unix socket.

HTTP/1.1 is parsed with h11 on both sides (a small, well-kept sans-I/O parser: framing, chunked bodies,
keep-alive and malformed input are its job, not ours); the asyncio loop does the I/O. Bodies pass through
as bytes, never re-serialised; the engine's chunks are written to the client as each one arrives. The
adapter never retries and never queues: a call over the limit gets 429 at once.
"""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import h11

from . import adapter_http as rules
from .adapter_upstream import EnginePool, Upstream
from .transport_log import CallRecord, TransportLog

READ_CHUNK = 65536
LINGER_S = 2.0  # after an error answer, read and drop what the client still sends, so it sees the answer


@dataclass(frozen=True)
class AdapterLimits:
    """Timeouts (s) and caps of the adapter; the defaults are the kit's."""

    max_outstanding: int = rules.MAX_OUTSTANDING
    max_body_bytes: int = rules.MAX_BODY_BYTES
    header_timeout_s: float = 10.0  # from the first byte of a request to its complete head
    idle_timeout_s: float = 75.0  # a kept-alive connection with no request started
    body_timeout_s: float = 30.0  # longest pause between two pieces of a request body
    connect_timeout_s: float = 10.0  # reaching the engine's socket
    upstream_timeout_s: float = 600.0  # longest pause in the engine's answer (the request timeout)
    max_connections: int = 256  # open client connections; more are answered 503 and closed


class _ClientGone(Exception):
    """The client closed its connection, or it must be closed because its response cannot be completed."""


class _AnsweredClose(Exception):
    """The adapter answered with an error and `Connection: close`; the connection ends with a linger."""


class _EngineFailed(Exception):
    """The engine's socket or answer failed; `status` is what the client gets if nothing was sent yet."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Client:
    """One client connection: its h11 state machine and its streams."""

    conn: h11.Connection
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    relaying: bool = False  # an engine answer is being relayed (a close now means the client left)
    gone: bool = False  # the client closed while its answer was being relayed


class Adapter:
    """One adapter: `await start()`, serve, `await close(grace_s)`. Runs on one asyncio loop."""

    def __init__(self, socket_path: str, key: str, log: TransportLog, limits: AdapterLimits = AdapterLimits()):
        self.socket_path, self.key, self.log, self.limits = socket_path, key, log, limits
        self.port = 0
        self.outstanding = 0
        self.closing = False
        self._server: asyncio.AbstractServer | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._in_call: set[asyncio.Task] = set()  # connection tasks holding one of the outstanding slots
        self._cut_reason: str | None = None
        self._pool: EnginePool | None = None

    async def start(self, host: str = "127.0.0.1") -> int:
        """Listen on a free loopback port (port 0: the kernel picks one) and return it."""
        self._pool = EnginePool(self.socket_path, self.limits.connect_timeout_s)
        self._server = await asyncio.start_server(self._on_connection, host, 0, limit=READ_CHUNK)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self, grace_s: float) -> dict:
        """Refuse new calls (503), let calls in flight finish for up to grace_s (s), cut the rest, stop."""
        self.closing = True
        deadline = time.monotonic() + grace_s
        # Still listening during the grace period: a new connection gets a 503 answer, not a refusal.
        while self._in_call and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self._server is not None:
            self._server.close()
        cut = len(self._in_call)
        if cut:
            self._cut_reason = f"cut: the serve window closed and the {grace_s:g} s grace period passed"
            for task in list(self._in_call):
                task.cancel()
        for task, writer in list(self._connections.items()):
            if task not in self._in_call:
                writer.close()  # idle kept-alive connections
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        if self._pool is not None:
            self._pool.close()
        return {"cut_in_flight": cut}

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections[task] = writer
        client = _Client(h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024), reader, writer)
        try:
            if len(self._connections) > self.limits.max_connections:
                writer.write(rules.bare_error(503, rules.json_error(503, "unavailable", "too many open connections")))
                return
            await self._serve(client)
        except _AnsweredClose:
            await self._linger(client)
        except asyncio.CancelledError:
            if self._cut_reason is None:
                raise
        except (ConnectionError, _ClientGone, asyncio.TimeoutError):
            pass
        finally:
            self._connections.pop(task, None)
            self._in_call.discard(task)
            writer.close()

    async def _serve(self, c: _Client) -> None:
        """Requests on one connection, one after another (keep-alive) until either side closes."""
        while True:
            try:
                request = await self._next_head(c)
            except h11.RemoteProtocolError as exc:
                await self._reject(c, None, time.monotonic(),
                                   rules.Reject(exc.error_status_hint, "bad_request", f"malformed HTTP: {exc}"))
                return
            except asyncio.TimeoutError:
                if c.conn.trailing_data[0]:  # a partial head: say why before closing
                    await self._reject(c, None, time.monotonic(), rules.Reject(
                        408, "header_timeout", f"request head not complete within {self.limits.header_timeout_s:g} s"))
                return
            if request is None:
                return
            await self._handle(c, request)
            if c.conn.our_state is not h11.DONE or c.conn.their_state is not h11.DONE:
                return
            c.conn.start_next_cycle()

    async def _next_head(self, c: _Client) -> h11.Request | None:
        """The next request head, or None when the client closed; TimeoutError for idle or slow heads."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.idle_timeout_s
        partial = False
        while True:
            event = c.conn.next_event()
            if isinstance(event, h11.Request):
                return event
            if isinstance(event, h11.ConnectionClosed):
                return None
            if event is not h11.NEED_DATA:
                raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}", 400)
            if not partial and c.conn.trailing_data[0]:
                # The first bytes of a head arrived: from now on the (shorter) head timeout runs.
                partial, deadline = True, loop.time() + self.limits.header_timeout_s
            async with asyncio.timeout_at(deadline):  # no extra task per read, unlike wait_for
                data = await c.reader.read(READ_CHUNK)
            c.conn.receive_data(data)

    async def _handle(self, c: _Client, request: h11.Request) -> None:
        started = time.monotonic()
        verdict = rules.check_request(request.method, request.target, list(request.headers), port=self.port,
                                      key=self.key, is_closing=self.closing,
                                      max_body_bytes=self.limits.max_body_bytes)
        if verdict is None and self.outstanding >= self.limits.max_outstanding:
            verdict = rules.busy(self.limits.max_outstanding)
        if verdict is not None:
            await self._reject(c, request, started, verdict)
            return
        task = asyncio.current_task()
        self.outstanding += 1
        self._in_call.add(task)
        call = CallRecord(request.method, request.target, list(request.headers), started)
        try:
            await self._proxy(c, call)
        except asyncio.CancelledError:
            if self._cut_reason is not None:
                call.outcome = self._cut_reason
            raise
        except (ConnectionError, _ClientGone, asyncio.TimeoutError):
            if call.outcome == "complete":
                call.outcome = "client disconnected"
            raise
        finally:
            self.outstanding -= 1
            self._in_call.discard(task)
            self.log.record(call.entry(time.monotonic()))

    async def _proxy(self, c: _Client, call: CallRecord) -> None:
        body = await self._read_body(c, call)
        if body is None:
            return
        try:
            up = await self._pool.take()
        except (OSError, asyncio.TimeoutError) as exc:
            await self._fail(c, call, rules.Reject(502, "engine_unreachable", "the engine's socket does not "
                                                   f"answer ({type(exc).__name__}: {exc})"))
            return
        # Watch the client while the engine works: a client that leaves frees its slot at once.
        c.relaying = True
        watcher = asyncio.get_running_loop().create_task(self._watch_client(c, asyncio.current_task()))
        complete = False
        try:
            await self._relay(c, call, body, up)
            complete = True
        except _EngineFailed as exc:
            if c.conn.our_state is h11.SEND_RESPONSE:
                await self._fail(c, call, rules.Reject(exc.status, "engine_failed", f"the engine failed: {exc}"))
            else:  # the head is out: nothing honest can be added; the client sees an incomplete response
                call.outcome = f"cut: the engine's answer broke off ({exc})"
                raise _ClientGone() from None
        except asyncio.CancelledError:
            if not c.gone:
                raise
            asyncio.current_task().uncancel()  # our own watcher's cancel: the client left
            raise _ClientGone() from None
        finally:
            c.relaying = False
            self._pool.give_back(up, reusable=complete)  # a cut exchange closes it: the engine stops
            watcher.cancel()
            await asyncio.wait([watcher])  # its read must end before the next request's read starts

    @staticmethod
    async def _watch_client(c: _Client, relay: asyncio.Task) -> None:
        """Cancel the relay if the client closes mid-call; bytes it sends (pipelining) go to h11."""
        try:
            data = await c.reader.read(READ_CHUNK)
        except ConnectionError:
            data = b""
        c.conn.receive_data(data)
        if not data and c.relaying:
            c.gone = True
            relay.cancel()

    async def _read_body(self, c: _Client, call: CallRecord) -> bytes | None:
        """The whole request body (counted as it arrives: 413 past the cap), or None if answered already."""
        if c.conn.they_are_waiting_for_100_continue:
            c.writer.write(c.conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        parts: list[bytes] = []
        while True:
            event = c.conn.next_event()
            if event is h11.NEED_DATA:
                try:
                    async with asyncio.timeout(self.limits.body_timeout_s):
                        data = await c.reader.read(READ_CHUNK)
                except asyncio.TimeoutError:
                    await self._fail(c, call, rules.Reject(408, "body_timeout", "request body stalled for "
                                                           f"{self.limits.body_timeout_s:g} s"))
                    return None
                if not data:
                    raise _ClientGone()
                c.conn.receive_data(data)
            elif isinstance(event, h11.Data):
                call.request.feed(event.data, time.monotonic())
                if call.request.bytes > self.limits.max_body_bytes:
                    await self._fail(c, call, rules.too_large(self.limits.max_body_bytes))
                    return None
                parts.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return b"".join(parts)
            else:
                raise _ClientGone()

    async def _relay(self, c: _Client, call: CallRecord, body: bytes, up: Upstream) -> None:
        """Send the request to the engine and relay its answer as it arrives.

        Whatever one read from the engine yields (head and/or chunks) is written to the client at once, in
        one write: nothing is held back for later. Raises _EngineFailed when the engine fails or stalls.
        """
        length = None if call.method == b"GET" and not body else len(body)
        head = h11.Request(method=call.method, target=call.target,
                           headers=rules.upstream_headers(call.headers, length))
        up.writer.write(up.conn.send(head) + (up.conn.send(h11.Data(data=body)) if body else b"")
                        + up.conn.send(h11.EndOfMessage()))
        try:
            await up.writer.drain()
        except OSError as exc:
            raise _EngineFailed(502, f"{type(exc).__name__}: {exc}") from None
        stall_s = self.limits.upstream_timeout_s
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(stall_s) as stall:
                while True:
                    out, done, broken = self._translate(c, call, up.conn)
                    if out:
                        c.writer.write(out)
                        if done:
                            c.relaying = False  # a client closing after the last byte is not leaving early
                        await c.writer.drain()
                        call.ttfb(time.monotonic())
                    if broken:
                        raise _EngineFailed(502, broken)
                    if done:
                        return
                    try:
                        up.conn.receive_data(await up.reader.read(READ_CHUNK))
                    except OSError as exc:
                        raise _EngineFailed(502, f"{type(exc).__name__}: {exc}") from None
                    stall.reschedule(loop.time() + stall_s)
        except TimeoutError:
            raise _EngineFailed(504, f"no progress from the engine for {stall_s:g} s") from None

    @staticmethod
    def _translate(c: _Client, call: CallRecord, up: h11.Connection) -> tuple[bytes, bool, str | None]:
        """Client-side bytes for every engine event received so far; whether the answer is complete; and
        why the engine's answer broke, if it did (what arrived before the break is still relayed)."""
        out: list[bytes] = []
        while True:
            try:
                event = up.next_event()
            except h11.ProtocolError as exc:
                return b"".join(out), False, f"{type(exc).__name__}: {exc}"
            if event is h11.NEED_DATA:
                return b"".join(out), False, None
            if isinstance(event, h11.Response):
                call.respond(event.status_code, list(event.headers))
                out.append(c.conn.send(h11.Response(status_code=event.status_code, reason=event.reason,
                                                    headers=rules.client_headers(list(event.headers)))))
            elif isinstance(event, h11.Data):
                call.response.feed(event.data, time.monotonic())
                out.append(c.conn.send(h11.Data(data=event.data)))
            elif isinstance(event, h11.EndOfMessage):
                out.append(c.conn.send(h11.EndOfMessage()))
                return b"".join(out), True, None
            else:
                return b"".join(out), False, f"unexpected {type(event).__name__} from the engine"

    async def _fail(self, c: _Client, call: CallRecord, reject: rules.Reject) -> None:
        """Answer a call that was being forwarded with an error of our own, then close the connection."""
        body = rules.json_error(reject.status, reject.code, reject.message)
        call.respond(reject.status, [], adapter_error=reject.code)
        call.response.feed(body, time.monotonic())
        await self._send_error(c, reject.status, body, head_only=call.method == b"HEAD")
        call.ttfb(time.monotonic())
        call.finished_s = time.monotonic()
        raise _AnsweredClose()

    async def _reject(self, c: _Client, request, started: float, reject: rules.Reject) -> None:
        """Answer without forwarding, log the call, and close the connection (its body is never read)."""
        call = (CallRecord(request.method, request.target, list(request.headers), started, forwarded=False)
                if request is not None else CallRecord(b"", b"", [], started, forwarded=False))
        try:
            await self._fail(c, call, reject)
        finally:
            self.log.record(call.entry(time.monotonic()))

    @staticmethod
    async def _send_error(c: _Client, status: int, body: bytes, head_only: bool = False) -> None:
        """Send a complete JSON error with `Connection: close` (its headers only, for a HEAD request)."""
        if c.conn.our_state is h11.SEND_RESPONSE:
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       (b"connection", b"close")]
            out = c.conn.send(h11.Response(status_code=status, headers=headers))
            if not head_only:  # h11 refuses a body after a HEAD request, as HTTP does
                out += c.conn.send(h11.Data(data=body))
            c.writer.write(out + c.conn.send(h11.EndOfMessage()))
        else:  # a head that never parsed: h11 has no response to send, so answer outside its cycle
            c.writer.write(rules.bare_error(status, body))
        await c.writer.drain()

    @staticmethod
    async def _linger(c: _Client) -> None:
        """Half-close, then drop what the client still sends for a moment before closing.

        Closing with unread request bytes in the kernel makes it send RST, which can destroy the error
        answer before the client reads it (the classic lingering close of HTTP servers).
        """
        if c.writer.is_closing():
            return
        if c.writer.can_write_eof():
            c.writer.write_eof()
        try:
            async with asyncio.timeout(LINGER_S):
                while await c.reader.read(READ_CHUNK):
                    pass
        except (TimeoutError, ConnectionError):
            pass
