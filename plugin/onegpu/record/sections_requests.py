"""Pure: the custody, canary, batch and serve phases' sections, and a session's end (onegpu.phases.custody, canary,
batch, serve; onegpu.session; onegpu.session.reaper_watch), as read from receipt.json."""
from __future__ import annotations

from onegpu.record.base import Section
from onegpu.record.sections_load import EngineState

# -- custody (onegpu.phases.custody) ---------------------------------------------------------------------------


class CustodyTotals(Section, frozen=True):
    """onegpu.custody.manifest:build_manifest (totals)."""
    files: int | None = None
    bytes: int | None = None


class CustodyHashing(Section, frozen=True):
    """onegpu.custody.flow:take_custody (hashing): hashed here, or stat-matched (seconds None, with a note)."""
    seconds: int | float | None = None
    bytes_per_s: int | None = None
    workers: int | None = None
    buffer_bytes_per_worker: int | None = None
    page_cache: str | None = None  # how the page cache was treated while reading
    note: str | None = None  # only when an earlier manifest was stat-matched instead


class CustodySource(Section, frozen=True):
    """onegpu.custody.flow:take_custody (source): "hashed", or "stat-matched" against an earlier manifest."""
    kind: str | None = None
    manifest: str | None = None  # the reused manifest's path
    manifest_sha256: str | None = None
    hashed_at: str | None = None
    earlier_hashing: CustodyHashing | None = None  # the reused manifest's own hashing


class ContentAddressCheck(Section, frozen=True):
    """onegpu.checkpoint.hf_cache_auth:authenticate (content_address)."""
    matched: int | None = None
    mismatched: list[str] | None = None  # "path: blob <name>, content sha256|git-sha1 <hex>"
    unaddressed: list[str] | None = None  # paths with no content address in the cache


class PublisherHashCheck(Section, frozen=True):
    """onegpu.checkpoint.hf_cache_auth:authenticate (publisher_hashes)."""
    file: str | None = None
    file_sha256: str | None = None
    matched: int | None = None
    mismatched: list[str] | None = None  # "path: ours <hex>, publisher <hex>"
    files_without_publisher_hash: list[str] | None = None
    publisher_hashes_without_file: list[str] | None = None


class CustodyAuthentication(Section, frozen=True):
    """onegpu.custody.flow:take_custody (authentication, with authenticate's details)."""
    statements: list[str] | None = None
    failures: list[str] | None = None
    content_address: ContentAddressCheck | None = None
    publisher_hashes: PublisherHashCheck | None = None


class RecheckNumbers(Section, frozen=True):
    """onegpu.custody.manifest:recheck (the Blocked numbers of a changed checkpoint)."""
    files: int | None = None  # files unreadable or vanished (walk_checkpoint)
    files_changed: int | None = None  # files whose stat differs from the manifest


class CustodyRecheck(Section, frozen=True):
    """onegpu.phases.custody:checkpoint_unchanged (recheck; code, message, numbers from Blocked.as_json)."""
    at: str | None = None
    unchanged: bool | None = None
    code: str | None = None
    message: str | None = None
    numbers: RecheckNumbers | None = None


class Custody(Section, frozen=True):
    """onegpu.custody.flow:summary (manifest.json less its files), then phases.custody:checkpoint_unchanged."""
    schema: str | None = None
    created_at: str | None = None
    root: str | None = None
    hf_cache_repo: str | None = None
    revision: str | None = None
    totals: CustodyTotals | None = None
    hashing: CustodyHashing | None = None
    source: CustodySource | None = None
    authentication: CustodyAuthentication | None = None
    manifest: str | None = None  # path of manifest.json
    warnings: list[str] | None = None
    recheck: CustodyRecheck | None = None


# -- request runs (onegpu.phases.canary, batch) ----------------------------------------------------------------


class Deadlines(Section, frozen=True):
    """onegpu.phases.canary:request_deadline."""
    requests_deadline_s: int | None = None
    requests_deadline_counted_from: str | None = None
    request_timeout_s: int | None = None


class CanaryRequestFile(Section, frozen=True):
    """onegpu.phases.canary:canary_requests (request_file)."""
    path: str | None = None
    sha256: str | None = None
    bytes: int | None = None
    requests: int | None = None
    written_by_kit: str | None = None


class Needle(Section, frozen=True):
    """onegpu.requests.canary:Needle.as_json."""
    seed: int | None = None
    total_chars: int | None = None
    depth_asked: int | float | None = None
    depth_actual: int | float | None = None
    code_word: str | None = None
    custom_id: str | None = None
    max_tokens: int | None = None
    approx_tokens: int | None = None
    label: str | None = None


class RequestSummary(Section, frozen=True):
    """onegpu.requests.batch_summary:summarize (UNSCORED counts and transport rates of a request run)."""
    label: str | None = None
    note: str | None = None
    expected: int | None = None
    received: int | None = None
    answered_2xx: int | None = None
    missing: int | None = None
    missing_ids: list[str] | None = None
    errors: dict[str, int] | None = None  # error code -> requests
    error_ids: dict[str, list[str]] | None = None  # error code -> custom_ids (capped)
    length_limited: int | None = None
    length_limited_ids: list[str] | None = None
    empty_generations: int | None = None
    empty_generation_ids: list[str] | None = None
    rate_label: str | None = None
    measured_requests: int | None = None
    output_tokens: int | None = None
    measured_elapsed_s: int | float | None = None
    output_tokens_per_s: int | float | None = None
    prompt_tokens: int | None = None
    prompt_tokens_per_s: int | float | None = None
    median_elapsed_s: int | float | None = None
    median_ttfb_s: int | float | None = None


