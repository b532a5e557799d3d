"""Session fixtures of the batch phase (tests_hw/test_7_batch.py): the frozen request file and its protocol,
checked before anything starts, then sent through the engine (resumable with --resume-batch)."""
from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from onegpu.core.jsonable import to_json
from onegpu.core.outcomes import Blocked
from onegpu.phases.canary import RunSummary, blocked_by, rates_against_ceiling, records_line, refuse, run_and_summarize
from onegpu.record.sections_requests import RequestSummary
from onegpu.report.request_lines import summary_lines
from onegpu.requests.batch import (
    BATCH_STEM,
    BatchFiles,
    read_binding,
    resume_problems,
    write_binding,
)
from onegpu.requests.protocol import Protocol, ProtocolError, load_protocol
from onegpu.requests.requests_file import RequestFile, RequestFileError, load_request_file
from onegpu.session.glue import blocked_as_xfail

BATCH_TITLE = "onegpu batch (UNSCORED: a transport record, not a score)"


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
            raise refuse(kit, exc, "request file") from None
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
            raise refuse(kit, exc, "protocol") from None
        problems = resume_problems(binding, protocol_sha256=bound.sha256) if binding else []
        if problems:
            raise Blocked("REQUESTS_INVALID", f"--resume-batch: {'; '.join(problems)}")
    kit.receipt.update("batch", protocol={**bound.as_json()})
    return bound


@pytest.fixture(scope="session")
def batch_results(live_hardware, batch_requests, protocol, engine, request_deadline, settings, kit) -> RunSummary:
    """The frozen batch sent one request at a time (on resume, only what responses.jsonl lacks); UNSCORED."""
    folder = kit.run_folder
    files = BatchFiles.for_stem(folder, BATCH_STEM)
    if read_binding(folder) is None:
        write_binding(folder, batch_requests.path, batch_requests.sha256, len(batch_requests.requests),
                      protocol.path, protocol.sha256)
    with blocked_as_xfail():
        already, run, summary, _ = run_and_summarize(kit, settings, engine, request_deadline,
                                                      list(batch_requests.requests), files,
                                                      batch_requests.custom_ids)
    kit.receipt.timing("batch", run.elapsed_s)
    recorded = msgspec.convert(summary, RequestSummary)
    lines = summary_lines(recorded) + [records_line(files) + "; the benchmark's own scorer reads the responses"]
    lines += rates_against_ceiling(kit, recorded, "batch")
    kit.table(BATCH_TITLE, lines)
    kit.receipt.update("batch", summary=summary, session_run=to_json(run),
                       resumed={"answered_before": len(already.answered), "torn_lines_set_aside": already.cut}
                       if already.responses or already.cut else None)
    with blocked_as_xfail():
        blocked = blocked_by(run, "batch")
        if blocked:
            raise blocked
    return RunSummary(summary=summary, run=run, lines=lines)
