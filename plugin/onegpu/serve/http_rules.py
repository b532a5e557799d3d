"""Pure: what the serve adapter decides about one HTTP request, and the headers it passes on.

No sockets here: the checks take the parsed request head (header names lower-cased, values stripped) and
return a `Reject` or None, so every rule is unit-tested without a server; the framing helpers build the
exact bytes of a head or a chunk.
"""
from __future__ import annotations

import hmac
import json
from http import HTTPStatus

from msgspec import Struct

from onegpu.core.units import MIB

# The four engine endpoints a native harness may reach; everything else needs an adapter of its own.
FORWARDED: frozenset[tuple[bytes, bytes]] = frozenset({
    (b"GET", b"/health"),
    (b"GET", b"/v1/models"),
    (b"POST", b"/v1/chat/completions"),
    (b"POST", b"/v1/completions"),
})
MAX_BODY_BYTES = 16 * MIB  # request bodies above 16 MiB get 413
MAX_OUTSTANDING = 4  # proxied calls at once; the next one gets 429

# RFC 9110 7.6.1 connection-specific fields (plus the old proxy ones): they describe one hop, never both.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te",
                        b"trailer", b"upgrade", b"proxy-authenticate", b"proxy-authorization"})
# Consumed by the adapter itself: the key is ours, the Host names our port, the length is re-stated for
# the exact bytes forwarded, Expect is answered here.
CONSUMED = frozenset({b"authorization", b"host", b"content-length", b"expect"})

Headers = list[tuple[bytes, bytes]]


class Reject(Struct, frozen=True):
    """An answer the adapter gives itself, without reaching the engine."""

    status: int
    code: str  # machine-readable, also the transport log's `rejected` field
    message: str


def path_of(target: bytes) -> bytes:
    """The path of a request target, without its query string."""
    return target.split(b"?", 1)[0]


def header_values(headers: Headers, name: bytes) -> list[bytes]:
    return [value for key, value in headers if key == name]


def check_origin(headers: Headers, port: int) -> Reject | None:
    """403 unless Host names this loopback port exactly and no Origin header is present (DNS rebinding)."""
    if header_values(headers, b"origin"):
        return Reject(403, "origin_refused", "requests carrying an Origin header (browsers) are refused: the "
                                             "adapter serves local harnesses only")
    hosts = header_values(headers, b"host")
    allowed = {f"127.0.0.1:{port}".encode(), f"localhost:{port}".encode()}
    if len(hosts) != 1 or hosts[0].lower() not in allowed:
        shown = b", ".join(hosts).decode("latin-1")[:100] or "(none)"
        return Reject(403, "host_refused", f"Host {shown!r} is refused: only 127.0.0.1:{port} or "
                                           f"localhost:{port} are served")
    return None


def check_key(headers: Headers, key: str) -> Reject | None:
    """401 unless exactly one `Authorization: Bearer <key>` matches (constant-time compare)."""
    values = header_values(headers, b"authorization")
    given = b""
    if len(values) == 1:
        scheme, _, token = values[0].strip().partition(b" ")
        if scheme.lower() == b"bearer":
            given = token.strip()
    # compare_digest runs in time independent of where the bytes differ; an empty token never matches.
    if not given or not hmac.compare_digest(given, key.encode()):
        return Reject(401, "invalid_api_key", "missing or wrong API key: send 'Authorization: Bearer <key>' "
                                              "with the key from connection-private.json")
    return None


def check_route(method: bytes, target: bytes) -> Reject | None:
    """501 ADAPTER REQUIRED for any method and path the adapter does not forward."""
    if (method, path_of(target)) in FORWARDED:
        return None
    shown = f"{method.decode('latin-1')} {path_of(target).decode('latin-1')[:200]}"
    return Reject(501, "adapter_required", f"ADAPTER REQUIRED: {shown} is not forwarded. Only GET /health, "
                  "GET /v1/models, POST /v1/chat/completions and POST /v1/completions reach the engine; other "
                  "APIs (responses, embeddings, tokenizer, vendor APIs) are never approximated")