class EngineEnd(Section, frozen=True):
    """onegpu.requests.batch:explain_death (EngineEnd.as_json, reason, why); in serve also
    onegpu.session.reaper_watch:main (reap's removed, removed_by or error, then removed_at, reason)."""
    code: str | None = None
    quote: str | None = None  # the engine's own line that says why (free text it printed)
    last_line: str | None = None  # the engine log's last line (free text it printed)
    exit_code: int | None = None
    oom_killed: bool | None = None
    oom_kills: int | None = None
    oom_events: int | None = None
    ram_cap_bytes: int | None = None
    reason: str | None = None
    why: str | None = None
    removed: bool | None = None
    removed_by: str | None = None
    error: str | None = None
    removed_at: str | None = None


class SessionRun(Section, frozen=True):
    """onegpu.requests.batch:RunResult (to_json): what this session's run of the requests did."""
    sent: int | None = None
    answered: int | None = None
    errors: dict[str, int] | None = None  # error code -> requests
    engine_death: EngineState | None = None
    engine_end: EngineEnd | None = None
    deadline_hit: bool | None = None
    elapsed_s: int | float | None = None


class Canary(Section, frozen=True):
    """onegpu.phases.canary:canary_requests, then canary_results."""
    label: str | None = None
    request_file: CanaryRequestFile | None = None
    needle: Needle | None = None
    summary: RequestSummary | None = None
    session_run: SessionRun | None = None
    needle_check: str | None = None  # "found", "only in the reasoning text", "not found" or "no reply"


class BatchRequestFile(Section, frozen=True):
    """onegpu.phases.batch:batch_requests (request_file)."""
    path: str | None = None
    sha256: str | None = None
    bytes: int | None = None
    requests: int | None = None
    sent_unchanged: str | None = None


class BatchProtocol(Section, frozen=True):
    """onegpu.requests.protocol:Protocol.as_json."""
    source_schema: str | None = None
    path: str | None = None
    sha256: str | None = None
    benchmark: str | None = None
    split: str | None = None
    harness: str | None = None
    harness_revision: str | None = None
    harness_configuration: str | None = None
    dataset: str | None = None
    dataset_revision: str | None = None
    dataset_items: int | None = None
    scorer: str | None = None
    scorer_revision: str | None = None
    interaction: str | None = None
    timing_policy: str | None = None
    context_tokens: int | None = None
    requests_sha256: str | None = None


class BatchResumed(Section, frozen=True):
    """onegpu.phases.batch:batch_results (resumed: what earlier sessions of a resumed batch left)."""
    answered_before: int | None = None
    torn_lines_set_aside: dict[str, int] | None = None  # record file name -> bytes of a torn last line


class Batch(Section, frozen=True):
    """onegpu.phases.batch:batch_requests, protocol, then batch_results."""
    label: str | None = None
    request_file: BatchRequestFile | None = None
    protocol: BatchProtocol | None = None
    summary: RequestSummary | None = None
    session_run: SessionRun | None = None
    resumed: BatchResumed | None = None


# -- serve (onegpu.phases.serve; closed by onegpu.session.reaper_watch) ---------------------------------------------


class LatencyPercentiles(Section, frozen=True):
    """onegpu.serve.transport_log:summarize (latency_forwarded_s, streams.ttft_s)."""
    p50: int | float | None = None
    p95: int | float | None = None


class RatePercentiles(Section, frozen=True):
    """onegpu.serve.transport_log:summarize (streams.output_tokens_per_s)."""
    p50: int | float | None = None
    min: int | float | None = None


class TransportStreams(Section, frozen=True):
    """onegpu.serve.transport_log:summarize (streams)."""
    label: str | None = None
    count: int | None = None
    ttft_s: LatencyPercentiles | None = None
    output_tokens_per_s: RatePercentiles | None = None


class Transport(Section, frozen=True):
    """onegpu.serve.transport_log:summarize, with lines_lost from onegpu.serve.window:ServeWindow.close."""
    calls: int | None = None
    forwarded: int | None = None
    statuses: dict[str, int] | None = None  # HTTP status (as text) -> calls
    rejected_429: int | None = None
    cut: int | None = None
    request_bytes: int | None = None
    response_bytes: int | None = None
    completion_tokens: int | None = None
    streams_without_token_count: int | None = None
    latency_forwarded_s: LatencyPercentiles | None = None
    streams: TransportStreams | None = None
    lines_lost: int | None = None  # transport lines the disk refused


class Serve(Section, frozen=True):
    """onegpu.phases.serve:_record; closed by onegpu.session.reaper_watch:close_evidence when the session died."""
    state: str | None = None  # STARTING, READY or CLOSED
    connection_file: str | None = None
    url: str | None = None
    model: str | None = None
    window_s: int | None = None
    ready_at: str | None = None
    deadline: str | None = None  # ISO time the window closes, counted from READY
    closed_at: str | None = None
    closed_reason: str | None = None
    cut_in_flight: int | None = None
    engine_end: EngineEnd | None = None
    transport: Transport | None = None
    note: str | None = None


# -- a session's end (onegpu.plugin, onegpu.session.reaper_watch) --------------------------------------------------


class Interrupted(Section, frozen=True):
    """onegpu.session.interruption:Cut.as_json (written by onegpu.plugin:pytest_sessionfinish)."""
    by: str | None = None  # SIGINT, SIGTERM or timeout_backstop
    words: str | None = None
    test: str | None = None  # nodeid of the test it cut
    phase: str | None = None


class Reaper(Section, frozen=True):
    """onegpu.session.reaper_watch:close_evidence (written by the reaper when the session died)."""
    closed: bool | None = None
    reason: str | None = None
    at: str | None = None
