"""Pure: the plan phase's sections (onegpu.phases.plan, plan_launch), as read from receipt.json."""
from __future__ import annotations

from onegpu.record.base import Section

# ---- settings: the settings file as the session read it (onegpu.plan.settings).


class SettingsMultiGpu(Section, frozen=True):
    """onegpu.plan.settings:MultiGpu (via settings.py:settings_values): rank r runs on gpus[r]."""

    gpus: list[int | str] | None = None  # GPU indexes or UUIDs, in rank order
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    nccl_env: dict[str, str] | None = None  # NCCL_* name -> value


class SettingsValues(Section, frozen=True):
    """onegpu.plan.settings:settings_values (the Settings Struct, multi_gpu and vllm_version left out when None)."""

    source_schema: str | None = None
    path: str | None = None
    sha256: str | None = None
    model_id: str | None = None
    model_revision: str | None = None
    model_path: str | None = None
    image: str | None = None
    gpu: int | str | None = None  # index, or a GPU UUID
    context_tokens: int | None = None
    prefill_chunk_tokens: int | None = None
    cpu_offload_gib: int | float | None = None
    container_ram_gib: int | float | None = None
    host_headroom_gib: int | float | None = None
    deadline_s: int | None = None
    boot_deadline_s: int | None = None
    container_cpus: int | float | None = None
    gpu_reserve_gib: int | float | None = None
    kv_cache_dtype: str | None = None  # None: the model's own dtype (vLLM 'auto')
    trust_remote_code: bool | None = None
    request_timeout_s: int | None = None
    serve_window_s: int | None = None
    shm_gib: int | float | None = None
    pids_limit: int | None = None
    free_floor_gib: int | float | None = None
    max_requests: int | None = None
    offload_pinning: str | None = None  # "rounded" | "exact"
    assumed: dict[str, str] | None = None  # field -> "value (why)"
    multi_gpu: SettingsMultiGpu | None = None  # absent: the one-GPU protocol
    vllm_version: str | None = None  # as the operator declares it


class Settings(Section, frozen=True):
    """onegpu.phases.plan:settings."""

    path: str | None = None
    sha256: str | None = None
    schema: str | None = None  # the file's schema: onegpu/settings@1 or axm/one-gpu-settings@1
    assumed: dict[str, str] | None = None  # field (or "multi_gpu.nccl_env") -> "value (why)"
    values: SettingsValues | None = None


# ---- checkpoint: onegpu.checkpoint.model.CheckpointFacts.summary() (no per-tensor list, no config).


class CheckpointQuant(Section, frozen=True):
    """onegpu.checkpoint.model:QuantFacts (via model.py:CheckpointFacts.summary)."""

    method: str | None = None  # "fp8", "mxfp4", "modelopt", "compressed-tensors"; None = unquantized
    store_dtype: str | None = None
    recognised: bool | None = None
    description: str | None = None
    ignored_layers: list[str] | None = None


class CheckpointShard(Section, frozen=True):
    """onegpu.checkpoint.model:ShardFacts (via model.py:CheckpointFacts.summary)."""

    name: str | None = None  # relative to the checkpoint root
    size_bytes: int | None = None
    header_bytes: int | None = None
    tensors: int | None = None


class Checkpoint(Section, frozen=True):
    """onegpu.checkpoint.model:CheckpointFacts.summary."""

    root: str | None = None
    hf_cache_repo: str | None = None  # the models--ORG--NAME folder when the checkpoint is a cache snapshot
    hf_revision: str | None = None  # the snapshot's 40-hex folder name
    architectures: list[str] | None = None
    model_type: str | None = None
    quant: CheckpointQuant | None = None
    index_file: str | None = None  # None for a single model.safetensors
    shards: list[CheckpointShard] | None = None
    bytes_by_dtype: dict[str, int] | None = None
    params_by_dtype: dict[str, int] | None = None  # element counts for dtypes that are not packed
    packed_bytes_by_dtype: dict[str, int] | None = None
    bytes_by_role: dict[str, int] | None = None  # routed_experts, shared_dense, embeddings_head
    weight_bytes: int | None = None
    index_total_size: int | None = None
    tokenizer_files: list[str] | None = None
    files: list[str] | None = None
    synthetic: bool | None = None  # header-only checkpoint: no weights at all
    disk_free_bytes: int | None = None
    tensor_count: int | None = None


