"""Pure: settings + the selected GPU + host facts + checkpoint headers + KV estimate -> capacity verdicts.

KIT.md 5. Header bytes are not the loaded footprint, so OK means "no definite failure found", never "fits".
Each verdict carries its numbers (bytes); UNKNOWN is shown with its reason and never blocks. Where the CPU
offload lands and what it pins in host RAM follow vLLM's offloader rule by rule (onegpu.plan.offload, whose RULES
name the vLLM file and function of each): the host verdicts count the bytes vLLM pins, not the budget. What differs
between vLLM releases (the KV block, how the KV cache is sized, what a repack re-pins) follows the version the plan
applies (onegpu.plan.vllm_versions), named in every row that depends on it.
"""
from __future__ import annotations

import math
from itertools import compress

from msgspec.structs import replace

from onegpu.checkpoint.model import CheckpointFacts
from onegpu.checkpoint.towers import has_towers  # the tower sections of config.json, as the launch reads them
from onegpu.core.units import GIB, gib
from onegpu.machine.model import GpuDevice, HostFacts
from onegpu.plan.capacity_host import (
    CONTAINER_OWN_NEEDS_BYTES,
    UNCONFIRMED,
    cgroup_limit,
    gib_bytes,
    host_offload,
    host_ram,
    pinning_text,
    run_folder_disk,
)
from onegpu.plan.kv_sizing import GPU_UTILIZATION, KvBudget, budget_text, kv_budget
from onegpu.plan.kvcache import KvEstimate
from onegpu.plan.offload import OffloadPlan, offload_plan, where_lines
from onegpu.plan.offload_rules import RULES
from onegpu.plan.repack import repack_verdict, repin_cost
from onegpu.plan.verdict import Verdict
from onegpu.plan.verdict import blocked as _blocked
from onegpu.plan.verdict import ok as _ok
from onegpu.plan.verdict import unknown as _unknown
from onegpu.plan.vllm_versions import Accounting, VersionRules, assumed_newest


def table_title(accounting: Accounting) -> str:
    return (f"onegpu capacity, {accounting.label} (header bytes are not the loaded footprint; a pass means no "
            "definite failure found, never 'fits')")


CHECKS = ("weights", "quantization", "offload_plan", "gpu_free", "gpu_budget", "gpu_weights", "kv_cache",
          "host_offload", "host_ram", "cgroup", "repack", "disk")
GPU_CHECKS = ("gpu_free", "gpu_budget", "gpu_weights", "kv_cache")
LABELS = {"weights": "weights (headers)", "quantization": "quantization", "offload_plan": "offload plan",
          "gpu_free": "GPU free at start", "gpu_budget": "GPU budget", "gpu_weights": "GPU part of weights",
          "kv_cache": "KV cache", "host_offload": "pinned in RAM cap", "host_ram": "host RAM",
          "cgroup": "kit cgroup limit", "repack": "repack after load", "disk": "run folder disk"}
_ROLE_NAMES = {"routed_experts": "routed experts", "shared_dense": "shared/dense", "embeddings_head": "embeddings/head"}


def pinning_of(settings) -> str:
    """The settings' offload pinning ("rounded", vLLM's default, or "exact")."""
    return getattr(settings, "offload_pinning", "rounded")


def kit_plan(ckpt: CheckpointFacts, budget_bytes: int, pinning: str = "rounded",
             selected: tuple[str, ...] = (), layout=None) -> OffloadPlan:
    """The engine's offload as the kit launches it: towers left out whenever config.json declares any (the launch
    passes --language-model-only then, RULES["towers_flag"])."""
    towers = has_towers(ckpt.config or {})
    return offload_plan(ckpt, budget_bytes, pinning, language_model_only=True if towers else None,
                        selected=selected, layout=layout)


def plan_for(settings, ckpt: CheckpointFacts) -> OffloadPlan:
    """kit_plan for the settings' budget and pinning."""
    return kit_plan(ckpt, gib_bytes(settings.cpu_offload_gib), pinning_of(settings))


