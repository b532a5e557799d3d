"""Send request bodies to the engine one at a time, in file order, and record every outcome durably.

Each body goes byte-for-byte over the engine's Unix socket; no retries. Records (JSON lines, 0600, each line
flushed and fsynced before the next request):
  <stem>.jsonl          the OpenAI batch output: one line per request that got an HTTP answer
  <stem>.errors.jsonl   the OpenAI batch error file: requests without an answer (TIMEOUT, DEADLINE,
                        TRANSPORT, ENGINE_DIED / HOST_OOM_KILLED with the engine's state; a server error the
                        engine gave as it died counts as no answer, its body kept in the error)
  <stem>.timings.jsonl  per-request transport timings, kept apart so the batch-output shape stays clean
A resumed batch sends only the custom_ids missing from <stem>.jsonl, so none is ever answered twice there.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable
from typing import Protocol as TypingProtocol

from msgspec import Struct, field

from onegpu.core import strict_json
from onegpu.evidence.receipt import now_iso
from onegpu.evidence.rundir import append_line, open_private_append, utc_stamp, write_private
from onegpu.requests.requests_file import RequestLine

BINDING_NAME = "batch-binding.json"
BATCH_STEM = "responses"
DEATH_GRACE_S = 5.0  # how long a refused connection waits for Docker to report the engine's exit
# A server error from an engine whose /health no longer answers 200 waits this long for the engine to exit:
# vLLM's API server answers HTTP 500 ("EngineCore encountered an issue") to the request in flight when its engine
# core dies, and shuts down about 5 s later (tests_offline/data/engine_logs/died-after-start.log).
DYING_GRACE_S = 30.0
HEALTH_TIMEOUT_S = 2.0
CODES = ("TIMEOUT", "DEADLINE", "TRANSPORT", "ENGINE_DIED", "HOST_OOM_KILLED")


class EngineLike(TypingProtocol):
    """What the runner needs of the engine handle."""

    socket_path: str | Path

    def alive(self) -> bool: ...

    def state(self) -> dict: ...


class BatchRecordError(Exception):
    """A record file holds a complete line that is not JSON: something other than the kit changed it."""


class BatchFiles(Struct, frozen=True):
    """The three record files of one request run."""

    responses: Path
    errors: Path
    timings: Path

    @classmethod
    def for_stem(cls, folder: Path, stem: str) -> "BatchFiles":
        return cls(folder / f"{stem}.jsonl", folder / f"{stem}.errors.jsonl", folder / f"{stem}.timings.jsonl")

    def all(self) -> tuple[Path, Path, Path]:
        return self.responses, self.errors, self.timings


class Recorded(Struct):
    """What the record files held when a run (or a resumed run) began."""

    responses: list[dict]
    errors: list[dict]
    timings: list[dict]
    cut: dict[str, int] = field(default_factory=dict)  # file name -> bytes of a torn last line set aside

    @property
    def answered(self) -> set[str]:
        return {r["custom_id"] for r in self.responses if r.get("custom_id") is not None}


class RunResult(Struct):
    """What one session's run did."""

    sent: int = 0
    answered: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # code -> count
    engine_death: dict | None = None  # the engine's state once it was found dead
    engine_end: dict | None = None  # why it ended: code, why (the sentence), the engine's quote and evidence
    deadline_hit: bool = False
    elapsed_s: float = 0.0


def engine_death_code(state: dict) -> str:
    """The outcome code for an engine found dead, from its Docker state alone: its RAM cap killed it, or it
    died otherwise (explain_death reads the engine's log where the handle can)."""
    return "HOST_OOM_KILLED" if state.get("oom_killed") else "ENGINE_DIED"


def explain_death(engine, state: dict) -> dict:
    """{code, reason, why, ...} for an engine found dead: `why` (the exit code, OOMKilled, then the reason) is
    what messages carry.

    The kit's engine handle reads the engine's own reason from its log (`explain_end`: quote, last line,
    OOM evidence join the dict); a handle with no log to read gets the code from the Docker state alone.
    """
    facts = f"exit code {state.get('exit_code')}, OOMKilled {state.get('oom_killed')}"
    explain = getattr(engine, "explain_end", None)
    if explain is None:
        clean = "; exit code 0 is no clean stop of an engine found dead" if state.get("exit_code") == 0 else ""
        return {"code": engine_death_code(state), "reason": None, "why": f"({facts}){clean}"}
    end = explain(state)
    return {**end.as_json(), "reason": end.reason(), "why": f"({facts}): {end.reason()}"}


def recover_jsonl(path: Path) -> tuple[list[dict], bytes]:
    """The records of a JSON-lines file, and the bytes of a torn last line, which are cut off the file.

    append_line writes a record and its newline and fsyncs before returning, and JSON text never holds a raw
    newline, so a line without its final newline can only be a write cut short by a kill. Its bytes are set
    aside by the caller and the file is truncated back to its last complete line, so the next append starts
    on a clean line. Raises BatchRecordError if a complete line is not JSON.
    """
    if not path.exists():
        return [], b""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    torn = data[end:]
    records = []
    for n, line in enumerate(data[:end].splitlines(), start=1):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise BatchRecordError(f"{path} line {n}: not a JSON record; the file was changed by something "
                                   "other than the kit, so the batch cannot be resumed safely") from None
    return records, torn


