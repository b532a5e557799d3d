"""Pure: capacity per GPU of a declared multi-GPU protocol (tensor parallel TP x pipeline parallel PP, one GPU per
rank) in vLLM's own accounting.

What each rank holds comes from onegpu.plan.rank_share. That share, as a view of the checkpoint, goes through the
one-GPU offload plan unchanged (onegpu.plan.offload): every worker runs its own offloader with the same
--cpu-offload-gb; its KV is its stage's attention layers with its share of the KV heads. The GPU checks are judged per rank against that rank's GPU; the host
checks count every worker together. With TP 1 and PP 1 the one rank's plan is the one-GPU plan, except where the
vocabulary is not a multiple of 64: the rank counts vLLM's padding rows of the embedding and head, which the one-GPU
plan does not (at most 63 rows of each).
"""
from __future__ import annotations

import sys

from msgspec import Struct
from msgspec.structs import replace

from onegpu.checkpoint.model import CheckpointFacts
from onegpu.core.units import gib
from onegpu.machine.model import GpuDevice, HostFacts
from onegpu.plan.capacity import (
    GPU_CHECKS,
    Verdict,
    _blocked,
    _gpu_budget,
    _gpu_free,
    _gpu_weights,
    _kv_cache,
    _quantization,
    _unknown,
    _weights,
    gpu_kv_budget,
    kit_plan,
    named,
    pinning_of,
)
from onegpu.plan.capacity_host import (
    CONTAINER_OWN_NEEDS_BYTES,
    cgroup_limit,
    gib_bytes,
    host_offload,
    host_ram,
    run_folder_disk,
)
from onegpu.plan.kvcache import KvEstimate
from onegpu.plan.offload import OffloadPlan, spans
from onegpu.plan.parallel_rules import PARALLEL_RULES
from onegpu.plan.rank_kv import rank_estimate, rank_kv
from onegpu.plan.rank_share import (
    RankLayout,
    RankPlace,
    rank_layout,
    split_refusals,
    split_unplaced,
)
from onegpu.plan.repack import repack_verdict, repin_cost
from onegpu.plan.settings import protocol_label
from onegpu.plan.vllm_versions import Accounting, assumed_newest


def rank_plans(ckpt: CheckpointFacts, tp: int, pp: int, budget_bytes: int, pinning: str = "rounded",
               partition: tuple[int, ...] | None = None) -> list[OffloadPlan]:
    """Each rank's offload plan, rank by rank: the same budget per worker (RULES 'per_worker_offload') over that
    rank's own parameters, through the one-GPU plan's own loop (onegpu.plan.capacity.kit_plan)."""
    plans = []
    for rank in range(tp * pp):
        rl = rank_layout(ckpt, tp, pp, rank, partition)
        plans.append(kit_plan(rl.ckpt, budget_bytes, pinning, layout=rl.layout))
    return plans




# ---- everything one rank needs -----------------------------------------------------------------------------------

class RankFacts(Struct, frozen=True):
    place: RankPlace
    gpu: GpuDevice | None
    layout: RankLayout
    plan: OffloadPlan
    kv: KvEstimate  # the rank's own estimate (bytes None: UNKNOWN with its reason)


def rank_facts(settings, gpus: list[GpuDevice | None], ckpt: CheckpointFacts, kv: KvEstimate, tp: int, pp: int,
               partition: tuple[int, ...] | None = None) -> list[RankFacts]:
    """Every rank in rank order; GPU i of `gpus` is rank i (RULES 'rank_order')."""
    if len(gpus) != tp * pp:
        raise ValueError(f"{len(gpus)} GPUs for TP {tp} x PP {pp} = {tp * pp} ranks")
    budget = gib_bytes(settings.cpu_offload_gib)
    out = []
    for rank, gpu in enumerate(gpus):
        rl = rank_layout(ckpt, tp, pp, rank, partition)
        plan = kit_plan(rl.ckpt, budget, pinning_of(settings), layout=rl.layout)
        share = rank_kv(kv, ckpt.config or {}, tp, pp, rank, partition)
        out.append(RankFacts(rl.place, gpu, rl, plan, rank_estimate(kv, share)))
    return out


