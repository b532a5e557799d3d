"""Pure: settings + the selected GPU + host facts + checkpoint headers + KV estimate -> capacity verdicts.

KIT.md 5. Header bytes are not the loaded footprint, so OK means "no definite failure found", never "fits".
Each verdict carries its numbers (bytes); UNKNOWN is shown with its reason and never blocks.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from operator import attrgetter

from .checkpoint_model import CheckpointFacts, TensorInfo
from .hardware_model import GpuDevice, HostFacts
from .kvcache import KvEstimate
from .outcomes import Blocked, gib

GPU_UTILIZATION = 0.85  # the kit's fixed allocation target (--gpu-memory-utilization)
# Named assumption: what the engine container needs for itself besides the offloaded weights (engine process,
# tokenizer, CUDA host context, Python heap). Shown as ASSUMED wherever it is used.
CONTAINER_OWN_NEEDS_BYTES = 8 * 2**30
RUN_FOLDER_DISK_NEED_BYTES = 1 * 2**30  # engine log, responses, samples, receipt and report of one run

TABLE_TITLE = ("onegpu capacity (header bytes are not the loaded footprint; a pass means no definite failure "
               "found, never 'fits')")
CHECKS = ("weights", "quantization", "gpu_free", "gpu_budget", "gpu_weights", "kv_cache", "host_offload",
          "host_ram", "cgroup", "pinned_pow2", "disk")
GPU_CHECKS = ("gpu_free", "gpu_budget", "gpu_weights", "kv_cache")
LABELS = {"weights": "weights (headers)", "quantization": "quantization", "gpu_free": "GPU free at start",
          "gpu_budget": "GPU budget", "gpu_weights": "GPU part of weights", "kv_cache": "KV cache",
          "host_offload": "offload in RAM cap", "host_ram": "host RAM", "cgroup": "kit cgroup limit",
          "pinned_pow2": "pinned pow2 risk", "disk": "run folder disk"}
_ROLE_NAMES = {"routed_experts": "routed experts", "shared_dense": "shared/dense", "embeddings_head": "embeddings/head"}
_OWN_NEEDS = f"{gib(CONTAINER_OWN_NEEDS_BYTES)} ASSUMED for the container's own needs (engine process, " \
             "tokenizer, CUDA host context)"


@dataclass(frozen=True)
class Verdict:
    """One capacity check: OK (no definite failure), BLOCKED (code) or UNKNOWN (reason), with its numbers."""

    check: str
    status: str  # "OK" | "BLOCKED" | "UNKNOWN"
    code: str | None
    message: str
    numbers: dict = field(default_factory=dict)

    def blocked(self) -> Blocked:
        """The Blocked outcome of a BLOCKED verdict (for the pytest layer to raise)."""
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
    return int(round(value_gib * 2**30))


def capacity_verdicts(settings, gpu: GpuDevice | None, host: HostFacts, ckpt: CheckpointFacts, kv: KvEstimate,
                      run_disk_free_bytes: int | None, gpu_missing_reason: str | None = None,
                      calibration=None) -> list[Verdict]:
    """Every check of KIT.md 5, in CHECKS order. Pure: no file, device or daemon is consulted.

    `calibration` (plugin.calibrate.Calibration) replaces the settings' non-weight reserve by a measured one.
    """
    offload_budget = _gib_bytes(settings.cpu_offload_gib)
    offloadable = sum(t.nbytes for t in offload_order(ckpt.tensors))
    offloaded = min(offload_budget, offloadable)
    resident = ckpt.weight_bytes - offloaded
    cap = _gib_bytes(settings.container_ram_gib)
    verdicts = [_weights(ckpt), _quantization(ckpt)]
    if gpu is None:
        why = gpu_missing_reason or "no GPU is selected"
        verdicts += [_unknown(c, f"{why}: the GPU side is not known and no number is assumed") for c in GPU_CHECKS]
    else:
        reserve = calibration.reserve_bytes if calibration is not None else _gib_bytes(settings.gpu_reserve_gib)
        budget = int(gpu.total_bytes * GPU_UTILIZATION) - reserve
        verdicts += [_gpu_free(gpu), _gpu_budget(settings, gpu, budget, calibration),
                     _gpu_weights(ckpt, offload_budget, offloadable, offloaded, resident, budget),
                     _kv_cache(kv, resident, budget)]
    verdicts += [_host_offload(offloaded, cap), _host_ram(settings, host, cap), _cgroup(settings, host, cap),
                 _pinned(ckpt, offload_budget, cap), _disk(run_disk_free_bytes)]
    return verdicts


def _weights(ckpt: CheckpointFacts) -> Verdict:
    by_dtype = ", ".join(f"{d} {gib(b)}" for d, b in sorted(ckpt.bytes_by_dtype.items(), key=lambda kv: -kv[1]))
    by_role = ", ".join(f"{_ROLE_NAMES.get(r, r)} {gib(b)}" for r, b in ckpt.bytes_by_role.items())
    mtp = sum(t.nbytes for t in ckpt.tensors if ".mtp." in t.name)
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


def _gpu_weights(ckpt, offload_budget, offloadable, offloaded, resident, budget) -> Verdict:
    nums = dict(weight_bytes=ckpt.weight_bytes, offload_budget_bytes=offload_budget, offloadable_bytes=offloadable,
                offloaded_bytes=offloaded, gpu_resident_bytes=resident, gpu_budget_bytes=budget)
    text = f"header bytes {gib(ckpt.weight_bytes)} minus CPU offload {gib(offloaded)} = {gib(resident)} on the GPU"
    if offload_budget > offloadable:
        text += (f" (the offload budget {gib(offload_budget)} exceeds the {gib(offloadable)} of decoder-layer weights, "
                 "the only ones vLLM's offloader moves)")
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
    text = (f"KV for {kv.context_tokens:,} tokens, one sequence ({kv.kv_dtype}) {gib(kv.bytes)} + GPU part of "
            f"weights {gib(resident)} = {gib(need)}")
    if need > budget:
        return _blocked("kv_cache", "KV_DOES_NOT_FIT", f"{text} exceeds the GPU budget {gib(budget)} by "
                                                       f"{gib(need - budget)}", over_bytes=need - budget, **nums)
    return _ok("kv_cache", f"no definite failure: {text}, {gib(budget - need)} below the GPU budget {gib(budget)}",
               **nums)


def _host_offload(offloaded: int, cap: int) -> Verdict:
    room = cap - CONTAINER_OWN_NEEDS_BYTES
    nums = dict(offloaded_bytes=offloaded, container_ram_cap_bytes=cap, own_needs_bytes=CONTAINER_OWN_NEEDS_BYTES,
                room_bytes=room, own_needs_assumed=True)
    text = f"RAM cap {gib(cap)} minus {_OWN_NEEDS} leaves {gib(room)}"
    if offloaded > room:
        return _blocked("host_offload", "INSUFFICIENT_HOST_RAM",
                        f"offloaded weights {gib(offloaded)} exceed what the container can hold: {text}", **nums)
    return _ok("host_offload", f"no definite failure: offloaded weights {gib(offloaded)} within the container: {text}",
               **nums)


def _host_ram(settings, host: HostFacts, cap: int) -> Verdict:
    headroom = _gib_bytes(settings.host_headroom_gib)
    need = cap + headroom
    nums = dict(container_ram_cap_bytes=cap, host_headroom_bytes=headroom, need_bytes=need,
                host_available_bytes=host.ram_available_bytes)
    if host.ram_available_bytes is None:
        return _unknown("host_ram", f"host RAM unknown (the replayed profile leaves it unset; state it with "
                                    f"--host-ram-gib N): cap {gib(cap)} + headroom {gib(headroom)} = {gib(need)} "
                                    "cannot be checked", **nums)
    who = "stated by the operator" if host.ram_stated_by_operator else "available now"
    text = f"RAM cap {gib(cap)} + host headroom {gib(headroom)} = {gib(need)} vs host RAM {who} " \
           f"{gib(host.ram_available_bytes)}"
    if need > host.ram_available_bytes:
        return _blocked("host_ram", "INSUFFICIENT_HOST_RAM",
                        f"{text}: short by {gib(need - host.ram_available_bytes)}", **nums)
    return _ok("host_ram", f"no definite failure: {text}", **nums)


def _cgroup(settings, host: HostFacts, cap: int) -> Verdict:
    need = cap + _gib_bytes(settings.host_headroom_gib)
    cg = host.cgroup
    nums = dict(need_bytes=need, cgroup_limit_bytes=cg.memory_limit_bytes, cgroup_path=cg.path)
    if cg.version is None:
        return _ok("cgroup", "no cgroup filesystem recorded: no cgroup memory limit known", **nums)
    if cg.memory_limit_bytes is None:
        return _ok("cgroup", f"no definite failure: cgroup v{cg.version} {cg.path} has no memory limit", **nums)
    if need > cg.memory_limit_bytes:
        return _blocked("cgroup", "CGROUP_LIMIT",
                        f"RAM cap + host headroom {gib(need)} exceed the memory limit {gib(cg.memory_limit_bytes)} of "
                        f"the kit's cgroup v{cg.version} {cg.path}", **nums)
    return _ok("cgroup", f"no definite failure: RAM cap + host headroom {gib(need)} within the cgroup v{cg.version} "
                         f"limit {gib(cg.memory_limit_bytes)}", **nums)


_EXPERT = re.compile(r"^(?P<owner>.*\.experts)\.\d+\.(?P<proj>[A-Za-z0-9_]+)\.(?P<suffix>.+)$")
# vLLM stacks every expert of a layer into one parameter per projection group: gate+up (w13) and down (w2).
_FUSED = {"gate_proj": "w13", "up_proj": "w13", "w1": "w13", "w3": "w13", "down_proj": "w2", "w2": "w2"}


_layer_of = attrgetter("layer")


def offload_order(tensors: list[TensorInfo]) -> list[TensorInfo]:
    """Decoder-layer tensors in model order: the only ones vLLM's offloader moves (per layer, in order).

    Draft (MTP) layers are left out: the engine builds them only for speculative decoding.
    """
    # sorted() is stable: tensors of one layer keep their checkpoint order (shard by shard, header order).
    return sorted((t for t in tensors if t.layer is not None and ".mtp." not in t.name), key=_layer_of)


def engine_parameters(tensors: list[TensorInfo]) -> list[tuple[str, int]]:
    """(parameter, bytes) in model order, with per-expert checkpoint tensors stacked as the engine stacks them."""
    params: dict[str, int] = {}
    for t in offload_order(tensors):
        m = _EXPERT.match(t.name)
        key = f"{m['owner']}.{_FUSED.get(m['proj'], m['proj'])}.{m['suffix']}" if m else t.name
        params[key] = params.get(key, 0) + t.nbytes
    return list(params.items())


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 0


def pinned_pow2_bytes(sizes: list[int], budget: int) -> tuple[int, int, int]:
    """(offloaded bytes, pinned bytes, parameters) when parameters are offloaded in order until the budget is
    used (the last one may overshoot it) and each pinned buffer is rounded up to a power of two."""
    offloaded = pinned = count = 0
    for size in sizes:
        if offloaded >= budget:
            break
        offloaded, pinned, count = offloaded + size, pinned + _pow2(size), count + 1
    return offloaded, pinned, count


def _pinned(ckpt: CheckpointFacts, offload_budget: int, cap: int) -> Verdict:
    if offload_budget == 0:
        return _ok("pinned_pow2", "no CPU offload: nothing is pinned", pinned_bytes=0, offload_budget_bytes=0)
    if not ckpt.tensors:
        return _unknown("pinned_pow2", "no per-tensor facts: the pinned power-of-two figure cannot be computed")
    params = engine_parameters(ckpt.tensors)
    offloaded, pinned, count = pinned_pow2_bytes([b for _, b in params], offload_budget)
    _, per_tensor, _ = pinned_pow2_bytes([t.nbytes for t in offload_order(ckpt.tensors)], offload_budget)
    room = cap - CONTAINER_OWN_NEEDS_BYTES
    nums = dict(offload_budget_bytes=offload_budget, offloaded_bytes=offloaded, pinned_bytes=pinned,
                pinned_per_checkpoint_tensor_bytes=per_tensor, parameters=count, container_ram_cap_bytes=cap,
                room_bytes=room, own_needs_assumed=True)
    text = (f"offloading in layer order takes {count} engine parameters = {gib(offloaded)}; each pinned buffer "
            f"rounded up to a power of two = {gib(pinned)} ({gib(per_tensor)} if rounded per checkpoint tensor) vs "
            f"offload budget {gib(offload_budget)} vs RAM cap {gib(cap)} ({gib(room)} after {_OWN_NEEDS}). A "
            "reported behaviour of vLLM's offloader with MXFP4 experts, not a measurement")
    if pinned > room:
        return _unknown("pinned_pow2", f"RISK: {text}", **nums)
    return _ok("pinned_pow2", f"risk figure within the RAM cap: {text}", **nums)


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
