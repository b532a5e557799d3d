"""Pure: the probe and load phases' sections (onegpu.phases.plan, probe, load, load_landing), as read from
receipt.json."""
from __future__ import annotations

from onegpu.record.base import Section


class Image(Section, frozen=True):
    """onegpu.engine.image:resolve_local_image (ImageFacts, written by onegpu.phases.plan:image)."""

    reference: str | None = None  # as the settings name it
    id: str | None = None  # sha256:<64 hex>
    repo_tags: list[str] | None = None
    repo_digests: list[str] | None = None
    created: str | None = None
    architecture: str | None = None
    os: str | None = None
    size_bytes: int | None = None


class LaunchMount(Section, frozen=True):
    """onegpu.engine.launch:build_launch_spec (BindMount)."""

    source: str | None = None  # host path
    target: str | None = None  # container path
    read_only: bool | None = None


class Launch(Section, frozen=True):
    """onegpu.engine.launch:LaunchSpec.to_json (written by onegpu.phases.plan_launch:launch_spec)."""

    image_id: str | None = None
    name: str | None = None
    entrypoint: list[str] | None = None
    command: list[str] | None = None
    environment: dict[str, str] | None = None  # variable name -> value
    labels: dict[str, str] | None = None  # Docker label -> value
    mounts: list[LaunchMount] | None = None
    socket_dir: str | None = None
    socket_path: str | None = None
    gpu_uuid: str | None = None  # rank 0's GPU in the multi-GPU protocol; None without a GPU
    mem_limit_bytes: int | None = None
    memswap_limit_bytes: int | None = None
    pids_limit: int | None = None
    shm_size_bytes: int | None = None
    nano_cpus: int | None = None
    user: str | None = None  # "uid:gid"
    tmpfs: dict[str, str] | None = None  # container path -> mount options
    security_opt: list[str] | None = None
    cap_drop: list[str] | None = None
    network_mode: str | None = None
    init: bool | None = None
    model_arg: str | None = None
    notes: list[str] | None = None
    towers: list[str] | None = None  # config.json's tower sections (-> --language-model-only)
    engine_platform: str | None = None  # "cuda" | "cpu"
    gpu_uuids: list[str] | None = None  # the multi-GPU protocol only: its set in rank order
    protocol: str | None = None  # the multi-GPU protocol only: its label
    flags_used: list[str] | None = None
    docker_run_line: str | None = None


class LinkMeasurement(Section, frozen=True):
    """onegpu.engine.probe_script:link_bandwidth (pinned host-to-device copies in the image; the probe's h2d, and the
    measurement a link ceiling stands on)."""

    bytes: int | None = None
    repeats: int | None = None
    seconds: list[int | float] | None = None
    gbps: int | float | None = None
    device: str | None = None


class ProbeAccounting(Section, frozen=True):
    """onegpu.plan.vllm_versions:Accounting.as_json."""

    series: str | None = None
    label: str | None = None
    basis: str | None = None  # DECLARED | PROBED | RECORDED | ASSUMED
    version: str | None = None
    evidence: str | None = None
    confirmed: bool | None = None
    read_from: str | None = None
    default_block_size: int | None = None
    kv_sizing: str | None = None


class ProbeNumbers(Section, frozen=True):
    """onegpu.engine.probe_parse:judge_probe and onegpu.engine.probe:run_probe (a blocked probe's numbers)."""

    vllm_version: str | None = None
    torch_version: str | None = None
    cuda_device_count: int | None = None
    flags_checked: int | None = None  # how many flags were checked
    flags_judged_by: str | None = None
    parser_error: str | None = None  # argparse's own error line, as the engine printed it
    missing_flags: list[str] | None = None
    platform: str | None = None
    cuda_init_error: str | None = None  # torch's words
    exit_code: int | None = None  # the probe container's, when it printed no result


class Probe(Section, frozen=True):
    """onegpu.engine.probe:facts_json (a passed probe) or Blocked.as_json (a blocked one), written by
    onegpu.phases.probe:runtime_probe."""

    passed: bool | None = None
    vllm_version: str | None = None
    torch_version: str | None = None
    cuda_device_count: int | None = None
    help_modes: dict[str, int | None] | None = None  # "--help=all" / "--help" -> its exit code
    flags_known: int | None = None
    flags_checked: list[str] | None = None
    missing_flags: list[str] | None = None
    errors: list[str] | None = None
    platform: str | None = None
    expected_platform: str | None = None
    parser_judged: bool | None = None
    parser_note: str | None = None
    cuda_init_error: str | None = None  # torch's reason for seeing no CUDA device, in its words
    h2d: LinkMeasurement | None = None
    h2d_error: str | None = None
    elapsed_s: int | float | None = None
    accounting: ProbeAccounting | None = None
    code: str | None = None  # code, message, numbers: a blocked probe
    message: str | None = None
    numbers: ProbeNumbers | None = None