def _cut_torn_line(path: Path, keep: int, torn: bytes) -> None:
    """Keep a torn last line's bytes beside the file (0600), then truncate the file to `keep` bytes."""
    write_private(path.with_name(f"{path.name}.torn-{utc_stamp()}-{os.getpid()}"), torn)
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, keep)
        os.fsync(fd)
    finally:
        os.close(fd)


def open_records(files: BatchFiles) -> Recorded:
    """Read the record files of a (possibly interrupted) run, repairing torn last lines."""
    loaded: list[list[dict]] = []
    cut: dict[str, int] = {}
    for path in files.all():
        records, torn = recover_jsonl(path)
        if torn:
            _cut_torn_line(path, path.stat().st_size - len(torn), torn)
            cut[path.name] = len(torn)
        loaded.append(records)
    responses, errors, timings = loaded
    return Recorded(responses, errors, timings, cut=cut)


def pending(requests: Iterable[RequestLine], answered: set[str]) -> list[RequestLine]:
    """The requests still to send, in file order: those without a line in the responses record."""
    return [r for r in requests if r.custom_id not in answered]


def resume_problems(binding: dict, **current: str) -> list[str]:
    """Why a resumed batch may not continue (empty: it may): each given SHA-256 (requests_sha256,
    protocol_sha256) must equal the one recorded when the batch started."""
    what = {"requests_sha256": "request file", "protocol_sha256": "protocol file"}
    return [f"the {what.get(key, key)}'s SHA-256 {value} differs from {binding.get(key)}, the one this batch "
            "started with" for key, value in current.items() if binding.get(key) != value]


def _new_id() -> str:
    return f"batch_req_{uuid.uuid4().hex}"


def _parse_body(raw: bytes):
    """The response body as JSON when it is strict JSON, else as text (never re-shaped)."""
    try:
        return strict_json.loads(raw)
    except (strict_json.StrictJSONError, UnicodeDecodeError):
        return raw.decode("utf-8", errors="replace")


def _usage(body) -> dict:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return {}
    return {k: v for k, v in usage.items() if k in ("prompt_tokens", "completion_tokens", "total_tokens")
            and isinstance(v, int) and not isinstance(v, bool)}


