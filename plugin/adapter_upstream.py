"""Connections from the serve adapter to the engine's Unix socket, kept alive between calls while fresh.

Reusing a connection saves a connect, a close and the engine's per-connection setup on every call. A
connection goes back to the pool only after a complete exchange that both sides left reusable, and is
reused only within FRESH_S of its last use, well inside the keep-alive window servers keep open (vLLM's
uvicorn: 5 s), so the engine closing an idle connection under a request is not a practical case. The
adapter never retries: a reused connection that fails is answered 502 like any other.
"""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field

import h11

from .uds_http import SUN_PATH_MAX

READ_CHUNK = 65536
FRESH_S = 1.0  # reuse an idle connection only this soon after its last use (s)
MAX_IDLE = 8


@dataclass
class Upstream:
    """One connection to the engine with its own HTTP/1.1 state machine."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    conn: h11.Connection = field(default_factory=lambda: h11.Connection(h11.CLIENT))
    idle_since: float = 0.0


class EnginePool:
    """Idle keep-alive connections to one engine socket (LIFO: the most recently used first)."""

    def __init__(self, socket_path: str, connect_timeout_s: float):
        self.socket_path, self.connect_timeout_s = socket_path, connect_timeout_s
        self._idle: list[Upstream] = []
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

    async def take(self) -> Upstream:
        """A fresh idle connection, or a new one; raises OSError or TimeoutError if the engine is unreachable."""
        now = time.monotonic()
        while self._idle:
            up = self._idle.pop()
            if now - up.idle_since < FRESH_S and not up.reader.at_eof() and not up.writer.is_closing():
                return up
            up.writer.close()
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(self._connect_path, limit=READ_CHUNK), self.connect_timeout_s)
        return Upstream(reader, writer)

    def give_back(self, up: Upstream, reusable: bool) -> None:
        """Keep the connection if the exchange completed cleanly on both sides; close it otherwise."""
        if reusable and up.conn.our_state is h11.DONE and up.conn.their_state is h11.DONE \
                and len(self._idle) < MAX_IDLE and self._dirfd != -1:
            up.conn.start_next_cycle()
            up.idle_since = time.monotonic()
            self._idle.append(up)
        else:
            up.writer.close()

    def close(self) -> None:
        for up in self._idle:
            up.writer.close()
        self._idle.clear()
        if self._dirfd is not None and self._dirfd >= 0:
            os.close(self._dirfd)
        self._dirfd = -1  # closed: nothing goes back into the pool any more
