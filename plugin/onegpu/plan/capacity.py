"""Pure: settings + the selected GPU + host facts + checkpoint headers + KV estimate -> capacity verdicts.

KIT.md 5. Header bytes are not the loaded footprint, so OK means "no definite failure found", never "fits".
Each verdict carries its numbers (bytes); UNKNOWN is shown with its reason and never blocks. Where the CPU
offload lands and what it pins in host RAM follow vLLM 0.33's offloader rule by rule (onegpu.plan.offload, whose RULES
name the vLLM file and function of each): the host verdicts count the bytes vLLM pins, not the budget.
"""
from __future__ import annotations

from itertools import compress

from msgspec import Struct, field

from onegpu.checkpoint.model import CheckpointFacts
from onegpu.machine.model import GpuDevice, HostFacts
from onegpu.plan.kvcache import KvEstimate
from onegpu.plan.offload import OffloadPlan, expert_method, offload_plan, where_lines
from onegpu.plan.offload_rules import ACCOUNTING, RULES
from onegpu.core.outcomes import Blocked
from onegpu.core.units import GIB, gib
from onegpu.checkpoint.towers import has_towers  # the tower sections of config.json, as the launch reads them

GPU_UTILIZATION = 0.85  # the kit's fixed allocation target (--gpu-memory-utilization)
# Named assumption: what the engine container needs for itself besides the offloaded weights (engine process,
# tokenizer, CUDA host context, Python heap). Shown as ASSUMED wherever it is used.
CONTAINER_OWN_NEEDS_BYTES = 8 * GIB
RUN_FOLDER_DISK_NEED_BYTES = 1 * GIB  # engine log, responses, samples, receipt and report of one run

TABLE_TITLE = (f"onegpu capacity, {ACCOUNTING} (header bytes are not the loaded footprint; a pass means no definite "
               "failure found, never 'fits')")
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


class Verdict(Struct, frozen=True):
    """One capacity check: OK (no definite failure), BLOCKED (code) or UNKNOWN (reason), with its numbers."""

    check: str
    status: str  # "OK" | "BLOCKED" | "UNKNOWN"
    code: str | None
    message: str
    numbers: dict = field(default_factory=dict)

    def blocked(self) -> Blocked:
        """The Blocked outcome of a BLOCKED verdict (for the pytest layer to raise)."""
        assert self.code is not None, "a BLOCKED verdict carries its code"
        return Blocked(self.code, self.message, dict(self.numbers))

    def as_json(self) -> dict:
        return {"check": self.check, "status": self.status, "code": self.code, "message": self.message,
                "numbers": dict(self.numbers)}


def _ok(check, message, **numbers) -> Verdict:
    return Verdict(check, "OK", None, message, numbers)


def _blocked(check, code, message, **numbers) -> Verdict:
    return Verdict(check, "BLOCKED", code, message, numbers)


def _unknown(check, message, **numbers) -> Verdict:
    return Verdict(check, "UNKNOWN", None, message, numbers)


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


def capacity_verdicts(settings, gpu: GpuDevice | None, host: HostFacts, ckpt: CheckpointFacts, kv: KvEstimate,
                      run_disk_free_bytes: int | None, gpu_missing_reason: str | None = None,
                      calibration=None) -> list[Verdict]:
    """Every check of KIT.md 5, in CHECKS order. Pure: no file, device or daemon is consulted.

    `calibration` (onegpu.plan.calibrate.Calibration) replaces the settings' non-weight reserve by a measured one.
    """
    plan = plan_for(settings, ckpt)
    cap = _gib_bytes(settings.container_ram_gib)
    container_need = plan.peak_bytes + CONTAINER_OWN_NEEDS_BYTES
    verdicts = [_weights(ckpt), _quantization(ckpt), _offload_plan(ckpt, plan)]
    if gpu is None:
        why = gpu_missing_reason or "no GPU is selected"
        verdicts += [_unknown(c, f"{why}: the GPU side is not known and no number is assumed") for c in GPU_CHECKS]
    else:
        reserve = calibration.reserve_bytes if calibration is not None else _gib_bytes(settings.gpu_reserve_gib)
        budget = int(gpu.total_bytes * GPU_UTILIZATION) - reserve
        verdicts += [_gpu_free(gpu), _gpu_budget(settings, gpu, budget, calibration),
                     _gpu_weights(ckpt, plan, budget), _kv_cache(kv, plan.gpu_resident_bytes, budget)]
    verdicts += [_host_offload(plan, cap), _host_ram(settings, host, cap, plan, container_need),
                 _cgroup(settings, host, cap, container_need), _repack(ckpt, plan), _disk(run_disk_free_bytes)]
    return verdicts


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


