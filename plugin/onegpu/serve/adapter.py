"""The loopback serve adapter: HTTP on 127.0.0.1 in front of the engine's Unix socket.

HTTP/1.1 is parsed with httptools on both sides (llhttp, the C parser of Node.js: framing, chunked bodies,
keep-alive and malformed input are its job, not ours); asyncio Protocols do the I/O (adapter_client.py,
adapter_upstream.py). Bodies pass through as bytes, never re-serialised; the engine's chunks are written
to the client as each read brings them. The adapter never retries and never queues: a call over the
limit gets 429 at once. It runs on one event loop; nothing here is thread-safe.
"""
from __future__ import annotations

import asyncio
import time

from msgspec import Struct

from onegpu.serve import http_rules as rules
from onegpu.serve.client import ClientConnection
from onegpu.serve.transport_log import TransportLog
from onegpu.serve.upstream import EnginePool


class AdapterLimits(Struct, frozen=True):
    """Timeouts (s) and caps of the adapter; the defaults are the kit's."""

    max_outstanding: int = rules.MAX_OUTSTANDING
    max_body_bytes: int = rules.MAX_BODY_BYTES
    header_timeout_s: float = 10.0  # from the first byte of a request to its complete head
    idle_timeout_s: float = 75.0  # a kept-alive connection with no request started
    body_timeout_s: float = 30.0  # longest pause between two pieces of a request body
    connect_timeout_s: float = 10.0  # reaching the engine's socket
    upstream_timeout_s: float = 600.0  # longest pause in the engine's answer, or in a client's reading of it
    max_connections: int = 256  # open client connections; more are answered 503 and closed


class Adapter:
    """One adapter: `await start()`, serve, `await close(grace_s)`. Owns the slots, the pool and the log."""

    def __init__(self, socket_path: str, key: str, log: TransportLog, limits: AdapterLimits = AdapterLimits()):
        self.socket_path, self.key, self.log, self.limits = socket_path, key, log, limits
        self.port = 0
        self.outstanding = 0
        self.closing = False
        self.pool: EnginePool | None = None
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[ClientConnection] = set()
        self._in_call: set[ClientConnection] = set()  # connections holding one of the outstanding slots

    async def start(self, host: str = "127.0.0.1") -> int:
        """Listen on a free loopback port (port 0: the kernel picks one) and return it."""
        self.pool = EnginePool(self.socket_path, self.limits.connect_timeout_s)
        self._server = await asyncio.get_running_loop().create_server(lambda: ClientConnection(self), host, 0)
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
        reason = f"cut: the serve window closed and the {grace_s:g} s grace period passed"
        for connection in list(self._connections):
            connection.cut(reason)  # idle kept-alive connections are just closed
        end = time.monotonic() + 5
        while self._connections and time.monotonic() < end:  # their transports close on the next turns
            await asyncio.sleep(0.01)
        if self.pool is not None:
            self.pool.close()
        return {"cut_in_flight": cut}

    # -- called by the connections

    def admit(self, connection: ClientConnection) -> bool:
        """Count a new connection; False when over the limit (it is answered 503 and closed)."""
        self._connections.add(connection)
        return len(self._connections) <= self.limits.max_connections

    def release_connection(self, connection: ClientConnection) -> None:
        self._connections.discard(connection)

    def take_slot(self, connection: ClientConnection) -> None:
        self.outstanding += 1
        self._in_call.add(connection)

    def release_slot(self, connection: ClientConnection) -> None:
        self.outstanding -= 1
        self._in_call.discard(connection)
