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
from onegpu.plan.kv_sizing import GPU_UTILIZATION, KvBudget, budget_text, kv_budget
from onegpu.plan.kvcache import KvEstimate
from onegpu.plan.offload import OffloadPlan, offload_plan, where_lines
from onegpu.plan.offload_rules import RULES
from onegpu.plan.repack import NONE as NO_REPIN
from onegpu.plan.repack import RepinCost, repack_verdict, repin_cost, repin_short
from onegpu.plan.verdict import Verdict
from onegpu.plan.verdict import blocked as _blocked
from onegpu.plan.verdict import ok as _ok
from onegpu.plan.verdict import unknown as _unknown
from onegpu.plan.vllm_versions import Accounting, VersionRules, assumed_newest

# Named assumption: what the engine container needs for itself besides the offloaded weights (engine process,
# tokenizer, CUDA host context, Python heap). Shown as ASSUMED wherever it is used.
CONTAINER_OWN_NEEDS_BYTES = 8 * GIB
RUN_FOLDER_DISK_NEED_BYTES = 1 * GIB  # engine log, responses, samples, receipt and report of one run

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
_OWN_NEEDS = f"{gib(CONTAINER_OWN_NEEDS_BYTES)} ASSUMED for the container's own needs (engine process, " \
             "tokenizer, CUDA host context)"
UNCONFIRMED = ("UNCONFIRMED: exact pinning is read from vLLM's source, not yet measured; a measured landing "
               "(container memory at READY) confirms it")


def _gib_bytes(value_gib: float) -> int:
    return int(round(value_gib * GIB))


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
    return kit_plan(ckpt, _gib_bytes(settings.cpu_offload_gib), pinning_of(settings))


def gpu_kv_budget(settings, gpu: GpuDevice, rules: VersionRules, calibration=None) -> KvBudget:
    """What the card leaves for weights and KV after the non-weight reserve (settings' or calibrated)."""
    reserve = calibration.reserve_bytes if calibration is not None else _gib_bytes(settings.gpu_reserve_gib)
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
    cap = _gib_bytes(settings.container_ram_gib)
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
    verdicts += [_host_offload(plan, cap, accounting=accounting, repin=repin),
                 _host_ram(settings, host, cap, plan, container_need, repin),
                 _cgroup(settings, host, cap, container_need), repack_verdict(ckpt, plan, accounting),
                 _disk(run_disk_free_bytes)]
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
    shown = gib(_gib_bytes(settings.gpu_reserve_gib))
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


_ROUNDED_RULE = ("vLLM's default pinning: uva.py:UVAOffloader._maybe_offload_to_cpu pins each parameter and torch's "
                 "CachingHostAllocator rounds every pinned buffer up to a power of two")
_EXACT_RULE = ("offload_pinning exact: VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1, and cuda_view.cu:"
               "get_cuda_view_from_cpu_tensor pins a buffer of the parameter's own size")


def _pinning_text(plan: OffloadPlan) -> str:
    if plan.pinning == "exact":
        return (f"pinned {gib(plan.pinned_exact_bytes)} at their own size ({_EXACT_RULE}; rounded it would be "
                f"{gib(plan.pinned_rounded_bytes)})")
    return f"pinned {gib(plan.pinned_rounded_bytes)}, a certain cost ({_ROUNDED_RULE})"


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
                     f"parameters: {round(plan.offloaded_bytes / GIB, 2)}'; {_pinning_text(plan)}")
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


def _pinned_need_text(plan: OffloadPlan) -> str:
    return (f"{len(plan.offloaded)} offloaded parameters, {gib(plan.offloaded_bytes)} logical (the budget's figure), "
            f"{_pinning_text(plan)}; peak while offloading {gib(plan.peak_bytes)} (pinned so far + the pageable copy "
            "of the parameter being pinned)")


def _repin_clause(repin: RepinCost, need: int, cap: int, what: str) -> str:
    """How a repack's re-pin stands against a cap: counted when certain, shown with its effect when possible."""
    if repin.certainty is None:
        return ""
    if repin.certainty == "certain":
        return f"; counted: {repin_short(repin)}"
    after = need + repin.bytes
    effect = (f"would exceed the {what} {gib(cap)} by {gib(after - cap)}" if after > cap
              else f"would still fit the {what} {gib(cap)}")
    return f"; not counted: {repin_short(repin)}: with it {gib(after)}, which {effect}"


