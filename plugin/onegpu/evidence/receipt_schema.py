"""Pure: the sections of receipt.json (schema onegpu/receipt@1), declared once for every writer and every reader.

receipt.json stays plain JSON; these TypedDicts say which sections and which keys it may hold, checked three ways
(onegpu.evidence.receipt_check enforces the first two):
* writes, at run time: `Receipt.set`/`update`/`record_test` refuse a section or key not declared here
  (`check_write`), so a misspelt field in a writer fails the test that writes it;
* reads, at run time: renderers get the receipt through `declared_view` (`Receipt.view`, `read_receipt`), whose
  get, [] and `in` refuse an undeclared key, so a misspelt field in a renderer fails the test that renders it
  instead of showing "unknown";
* reads, statically: renderers take `ReceiptData`, so mypy (run by the test command) checks `receipt["key"]` and
  the declared value types (it types `.get` of an undeclared key as `object`, not as an error: hence the view).
A section typed `dict[str, ...]` is keyed by names the session chooses (node IDs, phases, table titles). Values
below the declared keys are plain JSON (Any): their shape is the writing module's (named beside each section).
The schema's name stays onegpu/receipt@1: declaring it changed no field of the file.
"""
from __future__ import annotations

from typing import Any, TypedDict

SCHEMA = "onegpu/receipt@1"


class KitSection(TypedDict, total=False):
    name: str
    version: str
    git_commit: str | None


class TestEntry(TypedDict, total=False):
    """One kit test's outcome (onegpu.plugin)."""
    phase: str
    outcome: str
    code: str
    message: str
    numbers: dict[str, Any]
    duration_s: float
    when: str  # pytest's step that failed: setup, call or teardown


class PhaseEntry(TypedDict, total=False):
    """One phase's verdict (onegpu.evidence.verdicts)."""
    verdict: str
    code: str | None
    message: str | None
    counts: dict[str, int]
    codes: list[str]  # every blocked code of the phase, the most consequential first
    progress: dict[str, Any] | None  # {done, of, unit} of an interrupted request phase


class InterruptedSection(TypedDict, total=False):
    by: Any
    phase: Any
    test: Any
    words: Any


class HardwareSection(TypedDict, total=False):
    description: Any
    docker: Any
    gpu: Any
    host: Any
    notes: Any
    profile: Any
    recorded_at: Any
    schema: Any
    source: Any


class ReplaySection(TypedDict, total=False):
    name: Any
    profile: Any


class SelectionSection(TypedDict, total=False):
    gpu_index: Any
    gpu_name: Any
    gpu_uuid: Any
    # the multi-GPU protocol (settings multi_gpu): its label, sizes and GPUs in rank order
    protocol: Any
    tensor_parallel_size: Any
    pipeline_parallel_size: Any
    gpu_set: Any


class SettingsSection(TypedDict, total=False):
    assumed: Any
    path: Any
    schema: Any
    sha256: Any
    values: Any


class CheckpointSection(TypedDict, total=False):
    architectures: Any
    bytes_by_dtype: Any
    bytes_by_role: Any
    disk_free_bytes: Any
    files: Any
    hf_cache_repo: Any
    hf_revision: Any
    index_file: Any
    index_total_size: Any
    model_type: Any
    packed_bytes_by_dtype: Any
    params_by_dtype: Any
    quant: Any
    root: Any
    shards: Any
    synthetic: Any
    tensor_count: Any
    tokenizer_files: Any
    weight_bytes: Any


class KvCacheSection(TypedDict, total=False):
    accounting: Any
    async_scheduling: Any
    block_size: Any
    bytes: Any
    bytes_per_token_full: Any
    context_tokens: Any
    dtype_bytes: Any
    kv_dtype: Any
    layers: Any
    notes: Any
    pool: Any
    prefill_chunk_tokens: Any
    unknown_reason: Any