def gpu_kv_budget(settings, gpu: GpuDevice, rules: VersionRules, calibration=None) -> KvBudget:
    """What the card leaves for weights and KV after the non-weight reserve (settings' or calibrated)."""
    reserve = calibration.reserve_bytes if calibration is not None else gib_bytes(settings.gpu_reserve_gib)
    return kv_budget(gpu.total_bytes, gpu.free_bytes, reserve, rules)


def capacity_verdicts(settings, gpu: GpuDevice | None, host: HostFacts, ckpt: CheckpointFacts, kv: KvEstimate,
                      run_disk_free_bytes: int | None, gpu_missing_reason: str | None = None,
                      calibration=None, accounting: Accounting | None = None) -> list[Verdict]:
    """Every check of KIT.md 5, in CHECKS order. Pure: no file, device or daemon is consulted.

    `calibration` (onegpu.plan.calibrate.Calibration) replaces the settings' non-weight reserve by a measured one;
    `accounting` is the vLLM version whose rules apply (the newest known, ASSUMED, when None).
    """
    accounting = accounting or assumed_newest()
    plan = plan_for(settings, ckpt)
    cap = gib_bytes(settings.container_ram_gib)
    repin = repin_cost(ckpt, plan, accounting)
    container_need = plan.peak_bytes + CONTAINER_OWN_NEEDS_BYTES + (repin.bytes if repin.certainty == "certain" else 0)
    verdicts = [_weights(ckpt), _quantization(ckpt), _offload_plan(ckpt, plan, accounting)]
    if gpu is None:
        why = gpu_missing_reason or "no GPU is selected"
        verdicts += [_unknown(c, f"{why}: the GPU side is not known and no number is assumed") for c in GPU_CHECKS]
    else:
        budget = gpu_kv_budget(settings, gpu, accounting.rules, calibration)
        verdicts += [_gpu_free(gpu, accounting), _gpu_budget(settings, gpu, budget, calibration),
                     _gpu_weights(ckpt, plan, budget.budget_bytes),
                     _kv_cache(kv, plan.gpu_resident_bytes, budget.budget_bytes)]
    verdicts += [host_offload(plan, cap, accounting=accounting, repin=repin),
                 host_ram(settings, host, cap, plan, container_need, repin),
                 cgroup_limit(settings, host, cap, container_need), repack_verdict(ckpt, plan, accounting),
                 run_folder_disk(run_disk_free_bytes)]
    return named(verdicts, accounting)


def named(verdicts: list[Verdict], accounting: Accounting) -> list[Verdict]:
    """Every row carries the accounting it was judged by (the receipt's numbers, the report's column)."""
    return [replace(v, numbers={**v.numbers, "accounting": accounting.label}) for v in verdicts]


def _weights(ckpt: CheckpointFacts) -> Verdict:
    by_dtype = ", ".join(f"{d} {gib(b)}" for d, b in sorted(ckpt.bytes_by_dtype.items(), key=lambda kv: -kv[1]))
    by_role = ", ".join(f"{_ROLE_NAMES.get(r, r)} {gib(b)}" for r, b in ckpt.bytes_by_role.items())
    table = ckpt.tensors
    # Tested on the expert groups' names (~10^3), which hold ".mtp." exactly when their tensors' names do: only the
    # expert number differs between them.
    mtp_groups = {g for g, name in enumerate(table.group_names) if ".mtp." in name}
    mtp = sum(compress(table.nbytes, map(mtp_groups.__contains__, table.group_of))) if mtp_groups else 0
    extra = f"; {gib(mtp)} of it in draft (MTP) layers the engine loads only for speculative decoding" if mtp else ""
    return _ok("weights", f"header bytes {gib(ckpt.weight_bytes)} ({ckpt.weight_bytes:,} B): by dtype {by_dtype}; "
                          f"by role {by_role}{extra}",
               weight_bytes=ckpt.weight_bytes, mtp_bytes=mtp,
               **{f"{r}_bytes": b for r, b in ckpt.bytes_by_role.items()},
               **{f"dtype_{d}_bytes": b for d, b in ckpt.bytes_by_dtype.items()})