def _gpu_free(gpu: GpuDevice) -> Verdict:
    need = int(gpu.total_bytes * GPU_UTILIZATION)
    nums = dict(free_bytes=gpu.free_bytes, total_bytes=gpu.total_bytes, need_bytes=need)
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


def _gpu_budget(settings, gpu: GpuDevice, budget: int, calibration=None) -> Verdict:
    target = int(gpu.total_bytes * GPU_UTILIZATION)
    text = (f"{gib(gpu.total_bytes)} x {GPU_UTILIZATION} = {gib(target)} minus non-weight reserve "
            f"{_reserve_text(settings, calibration)} = {gib(budget)} for weights and KV")
    nums = dict(total_bytes=gpu.total_bytes, target_bytes=target, reserve_bytes=target - budget, budget_bytes=budget,
                reserve_assumed="gpu_reserve_gib" in settings.assumed and calibration is None,
                reserve_calibrated_from=calibration.run_id if calibration is not None else None)
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


def _offload_plan(ckpt: CheckpointFacts, plan: OffloadPlan) -> Verdict:
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
                accounting=ACCOUNTING, rules=["order", "budget", "stays", "not_loaded", "engine_params",
                                              plan.pinning if plan.pinning == "exact" else "pinned", "transient",
                                              "logged"])
    if not ckpt.tensors:
        return _unknown("offload_plan", "no per-tensor facts: where the offload lands cannot be computed", **nums)
    parts = [f"{ACCOUNTING}: {where_lines(plan)}"]
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
        nums.update(pool_bytes_per_block=kv.pool.bytes_per_block, pool_blocks_per_request=kv.pool.blocks_per_request)
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


def _host_offload(plan: OffloadPlan, cap: int, own_needs: int = CONTAINER_OWN_NEEDS_BYTES,
                  own_text: str = _OWN_NEEDS) -> Verdict:
    """The container's RAM cap against what it must hold; `own_needs` and `own_text` name the ASSUMED needs of
    the engine's own processes (one engine process by default)."""
    room = cap - own_needs
    need = plan.peak_bytes + own_needs
    nums = dict(offloaded_bytes=plan.offloaded_bytes, pinned_bytes=plan.pinned_bytes,
                pinned_rounded_bytes=plan.pinned_rounded_bytes, pinned_exact_bytes=plan.pinned_exact_bytes,
                peak_bytes=plan.peak_bytes, pinning=plan.pinning, pinning_confirmed=plan.pinning == "rounded",
                container_ram_cap_bytes=cap, own_needs_bytes=own_needs, room_bytes=room,
                need_bytes=need, own_needs_assumed=True, accounting=ACCOUNTING)
    if not plan.offloaded:
        text = f"nothing is offloaded, nothing is pinned; RAM cap {gib(cap)} minus {own_text} leaves {gib(room)}"
        if need > cap:  # the container's own needs alone do not fit its cap
            return _blocked("host_offload", "INSUFFICIENT_HOST_RAM",
                            f"the container's own needs exceed its RAM cap by {gib(need - cap)}: {text}", **nums)
        return _ok("host_offload", f"no definite failure: {text}", **nums)
    text = f"{_pinned_need_text(plan)} + {own_text} = {gib(need)} vs RAM cap {gib(cap)}"
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


def _host_ram(settings, host: HostFacts, cap: int, plan: OffloadPlan, container_need: int) -> Verdict:
    headroom = _gib_bytes(settings.host_headroom_gib)
    need, how = _host_need(cap, container_need, headroom)
    nums = dict(container_ram_cap_bytes=cap, host_headroom_bytes=headroom, need_bytes=need,
                container_need_bytes=container_need, pinned_bytes=plan.pinned_bytes,
                host_available_bytes=host.ram_available_bytes, pinning=plan.pinning)
    if host.ram_available_bytes is None:
        return _unknown("host_ram", f"host RAM unknown (the replayed profile leaves it unset; state it with "
                                    f"--host-ram-gib N): {how} = {gib(need)} cannot be checked", **nums)
    who = "stated by the operator" if host.ram_stated_by_operator else "available now"
    text = f"{how} = {gib(need)} vs host RAM {who} {gib(host.ram_available_bytes)}"
    if need > host.ram_available_bytes:
        return _blocked("host_ram", "INSUFFICIENT_HOST_RAM",
                        f"{text}: short by {gib(need - host.ram_available_bytes)}", **nums)
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


