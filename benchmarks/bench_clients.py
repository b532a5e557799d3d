"""The benchmark's clients: one keep-alive connection each, one call at a time, timed.

  * lean        - the request as prebuilt bytes on a plain socket; the answer read to its end by its framing
                  (Content-Length, or chunked to the last chunk), its status checked. On a 2-vCPU machine the
                  load generator shares the CPUs with the engine and the adapter, and what it spends lands on
                  both paths' latency: this one spends about half of what http.client does per call.
  * http.client - the standard library's client, as an operator's script would call it.

Both time the same thing: the whole answer (non-streamed) or the first SSE event (streamed, `data:`).
A `target` is the engine's Unix socket path (str) or the adapter's loopback port (int, sent with its key).
"""
from __future__ import annotations

import http.client
import re
import socket
import time

from onegpu.core.uds_http import UnixHTTPConnection

CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
LAST_CHUNK_END = b"\r\n0\r\n\r\n"  # the end of a chunked answer
PATH = "/v1/completions"


class LeanClient:
    def __init__(self, target, payload: bytes, key: str):
        on_socket = isinstance(target, str)
        host = "localhost" if on_socket else f"127.0.0.1:{target}"
        auth = "" if on_socket else f"Authorization: Bearer {key}\r\n"
        self.request = (f"POST {PATH} HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\n"
                        f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload
        if on_socket:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.connect(target)
        else:
            self.sock = socket.create_connection(("127.0.0.1", target))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(30)

    def _more(self) -> bytes:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection mid-answer")
        return data

    def call(self, stream: bool) -> float:
        began = time.perf_counter()
        self.sock.sendall(self.request)
        answer = self._more()
        while (head_end := answer.find(b"\r\n\r\n")) < 0:
            answer += self._more()
        if not answer.startswith(b"HTTP/1.1 200 "):
            raise RuntimeError(f"not a 200 answer: {answer[:300]!r}")
        body_at = head_end + 4
        if stream:
            while answer.find(b"data:", body_at) < 0:
                answer += self._more()
            took = time.perf_counter() - began
            while not answer.endswith(LAST_CHUNK_END):
                answer += self._more()
            return took
        found = CONTENT_LENGTH.search(answer, 0, body_at)
        if found is None:
            raise RuntimeError(f"a 200 answer without Content-Length: {answer[:300]!r}")
        length = int(found.group(1))
        while len(answer) - body_at < length:
            answer += self._more()
        return time.perf_counter() - began

    def close(self) -> None:
        self.sock.close()


class StdlibClient:
    def __init__(self, target, payload: bytes, key: str):
        self.payload = payload
        self.headers = {"Content-Type": "application/json"}
        self.conn: http.client.HTTPConnection
        if isinstance(target, str):
            self.conn = UnixHTTPConnection(target, timeout=30)
        else:
            self.conn = http.client.HTTPConnection("127.0.0.1", target, timeout=30)
            self.headers["Authorization"] = f"Bearer {key}"

    def call(self, stream: bool) -> float:
        began = time.perf_counter()
        self.conn.request("POST", PATH, body=self.payload, headers=self.headers)
        response = self.conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"not a 200 answer: {response.status} {response.read()[:300]!r}")
        if stream:
            while not response.readline().startswith(b"data:"):
                pass
            took = time.perf_counter() - began
            response.read()
            return took
        response.read()
        return time.perf_counter() - began

    def close(self) -> None:
        self.conn.close()


CLIENTS: dict[str, type[LeanClient] | type[StdlibClient]] = {"lean": LeanClient, "http.client": StdlibClient}