def host_total_plan(plans: list[OffloadPlan]) -> OffloadPlan:
    """Every worker's offload as one plan for the host checks: what they offload and pin adds up. The peak is the
    sum of each worker's peak (the workers load at the same time: an upper bound, reached when their worst moments
    coincide)."""
    def total(attr: str) -> int:
        return sum(getattr(p, attr) for p in plans)

    touched = sorted({layer for p in plans for layer in p.layers_touched})
    return replace(plans[0], offloaded=[x for p in plans for x in p.offloaded], offloaded_bytes=total("offloaded_bytes"),
                   pinned_rounded_bytes=total("pinned_rounded_bytes"), pinned_exact_bytes=total("pinned_exact_bytes"),
                   peak_bytes=total("peak_bytes"), offerable_bytes=total("offerable_bytes"),
                   loaded_bytes=total("loaded_bytes"), gpu_resident_bytes=total("gpu_resident_bytes"),
                   stays_bytes=total("stays_bytes"), draft_bytes=total("draft_bytes"),
                   never_loaded_bytes=total("never_loaded_bytes"), not_loaded_bytes=total("not_loaded_bytes"),
                   tower_offloaded_bytes=total("tower_offloaded_bytes"), engine_only_bytes=total("engine_only_bytes"),
                   layers_on_cpu=sorted({layer for p in plans for layer in p.layers_on_cpu}), partial_layer=None,
                   partial_on_cpu=[], partial_of=0, layers_touched=touched)


# ---- the verdicts ------------------------------------------------------------------------------------------------

_SEVERITY = {"BLOCKED": 2, "UNKNOWN": 1, "OK": 0}
_MARGINS = {"gpu_free": ("free_bytes", "need_bytes"), "gpu_budget": ("budget_bytes", None),
            "gpu_weights": ("gpu_budget_bytes", "gpu_resident_bytes"), "kv_cache": ("gpu_budget_bytes", "need_bytes")}


def _margin(check: str, v: Verdict) -> int | None:
    """Bytes to spare on this rank for this check (negative: short), from the verdict's own numbers."""
    have, need = _MARGINS[check]
    if v.status == "UNKNOWN" or v.numbers.get(have) is None:
        return None
    return v.numbers[have] - ((v.numbers.get(need) or 0) if need else 0)


def _worst(check: str, verdicts: list[Verdict]) -> int:
    """The rank whose verdict leads: BLOCKED before UNKNOWN before OK, then the least to spare."""
    def key(i: int):
        margin = _margin(check, verdicts[i])
        return -_SEVERITY[verdicts[i].status], margin if margin is not None else sys.maxsize, i

    return min(range(len(verdicts)), key=key)


def _rank_row(r: RankFacts, v: Verdict, check: str) -> dict:
    row = {"rank": r.place.rank, "gpu_index": r.gpu.index if r.gpu is not None else None,
           "tp_rank": r.place.tp_rank, "pp_stage": r.place.pp_stage, "status": v.status, "code": v.code,
           "margin_bytes": _margin(check, v)}
    row.update({k: val for k, val in v.numbers.items() if isinstance(val, (int, str, bool)) or val is None})
    return row


def _spare(check: str, v: Verdict) -> str:
    margin = _margin(check, v)
    if margin is None:
        return ""
    return f" ({gib(margin)} to spare)" if margin >= 0 else f" (short by {gib(-margin)})"


def _combined(check: str, label: str, ranks: list[RankFacts], per_rank: list[Verdict]) -> Verdict:
    """One check over every rank: BLOCKED if any rank is; the worst rank named, every rank listed."""
    w = _worst(check, per_rank)
    lead, place = per_rank[w], ranks[w].place
    blocked = sum(v.status == "BLOCKED" for v in per_rank)
    summary = "; ".join(f"rank {r.place.rank} {v.status}{' ' + v.code if v.code else ''}{_spare(check, v)}"
                        for r, v in zip(ranks, per_rank))
    head = (f"{blocked} of {len(ranks)} ranks BLOCKED, worst" if blocked else
            "a rank is UNKNOWN" if lead.status == "UNKNOWN" else "every rank passes, tightest")
    message = f"{label}: {head} {place.describe(ranks[w].gpu)}: {lead.message}. Every rank: {summary}"
    numbers = {**lead.numbers, "protocol": label, "worst_rank": place.rank,
               "ranks": [_rank_row(r, v, check) for r, v in zip(ranks, per_rank)]}
    return Verdict(check, lead.status, lead.code, message, numbers)


