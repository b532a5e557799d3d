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
    from onegpu.core.uds_http import UnixHTTPConnection

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


class ContainerView:
    """A container as the SDK's docker.models.containers.Container reads its inspect answer (id, name, status,
    labels): the slice leftovers.find_kit_containers uses."""

    def __init__(self, attrs: dict):
        self.attrs = attrs

    @property
    def id(self):
        return self.attrs.get("Id")

    @property
    def name(self):
        return self.attrs["Name"].lstrip("/") if self.attrs.get("Name") is not None else None

    @property
    def status(self):
        state = self.attrs["State"]
        return state["Status"] if isinstance(state, dict) else state

    @property
    def labels(self) -> dict:
        return self.attrs["Config"].get("Labels") or {}


class _Containers:
    def __init__(self, daemon: LocalDaemon):
        self.daemon = daemon

    def list(self, all: bool = False, filters: dict | None = None, ignore_removed: bool = False) -> list:
        """containers.list as the SDK does it: the list with its query, then each container inspected; one
        removed in between (404) is skipped with ignore_removed."""
        query: dict[str, int | str] = {"limit": -1, "all": 1 if all else 0, "size": 0, "trunc_cmd": 0}
        if filters:  # docker.utils.convert_filters
            query["filters"] = json.dumps({k: [v if isinstance(v, str) else str(v) for v in vs] for k, vs in (
                (k, ("true" if v else "false") if isinstance(v, bool) else v) for k, v in filters.items())
                for vs in [vs if isinstance(vs, list) else [vs]]})
        status, listed = self.daemon.get("/containers/json?" + urllib.parse.urlencode(query))
        if status != 200 or not isinstance(listed, list):
            raise NotAnswered(f"GET /containers/json: {status}")
        found = []
        for row in listed:
            container_id = row.get("Id") if isinstance(row, dict) else None
            if not isinstance(container_id, str):
                raise NotAnswered("GET /containers/json: a row without an Id")
            status, attrs = self.daemon.get("/containers/{0}/json", container_id)
            if status == 404 and ignore_removed:
                continue
            if status != 200 or not isinstance(attrs, dict) or not isinstance(attrs.get("Config"), dict) \
                    or "State" not in attrs:
                raise NotAnswered(f"GET /containers/{container_id}/json: {status}")
            found.append(ContainerView(attrs))
        return found


class LocalClient:
    """The read-only slice of a docker.DockerClient a scan uses (containers.list), on a local socket."""

    def __init__(self, endpoint: str, timeout: float):
        self.containers = _Containers(LocalDaemon(endpoint, timeout))