def check_declared_length(headers: Headers, max_body_bytes: int = MAX_BODY_BYTES) -> Reject | None:
    """413 when Content-Length already says the body is too large (checked before reading it)."""
    for value in header_values(headers, b"content-length"):
        if value.isdigit() and int(value) > max_body_bytes:
            return too_large(max_body_bytes)
    return None


def too_large(max_body_bytes: int = MAX_BODY_BYTES) -> Reject:
    return Reject(413, "body_too_large", f"request body over {max_body_bytes} bytes ({max_body_bytes / MIB:g} "
                                         "MiB) is refused")


def closing() -> Reject:
    return Reject(503, "window_closed", "the serve window is closing or closed: no new requests are accepted")


def busy(max_outstanding: int = MAX_OUTSTANDING) -> Reject:
    return Reject(429, "too_many_outstanding", f"{max_outstanding} proxied calls are already outstanding; this "
                  "transport limit is part of the experiment (the adapter never queues or retries)")


def check_request(method: bytes, target: bytes, headers: Headers, *, port: int, key: str,
                  is_closing: bool, max_body_bytes: int = MAX_BODY_BYTES) -> Reject | None:
    """All checks that need only the request head, in the order a caller learns least from.

    Host/Origin first (a rebinding page learns nothing), then the key, then the route, the window state
    and the declared size. The 429 limit is applied by the server, which owns the count.
    """
    return (check_origin(headers, port) or check_key(headers, key) or check_route(method, target)
            or (closing() if is_closing else None) or check_declared_length(headers, max_body_bytes))


def json_error(status: int, code: str, message: str) -> bytes:
    """An OpenAI-shaped error body, so SDK clients surface the message instead of a parse error."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}},
                      separators=(",", ":")).encode()


def _connection_named(headers: Headers) -> set[bytes]:
    """Header names a Connection header declares hop-by-hop for this message."""
    named: set[bytes] = set()
    for value in header_values(headers, b"connection"):
        named.update(part.strip().lower() for part in value.split(b",") if part.strip())
    return named


def upstream_headers(headers: Headers, body_bytes: int | None) -> Headers:
    """Client headers to send to the engine: end-to-end ones only, the key removed, Host and length re-stated.

    `body_bytes` None means the request carries no body (a GET).
    """
    drop = HOP_BY_HOP | CONSUMED | _connection_named(headers)
    kept = [(k, v) for k, v in headers if k not in drop]
    head = [(b"host", b"localhost")]
    if body_bytes is not None:
        head.append((b"content-length", str(body_bytes).encode()))
    return head + kept


def client_headers(headers: Headers) -> Headers:
    """Engine response headers to send to the client: end-to-end ones only (the adapter re-frames the body).

    Content-Length is kept when the engine stated one (the body is relayed unchanged, so it stays true);
    a chunked engine response is re-chunked to the client, one chunk per engine read.
    """
    drop = HOP_BY_HOP | _connection_named(headers)
    return [(k, v) for k, v in headers if k not in drop]


def is_event_stream(headers: Headers) -> bool:
    return any(v.split(b";", 1)[0].strip().lower() == b"text/event-stream"
               for v in header_values(headers, b"content-type"))


def reason_phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b"Error"


def request_head(method: bytes, target: bytes, headers: Headers) -> bytes:
    """An HTTP/1.1 request head (the values were validated by the parser they came from)."""
    return b"%s %s HTTP/1.1\r\n%s\r\n" % (method, target, b"".join(b"%s: %s\r\n" % h for h in headers))


def response_head(status: int, reason: bytes, headers: Headers) -> bytes:
    return b"HTTP/1.1 %d %s\r\n%s\r\n" % (status, reason or reason_phrase(status),
                                          b"".join(b"%s: %s\r\n" % h for h in headers))


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (never empty: an empty chunk would end the body)."""
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def error_response(status: int, body: bytes, head_only: bool = False) -> bytes:
    """A complete JSON error answer with `Connection: close` (its head only, for a HEAD request)."""
    head = response_head(status, b"", [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode()), (b"connection", b"close")])
    return head if head_only else head + body