def _rank_gpu_verdicts(settings, r: RankFacts, calibration, not_judged: str | None,
                       accounting: Accounting) -> dict[str, Verdict]:
    """The four GPU checks of one rank against its own GPU, as capacity.py judges one GPU; the weights and KV checks
    UNKNOWN for `not_judged` (a split vLLM refuses, or stages the kit cannot place)."""
    if r.gpu is None:
        why = f"{r.place.describe(None)}: its GPU is not on this machine; the GPU side is not known"
        return {c: _unknown(c, why) for c in GPU_CHECKS}
    kv_budget = gpu_kv_budget(settings, r.gpu, accounting.rules, calibration)
    budget = kv_budget.budget_bytes
    out = {"gpu_free": _gpu_free(r.gpu, accounting), "gpu_budget": _gpu_budget(settings, r.gpu, kv_budget, calibration),
           "gpu_weights": _gpu_weights(r.layout.ckpt, r.plan, budget),
           "kv_cache": _kv_cache(r.kv, r.plan.gpu_resident_bytes, budget)}
    if not_judged is not None:
        out["gpu_weights"] = _unknown("gpu_weights", not_judged, gpu_budget_bytes=budget)
        out["kv_cache"] = _unknown("kv_cache", not_judged, gpu_budget_bytes=budget)
    return out


def _stage_ends(r: RankFacts) -> str:
    """What the rank's stage holds besides its decoder layers (RULES 'pp_ends'), never offered to the offloader."""
    held = []
    if r.layout.embeddings_head_bytes:
        held.append(f"embeddings/head {gib(r.layout.embeddings_head_bytes)}")
    if r.layout.other_stays_bytes:
        norm = r.place.last_stage or r.layout.ends_on_every_stage
        held.append(f"{'final norm' if norm else 'top-level tensors without a rule'} "
                    f"{gib(r.layout.other_stays_bytes)}")
    everywhere = (f", counted on every stage: {r.layout.ends_on_every_stage} is not an architecture whose vLLM model "
                  "was read to build them only on their stages (an upper bound)"
                  if r.layout.ends_on_every_stage else "")
    return f" + {' and '.join(held)} (never offloaded{everywhere})" if held else ""


def _rank_where(r: RankFacts) -> str:
    """One rank's layers and where its offload lands, in words."""
    plan = r.plan
    moved = (f"offloads {len(plan.offloaded)} parameters, {gib(plan.offloaded_bytes)} logical, pinned "
             f"{gib(plan.pinned_bytes)}, from layers {spans(plan.layers_touched)}" if plan.offloaded
             else "offloads nothing")
    return (f"{r.place.describe(r.gpu)}: decoder layers {r.place.layers_text}{_stage_ends(r)}; {moved}; "
            f"{gib(plan.gpu_resident_bytes)} of weights on its GPU")