class ImageSection(TypedDict, total=False):
    architecture: Any
    created: Any
    id: Any
    os: Any
    reference: Any
    repo_digests: Any
    repo_tags: Any
    size_bytes: Any


class LaunchSection(TypedDict, total=False):
    cap_drop: Any
    command: Any
    docker_run_line: Any
    engine_platform: Any
    entrypoint: Any
    environment: Any
    flags_used: Any
    gpu_uuid: Any
    gpu_uuids: Any  # the multi-GPU protocol only: its set in rank order, with its label
    protocol: Any
    image_id: Any
    init: Any
    labels: Any
    mem_limit_bytes: Any
    memswap_limit_bytes: Any
    model_arg: Any
    mounts: Any
    name: Any
    nano_cpus: Any
    network_mode: Any
    notes: Any
    pids_limit: Any
    security_opt: Any
    shm_size_bytes: Any
    socket_dir: Any
    socket_path: Any
    tmpfs: Any
    towers: Any
    user: Any


class PlanSection(TypedDict, total=False):
    approved: Any
    path: Any
    sha256: Any


class ConsistencySection(TypedDict, total=False):
    checks: Any
    kv_dtype_at_probe: Any
    probe_vllm_version: Any
    vllm_version: Any
    vllm_version_source: Any


class CalibrationSection(TypedDict, total=False):
    estimates: Any
    folder: Any
    gpu_name: Any
    how: Any
    image_id: Any
    reserve_bytes: Any
    rows: Any
    run_id: Any
    vllm_version: Any
    warnings: Any


class ProposalSection(TypedDict, total=False):
    alternatives: Any
    blockers: Any
    derivation: Any
    path: Any
    proposed: Any
    reserve: Any
    settings: Any
    sha256: Any
    unknown: Any
    warnings: Any


class OperatorScoreSection(TypedDict, total=False):
    computed_by_kit: Any
    file: Any
    file_sha256: Any
    label: Any
    mismatches: Any
    operator_supplied: Any
    record: Any


class LeftoversSection(TypedDict, total=False):
    containers: Any
    removed_any: Any


class GpuLockSection(TypedDict, total=False):
    gpu_uuid: Any
    gpu_uuids: Any  # the multi-GPU protocol: every GPU of the set
    pid: Any
    since: Any


class ProbeSection(TypedDict, total=False):
    accounting: Any  # the rules the probed version is planned with (onegpu.plan.vllm_versions.Accounting.as_json)
    code: Any  # code, message, numbers: a blocked probe (Blocked.as_json)
    cuda_device_count: Any
    elapsed_s: Any
    errors: Any
    expected_platform: Any
    flags_checked: Any
    flags_known: Any
    help_modes: Any
    message: Any
    missing_flags: Any
    numbers: Any
    parser_judged: Any  # the launch argv was judged by the release's own `vllm serve` parser
    parser_note: Any
    cuda_init_error: Any  # torch's reason for seeing no CUDA device, in its words
    h2d: Any  # pinned host-to-device bandwidth measured in the image (onegpu.engine.probe_script.link_bandwidth)
    h2d_error: Any
    passed: Any
    platform: Any
    torch_version: Any
    vllm_version: Any


class EngineSection(TypedDict, total=False):
    boot_elapsed_s: Any
    container_id: Any
    created_at: Any
    end: Any
    log: Any
    name: Any
    pid: Any
    ready_at: Any
    reaper_pid: Any
    stale_socket_removed: Any
    started_at: Any


class BootSection(TypedDict, total=False):
    code: Any
    elapsed_s: Any
    facts: Any
    failure: Any
    message: Any
    numbers: Any
    ready: Any


class SamplesSection(TypedDict, total=False):
    container_memory_bytes_max: Any
    count: Any
    errors: Any
    gpu_free_bytes_min: Any
    gpu_power_w_max: Any
    gpu_used_bytes_max: Any
    gpu_util_percent_max: Any
    host_available_bytes_min: Any