class Samples(Section, frozen=True):
    """onegpu.engine.sampler:peaks (Sampler.stop; also engine.end.samples)."""

    count: int | None = None
    errors: int | None = None  # samples that recorded an error
    gpu_used_bytes_max: int | None = None
    gpu_free_bytes_min: int | None = None
    gpu_util_percent_max: int | None = None
    gpu_power_w_max: int | float | None = None
    host_available_bytes_min: int | None = None
    container_memory_bytes_max: int | None = None


class EngineState(Section, frozen=True):
    """onegpu.engine.container:Engine.state."""

    status: str | None = None
    exit_code: int | None = None
    oom_killed: bool | None = None


class EngineTeardown(Section, frozen=True):
    """onegpu.engine.container:Engine.close (its steps), merged with onegpu.session.reaper_watch:close_evidence."""

    state_at_end: EngineState | None = None
    stop_s: int | float | None = None
    status: str | None = None
    exit_code: int | None = None
    oom_killed: bool | None = None
    stopped_at: str | None = None
    oom_kill_count_first: int | None = None
    oom_kill_count_last: int | None = None
    oom_kill_count_rose: bool | None = None
    samples: Samples | None = None
    log_chars: int | None = None
    oom_events: int | None = None
    removed: bool | None = None
    removed_at: str | None = None
    errors: list[str] | None = None  # "<step>: <exception>" of teardown steps that failed
    removed_by: str | None = None  # the reaper's: who removed the container
    error: str | None = None  # the reaper's refusal
    reason: str | None = None  # the reaper's: why it acted


class Engine(Section, frozen=True):
    """onegpu.engine.container:Engine.launch / close (through phases.load's record=) and
    onegpu.session.reaper_watch:close_evidence (end)."""

    stale_socket_removed: str | None = None
    container_id: str | None = None
    name: str | None = None
    created_at: str | None = None
    log: str | None = None  # engine.log's name in the run folder
    reaper_pid: int | None = None
    started_at: str | None = None
    ready_at: str | None = None
    boot_elapsed_s: int | float | None = None
    end: EngineTeardown | None = None


class BootKvAfterWarmup(Section, frozen=True):
    """onegpu.engine.bootlog:parse_boot_log (KvAfterWarmup: vLLM 0.34's "Memory after warmup" line, GiB)."""

    free_gib: int | float | None = None
    committed_gib: int | float | None = None
    transient_gib: int | float | None = None
    peak_gib: int | float | None = None
    growth_gib: int | float | None = None
    blocks: int | None = None
    blocks_gib: int | float | None = None
    requested_gib: int | float | None = None
    torch_limit_gib: int | float | None = None


class BootFacts(Section, frozen=True):
    """onegpu.engine.bootlog:parse_boot_log (BootFacts, via onegpu.engine.container:facts_json)."""

    kv_cache_gib: int | float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: int | float | None = None
    concurrency_tokens: int | None = None
    load_gib: int | float | None = None
    load_s: int | float | None = None
    cpu_offload_gib: int | float | None = None
    server_started: bool | None = None
    vllm_version: str | None = None
    kv_cache_device: str | None = None  # "GPU", "CPU", "GPU + host"
    weights_load_s: int | float | None = None
    kv_after_warmup: BootKvAfterWarmup | None = None
    kv_extended_blocks: int | None = None
    kv_extended_gib: int | float | None = None
    kv_gpu_blocks: int | None = None


class BootNumbers(Section, frozen=True):
    """onegpu.engine.container:Engine._classify (a blocked boot's numbers)."""

    exit_code: int | None = None
    oom_killed: bool | None = None
    oom_kill_count_rose: bool | None = None
    elapsed_s: int | float | None = None
    boot_deadline_s: int | None = None


class BootFailure(Section, frozen=True):
    """onegpu.engine.container:Engine._classify (Engine.failure: the evidence of a boot failure)."""

    code: str | None = None
    timed_out: bool | None = None
    exit_code: int | None = None
    oom_killed: bool | None = None
    oom_kill_count_rose: bool | None = None
    elapsed_s: int | float | None = None
    boot_deadline_s: int | None = None
    quote: str | None = None  # the engine's own line that says why
    reason: str | None = None
    log_tail: list[str] | None = None  # the engine log's last lines, as printed


class Boot(Section, frozen=True):
    """onegpu.phases.load:engine (ready: elapsed_s and facts; blocked: Blocked.as_json and failure)."""

    ready: bool | None = None
    elapsed_s: int | float | None = None
    facts: BootFacts | None = None
    code: str | None = None
    message: str | None = None
    numbers: BootNumbers | None = None
    failure: BootFailure | None = None


