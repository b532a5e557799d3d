"""Pure: the plan's insight sections: the link ceiling and the measured rates against it, calibration, proposal,
operator-supplied score (onegpu.phases.plan_ceiling, plan_insight, canary), as read from receipt.json."""
from __future__ import annotations

from onegpu.record.base import Section
from onegpu.record.sections_load import LinkMeasurement
from onegpu.record.sections_plan import CapacityNumber


class CeilingLink(Section, frozen=True):
    """The link the ceilings use and how it is known (onegpu.plan.ceiling_record:ceiling_record)."""
    gbps: int | float | None = None
    basis: str | None = None  # "MEASURED" | "ASSUMED" | "UNKNOWN"
    how: str | None = None
    gen: int | None = None  # the link's maximum PCIe generation and width
    width: int | None = None
    current_gen: int | None = None  # what NVML read at the time (an idle card may run its link slower)
    current_width: int | None = None
    nominal_gbps: int | float | None = None
    measurement: LinkMeasurement | None = None
    not_measured: str | None = None  # why no probe measured this link


class CeilingTraffic(Section, frozen=True):
    """The offloaded bytes a forward step reads over the link (onegpu.plan.ceiling_record:ceiling_record)."""
    expert_bytes: int | None = None  # every offloaded routed-expert tensor and its scales
    dense_bytes: int | None = None  # every other offloaded parameter, read whole each step
    experts: int | None = None  # routed experts per MoE layer
    top_k: int | None = None  # experts per token
    moe_layers: int | None = None
    dense_layers: int | None = None


class CeilingRule(Section, frozen=True):
    """One rule the ceilings rest on (onegpu.plan.ceiling:ceiling_rules_json)."""
    rule: str | None = None
    text: str | None = None
    sources: list[str] | None = None  # vLLM source locations


class Ceiling(Section, frozen=True):
    """The link's upper bounds and their inputs (onegpu.plan.ceiling_record:ceiling_record), or why none were
    computed (onegpu.phases.plan_ceiling:ceiling)."""
    label: str | None = None
    why: str | None = None  # only when not computed
    link: CeilingLink | None = None
    traffic: CeilingTraffic | None = None
    decode_tps: dict[str, int | float | None] | None = None  # sequences a step -> tokens/s (null: unknown or unbounded)
    step_bytes: dict[str, int] | None = None  # sequences a step -> bytes a decode step reads
    prefill_tps: int | float | None = None  # at the prefill chunk
    chunk_tokens: int | None = None
    chunk_bytes: int | None = None
    ttft_s: dict[str, int | float | None] | None = None  # prompt tokens -> seconds, at least
    offloaded: bool | None = None
    rules: list[CeilingRule] | None = None
    lines: list[str] | None = None


class RateRow(Section, frozen=True):
    """One measured rate as a fraction of its ceiling (onegpu.record.rates:measured_against)."""
    run: str | None = None  # "canary" | "batch"
    rate: str | None = None  # "decode" | "prefill"
    measured_tps: int | float | None = None
    ceiling_tps: int | float | None = None
    fraction: int | float | None = None
    status: str | None = None
    why: str | None = None
    link_basis: str | None = None


class CalibrationEstimates(Section, frozen=True):
    """The two measurements of the non-weight reserve (onegpu.plan.calibrate:measure)."""
    boot_log_bytes: int | None = None
    nvml_bytes: int | None = None


class Calibration(Section, frozen=True):
    """The reserve measured from an earlier run (onegpu.plan.calibrate:Calibration.as_json, warnings added by
    onegpu.phases.plan_insight:calibration)."""
    run_id: str | None = None
    folder: str | None = None
    reserve_bytes: int | None = None
    how: str | None = None
    estimates: CalibrationEstimates | None = None
    rows: list[str] | None = None
    warnings: list[str] | None = None
    image_id: str | None = None
    vllm_version: str | None = None
    gpu_name: str | None = None


