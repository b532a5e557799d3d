"""HTTP/1.1 client for the engine's Unix socket, with time to first byte and total time per request.

Hand-written on the standard library's http.client because `requests` has no maintained Unix-socket
adapter (requests-unixsocket is unmaintained) and the kit needs the first-byte time, which no client
library exposes. Socket paths over the kernel's 107-byte limit are reached through
/proc/self/fd/<dirfd>/<name> of an open descriptor of their folder.
"""
from __future__ import annotations

import http.client
import os
import socket
import time
from contextlib import contextmanager
from typing import Iterator

from msgspec import Struct, field

SUN_PATH_MAX = 107  # bytes of sockaddr_un.sun_path, less the terminating NUL
DEFAULT_TIMEOUT_S = 30.0


def connect_unix(sock: socket.socket, socket_path: str | os.PathLike) -> None:
    """Connect `sock` to the socket file; long paths go through /proc/self/fd of their folder.

    Raises OSError (FileNotFoundError, ConnectionRefusedError, ...) as connect(2) does, and ValueError
    when even the socket's own file name is too long to be reached.
    """
    path = os.fsencode(socket_path)
    if len(path) <= SUN_PATH_MAX:
        sock.connect(path)
        return
    folder, name = os.path.split(path)
    dirfd = os.open(folder or b".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        short = b"/proc/self/fd/%d/%s" % (dirfd, name)
        if len(short) > SUN_PATH_MAX:
            raise ValueError(f"socket file name {name!r} is too long to connect to ({len(short)} > "
                             f"{SUN_PATH_MAX} bytes even through /proc/self/fd)")
        sock.connect(short)
    finally:
        os.close(dirfd)


class UnixHTTPConnection(http.client.HTTPConnection):
    """An http.client connection whose transport is a Unix stream socket; timeout in seconds."""

    def __init__(self, socket_path: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT_S):
        # "localhost" is only the Host header; nothing is resolved or reached over the network.
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            connect_unix(sock, self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class UdsResponse(Struct, frozen=True):
    """One complete response; ttfb_s: request start to the status line's first byte; elapsed_s: to the body's end."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    ttfb_s: float
    elapsed_s: float

    def header(self, name: str) -> str | None:
        """First value of a header, case-insensitive; None when absent."""
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


def _wait_first_byte(conn: UnixHTTPConnection) -> None:
    """Block until the answer's first byte has arrived (peeked, not consumed); raises socket.timeout."""
    if not conn.sock.recv(1, socket.MSG_PEEK):
        raise http.client.RemoteDisconnected("engine closed the connection without answering")


def _send(conn: UnixHTTPConnection, method: str, path: str, body: bytes, headers: dict | None) -> None:
    all_headers = {"Content-Type": "application/json"} if body else {}
    all_headers.update(headers or {})
    conn.request(method, path, body=body or None, headers=all_headers)


def uds_request(socket_path: str | os.PathLike, method: str, path: str, body: bytes = b"",
                headers: dict | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> UdsResponse:
    """Send one request on a fresh connection and read the whole answer; `timeout` (s) bounds all of it.

    Raises TimeoutError past `timeout`, other OSError (no socket, refused) and http.client.HTTPException
    (malformed or cut answer).
    """
    started = time.monotonic()
    deadline = started + timeout

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no complete answer within {timeout} s")
        return remaining

    conn = UnixHTTPConnection(socket_path, timeout)
    try:
        _send(conn, method, path, body, headers)
        sock = conn.sock  # kept: http.client drops conn.sock when the answer says it will close
        sock.settimeout(left())
        _wait_first_byte(conn)
        ttfb = time.monotonic() - started
        resp = conn.getresponse()
        parts = []
        while True:
            sock.settimeout(left())  # each read waits at most what is left of the whole request's time
            data = resp.read1(65536)
            if not data:
                break
            parts.append(data)
        elapsed = time.monotonic() - started
        return UdsResponse(resp.status, resp.reason, list(resp.getheaders()), b"".join(parts), ttfb, elapsed)
    finally:
        conn.close()


class UdsStream(Struct):
    """A response being read as it arrives: status and headers now, the body through `chunks()`."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    ttfb_s: float
    _resp: http.client.HTTPResponse
    _started: float
    elapsed_s: float | None = None  # set when the body has been read to its end
    chunk_times_s: list[float] = field(default_factory=list)  # arrival of each chunk, from request start

    def chunks(self, size: int = 65536) -> Iterator[bytes]:
        """Raw body bytes as they arrive (chunked framing removed); raises http.client.IncompleteRead if cut."""
        while True:
            data = self._resp.read1(size)
            if not data:
                self.elapsed_s = time.monotonic() - self._started
                return
            self.chunk_times_s.append(time.monotonic() - self._started)
            yield data

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


@contextmanager
def uds_stream(socket_path: str | os.PathLike, method: str, path: str, body: bytes = b"",
               headers: dict | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[UdsStream]:
    """Send one request and yield a `UdsStream` to read the body incrementally (SSE); closes on exit.

    `timeout` bounds each wait for bytes, not the whole stream. Raises as `uds_request`.
    """
    conn = UnixHTTPConnection(socket_path, timeout)
    started = time.monotonic()
    try:
        _send(conn, method, path, body, headers)
        _wait_first_byte(conn)
        ttfb = time.monotonic() - started
        resp = conn.getresponse()
        yield UdsStream(resp.status, resp.reason, list(resp.getheaders()), ttfb, resp, started)
    finally:
        conn.close()
