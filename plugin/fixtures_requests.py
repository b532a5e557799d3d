"""Session fixtures of the canary and batch phases: request files checked first, then sent through the engine.

Validation (canary_requests, batch_requests, protocol; together: request_files_checked) needs no engine,
so a bad file is refused before anything starts; the results fixtures need the `engine`. The overall
deadline (settings deadline_s) is counted from when the request phases first use the ready engine (right
after the load phase), not from session start: hashing and boot have their own budgets.

The needle canary is an option of the canary phase (--needle-chars, --needle-depth, --needle-seed) rather
than a request file for --requests: a --requests file is a frozen benchmark bound by a protocol, which a
load smoke check is not.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from . import canary as canary_mod
from .batch import (BATCH_STEM, BatchFiles, BatchRecordError, RunResult, open_records,
                    pending, read_binding, resume_problems, run_requests, write_binding)
from .batch_summary import summarize, summary_lines
from .glue import blocked_as_xfail
from .outcomes import Blocked
from .protocol import Protocol, ProtocolError, load_protocol
from .requests_file import RequestFile, RequestFileError, load_request_file
from .rundir import write_private

CANARY_TITLE = f"onegpu canary ({canary_mod.LABEL})"
BATCH_TITLE = "onegpu batch (UNSCORED: a transport record, not a score)"
WRITTEN_BY_KIT = ("the only request body the kit ever writes: the shipped canary template with body.model "
                  "filled from the settings' model_id (plus the needle request when asked); operator request "
                  "files are never changed")


def pytest_addoption(parser):
    group = parser.getgroup("onegpu")
    group.addoption("--needle-chars", type=int, metavar="N", help="add a needle-in-a-haystack request of N "
                    "characters to the canary (a load smoke check, never a benchmark)")
    group.addoption("--needle-depth", type=float, default=0.5, metavar="F", help="where the needle sits in "
                    "the filler, 0 (start) to 1 (end); default 0.5")
    group.addoption("--needle-seed", type=int, default=0, metavar="S", help="seed of the needle's filler and "
                    "code word (same seed, same bytes); default 0")


def pytest_configure(config):
    chars, depth = config.getoption("needle_chars"), config.getoption("needle_depth")
    if chars is not None and not canary_mod.NEEDLE_MIN_CHARS <= chars <= canary_mod.NEEDLE_MAX_CHARS:
        raise pytest.UsageError(f"--needle-chars {chars}: must be from {canary_mod.NEEDLE_MIN_CHARS} to "
                                f"{canary_mod.NEEDLE_MAX_CHARS}")
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise pytest.UsageError(f"--needle-depth {depth}: must be from 0 (start) to 1 (end)")


@dataclass(frozen=True)
class CanaryRequests:
    file: RequestFile
    needle: canary_mod.Needle | None
    stem: str  # record files are <stem>-responses*.jsonl


@dataclass(frozen=True)
class RunSummary:
    summary: dict
    run: RunResult
    lines: list[str]
    needle_result: str | None = None


def _refuse(kit, exc: RequestFileError | ProtocolError, what: str) -> Blocked:
    """REQUESTS_INVALID naming the first problems; all of them go to the receipt and a table."""
    errors = exc.errors
    kit.receipt.update("request_errors", **{what: errors})
    kit.table(f"onegpu {what} problems", errors)
    shown = "; ".join(errors[:3]) + (f"; ... ({len(errors) - 3} more in the receipt)" if len(errors) > 3 else "")
    return Blocked("REQUESTS_INVALID", f"{exc.path}: {shown}", {"problems": getattr(exc, "total", len(errors))})


def _session_stem(folder: Path, base: str) -> str:
    """A stem whose files do not exist yet (a resumed run folder keeps the earlier sessions' canary)."""
    n = 1
    while (folder / f"{base if n == 1 else f'{base}-{n}'}-requests.jsonl").exists():
        n += 1
    return base if n == 1 else f"{base}-{n}"


def _needle(config, settings) -> tuple[bytes | None, canary_mod.Needle | None]:
    chars = config.getoption("needle_chars")
    if chars is None:
        return None, None
    line, needle = canary_mod.needle_request(settings.model_id, config.getoption("needle_seed"), chars,
                                             config.getoption("needle_depth"))
    if needle.approx_tokens + needle.max_tokens >= settings.context_tokens:
        raise Blocked("REQUESTS_INVALID", f"--needle-chars {chars}: about {needle.approx_tokens} prompt tokens "
                                          f"plus {needle.max_tokens} output tokens do not fit the context of "
                                          f"{settings.context_tokens} tokens; use fewer characters")
    return line, needle


@pytest.fixture(scope="session")
def canary_requests(pytestconfig, kit, settings) -> CanaryRequests:
    """The canary file: the shipped template filled with the model ID, written 0600 here, checked, hashed."""
    with blocked_as_xfail():
        needle_line, needle = _needle(pytestconfig, settings)
        stem = _session_stem(kit.run_folder, "canary")
        path = write_private(kit.run_folder / f"{stem}-requests.jsonl",
                             canary_mod.canary_file(settings.model_id, needle_line))
        try:
            requests = load_request_file(path, model_id=settings.model_id, context_tokens=settings.context_tokens,
                                         max_requests=settings.max_requests)
        except RequestFileError as exc:
            raise _refuse(kit, exc, "canary request file") from None
    kit.receipt.update("canary", label=canary_mod.LABEL, request_file={
        "path": str(path), "sha256": requests.sha256, "bytes": requests.size_bytes,
        "requests": len(requests.requests), "written_by_kit": WRITTEN_BY_KIT},
        needle=needle.as_json() if needle else None)
    return CanaryRequests(file=requests, needle=needle, stem=stem)


def _batch_sources(config, kit) -> tuple[Path, Path, dict | None]:
    """(request file, protocol file, binding of a resumed batch or None); a resume may omit the paths."""
    binding = read_binding(kit.run_folder) if config.getoption("resume_batch") else None
    given_requests, given_protocol = config.getoption("requests"), config.getoption("protocol")
    if given_requests:
        return Path(given_requests), Path(given_protocol), binding
    if binding is None:
        raise Blocked("REQUESTS_INVALID", f"--resume-batch {kit.run_folder}: no batch-binding.json records which "
                                          "request file this batch ran; give --requests and --protocol")
    return Path(binding["requests_path"]), Path(binding["protocol_path"]), binding


@pytest.fixture(scope="session")
def batch_requests(pytestconfig, kit, settings) -> RequestFile:
    """The frozen request file, checked against the settings (and, on resume, against the recorded SHA-256)."""
    with blocked_as_xfail():
        path, _, binding = _batch_sources(pytestconfig, kit)
        try:
            requests = load_request_file(path.absolute(), model_id=settings.model_id,
                                         context_tokens=settings.context_tokens, max_requests=settings.max_requests)
        except RequestFileError as exc:
            raise _refuse(kit, exc, "request file") from None
        problems = resume_problems(binding, requests_sha256=requests.sha256) if binding else []
        if problems:
            raise Blocked("REQUESTS_INVALID", f"--resume-batch: {'; '.join(problems)}: a batch resumes only with "
                                              "the file it started with")
    kit.receipt.update("batch", label="UNSCORED", request_file={
        "path": requests.path, "sha256": requests.sha256, "bytes": requests.size_bytes,
        "requests": len(requests.requests), "sent_unchanged": "each line's body bytes exactly as in the file"})
    return requests


@pytest.fixture(scope="session")
def protocol(pytestconfig, kit, settings, batch_requests) -> Protocol:
    """protocol.json bound to the settings' context and the request file's SHA-256."""
    with blocked_as_xfail():
        _, path, binding = _batch_sources(pytestconfig, kit)
        try:
            bound = load_protocol(path.absolute(), context_tokens=settings.context_tokens,
                                  requests_sha256=batch_requests.sha256)
        except ProtocolError as exc:
            raise _refuse(kit, exc, "protocol") from None
        problems = resume_problems(binding, protocol_sha256=bound.sha256) if binding else []
        if problems:
            raise Blocked("REQUESTS_INVALID", f"--resume-batch: {'; '.join(problems)}")
    kit.receipt.update("batch", protocol={**bound.as_json()})
    return bound


@pytest.fixture(scope="session")
def request_files_checked(request, pytestconfig):
    """Every request file of this session checked (canary; batch and protocol when given): for fixtures that
    should not start anything with a bad file."""
    request.getfixturevalue("canary_requests")
    if pytestconfig.getoption("requests") or pytestconfig.getoption("resume_batch"):
        request.getfixturevalue("protocol")


@pytest.fixture(scope="session")
def request_deadline(engine, settings, kit) -> float:
    """The overall deadline on the monotonic clock: settings deadline_s from the first use of the ready engine."""
    deadline_at = time.monotonic() + settings.deadline_s
    kit.receipt.update("deadlines", requests_deadline_s=settings.deadline_s,
                       requests_deadline_counted_from="the first request phase after the engine was ready",
                       request_timeout_s=settings.request_timeout_s)
    return deadline_at


def _run_and_summarize(kit, settings, engine, deadline_at, requests, files: BatchFiles, expected_ids):
    try:
        already = open_records(files)
    except BatchRecordError as exc:
        raise Blocked("REQUESTS_INVALID", str(exc)) from None
    todo = pending(requests, already.answered)
    run = run_requests(todo, engine, files, request_timeout_s=settings.request_timeout_s, deadline_at=deadline_at)
    final = open_records(files)
    summary = summarize(expected_ids, final.responses, final.errors, final.timings)
    return already, run, summary, final


def _records_line(files: BatchFiles) -> str:
    return (f"records: {files.responses.name} (OpenAI batch output), {files.errors.name} (requests without "
            f"an answer), {files.timings.name} (transport timings)")


def _blocked_by(run: RunResult, what: str) -> Blocked | None:
    if run.engine_death is not None:
        end = run.engine_end
        assert end is not None  # set together with engine_death
        return Blocked(end["code"], f"the engine died during the {what} {end['why']}; the requests left are "
                                    "recorded as errors", {**run.engine_death})
    if run.deadline_hit:
        return Blocked("DEADLINE", f"the overall deadline passed during the {what}; the requests left are "
                                   "recorded as errors", dict(run.errors))
    return None


@pytest.fixture(scope="session")
def canary_results(live_hardware, canary_requests, engine, request_deadline, settings, kit) -> RunSummary:
    """The canary sent one request at a time; its UNSCORED summary shown and kept in the receipt."""
    files = BatchFiles.for_stem(kit.run_folder, f"{canary_requests.stem}-responses")
    with blocked_as_xfail():
        _, run, summary, final = _run_and_summarize(kit, settings, engine, request_deadline,
                                                    list(canary_requests.file.requests), files,
                                                    canary_requests.file.custom_ids)
    kit.receipt.timing("canary", run.elapsed_s)
    lines = summary_lines(summary) + [_records_line(files)]
    needle_result = None
    if canary_requests.needle is not None:
        needle = canary_requests.needle
        answer = next((r["response"] for r in final.responses if r.get("custom_id") == needle.custom_id), None)
        needle_result = canary_mod.check_needle(answer.get("body"), needle) if answer else "no reply"
        lines.append(canary_mod.describe_needle(needle, needle_result))
        if needle_result != "found":
            kit.receipt.warn(f"needle canary: the code word was {needle_result} (a load smoke check, not a score)")
    kit.table(CANARY_TITLE, lines)
    kit.receipt.update("canary", summary=summary, session_run=asdict(run), needle_check=needle_result)
    with blocked_as_xfail():
        blocked = _blocked_by(run, "canary")
        if blocked:
            raise blocked
    return RunSummary(summary=summary, run=run, lines=lines, needle_result=needle_result)


@pytest.fixture(scope="session")
def batch_results(live_hardware, batch_requests, protocol, engine, request_deadline, settings, kit) -> RunSummary:
    """The frozen batch sent one request at a time (on resume, only what responses.jsonl lacks); UNSCORED."""
    folder = kit.run_folder
    files = BatchFiles.for_stem(folder, BATCH_STEM)
    if read_binding(folder) is None:
        write_binding(folder, batch_requests.path, batch_requests.sha256, len(batch_requests.requests),
                      protocol.path, protocol.sha256)
    with blocked_as_xfail():
        already, run, summary, _ = _run_and_summarize(kit, settings, engine, request_deadline,
                                                      list(batch_requests.requests), files,
                                                      batch_requests.custom_ids)
    kit.receipt.timing("batch", run.elapsed_s)
    lines = summary_lines(summary) + [_records_line(files) + "; the benchmark's own scorer reads the responses"]
    kit.table(BATCH_TITLE, lines)
    kit.receipt.update("batch", summary=summary, session_run=asdict(run),
                       resumed={"answered_before": len(already.answered), "torn_lines_set_aside": already.cut}
                       if already.responses or already.cut else None)
    with blocked_as_xfail():
        blocked = _blocked_by(run, "batch")
        if blocked:
            raise blocked
    return RunSummary(summary=summary, run=run, lines=lines)
