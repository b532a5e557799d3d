"""The native serve window: the connection file's states, the STOP/deadline watch, and the window's life.

connection-private.json moves STARTING -> READY (only once GET /health answers 200 through the adapter,
end to end) -> CLOSED with its reason; nothing else. The deadline is counted from READY.
"""
from __future__ import annotations

import datetime as _dt
import http.client
import secrets
import time
from pathlib import Path
from typing import Callable

from msgspec import Struct

from onegpu.core.outcomes import Blocked
from onegpu.evidence.rundir import write_json
from onegpu.requests.batch import explain_death
from onegpu.serve.http_rules import FORWARDED, MAX_BODY_BYTES, MAX_OUTSTANDING
from onegpu.serve.transport_log import read_entries, summarize

SCHEMA = "onegpu/connection@1"
CONNECTION_FILE = "connection-private.json"
TRANSPORT_FILE = "transport.jsonl"
STOP_FILE = "STOP"
CLOSE_GRACE_S = 30.0  # calls in flight when the window closes get this long to finish, then are cut
READY_TIMEOUT_S = 60.0  # the engine already booted: /health through the adapter must answer within this
POLL_S = 0.5

# The only moves a connection file makes.
TRANSITIONS = {None: {"STARTING"}, "STARTING": {"READY", "CLOSED"}, "READY": {"CLOSED"}, "CLOSED": set()}


class StateError(ValueError):
    """A connection-file move the state machine does not allow (e.g. CLOSED -> READY)."""


def next_state(current: str | None, new: str) -> str:
    """The new state, if the move current -> new is allowed; raises StateError otherwise."""
    if new not in TRANSITIONS.get(current, set()):
        raise StateError(f"connection state cannot move from {current} to {new}")
    return new


def _iso(epoch_s: float | None) -> str | None:
    if epoch_s is None:
        return None
    return _dt.datetime.fromtimestamp(epoch_s, _dt.timezone.utc).isoformat(timespec="seconds")


def engine_gone(engine_state: dict) -> str:
    return (f"the engine container stopped (status {engine_state.get('status')}, exit code "
            f"{engine_state.get('exit_code')}, OOM-killed {engine_state.get('oom_killed')})")


def close_reason(stop_exists: bool, now_s: float, deadline_s: float, window_s: float,
                 engine_state: dict | None) -> str | None:
    """Why the window must close now (STOP file, engine gone, deadline), or None to keep it open.

    `engine_state` is None while the engine runs, else its {status, exit_code, oom_killed}.
    """
    if stop_exists:
        return f"a {STOP_FILE} file appeared in the run folder"
    if engine_state is not None:
        return engine_gone(engine_state)
    if now_s >= deadline_s:
        return f"the deadline passed ({window_s:g} s after READY)"
    return None


class ConnectionFile:
    """connection-private.json: URL, key, exact model ID, deadline and state; rewritten atomically, 0600."""

    def __init__(self, path: Path, url: str, key: str, model_id: str, window_s: float):
        self.path = path
        self.state: str | None = None
        self.doc = {
            "schema": SCHEMA, "state": None, "url": url, "openai_base_url": f"{url}/v1", "api_key": key,
            "model": model_id, "window_s": window_s, "deadline": None, "ready_at": None, "closed_at": None,
            "closed_reason": None, "endpoints": sorted(f"{m.decode()} {p.decode()}" for m, p in FORWARDED),
            "max_outstanding": MAX_OUTSTANDING, "max_body_bytes": MAX_BODY_BYTES,
            "note": "wait for state READY; calls over max_outstanding get 429; other APIs answer ADAPTER REQUIRED",
        }

    def move(self, state: str, **fields) -> None:
        """Move to `state` (StateError if not allowed) and write the file."""
        self.state = next_state(self.state, state)
        self.doc.update(state=state, **fields)
        write_json(self.path, self.doc)