def _finish_reasons(body) -> list:
    choices = body.get("choices") if isinstance(body, dict) else None
    return [c.get("finish_reason") for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def _header(headers, name: str) -> str | None:
    return next((v for k, v in headers if k.lower() == name), None)


class _Recorder:
    """Appends the three kinds of lines; the timing line first, so a response line is the commit point."""

    def __init__(self, files: BatchFiles):
        self.handles = [open_private_append(p) for p in files.all()]

    def close(self) -> None:
        for fh in self.handles:
            fh.close()

    def answered(self, req: RequestLine, timing: dict, status: int, request_id, body) -> None:
        append_line(self.handles[2], timing)
        append_line(self.handles[0], {"id": _new_id(), "custom_id": req.custom_id,
                                      "response": {"status_code": status, "request_id": request_id,
                                                   "body": body},
                                      "error": None})

    def failed(self, req: RequestLine, timing: dict, code: str, message: str, state: dict | None,
               engine_answer: dict | None = None) -> None:
        error = {"code": code, "message": message, **({"engine_state": state} if state else {}),
                 **({"engine_answer": engine_answer} if engine_answer else {})}
        append_line(self.handles[2], {**timing, "error_code": code})
        append_line(self.handles[1], {"id": _new_id(), "custom_id": req.custom_id, "response": None,
                                      "error": error})


def _engine_gone(engine: EngineLike, grace_s: float, clock, sleep) -> dict | None:
    """The engine's state if it is found dead within grace_s (Docker reports an exit a moment late)."""
    end = clock() + grace_s
    while True:
        if not engine.alive():
            return engine.state()
        if clock() >= end:
            return None
        sleep(0.2)


def _dying(engine: EngineLike, send, grace_s: float, clock, sleep) -> dict | None:
    """After a server error: the engine's state if it is dying (its /health no longer answers 200 and it exits
    within grace_s); None while it is healthy, or still running past the grace (its answer then stands)."""
    try:
        if send(str(engine.socket_path), "GET", "/health", timeout=HEALTH_TIMEOUT_S).status == 200:
            return None
    except (OSError, http.client.HTTPException):
        pass  # no answer at all: the server is going down too
    return _engine_gone(engine, grace_s, clock, sleep)


def run_requests(requests: list[RequestLine], engine: EngineLike, files: BatchFiles, *, request_timeout_s: float,
                 deadline_at: float, clock: Callable[[], float] = time.monotonic, send=None,
                 sleep: Callable[[float], None] = time.sleep, death_grace_s: float = DEATH_GRACE_S,
                 dying_grace_s: float = DYING_GRACE_S,
                 on_done: Callable[[RequestLine, int, str | None], None] | None = None) -> RunResult:
    """Send `requests` one at a time, in order; record each outcome before the next is sent.

    deadline_at is on `clock` (monotonic seconds); each request may wait min(request_timeout_s, time left).
    Once the deadline passes or the engine is dead, the rest are recorded as errors without being sent.
    """
    if send is None:
        from onegpu.core.uds_http import uds_request as send
    result, recorder, began = RunResult(), _Recorder(files), clock()
    try:
        for index, req in enumerate(requests):
            base = {"custom_id": req.custom_id, "line": req.line, "request_sha256": hashlib.sha256(req.body)
                    .hexdigest(), "request_bytes": len(req.body), "sent": False, "started_at": now_iso()}
            code = None
            if result.engine_death is not None:
                assert result.engine_end is not None  # set together with engine_death
                code = result.engine_end["code"]
                recorder.failed(req, base, code, "not sent: the engine had died", result.engine_death)
            elif clock() >= deadline_at:
                result.deadline_hit, code = True, "DEADLINE"
                recorder.failed(req, base, code, "not sent: the overall deadline had passed", None)
            else:
                code = _send_one(req, engine, recorder, result, base, send=send, clock=clock, sleep=sleep,
                                 timeout=min(request_timeout_s, deadline_at - clock()),
                                 deadline_at=deadline_at, death_grace_s=death_grace_s, dying_grace_s=dying_grace_s)
            if code:
                result.errors[code] = result.errors.get(code, 0) + 1
            if on_done:
                on_done(req, index, code)
    finally:
        recorder.close()
        result.elapsed_s = clock() - began
    return result


def _send_one(req, engine, recorder, result, base, *, send, clock, sleep, timeout, deadline_at,
              death_grace_s, dying_grace_s) -> str | None:
    """Send one request and record what came of it; the error code, or None when it was answered."""
    result.sent += 1
    started = clock()
    timing = {**base, "sent": True}
    try:
        resp = send(str(engine.socket_path), "POST", req.url, body=req.body,
                    headers={"Content-Type": "application/json"}, timeout=max(timeout, 0.001))
    except TimeoutError:
        code = "DEADLINE" if clock() >= deadline_at else "TIMEOUT"
        result.deadline_hit = result.deadline_hit or code == "DEADLINE"
        waited = round(clock() - started, 3)
        limit = "the overall deadline" if code == "DEADLINE" else "the per-request timeout"
        recorder.failed(req, {**timing, "elapsed_s": waited}, code,
                        f"no answer within {waited} s ({limit}); not retried", None)
        return code
    except (OSError, http.client.HTTPException) as exc:
        elapsed = round(clock() - started, 3)
        state = _engine_gone(engine, death_grace_s, clock, sleep)
        if state is not None:
            result.engine_death, result.engine_end = state, explain_death(engine, state)
            code = result.engine_end["code"]
            recorder.failed(req, {**timing, "elapsed_s": elapsed}, code,
                            f"the engine died before answering {result.engine_end['why']}", state)
            return code
        recorder.failed(req, {**timing, "elapsed_s": elapsed}, "TRANSPORT",
                        f"{type(exc).__name__}: {exc}; the engine is still running; not retried", None)
        return "TRANSPORT"
    body = _parse_body(resp.body)
    state = _dying(engine, send, dying_grace_s, clock, sleep) if resp.status >= 500 else None
    if state is not None:  # the engine's last words, not an answer: the request is resent on resume
        result.engine_death, result.engine_end = state, explain_death(engine, state)
        code = result.engine_end["code"]
        recorder.failed(req, {**timing, "elapsed_s": round(resp.elapsed_s, 6), "status_code": resp.status}, code,
                        f"the engine answered HTTP {resp.status} as it died, then exited {result.engine_end['why']}",
                        state, {"status_code": resp.status, "body": body})
        return code
    request_id = _header(resp.headers, "x-request-id") or (body.get("id") if isinstance(body, dict) else None)
    timing.update(elapsed_s=round(resp.elapsed_s, 6), ttfb_s=round(resp.ttfb_s, 6), status_code=resp.status,
                  response_sha256=hashlib.sha256(resp.body).hexdigest(), response_bytes=len(resp.body),
                  usage=_usage(body), finish_reasons=_finish_reasons(body))
    recorder.answered(req, timing, resp.status, request_id, body)
    result.answered += 1
    return None


def write_binding(folder: Path, requests_path: str, requests_sha256: str, count: int,
                  protocol_path: str | None, protocol_sha256: str | None) -> dict:
    """Record which request file (and protocol) this batch runs, for a later resume to check against."""
    binding = {"schema": "onegpu/batch-binding@1", "requests_path": requests_path,
               "requests_sha256": requests_sha256, "requests": count, "protocol_path": protocol_path,
               "protocol_sha256": protocol_sha256, "started_at": now_iso()}
    write_private(folder / BINDING_NAME, json.dumps(binding, indent=2) + "\n")
    return binding


def read_binding(folder: Path) -> dict | None:
    """The binding recorded when this run folder's batch started, or None."""
    path = folder / BINDING_NAME
    return json.loads(path.read_text()) if path.is_file() else None
