"""Bytes from one client connection -> HTTP requests, oldest first, parsed by httptools (llhttp).

Pipelined requests queue behind the first; the connection takes them one at a time. Header names are
lower-cased and values stripped, as the checks in adapter_http expect. Malformed input is not raised but
kept as `bad` (why the input cannot be read on), since it may arrive behind a call still running.
"""
from __future__ import annotations

import time
from collections import deque

import httptools

MAX_HEAD_BYTES = 64 * 1024  # a request head past this gets 431
HEAD_TOO_LARGE = f"request head over {MAX_HEAD_BYTES} bytes"


class Request:
    """One request as parsed so far."""

    __slots__ = ("target", "headers", "method", "version", "keep_alive", "head_done", "complete", "body",
                 "body_bytes", "started")

    def __init__(self) -> None:
        self.target = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.method = b""
        self.version = b"1.1"
        self.keep_alive = True
        self.head_done = self.complete = False
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.started = 0.0  # when its head was complete: the transport log's clock starts here


class RequestReader:
    """Feeds a connection's bytes to one parser; `requests` holds what they made, oldest first."""

    def __init__(self, max_body_bytes: int):
        self.max_body_bytes = max_body_bytes
        self.requests: deque[Request] = deque()
        self.head_bytes = 0  # bytes received since the current head began (0: no head under way)
        self.bad: str | None = None
        self._parser = httptools.HttpRequestParser(self)

    @property
    def awaiting_head(self) -> bool:
        """No request is parsed or under way, or the newest one's head is not complete."""
        return not self.requests or not self.requests[-1].head_done

    def feed(self, data: bytes) -> None:
        if self.awaiting_head:
            self.head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.bad = self.bad or "protocol upgrades are not supported"
        except httptools.HttpParserError as exc:
            self.bad = self.bad or f"malformed HTTP: {exc}"
        if self.requests and self.awaiting_head and self.head_bytes > MAX_HEAD_BYTES:
            self.bad = self.bad or HEAD_TOO_LARGE

    # -- httptools callbacks

    def on_message_begin(self) -> None:
        self.requests.append(Request())

    def on_url(self, url: bytes) -> None:
        self.requests[-1].target += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.requests[-1].headers.append((name.lower(), value.strip()))

    def on_headers_complete(self) -> None:
        request = self.requests[-1]
        request.method = self._parser.get_method()
        request.version = self._parser.get_http_version().encode()
        request.keep_alive = self._parser.should_keep_alive() and request.version == b"1.1"
        request.head_done, request.started = True, time.monotonic()
        self.head_bytes = 0
        # A head that arrived whole in one read is measured from its parts (the request line and the CRLFs).
        size = len(request.method) + len(request.target) + 14 + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if size > MAX_HEAD_BYTES:
            self.bad = self.bad or HEAD_TOO_LARGE

    def on_body(self, data: bytes) -> None:
        request = self.requests[-1]
        request.body_bytes += len(data)
        if request.body_bytes <= self.max_body_bytes:  # past the cap it is refused: keep nothing
            request.body.append(data)

    def on_message_complete(self) -> None:
        self.requests[-1].complete = True