def describe_weights(ckpt: CheckpointFacts) -> list[str]:
    """Fact lines: header bytes by dtype (parameters where the dtype allows, packed blocks by bytes) and by role."""
    lines = [f"weights in the headers: {ckpt.weight_bytes:,} bytes ({gib(ckpt.weight_bytes)}); header bytes are not "
             "the loaded footprint"]
    for dtype, size in sorted(ckpt.bytes_by_dtype.items(), key=lambda kv: -kv[1]):
        if dtype in ckpt.packed_bytes_by_dtype:
            count = f"{ckpt.packed_bytes_by_dtype[dtype]:,} bytes in packed blocks, counted by bytes only"
        else:
            count = f"{ckpt.params_by_dtype.get(dtype, 0):,} parameters"
        lines.append(f"  {dtype:<12} {gib(size):>14}  {count}")
    for role, size in ckpt.bytes_by_role.items():
        lines.append(f"  {_ROLE_NAMES.get(role, role):<16} {gib(size):>14}")
    return lines


def _quantization(ckpt: CheckpointFacts) -> Verdict:
    q = ckpt.quant
    if not q.recognised:
        return _unknown("quantization", f"{q.description}: the kit cannot say whether the engine loads it (a load "
                                        "would end UNSUPPORTED_QUANT if it cannot)")
    return _ok("quantization", f"recognised: {q.description}")


def _gpu_free(gpu: GpuDevice, accounting: Accounting) -> Verdict:
    need = math.ceil(gpu.total_bytes * GPU_UTILIZATION)
    nums = dict(free_bytes=gpu.free_bytes, total_bytes=gpu.total_bytes, need_bytes=need, accounting=accounting.label)
    if accounting.rules.kv_sizing == "extensible":
        # 0.34's request_memory refuses nothing with the extensible cache: a busy card leaves a smaller cache, which
        # the GPU budget's device headroom bound counts from the free figure.
        state = "at or above" if gpu.free_bytes >= need else "below"
        return _ok("gpu_free", f"{accounting.label}: driver-reported free {gib(gpu.free_bytes)} is {state} "
                               f"{GPU_UTILIZATION} x total {gib(gpu.total_bytes)} = {gib(need)}; with the extensible "
                               "KV cache the engine does not refuse to start below it (vllm/v1/worker/utils.py:"
                               "request_memory), the GPU budget counts the free figure instead", **nums)
    if gpu.free_bytes < need:
        return _blocked("gpu_free", "INSUFFICIENT_VRAM",
                        f"GPU {gpu.index} driver-reported free {gib(gpu.free_bytes)} is below {GPU_UTILIZATION} x "
                        f"total {gib(gpu.total_bytes)} = {gib(need)}: vLLM refuses to start below its utilization target",
                        **nums)
    return _ok("gpu_free", f"no definite failure: driver-reported free {gib(gpu.free_bytes)} >= {GPU_UTILIZATION} x "
                           f"total {gib(gpu.total_bytes)} = {gib(need)}", **nums)


def _reserve_text(settings, calibration=None) -> str:
    if calibration is not None:
        return f"{gib(calibration.reserve_bytes)} CALIBRATED FROM {calibration.run_id} (measured: {calibration.how})"
    assumed = settings.assumed.get("gpu_reserve_gib")  # "8.0 (why)"
    shown = gib(gib_bytes(settings.gpu_reserve_gib))
    if not assumed:
        return f"{shown} (from the settings)"
    why = assumed.split(" (", 1)[1].removesuffix(")") if " (" in assumed else assumed
    return f"{shown} ASSUMED ({why})"


