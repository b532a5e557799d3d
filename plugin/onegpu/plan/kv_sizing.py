"""Pure: how much GPU memory the engine's KV cache may take, by the rules of the vLLM version the plan applies.

Two ways, read from the wheels (onegpu.plan.vllm_versions):
* estimate (0.32, 0.33): before the cache exists, a profiling run measures the model's non-KV memory (weights,
  peak activations, a CUDA graph estimate); the cache gets requested - that, requested = ceil(total x
  --gpu-memory-utilization) (vllm/v1/worker/gpu_worker.py:Worker.determine_available_memory, utils.py:request_memory);
* extensible (0.34 on CUDA): the address range is reserved from that estimate, warmup commits blocks as it goes,
  and after warmup the cache is committed from the memory measured then
  (vllm/v1/worker/extensible_kv_cache.py:measure_kv_cache_bytes): min(requested - non-KV memory in use,
  device headroom - margin) - max(transient peak, torch's reservation growth), margin = max(1 GiB, 0.75 x the
  transient peak); the reservation caps it (kv_cache_planning.py:finalize_extensible_kv_cache).
The kit's launch passes --gpu-memory-utilization 0.85 and no --kv-cache-memory-bytes, so on 0.34 the extensible
cache is on (config/vllm.py:VllmConfig._resolve_extensible_kv_cache) and the utilization resolves to 0.85, not
the 1.0 an unset flag gives (config/cache.py:CacheConfig.resolved_gpu_memory_utilization). The kit's non-weight
reserve stands for the non-KV memory beside the weights (CUDA context, activations' peak, buffers outside torch),
so the budget is total x 0.85 - reserve under both; on 0.34 the device headroom bound can bind first where
0.15 x total is under the 1 GiB margin floor, and the budget is the smaller of the two.
"""
from __future__ import annotations

import math

from msgspec import Struct

from onegpu.core.units import gib
from onegpu.plan.vllm_versions import VersionRules

GPU_UTILIZATION = 0.85  # the kit's fixed allocation target: the launch passes --gpu-memory-utilization 0.85
# vllm/v1/worker/extensible_kv_cache.py (0.34.0), CUDA values:
MARGIN_FLOOR_BYTES = 1 << 30  # KV_CACHE_MARGIN_FLOOR_BYTES
MARGIN_FRACTION = 0.75  # KV_CACHE_MARGIN_FRACTION (of the transient peak)
NON_TORCH_RESERVE_BYTES = 1 << 29  # KV_CACHE_NON_TORCH_RESERVE_BYTES: kept free outside torch's allocator
WARMUP_RESERVE_FRACTION = 0.1  # KV_CACHE_WARMUP_RESERVE_FRACTION: of the headroom, left uncommitted in warmup
GRANULE_BYTES = 2 << 20  # vllm/utils/extensible_tensor.py:granule_size: the driver's granularity, floored at 2 MiB
UNSET_UTILIZATION = 1.0  # CacheConfig.resolved_gpu_memory_utilization with the extensible cache and no flag

_X = "vllm/v1/worker/extensible_kv_cache.py"


class KvBudget(Struct, frozen=True):
    """The GPU bytes left for weights and the KV cache after the non-weight reserve, and how they were found."""

    budget_bytes: int
    requested_bytes: int  # ceil(total x utilization)
    utilization: float
    sizing: str  # "estimate" | "extensible"
    headroom_bound_bytes: int | None = None  # extensible: free at the scan - the margin floor
    binding: str = "requested"  # which bound set the budget: "requested" or "device headroom"

    def as_numbers(self) -> dict:
        return {"requested_bytes": self.requested_bytes, "utilization": self.utilization, "kv_sizing": self.sizing,
                "headroom_bound_bytes": self.headroom_bound_bytes, "budget_binding": self.binding}


def kv_budget(total_bytes: int, free_bytes: int, reserve_bytes: int, rules: VersionRules,
              utilization: float = GPU_UTILIZATION) -> KvBudget:
    """What is left for weights and KV on a card of total_bytes (free_bytes free now) after reserve_bytes."""
    requested = math.ceil(total_bytes * utilization)
    if rules.kv_sizing != "extensible":
        return KvBudget(requested - reserve_bytes, requested, utilization, rules.kv_sizing)
    # measure_kv_cache_bytes: the device headroom (what is free beside the engine) less the margin, whose floor is
    # certain; a larger transient peak makes the margin larger (0.75 x the peak), which the reserve does not split.
    headroom = free_bytes - MARGIN_FLOOR_BYTES
    if headroom < requested:
        return KvBudget(headroom - reserve_bytes, requested, utilization, "extensible", headroom, "device headroom")
    return KvBudget(requested - reserve_bytes, requested, utilization, "extensible", headroom)