# ---- kv_cache: to_json(onegpu.plan.kvcache.KvEstimate).


class KvLayerRow(Section, frozen=True):
    """onegpu.plan.kvcache:KvLayerRow (via phases/plan.py:kv_estimate)."""

    kind: str | None = None  # full_attention | sliding_attention | mla | linear_attention | mamba
    layers: int | None = None
    bytes_per_token: int | None = None  # one layer, one token; 0 for state rows
    window: int | None = None
    bound_tokens: int | None = None
    reserved_tokens: int | None = None
    state_bytes: int | None = None
    bytes: int | None = None
    formula: str | None = None
    groups: int | None = None
    padded_layers: int | None = None
    block_tokens: int | None = None


class KvPoolGroup(Section, frozen=True):
    """onegpu.plan.kv_pool:PoolGroup (via phases/plan.py:kv_estimate)."""

    kind: str | None = None
    bytes_per_token: int | None = None
    window: int | None = None
    layers: int | None = None
    groups: int | None = None
    padded_layers: int | None = None
    block_tokens: int | None = None
    page_bytes: int | None = None
    tokens_held: int | None = None
    blocks_per_request: int | None = None  # per group


class KvPool(Section, frozen=True):
    """onegpu.plan.kv_pool:KvPool (via phases/plan.py:kv_estimate)."""

    groups: list[KvPoolGroup] | None = None
    layers_per_group: int | None = None
    bytes_per_block: int | None = None
    blocks_per_request: int | None = None  # over every group
    block_size: int | None = None
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None
    async_scheduling: bool | None = None
    in_flight_tokens: int | None = None
    accounting: str | None = None


class KvCache(Section, frozen=True):
    """onegpu.plan.kvcache:kv_cache_estimate (via phases/plan.py:kv_estimate)."""

    bytes: int | None = None  # None: UNKNOWN (unknown_reason)
    bytes_per_token_full: int | None = None
    layers: list[KvLayerRow] | None = None
    notes: list[str] | None = None
    unknown_reason: str | None = None
    context_tokens: int | None = None
    kv_dtype: str | None = None
    dtype_bytes: int | None = None
    block_size: int | None = None
    prefill_chunk_tokens: int | None = None
    async_scheduling: bool | None = None
    pool: KvPool | None = None  # None when recurrent layers are summed instead
    accounting: str | None = None


# ---- capacity: onegpu.plan.verdict.Verdict.as_json per check (capacity.py, capacity_host.py, repack.py,
# parallel.py).


class CapacityRankRow(Section, frozen=True):
    """One rank's figures in a multi-GPU verdict's numbers["ranks"] (onegpu.plan.parallel:_rank_row for the GPU
    checks, _offload_plan_verdict and _host_verdicts for the others): the keys of the row's check only."""

    rank: int | None = None
    gpu_index: int | None = None
    tp_rank: int | None = None
    pp_stage: int | None = None
    status: str | None = None
    code: str | None = None
    margin_bytes: int | None = None  # bytes to spare for the check (negative: short)
    # offload_plan rows
    first_layer: int | None = None
    end_layer: int | None = None
    offloaded_bytes: int | None = None
    pinned_bytes: int | None = None
    peak_bytes: int | None = None
    loaded_bytes: int | None = None
    gpu_resident_bytes: int | None = None
    embeddings_head_bytes: int | None = None
    other_stays_bytes: int | None = None
    parameters: int | None = None
    # the GPU checks: the rank's own verdict's scalar numbers (capacity.py _gpu_free, _gpu_budget, _gpu_weights,
    # _kv_cache)
    free_bytes: int | None = None
    total_bytes: int | None = None
    need_bytes: int | None = None
    accounting: str | None = None
    target_bytes: int | None = None
    reserve_bytes: int | None = None
    budget_bytes: int | None = None
    reserve_assumed: bool | None = None
    reserve_calibrated_from: str | None = None
    requested_bytes: int | None = None
    kv_sizing: str | None = None
    headroom_bound_bytes: int | None = None
    budget_binding: str | None = None
    over_bytes: int | None = None
    weight_bytes: int | None = None
    offload_budget_bytes: int | None = None
    offloadable_bytes: int | None = None
    gpu_budget_bytes: int | None = None
    kv_bytes: int | None = None
    context_tokens: int | None = None
    kv_dtype: str | None = None
    pool_bytes_per_block: int | None = None
    pool_blocks_per_request: int | None = None
    pool_layer_segments: int | None = None
    block_size: int | None = None