# vLLM 0.33, what each quantization method does to an offloaded weight after loading (RULES["repack"]):
# * unquantized on CUDA: linear.py:UnquantizedLinearMethod.process_weights_after_loading does nothing there, and
#   unquantized_fused_moe_method.py:UnquantizedFusedMoEMethod.process_weights_after_loading copies its padding back
#   into the same storage: nothing is re-allocated.
# * MXFP4 experts (fp8.py:Fp8Config.get_quant_method -> mxfp4.py:Mxfp4MoEMethod when store_dtype is mxfp4):
#   _setup_kernel -> oracle/mxfp4.py:convert_weight_to_mxfp4_moe_kernel_format for the backend that
#   oracle/mxfp4.py:select_deepseek_v4_mxfp4_moe_backend picks on the card (_get_priority_backends: FlashInfer TRTLLM
#   MXFP8, DeepGEMM MXFP4, Marlin, batched Marlin, Humming; humming/priority.py:prioritize_humming moves Humming
#   ahead of Marlin on SM90). TRTLLM needs the SM100 family (experts/trtllm_mxfp4_moe.py:_supports_current_device),
#   DeepGEMM FP4 SM100/SM120 with DeepGEMM installed (experts/deep_gemm_moe.py). DeepGEMM keeps the weights and
#   repacks the scales (_pack_deepgemm_mxfp4_scales); Marlin (marlin_utils_fp4.py:prepare_moe_mxfp4_layer_for_marlin)
#   turns uint8 blocks into int32 and uint8 scales into float8_e8m0fnu at equal bytes; Humming deletes the
#   parameters and registers new ones (humming/moe.py:_replace_layer_parameters) under names the humming package
#   chooses. Which one runs is decided on the card at load.
# * block-fp8 linears: fp8.py:Fp8LinearMethod.process_weights_after_loading hands them to the kernel
#   init_fp8_linear_kernel chose for the device: also decided at load.
def _repack(ckpt: CheckpointFacts, plan: OffloadPlan) -> Verdict:
    method = expert_method(ckpt.quant)
    experts = [p for p in plan.offloaded if ".experts." in f".{p.local}"]
    expert_bytes = sum(p.nbytes for p in experts)
    scale_bytes = sum(p.nbytes for p in experts if "scale" in p.local.rsplit(".", 1)[-1])
    nums = dict(offloaded_expert_bytes=expert_bytes, offloaded_expert_scale_bytes=scale_bytes,
                quant_method=ckpt.quant.method, store_dtype=ckpt.quant.store_dtype, accounting=ACCOUNTING)
    rule = "model_loader/utils.py:device_loading_context, model_executor/utils.py:replace_parameter"
    if not plan.offloaded:
        return _ok("repack", "nothing is offloaded: no repack touches host memory", **nums)
    if ckpt.quant.method is None and ckpt.quant.recognised:
        return _ok("repack", "unquantized: on CUDA no quantization method re-allocates an offloaded weight after "
                             "loading (linear.py:UnquantizedLinearMethod.process_weights_after_loading, "
                             "unquantized_fused_moe_method.py:UnquantizedFusedMoEMethod.process_weights_after_loading "
                             f"copy in place): the pinned figures stand ({rule})", **nums)
    if method == "mxfp4":
        return _unknown(
            "repack", f"decided on the card at load, not in the headers: the {gib(expert_bytes)} of offloaded MXFP4 "
            "experts are repacked by the MoE backend vLLM picks there (oracle/mxfp4.py:"
            "select_deepseek_v4_mxfp4_moe_backend: FlashInfer TRTLLM on SM100 only, DeepGEMM MXFP4 on SM100/SM120 "
            "with DeepGEMM installed, then Marlin, batched Marlin, Humming; Humming ahead of Marlin on SM90). Under "
            "0.33's replace_parameter DeepGEMM keeps the weights in their pinned buffers and rebinds the repacked "
            f"scales ({gib(scale_bytes)}) to the GPU; Marlin changes dtype at equal bytes, so all "
            f"{gib(expert_bytes)} would come back onto the GPU (a load failure on this card); Humming replaces the "
            "parameters with new objects (humming/moe.py:_replace_layer_parameters), pinned again at their new size "
            "where a name is kept and left on the GPU where it is not (the humming package names them). No backend "
            "but Humming adds pinned host bytes, so the host figures above stand unless Humming runs. The block-fp8 "
            "linears are repacked by the kernel "
            f"init_fp8_linear_kernel picks, also at load ({rule})", **nums)
    return _unknown("repack", f"{ckpt.quant.description}: how its methods repack an offloaded weight after loading "
                              "is decided by the kernel vLLM picks on the card at load; the host figures assume no "
                              f"repack adds pinned bytes (true of 0.33's replace_parameter; {rule})", **nums)


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