class LandingPinning(Section, frozen=True):
    """onegpu.plan.landing:_pinning_record."""

    mode: str | None = None  # "rounded" | "exact"
    pinned_bytes: int | None = None
    pinned_rounded_bytes: int | None = None
    pinned_exact_bytes: int | None = None
    measured_container_bytes: int | None = None
    status: str | None = None


class LandingKvRow(Section, frozen=True):
    """onegpu.plan.landing_kv:_row."""

    quantity: str | None = None
    measured: int | float | None = None  # GiB, or tokens
    projected: int | float | list[int | float] | None = None  # GiB (a [least, most] range for the committed cache), or tokens
    status: str | None = None
    why: str | None = None


class LandingKvCheck(Section, frozen=True):
    """onegpu.plan.landing_kv:extensible_kv_check."""

    rows: list[LandingKvRow] | None = None
    accounting: str | None = None
    contradiction: str | None = None


class LandingMeasured(Section, frozen=True):
    """onegpu.plan.landing:landing_record (measured, with onegpu.plan.landing:_gpu_reading's NVML figures)."""

    weights_gpu_bytes: int | None = None
    kv_pool_bytes: int | None = None
    kv_pool_tokens: int | None = None
    host_available_bytes: int | None = None
    container_memory_bytes: int | None = None
    gpu_not_measured: str | None = None  # why there is no NVML reading
    gpu_free_bytes: int | None = None
    gpu_used_bytes: int | None = None
    gpu_total_bytes: int | None = None


class LandingProjected(Section, frozen=True):
    """onegpu.plan.landing:projection_from_plan (Projection)."""

    weights_gpu_bytes: int | None = None
    kv_pool_bytes: int | None = None
    kv_bytes_per_token: int | float | None = None
    kv_pool_tokens: int | None = None
    gpu_free_at_scan_bytes: int | None = None
    gpu_target_bytes: int | None = None
    gpu_free_after_bytes: int | None = None
    host_available_at_scan_bytes: int | None = None
    container_ram_cap_bytes: int | None = None
    host_available_min_bytes: int | None = None
    reserve_source: str | None = None  # "ASSUMED", "settings" or "CALIBRATED FROM <run>"
    offloaded_logical_bytes: int | None = None
    pinned_bytes: int | None = None
    pinned_rounded_bytes: int | None = None
    pinned_exact_bytes: int | None = None
    pinning: str | None = None  # "rounded" | "exact"
    kv_sizing: str | None = None  # "estimate" | "extensible"
    kv_bytes_per_block: int | None = None
    kv_blocks_per_request: int | None = None
    kv_layer_segments: int | None = None
    kv_context_tokens: int | None = None
    requested_bytes: int | None = None
    reserve_bytes: int | None = None
    accounting: str | None = None


class LandingError(Section, frozen=True):
    """onegpu.plan.landing:_row (one quantity, measured against projected)."""

    quantity: str | None = None
    unit: str | None = None  # "bytes" | "tokens"
    projected: int | None = None
    measured: int | None = None
    error: int | None = None  # measured - projected
    error_percent: int | float | None = None
    status: str | None = None  # "measured" | "not measured"
    why: str | None = None
    projected_is_lower_bound: bool | None = None
    logical: bool | None = None  # the offload row: logical bytes, as the engine counts them


class LandingFloor(Section, frozen=True):
    """onegpu.plan.landing:landing_record (the free-memory floor)."""

    bytes: int | None = None
    assumed: bool | None = None
    status: str | None = None  # "above" | "UNDER" | "not checked"
    margin_bytes: int | None = None
    why: str | None = None


class LandingSample(Section, frozen=True):
    """onegpu.engine.sampler:Sampler.sample_once (the sample taken at READY)."""

    t: int | float | None = None  # Unix time
    elapsed_s: int | float | None = None
    gpu_used_bytes: int | None = None
    gpu_free_bytes: int | None = None
    gpu_total_bytes: int | None = None
    gpu_util_percent: int | None = None
    gpu_power_w: int | float | None = None
    host_available_bytes: int | None = None
    container_memory_bytes: int | None = None
    container_memory_source: str | None = None
    errors: list[str] | None = None


class Landing(Section, frozen=True):
    """onegpu.plan.landing:landing_record (with "at", written by onegpu.phases.load_landing:record_landing)."""

    pinning: LandingPinning | None = None
    kv_after_warmup: LandingKvCheck | None = None
    measured: LandingMeasured | None = None
    projected: LandingProjected | None = None
    errors: list[LandingError] | None = None
    floor: LandingFloor | None = None
    warnings: list[str] | None = None
    at_ready: LandingSample | None = None
    at: str | None = None