def _offload_plan_verdict(ckpt: CheckpointFacts, ranks: list[RankFacts], label: str, refusal: str | None,
                          unplaced: str | None, accounting: Accounting) -> Verdict:
    """Each rank's share and offload in words, with per-rank numbers."""
    plans = [r.plan for r in ranks]
    total = host_total_plan(plans)
    rule = PARALLEL_RULES["per_worker_offload"]
    rows = [{"rank": r.place.rank, "tp_rank": r.place.tp_rank, "pp_stage": r.place.pp_stage,
             "first_layer": r.place.first_layer, "end_layer": r.place.end_layer if r.place.end_layer != sys.maxsize
             else None, "offloaded_bytes": r.plan.offloaded_bytes, "pinned_bytes": r.plan.pinned_bytes,
             "peak_bytes": r.plan.peak_bytes, "loaded_bytes": r.plan.loaded_bytes,
             "gpu_resident_bytes": r.plan.gpu_resident_bytes, "embeddings_head_bytes": r.layout.embeddings_head_bytes,
             "other_stays_bytes": r.layout.other_stays_bytes, "parameters": len(r.plan.offloaded)} for r in ranks]
    nums = dict(protocol=label, budget_bytes=plans[0].budget_bytes, budget_per_worker=True,
                offloaded_bytes=total.offloaded_bytes, pinning=total.pinning, pinned_bytes=total.pinned_bytes,
                pinned_rounded_bytes=total.pinned_rounded_bytes, pinned_exact_bytes=total.pinned_exact_bytes,
                peak_bytes=total.peak_bytes, loaded_bytes=total.loaded_bytes,
                gpu_resident_bytes=total.gpu_resident_bytes, accounting=accounting.label, ranks=rows,
                rules=list(PARALLEL_RULES))
    if not ckpt.tensors:
        return _unknown("offload_plan", f"{label}: no per-tensor facts: the ranks' shares cannot be computed", **nums)
    if refusal is not None:  # a definite failure at load: the plan cannot be run as declared
        return _blocked("offload_plan", "PARALLEL_SPLIT_REFUSED", f"{label}: {refusal}", **nums)
    if unplaced is not None:
        return _unknown("offload_plan", f"{label}: {unplaced}", **nums)
    parts = [f"{label}, {accounting.label}: each worker runs its own offloader with the same budget "
             f"{gib(plans[0].budget_bytes)} over its own share of the weights ({rule.short()})"]
    parts += [_rank_where(r) for r in ranks]
    whole = sorted({name for r in ranks for name in r.layout.counted_whole})
    if whole:
        parts.append(f"{len(whole)} tensor groups of modules without a split rule are counted whole on every rank, "
                     f"an upper bound (e.g. {whole[0]})")
    rounded = sorted({name for r in ranks for name in r.layout.rounded_up})
    if rounded:
        parts.append(f"{len(rounded)} tensor groups do not split into whole bytes per rank and are rounded up "
                     f"(e.g. {rounded[0]}; {PARALLEL_RULES['tp_scales'].short()})")
    parts.append("experts are split by TP on every rank: the launch passes no --enable-expert-parallel")
    return Verdict("offload_plan", "OK", None, "; ".join(parts), nums)


def _own_needs_text(workers: int) -> str:
    return (f"{gib(workers * CONTAINER_OWN_NEEDS_BYTES)} ASSUMED for the container's own needs: "
            f"{gib(CONTAINER_OWN_NEEDS_BYTES)} per worker process x {workers} (engine process, tokenizer, CUDA host "
            "context)")


def _host_verdicts(settings, host: HostFacts, ckpt: CheckpointFacts, ranks: list[RankFacts],
                   label: str, accounting: Accounting) -> list[Verdict]:
    """The host checks over every worker together: pinned bytes and peaks added up, own needs once per worker."""
    total = host_total_plan([r.plan for r in ranks])
    workers = len(ranks)
    own = workers * CONTAINER_OWN_NEEDS_BYTES
    cap = gib_bytes(settings.container_ram_gib)
    repin = repin_cost(ckpt, total, accounting)
    container_need = total.peak_bytes + own + (repin.bytes if repin.certainty == "certain" else 0)
    per_rank = [{"rank": r.place.rank, "pinned_bytes": r.plan.pinned_bytes, "peak_bytes": r.plan.peak_bytes,
                 "offloaded_bytes": r.plan.offloaded_bytes} for r in ranks]
    verdicts = [host_offload(total, cap, own, _own_needs_text(workers), accounting, repin),
                host_ram(settings, host, cap, total, container_need, repin),
                cgroup_limit(settings, host, cap, container_need), repack_verdict(ckpt, total, accounting)]
    summed = f"{label}, every worker together (the {workers} workers' peaks added up, an upper bound)"
    contexts = (summed, summed, summed, f"{label}, every worker's offloaded parameters")
    return [replace(v, message=f"{context}: {v.message}",
                    numbers={**v.numbers, "protocol": label, "workers": workers, "ranks": per_rank})
            for v, context in zip(verdicts, contexts)]