def budget_text(budget: KvBudget) -> str:
    """How the budget's upper bound was found, for the GPU budget row."""
    if budget.sizing != "extensible":
        return ("the KV cache gets what a profiling run leaves of it (gpu_worker.py:Worker.determine_available_memory)")
    bound = (f"the device headroom bound {gib(budget.headroom_bound_bytes or 0)} (total - the 1 GiB margin floor) is "
             "smaller and binds" if budget.binding == "device headroom" else
             f"within the device headroom bound {gib(budget.headroom_bound_bytes or 0)} (total - the 1 GiB margin "
             "floor)")
    return (f"extensible KV cache, committed from the memory measured after warmup ({_X}:measure_kv_cache_bytes); "
            f"the launch's --gpu-memory-utilization {budget.utilization:g} resolves the requested budget "
            f"(unset it would be {UNSET_UTILIZATION:.1f}); {bound}")


def sizing_rules(rules: VersionRules) -> list[tuple[str, str, tuple[str, ...]]]:
    """The KV sizing rules of `rules`' release, each with its vLLM sources, for the receipt and the report."""
    request = ("requested = ceil(total x --gpu-memory-utilization); the kit's launch passes 0.85",
               ("vllm/v1/worker/utils.py:request_memory",))
    if rules.kv_sizing != "extensible":
        return [
            ("kv_requested", *request),
            ("kv_estimate", "the KV cache gets requested - the non-KV memory a profiling run measured (weights, peak "
                            "activations, the CUDA graph estimate) before the cache exists; the log says 'Available "
                            "KV cache memory: X GiB'", ("vllm/v1/worker/gpu_worker.py:Worker.determine_available_memory",)),
            ("kv_gpu_busy", "the engine refuses to start when the card's free memory is below requested ('Free memory "
                            "on device ... on startup is less than desired GPU memory utilization')",
             ("vllm/v1/worker/utils.py:request_memory",)),
        ]
    return [
        ("kv_requested", request[0] + " (unset, 0.34 resolves 1.0 with the extensible cache and 0.92 without it)",
         (*request[1], "vllm/config/cache.py:CacheConfig.resolved_gpu_memory_utilization")),
        ("kv_extensible_on", "the extensible KV cache is on on CUDA unless --kv-cache-memory-bytes (or a block-count "
                             "override, elastic EP, or a KV connector that cannot use it) is given; the kit passes "
                             "none of them", ("vllm/config/vllm.py:VllmConfig._resolve_extensible_kv_cache",)),
        ("kv_reserved", "the address range is reserved for the blocks a profiling estimate allows (the log still says "
                        "'Available KV cache memory: X GiB'); that reservation caps the final size",
         ("vllm/v1/worker/gpu_worker.py:Worker.determine_available_memory",
          "vllm/v1/core/kv_cache_planning.py:finalize_extensible_kv_cache")),
        ("kv_warmup_reserve", f"during warmup blocks are committed only within the headroom less max(the profiled "
                              f"activation peak, {WARMUP_RESERVE_FRACTION:g} x the headroom) and the margin",
         (f"{_X}:ExtensibleKVCache.committable_blocks", f"{_X}:KV_CACHE_WARMUP_RESERVE_FRACTION")),
        ("kv_after_warmup", "after warmup the cache gets min(requested - the non-KV memory in use, device headroom "
                            f"- margin) - max(transient peak, torch's reservation growth), margin = max(1 GiB, "
                            f"{MARGIN_FRACTION:g} x the transient peak); the log says 'Memory after warmup: ... N KV "
                            "cache blocks (X GiB) fit within the requested R GiB'",
         (f"{_X}:measure_kv_cache_bytes", f"{_X}:measure_kv_cache_blocks", f"{_X}:KV_CACHE_MARGIN_FLOOR_BYTES")),
        ("kv_non_torch", f"{gib(NON_TORCH_RESERVE_BYTES)} stays free for allocations outside torch's caching allocator "
                         "(kernel scratch, NCCL buffers): torch is capped to leave it; part of the kit's non-weight "
                         "reserve", (f"{_X}:KV_CACHE_NON_TORCH_RESERVE_BYTES", f"{_X}:measure_kv_cache_blocks")),
        ("kv_commit", "blocks are committed in whole granules of each layer's segment (the driver's granularity, at "
                      "least 2 MiB): 'Extended KV cache to N blocks (X GiB)' states the physical bytes, at most one "
                      "granule per segment above N x the block's bytes",
         (f"{_X}:ExtensibleKVCache.physical_bytes_for", "vllm/utils/extensible_tensor.py:granule_size",
          f"{_X}:extend_kv_cache")),
        ("kv_gpu_busy", "no refusal at start when the card's free memory is below requested (the budget is only a "
                        "cap on address space); a busy card shows as a smaller cache after warmup",
         ("vllm/v1/worker/utils.py:request_memory",)),
    ]


def sizing_rules_json(rules: VersionRules) -> list[dict]:
    return [{"rule": key, "text": text, "sources": list(sources)} for key, text, sources in sizing_rules(rules)]