class LandingSection(TypedDict, total=False):
    kv_after_warmup: Any  # vLLM 0.34's extensible KV cache against the plan (onegpu.plan.landing_kv)
    at: Any
    at_ready: Any
    errors: Any
    floor: Any
    measured: Any
    pinning: Any
    projected: Any
    warnings: Any


class CustodySection(TypedDict, total=False):
    authentication: Any
    created_at: Any
    hashing: Any
    hf_cache_repo: Any
    manifest: Any
    recheck: Any
    revision: Any
    root: Any
    schema: Any
    source: Any
    totals: Any
    warnings: Any


class DeadlinesSection(TypedDict, total=False):
    request_timeout_s: Any
    requests_deadline_counted_from: Any
    requests_deadline_s: Any


class CanarySection(TypedDict, total=False):
    label: Any
    needle: Any
    needle_check: Any
    request_file: Any
    session_run: Any
    summary: Any


class BatchSection(TypedDict, total=False):
    label: Any
    protocol: Any
    request_file: Any
    resumed: Any
    session_run: Any
    summary: Any


class ServeSection(TypedDict, total=False):
    closed_at: Any
    closed_reason: Any
    connection_file: Any
    cut_in_flight: Any
    deadline: Any
    engine_end: Any
    model: Any
    note: Any
    ready_at: Any
    state: Any
    transport: Any
    url: Any
    window_s: Any


class ReceiptData(TypedDict, total=False):
    """receipt.json. Header and session bookkeeping first, then the sections in the order the phases write them."""
    schema: str
    kit: KitSection
    command_line: list[str]
    working_folder: str
    kind: str
    run_folder: str
    hardware_source: str
    started_at: str
    finished_at: str | None
    tests: dict[str, TestEntry]
    phases: dict[str, PhaseEntry]
    timings_s: dict[str, float]
    timeline: dict[str, list[float]]  # each timed phase's [start, end], seconds since the epoch (Receipt.timing)
    warnings: list[str]
    limitations: list[str]
    banners: list[str]
    shown: dict[str, list[str]]
    tables: dict[str, list[str]]
    earlier_sessions: list[ReceiptData]  # what a resumed run folder's earlier sessions recorded
    timeout_backstop_s: float
    interrupted: InterruptedSection
    reaper: dict[str, Any]  # {closed, reason, at}: written by the reaper when the session died (onegpu.engine.reaper)
    verdict: str
    exit_status: int
    # machine (onegpu.phases.machine)
    hardware: HardwareSection
    replay: ReplaySection
    selection: SelectionSection
    # plan (onegpu.phases.plan, plan_ceiling, plan_launch, plan_insight)
    settings: SettingsSection
    settings_errors: list[Any]
    checkpoint: CheckpointSection
    kv_cache: KvCacheSection
    capacity: list[dict[str, Any]]
    capacity_accounting: dict[str, Any]
    ceiling: dict[str, Any]  # the link's upper bounds and their inputs (onegpu.plan.ceiling_record)
    rates_vs_ceiling: list[dict[str, Any]]  # measured rates as fractions of the ceilings (after a run)
    image: ImageSection
    launch: LaunchSection
    plan: PlanSection
    consistency: ConsistencySection
    calibration: CalibrationSection
    proposal: ProposalSection
    operator_score: OperatorScoreSection
    # probe and load (onegpu.phases.probe, load, load_landing)
    leftovers: LeftoversSection
    gpu_lock: GpuLockSection
    probe: ProbeSection
    engine: EngineSection
    boot: BootSection
    samples: SamplesSection  # the peaks and counts of samples.jsonl (onegpu.engine.sampler)
    landing: LandingSection
    # custody, canary, batch, serve (onegpu.phases.custody, canary, batch, serve)
    custody: CustodySection
    request_errors: dict[str, Any]
    deadlines: DeadlinesSection
    canary: CanarySection
    batch: BatchSection
    serve: ServeSection


SECTIONS = frozenset(ReceiptData.__annotations__)