# A verdict's numbers (and a blocked test's, which carry them on): bytes and counts (int), utilization (int | float),
# labels and codes (str), flags (bool), None where not known, rule keys (list of str: "rules") and per-rank rows
# (list of CapacityRankRow: "ranks"); a list of plain numbers too.
CapacityNumber = int | float | str | bool | list[int | float | str | CapacityRankRow] | None


class CapacityRow(Section, frozen=True):
    """One capacity verdict (onegpu.plan.verdict.Verdict.as_json)."""

    check: str | None = None
    status: str | None = None  # "OK" | "BLOCKED" | "UNKNOWN"
    code: str | None = None
    message: str | None = None
    numbers: dict[str, CapacityNumber] | None = None  # keys vary by check; dtype_<DTYPE>_bytes among them


# ---- capacity_accounting: onegpu.plan.offload_rules.rules_json.


class AccountingVersion(Section, frozen=True):
    """onegpu.plan.vllm_versions:Accounting.as_json (via offload_rules.py:rules_json)."""

    series: str | None = None  # "0.34"
    label: str | None = None
    basis: str | None = None  # DECLARED | PROBED | RECORDED | ASSUMED
    version: str | None = None  # None when ASSUMED
    evidence: str | None = None
    confirmed: bool | None = None  # False: no rules for `version`, the newest stand in
    read_from: str | None = None
    default_block_size: int | None = None
    kv_sizing: str | None = None  # "estimate" | "extensible"


class AccountingRule(Section, frozen=True):
    """onegpu.plan.offload_rules:Rule.as_json, kv_pool.py:kv_rules_json, kv_sizing.py:sizing_rules_json."""

    rule: str | None = None
    text: str | None = None
    sources: list[str] | None = None  # vLLM file:function


class CapacityAccounting(Section, frozen=True):
    """The vLLM version's rules applied (onegpu.plan.offload_rules.rules_json)."""

    accounting: str | None = None
    version: AccountingVersion | None = None
    rules: list[AccountingRule] | None = None


# ---- plan: phases/plan.py:plan.


class PlanApproved(Section, frozen=True):
    """The --plan file the session was approved with (onegpu.phases.plan:plan)."""

    path: str | None = None
    sha256: str | None = None


class Plan(Section, frozen=True):
    """onegpu.phases.plan:plan."""

    path: str | None = None
    sha256: str | None = None
    approved: PlanApproved | None = None  # None without --plan


# ---- consistency: phases/plan_insight.py:consistency, then phases/probe.py:kv_dtype_support.


class ConsistencyCheck(Section, frozen=True):
    """onegpu.checkpoint.consistency:Check.as_json."""

    check: str | None = None
    status: str | None = None  # "ok" | "warning" | "unknown"
    message: str | None = None


class Consistency(Section, frozen=True):
    """onegpu.phases.plan_insight:consistency and onegpu.phases.probe:kv_dtype_support."""

    checks: list[ConsistencyCheck] | None = None
    vllm_version: str | None = None  # the --calibrate-from probe's
    vllm_version_source: str | None = None
    kv_dtype_at_probe: list[ConsistencyCheck] | None = None
    probe_vllm_version: str | None = None  # read by this session's runtime probe