def _host_offload(plan: OffloadPlan, cap: int, own_needs: int = CONTAINER_OWN_NEEDS_BYTES,
                  own_text: str = _OWN_NEEDS, accounting: Accounting | None = None,
                  repin: RepinCost = NO_REPIN) -> Verdict:
    """The container's RAM cap against what it must hold; `own_needs` and `own_text` name the ASSUMED needs of
    the engine's own processes (one engine process by default); a repack's re-pin is counted when certain."""
    accounting = accounting or assumed_newest()
    room = cap - own_needs
    need = plan.peak_bytes + own_needs + (repin.bytes if repin.certainty == "certain" else 0)
    nums = dict(offloaded_bytes=plan.offloaded_bytes, pinned_bytes=plan.pinned_bytes,
                pinned_rounded_bytes=plan.pinned_rounded_bytes, pinned_exact_bytes=plan.pinned_exact_bytes,
                peak_bytes=plan.peak_bytes, pinning=plan.pinning, pinning_confirmed=plan.pinning == "rounded",
                container_ram_cap_bytes=cap, own_needs_bytes=own_needs, room_bytes=room,
                need_bytes=need, own_needs_assumed=True, accounting=accounting.label, **repin.as_numbers())
    if not plan.offloaded:
        text = f"nothing is offloaded, nothing is pinned; RAM cap {gib(cap)} minus {own_text} leaves {gib(room)}"
        if need > cap:  # the container's own needs alone do not fit its cap
            return _blocked("host_offload", "INSUFFICIENT_HOST_RAM",
                            f"the container's own needs exceed its RAM cap by {gib(need - cap)}: {text}", **nums)
        return _ok("host_offload", f"no definite failure: {text}", **nums)
    text = (f"{_pinned_need_text(plan)} + {own_text} = {gib(need)} vs RAM cap {gib(cap)}"
            f"{_repin_clause(repin, need, cap, 'RAM cap')}")
    if plan.pinning == "exact":
        text += f"; {UNCONFIRMED}"
    if need > cap:
        return _blocked("host_offload", "INSUFFICIENT_HOST_RAM",
                        f"what the container must hold exceeds its RAM cap by {gib(need - cap)}: {text}", **nums)
    return _ok("host_offload", f"no definite failure: {text}", **nums)


def _host_need(cap: int, container_need: int, headroom: int) -> tuple[int, str]:
    """(bytes the host must have, how): the cap, or the pinned need where that is larger, plus the headroom."""
    if container_need > cap:
        return container_need + headroom, (f"the container's pinned need {gib(container_need)} (above its RAM cap "
                                           f"{gib(cap)}, so it counts instead) + host headroom {gib(headroom)}")
    return cap + headroom, f"RAM cap {gib(cap)} (it holds the pinned need {gib(container_need)}) + host headroom " \
                           f"{gib(headroom)}"


def _host_ram(settings, host: HostFacts, cap: int, plan: OffloadPlan, container_need: int,
              repin: RepinCost = NO_REPIN) -> Verdict:
    headroom = _gib_bytes(settings.host_headroom_gib)
    need, how = _host_need(cap, container_need, headroom)
    nums = dict(container_ram_cap_bytes=cap, host_headroom_bytes=headroom, need_bytes=need,
                container_need_bytes=container_need, pinned_bytes=plan.pinned_bytes,
                host_available_bytes=host.ram_available_bytes, pinning=plan.pinning, **repin.as_numbers())
    if host.ram_available_bytes is None:
        return _unknown("host_ram", f"host RAM unknown (the replayed profile leaves it unset; state it with "
                                    f"--host-ram-gib N): {how} = {gib(need)} cannot be checked", **nums)
    who = "stated by the operator" if host.ram_stated_by_operator else "available now"
    text = f"{how} = {gib(need)} vs host RAM {who} {gib(host.ram_available_bytes)}"
    if need > host.ram_available_bytes:
        text += f": short by {gib(need - host.ram_available_bytes)}"
    if repin.certainty == "possible":
        # the re-pin lands in the container: it moves the host figure only where it lifts the container above its cap
        lifted = max(cap, container_need + repin.bytes) + headroom
        if lifted > need:
            text += (f"; not counted: {repin_short(repin)}: with it the host would need {gib(lifted)}, which "
                     + (f"exceeds it by {gib(lifted - host.ram_available_bytes)}"
                        if lifted > host.ram_available_bytes else "still fits"))
    if need > host.ram_available_bytes:
        return _blocked("host_ram", "INSUFFICIENT_HOST_RAM", text, **nums)
    return _ok("host_ram", f"no definite failure: {text}", **nums)


def _cgroup(settings, host: HostFacts, cap: int, container_need: int) -> Verdict:
    need, how = _host_need(cap, container_need, _gib_bytes(settings.host_headroom_gib))
    cg = host.cgroup
    nums = dict(need_bytes=need, container_need_bytes=container_need, cgroup_limit_bytes=cg.memory_limit_bytes,
                cgroup_path=cg.path)
    if cg.version is None:
        return _ok("cgroup", "no cgroup filesystem recorded: no cgroup memory limit known", **nums)
    if cg.memory_limit_bytes is None:
        return _ok("cgroup", f"no definite failure: cgroup v{cg.version} {cg.path} has no memory limit", **nums)
    if need > cg.memory_limit_bytes:
        return _blocked("cgroup", "CGROUP_LIMIT",
                        f"{how} = {gib(need)} exceed the memory limit {gib(cg.memory_limit_bytes)} of the kit's "
                        f"cgroup v{cg.version} {cg.path}", **nums)
    return _ok("cgroup", f"no definite failure: {how} = {gib(need)} within the cgroup v{cg.version} "
                         f"limit {gib(cg.memory_limit_bytes)}", **nums)


def _disk(free: int | None) -> Verdict:
    need = RUN_FOLDER_DISK_NEED_BYTES
    if free is None:
        return _unknown("disk", f"free disk at the run folder not recorded (a replayed profile without a run-folder "
                                f"disk): a run needs {gib(need)}", need_bytes=need)
    nums = dict(free_bytes=free, need_bytes=need)
    if free < need:
        return _blocked("disk", "DISK_FULL", f"run folder disk has {gib(free)} free; a run needs at least {gib(need)} "
                                             "(engine log, responses, samples, receipt, report)", **nums)
    return _ok("disk", f"no definite failure: {gib(free)} free at the run folder, a run needs {gib(need)}", **nums)


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
