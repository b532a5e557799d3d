"""The read-only Docker Engine API questions a scan asks (version, info, one image), over the local daemon's Unix
socket with the standard library's http.client.

Importing the docker SDK (and requests with it) costs a scan session ~0.25 s of CPU, more than the questions
themselves. The answers are the same JSON the SDK returns, asked the way the SDK asks them: the API version from
the unversioned /version first, then /v<version>/... paths, with the SDK's path quoting. Only the expected answer
is taken from here: for any other endpoint (tcp://, ssh://, ...) and any failure (no socket, refused, timeout, an
unexpected status or body) the callers ask again through the SDK, so every error reads exactly as the SDK words it.
"""
from __future__ import annotations

import json
import urllib.parse

UNIX = "unix://"


class NotAnswered(Exception):
    """The fast path has no answer: ask through the docker SDK."""


def socket_path(endpoint: str) -> str | None:
    """The socket file of a local unix:// endpoint (absolute path), else None."""
    if endpoint.startswith(UNIX) and endpoint[len(UNIX):].startswith("/"):
        return endpoint[len(UNIX):]
    return None


def _get(sock: str, path: str, timeout: float) -> tuple[int, object]:
    from .uds_http import UnixHTTPConnection

    conn = UnixHTTPConnection(sock, timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        status = resp.status
    except Exception as exc:  # OSError, http.client.HTTPException, ValueError: the SDK gives the verdict
        raise NotAnswered(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        raise NotAnswered(f"GET {path}: {status}, not JSON") from None


class LocalDaemon:
    """One daemon on a local socket, its API version read as the SDK's from_env reads it."""

    def __init__(self, endpoint: str, timeout: float):
        sock = socket_path(endpoint)
        if sock is None:
            raise NotAnswered(f"{endpoint} is not a local unix:// socket")
        self.sock, self.timeout = sock, timeout
        status, version = _get(sock, "/version", timeout)
        if status != 200 or not isinstance(version, dict) or not isinstance(version.get("ApiVersion"), str):
            raise NotAnswered(f"GET /version: {status}")
        self.api_version = version["ApiVersion"]

    def get(self, pathfmt: str, *args: str) -> tuple[int, object]:
        """GET /v<api version><pathfmt formatted with args quoted as the SDK quotes them>."""
        path = pathfmt.format(*(urllib.parse.quote(a, safe="/:") for a in args))
        return _get(self.sock, f"/v{self.api_version}{path}", self.timeout)

    def get_object(self, pathfmt: str, *args: str) -> dict:
        """The JSON object a 200 answer holds; NotAnswered for anything else."""
        status, body = self.get(pathfmt, *args)
        if status != 200 or not isinstance(body, dict):
            raise NotAnswered(f"GET {pathfmt}: {status}")
        return body