class ProposedSettings(Section, frozen=True):
    """The settings a proposal proposes (onegpu.plan.propose:propose)."""
    schema: str | None = None
    model_id: str | None = None
    model_revision: str | None = None
    model_path: str | None = None
    image: str | None = None
    gpu: int | str | None = None
    context_tokens: int | None = None
    prefill_chunk_tokens: int | None = None
    cpu_offload_gib: int | None = None
    container_ram_gib: int | None = None
    host_headroom_gib: int | None = None
    kv_cache_dtype: str | None = None
    free_floor_gib: int | float | None = None
    gpu_reserve_gib: int | float | None = None


class AlternativeSettings(Section, frozen=True):
    """The settings an alternative changes (onegpu.plan.propose:_alternatives)."""
    offload_pinning: str | None = None
    cpu_offload_gib: int | None = None
    container_ram_gib: int | None = None


class AlternativeCeiling(Section, frozen=True):
    """The link's upper bounds under one alternative (onegpu.plan.ceiling_record:plan_ceiling, text added by
    onegpu.plan.propose:_ceiling_rows)."""
    decode_tps: int | float | None = None  # one sequence
    prefill_tps: int | float | None = None
    chunk_tokens: int | None = None
    step_bytes: int | None = None  # a one-token decode step
    chunk_bytes: int | None = None
    offloaded: bool | None = None
    link_gbps: int | float | None = None
    link_basis: str | None = None
    text: str | None = None


class Alternative(Section, frozen=True):
    """A choice to measure beside the proposal (onegpu.plan.propose:_alternative)."""
    name: str | None = None
    settings: AlternativeSettings | None = None
    engine_args: list[str] | None = None  # selective expert offload: not in the kit's launch
    container_ram_gib: int | None = None
    pinned_bytes: int | None = None
    peak_bytes: int | None = None
    parameters: int | None = None
    offloaded_bytes: int | None = None
    gpu_left_bytes: int | None = None
    confirmed: bool | None = None
    why: str | None = None
    ceiling: AlternativeCeiling | None = None


class DerivationRow(Section, frozen=True):
    """One row of the proposal's derivation (onegpu.plan.propose_text:proposal_document)."""
    quantity: str | None = None
    value: str | None = None
    derivation: str | None = None


class Blocker(Section, frozen=True):
    """Why no budget can work (onegpu.plan.propose:propose)."""
    check: str | None = None
    code: str | None = None
    message: str | None = None
    numbers: dict[str, CapacityNumber] | None = None  # the blocking verdict's numbers, as its check wrote them


class ProposalReserve(Section, frozen=True):
    """The non-weight reserve the proposal carries (onegpu.plan.propose:_reserve)."""
    source: str | None = None  # "calibrated" | "request" | "assumed"
    calibrated_from: str | None = None
    bytes: int | None = None


class Proposal(Section, frozen=True):
    """settings-proposed.json's path, digest and body (onegpu.phases.plan_insight:proposal)."""
    path: str | None = None
    sha256: str | None = None
    proposed: bool | None = None
    settings: ProposedSettings | None = None
    alternatives: list[Alternative] | None = None
    derivation: list[DerivationRow] | None = None
    blockers: list[Blocker] | None = None
    unknown: list[str] | None = None
    warnings: list[str] | None = None
    reserve: ProposalReserve | None = None


class Scorer(Section, frozen=True):
    """The operator's scorer (onegpu.plan.operator_score:parse_operator_score)."""
    name: str | None = None
    revision: str | None = None


class ScoreRecord(Section, frozen=True):
    """The operator's score file as validated (onegpu.plan.operator_score:parse_operator_score)."""
    benchmark: str | None = None
    metric: str | None = None
    value: int | float | None = None
    scorer: Scorer | None = None
    sample_count: int | None = None
    model_id: str | None = None
    model_revision: str | None = None
    scored_run: str | None = None
    obtained_at: str | None = None
    notes: str | None = None


class OperatorScore(Section, frozen=True):
    """The operator-supplied score, never computed by the kit (onegpu.plan.operator_score:receipt_section)."""
    label: str | None = None
    operator_supplied: bool | None = None
    computed_by_kit: bool | None = None
    file: str | None = None
    file_sha256: str | None = None
    record: ScoreRecord | None = None
    mismatches: list[str] | None = None