def _gpu_budget(settings, gpu: GpuDevice, kv_budget: KvBudget, calibration=None) -> Verdict:
    target, budget = kv_budget.requested_bytes, kv_budget.budget_bytes
    reserve = target - budget if kv_budget.binding == "requested" else (kv_budget.headroom_bound_bytes or 0) - budget
    top = (f"{gib(gpu.total_bytes)} x {GPU_UTILIZATION} = {gib(target)}" if kv_budget.binding == "requested" else
           f"device headroom {gib(kv_budget.headroom_bound_bytes or 0)} (below {gib(gpu.total_bytes)} x "
           f"{GPU_UTILIZATION} = {gib(target)})")
    text = (f"{top} minus non-weight reserve {_reserve_text(settings, calibration)} = {gib(budget)} for weights and "
            f"KV; {budget_text(kv_budget)}")
    nums = dict(total_bytes=gpu.total_bytes, target_bytes=target, reserve_bytes=reserve, budget_bytes=budget,
                reserve_assumed="gpu_reserve_gib" in settings.assumed and calibration is None,
                reserve_calibrated_from=calibration.run_id if calibration is not None else None,
                **kv_budget.as_numbers())
    if budget <= 0:
        return _blocked("gpu_budget", "INSUFFICIENT_VRAM", f"{text}: nothing is left for weights", **nums)
    return _ok("gpu_budget", text, **nums)


def _offload_plan(ckpt: CheckpointFacts, plan: OffloadPlan, accounting: Accounting) -> Verdict:
    """Where the engine puts the weights: the towers, the decoder layers in order, what stays, what is not loaded."""
    towers = has_towers(ckpt.config or {})
    nums = dict(budget_bytes=plan.budget_bytes, offloaded_bytes=plan.offloaded_bytes, parameters=len(plan.offloaded),
                pinning=plan.pinning, pinned_bytes=plan.pinned_bytes, pinned_rounded_bytes=plan.pinned_rounded_bytes,
                pinned_exact_bytes=plan.pinned_exact_bytes, peak_bytes=plan.peak_bytes,
                offerable_bytes=plan.offerable_bytes, loaded_bytes=plan.loaded_bytes,
                gpu_resident_bytes=plan.gpu_resident_bytes, stays_bytes=plan.stays_bytes,
                draft_bytes=plan.draft_bytes, never_loaded_bytes=plan.never_loaded_bytes,
                layers_on_cpu=len(plan.layers_on_cpu), partial_layer=plan.partial_layer,
                decoder_layers=plan.decoder_layers, tower_bytes=sum(plan.towers.values()),
                towers_left_out=plan.language_model_only and bool(plan.towers or towers),
                accounting=accounting.label, rules=["order", "budget", "stays", "not_loaded", "engine_params",
                                              plan.pinning if plan.pinning == "exact" else "pinned", "transient",
                                              "logged"])
    if not ckpt.tensors:
        return _unknown("offload_plan", "no per-tensor facts: where the offload lands cannot be computed", **nums)
    parts = [f"{accounting.label}: {where_lines(plan)}"]
    if plan.offloaded:
        parts.append(f"{len(plan.offloaded)} engine parameters moved whole, in the engine's order, until the budget "
                     f"{gib(plan.budget_bytes)} is crossed ({RULES['budget'].short()}, utils.py:make_layers) = "
                     f"{gib(plan.offloaded_bytes)} logical, which the engine logs as 'Total CPU offloaded "
                     f"parameters: {round(plan.offloaded_bytes / GIB, 2)}'; {pinning_text(plan)}")
    parts.append(f"{gib(plan.gpu_resident_bytes)} of weights stay on the GPU, {gib(plan.stays_bytes)} of them "
                 "embeddings/head and final norm, which the offloader is never offered")
    gone = []
    if plan.draft_bytes:
        gone.append(f"draft (MTP) layers {gib(plan.draft_bytes)}")
    if plan.never_loaded_bytes:
        gone.append(f"tensors the loader maps to nothing {gib(plan.never_loaded_bytes)}")
    if gone:
        parts.append(f"not loaded at all: {', '.join(gone)} ({RULES['not_loaded'].short()})")
    if towers or plan.towers:
        found = ", ".join(f"{k} {gib(v)}" for k, v in plan.towers.items()) or "no tower tensors"
        if plan.language_model_only:
            parts.append(f"towers ({found}; config.json declares {', '.join(towers) or 'none'}) are left out: the "
                         "launch passes --language-model-only for the kit's text-only runs; without it vLLM builds "
                         "them first and offloads them before any decoder layer "
                         f"({RULES['order'].short()})")
        else:
            parts.append(f"towers first ({found}): built and offloaded before the decoder layers")
    if plan.pinning == "exact":
        parts.append(UNCONFIRMED)
    return _ok("offload_plan", "; ".join(parts), **nums)