def health_through(url_port: int, key: str, timeout_s: float = 5.0) -> int | None:
    """The status of GET /health sent through the adapter like a client would; None if no answer."""
    conn = http.client.HTTPConnection("127.0.0.1", url_port, timeout=timeout_s)
    try:
        conn.request("GET", "/health", headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        return response.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


class WindowNotReady(RuntimeError):
    """/health never answered 200 through the adapter; `engine_state` is set when the engine was gone."""

    def __init__(self, reason: str, engine_state: dict | None):
        super().__init__(f"serve window never became READY: {reason}")
        self.reason, self.engine_state = reason, engine_state


class WindowClosed(Struct):
    """How the window ended: its reason, how long it was READY (s), calls cut, the transport sums."""

    reason: str
    ready_s: float | None
    cut_in_flight: int
    transport: dict


class ServeWindow:
    """One serve window over an engine's Unix socket, its files in the run folder.

    `engine_state` returns None while the engine runs, else its final state dict; `explain_end` turns that
    state into {code, reason, why, ...} (onegpu.requests.batch.explain_death: the engine's own words where a log is read).
    """

    def __init__(self, run_folder: Path, socket_path: str, model_id: str, window_s: float,
                 engine_state: Callable[[], dict | None], upstream_timeout_s: float = 600.0,
                 grace_s: float = CLOSE_GRACE_S,
                 explain_end: Callable[[dict], dict] = lambda state: explain_death(None, state)):
        self.run_folder, self.window_s, self.grace_s = run_folder, window_s, grace_s
        self.engine_state = engine_state
        self.explain_end = explain_end
        self.engine_end: dict | None = None  # set once the engine is found gone: why it ended
        self.key = secrets.token_urlsafe(32)
        # The adapter (asyncio, uvloop, httptools) is imported when a window opens, not when a scan session
        # collects this phase's tests.
        from onegpu.serve.adapter import AdapterLimits
        from onegpu.serve.thread import AdapterThread
        self.adapter = AdapterThread(socket_path, self.key, run_folder / TRANSPORT_FILE,
                                     AdapterLimits(upstream_timeout_s=upstream_timeout_s))
        self.file = ConnectionFile(run_folder / CONNECTION_FILE, self.adapter.url, self.key, model_id, window_s)
        self.file.move("STARTING")
        self.ready_mono: float | None = None
        self.deadline_mono: float | None = None
        self.closed: WindowClosed | None = None

    @property
    def connection_path(self) -> Path:
        return self.file.path

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """READY once /health answers 200 through the adapter; WindowNotReady (after closing) otherwise."""
        end = time.monotonic() + timeout_s
        status = None
        while time.monotonic() < end:
            if self.engine_state() is not None:
                break
            status = health_through(self.adapter.port, self.key)
            if status == 200:
                self.ready_mono = time.monotonic()
                self.deadline_mono = self.ready_mono + self.window_s
                now = time.time()
                self.file.move("READY", ready_at=_iso(now), deadline=_iso(now + self.window_s))
                return
            time.sleep(POLL_S)
        gone = self.engine_state()
        why = (self.gone_reason(gone) if gone is not None
               else f"GET /health through the adapter did not answer 200 within {timeout_s:g} s (last: {status})")
        self.close(f"never ready: {why}")
        raise WindowNotReady(why, gone)

    def gone_reason(self, state: dict) -> str:
        """The engine's end as the window says it: Docker's state, then the engine's own reason."""
        if self.engine_end is None:
            self.engine_end = self.explain_end(state)
        reason = self.engine_end.get("reason")
        return engine_gone(state) + (f": {reason}" if reason else "")

    def wait(self, poll_s: float = POLL_S, clock=time.monotonic, sleep=time.sleep) -> str:
        """Block until STOP, the deadline, or the engine's end; return the reason (the window is still open)."""
        assert self.deadline_mono is not None, "wait_ready() first"
        while True:
            state, stop = self.engine_state(), (self.run_folder / STOP_FILE).exists()
            reason = close_reason(stop, clock(), self.deadline_mono, self.window_s, state)
            if reason:
                return self.gone_reason(state) if state is not None and not stop else reason
            sleep(poll_s)

    def close(self, reason: str) -> WindowClosed:
        """New calls get 503, calls in flight get the grace period, the adapter stops; CLOSED with reason."""
        if self.closed is not None:
            return self.closed
        result = self.adapter.close(self.grace_s)
        ready_s = round(time.monotonic() - self.ready_mono, 3) if self.ready_mono is not None else None
        cut = result["cut_in_flight"]
        self.file.move("CLOSED", closed_at=_iso(time.time()),
                       closed_reason=reason + (f"; {cut} call(s) in flight were cut" if cut else ""))
        transport = summarize(read_entries(self.adapter.log.path))
        transport["lines_lost"] = self.adapter.log.lost  # lines the disk refused (e.g. full), if any
        self.closed = WindowClosed(reason, ready_s, cut, transport)
        return self.closed


def ready_line(window: ServeWindow) -> str:
    """The fact line of an open window: where the connection file is and its state."""
    doc = window.file.doc
    return (f"serve window {doc['state']} at {doc['url']} for model {doc['model']} until {doc['deadline']} "
            f"({window.window_s:g} s); connection file: {window.connection_path}; close early: touch "
            f"{window.run_folder / STOP_FILE}")


def hold_open(window: ServeWindow) -> list[str]:
    """Keep the window open until STOP, the deadline or the engine's end, then close it.

    Raises Blocked ENGINE_DIED / HOST_OOM_KILLED when the engine ended the window.
    """
    closed = window.close(window.wait())
    t = closed.transport
    lines = [f"serve window CLOSED: {closed.reason}; READY for {closed.ready_s} s; {closed.cut_in_flight} "
             "call(s) cut at close",
             f"transport: {t['calls']} calls ({t['forwarded']} forwarded, {t['rejected_429']} x 429), statuses "
             f"{t['statuses']}, forwarded latency p50 {t['latency_forwarded_s']['p50']} s p95 "
             f"{t['latency_forwarded_s']['p95']} s (a transport record, not a grade)"]
    gone = window.engine_state()
    if gone is not None:
        reason = window.gone_reason(gone)
        assert window.engine_end is not None  # gone_reason explained the end
        raise Blocked(window.engine_end["code"], f"the engine ended the serve window: {reason}", {
            "ready_s": closed.ready_s, "calls": t["calls"]})
    return lines