def parallel_capacity_verdicts(settings, gpus: list[GpuDevice | None], host: HostFacts, ckpt: CheckpointFacts,
                               kv: KvEstimate, run_disk_free_bytes: int | None, tp: int, pp: int, calibration=None,
                               partition: tuple[int, ...] | None = None,
                               ranks: list[RankFacts] | None = None,
                               accounting: Accounting | None = None) -> list[Verdict]:
    """Every check of capacity.CHECKS for the TP x PP protocol, in that order. GPU checks per rank against that
    rank's GPU (BLOCKED if any rank is, the worst rank named, every rank listed); host checks over every worker.
    `ranks`: rank_facts of the same arguments, when the caller already has them (the per-rank split is the costly
    part)."""
    label = protocol_label(tp, pp)
    accounting = accounting or assumed_newest()
    ranks = ranks if ranks is not None else rank_facts(settings, gpus, ckpt, kv, tp, pp, partition)
    problems = split_refusals(ckpt, tp)
    refusal = f"vLLM refuses this split at load: {'; '.join(problems)}" if problems else None
    unplaced = split_unplaced(ckpt, pp)
    per_rank = [_rank_gpu_verdicts(settings, r, calibration, refusal or unplaced, accounting) for r in ranks]
    host_checks = _host_verdicts(settings, host, ckpt, ranks, label, accounting)
    if unplaced is not None:  # every stage would be counted with every layer: no figure to judge the host by
        host_checks = [_unknown(v.check, f"{label}: {unplaced}") for v in host_checks]
    return named([_weights(ckpt), _quantization(ckpt),
                  _offload_plan_verdict(ckpt, ranks, label, refusal, unplaced, accounting),
                  *[_combined(c, label, ranks, [v[c] for v in per_rank]) for c in GPU_CHECKS],
                  *host_checks, run_folder_disk(run_disk_free_bytes)], accounting)


# ---- the table ---------------------------------------------------------------------------------------------------

def rank_rows(settings, gpus: list[GpuDevice | None], ckpt: CheckpointFacts, kv: KvEstimate, tp: int, pp: int,
              calibration=None, partition: tuple[int, ...] | None = None,
              ranks: list[RankFacts] | None = None, accounting: Accounting | None = None) -> list[str]:
    """One row per rank (GPU, TP rank, PP stage, layers, weights on its GPU, offloaded logical and pinned, KV,
    budget) and a row with the host total."""
    ranks = ranks if ranks is not None else rank_facts(settings, gpus, ckpt, kv, tp, pp, partition)
    rules = (accounting or assumed_newest()).rules
    rows = [f"{'rank':<5} {'GPU':<5} {'TP':>3} {'PP':>3} {'layers':<10} {'weights on GPU':>15} {'offloaded':>13} "
            f"{'pinned':>13} {'KV':>13} {'GPU budget':>13}"]
    for r in ranks:
        budget = gpu_kv_budget(settings, r.gpu, rules, calibration).budget_bytes if r.gpu is not None else None
        rows.append(f"{r.place.rank:<5} {str(r.gpu.index) if r.gpu else '?':<5} {r.place.tp_rank:>3} "
                    f"{r.place.pp_stage:>3} {r.place.layers_text:<10} {gib(r.plan.gpu_resident_bytes):>15} "
                    f"{gib(r.plan.offloaded_bytes):>13} {gib(r.plan.pinned_bytes):>13} {gib(r.kv.bytes):>13} "
                    f"{gib(budget):>13}")
    total = host_total_plan([r.plan for r in ranks])
    own = len(ranks) * CONTAINER_OWN_NEEDS_BYTES
    rows.append(f"{'host total, every worker':<44} {gib(total.offloaded_bytes):>13} {gib(total.pinned_bytes):>13}"
                f"  peak {gib(total.peak_bytes)} + {gib(own)} ASSUMED own needs ({len(ranks)} x "
                f"{gib(CONTAINER_OWN_NEEDS_BYTES)}) = {gib(total.peak_bytes + own)}")
    return rows