def _gpu_weights(ckpt, plan: OffloadPlan, budget) -> Verdict:
    resident = plan.gpu_resident_bytes
    nums = dict(weight_bytes=ckpt.weight_bytes, offload_budget_bytes=plan.budget_bytes,
                offloadable_bytes=plan.offerable_bytes, offloaded_bytes=plan.offloaded_bytes,
                loaded_bytes=plan.loaded_bytes, gpu_resident_bytes=resident, gpu_budget_bytes=budget)
    skipped = plan.not_loaded_bytes
    loaded = (f"loaded weights {gib(plan.loaded_bytes)} (header bytes {gib(ckpt.weight_bytes)} minus "
              f"{gib(skipped)} the engine does not load)" if skipped else f"header bytes {gib(ckpt.weight_bytes)}")
    text = f"{loaded} minus CPU offload {gib(plan.offloaded_bytes)} = {gib(resident)} on the GPU"
    if plan.budget_bytes > plan.offerable_bytes:
        text += (f" (the offload budget {gib(plan.budget_bytes)} exceeds the {gib(plan.offerable_bytes)} of "
                 "decoder-layer weights, the only ones vLLM's offloader moves)")
    if resident > budget:
        return _blocked("gpu_weights", "INSUFFICIENT_VRAM",
                        f"{text} exceeds the GPU budget {gib(budget)} by {gib(resident - budget)}",
                        over_bytes=resident - budget, **nums)
    return _ok("gpu_weights", f"no definite failure: {text}, within the GPU budget {gib(budget)}", **nums)


def _kv_cache(kv: KvEstimate, resident: int, budget: int) -> Verdict:
    if kv.bytes is None:
        return _unknown("kv_cache", f"KV cache for {kv.context_tokens:,} tokens not estimated: {kv.unknown_reason}",
                        context_tokens=kv.context_tokens)
    need = resident + kv.bytes
    nums = dict(kv_bytes=kv.bytes, gpu_resident_bytes=resident, need_bytes=need, gpu_budget_bytes=budget,
                context_tokens=kv.context_tokens, kv_dtype=kv.kv_dtype)
    if kv.pool is not None:  # what the landing needs to turn a pool into tokens as the engine does
        nums.update(pool_bytes_per_block=kv.pool.bytes_per_block, pool_blocks_per_request=kv.pool.blocks_per_request,
                    pool_layer_segments=kv.pool.layers_per_group, block_size=kv.block_size, accounting=kv.accounting)
    text = (f"KV for {kv.context_tokens:,} tokens, one sequence ({kv.kv_dtype}, {kv.accounting}: one request's "
            f"blocks + the null block) {gib(kv.bytes)} + GPU part of weights {gib(resident)} = {gib(need)}")
    if need > budget:
        return _blocked("kv_cache", "KV_DOES_NOT_FIT", f"{text} exceeds the GPU budget {gib(budget)} by "
                                                       f"{gib(need - budget)}", over_bytes=need - budget, **nums)
    return _ok("kv_cache", f"no definite failure: {text}, {gib(budget - need)} below the GPU budget {gib(budget)}",
               **nums)


def capacity_table(verdicts: list[Verdict]) -> list[str]:
    """Rows for the terminal: check, status (with code), message with its numbers."""
    rows = [f"{'check':<20} {'status':<26} numbers"]
    for v in verdicts:
        status = f"BLOCKED {v.code}" if v.status == "BLOCKED" else v.status
        rows.append(f"{LABELS.get(v.check, v.check):<20} {status:<26} {v.message}")
    return rows


def verdict_line(v: Verdict) -> str:
    """One verdict as a fact line."""
    status = f"BLOCKED {v.code}" if v.status == "BLOCKED" else v.status
    return f"capacity {LABELS.get(v.check, v.check)}: {status}: {v.message}"
