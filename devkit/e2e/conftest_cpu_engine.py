"""Copied as tests_hw/conftest.py into a throwaway kit project whose engine is the REAL vLLM, CPU build.

THE ONE SEAM where the kit's tests differ from the product path (one NVIDIA GPU), and why each part is there:
* GPU facts: as in conftest_simulated_gpu.py (recorded NVML answers of an H200; no GPU here), so the machine
  and plan phases run as on a GPU machine.
* `launch_spec`: the real plan with `engine_platform="cpu"` and no GPU device request. The probe then demands
  vLLM's own CPU platform detection and no CUDA device instead of exactly one CUDA device.
* The KV cache: on the CPU build, `--gpu-memory-utilization` is not what sizes the KV cache; the engine takes
  VLLM_CPU_KVCACHE_SPACE GiB of host RAM for it (ONEGPU_E2E_CPU_KVCACHE_GIB here, default 1). Its accounting
  uses the CPU platform's defaults, 128-token blocks and no async scheduling (vllm/platforms/cpu.py), so
  `kv_estimate` is the same estimate with those two values.
* The multi-GPU protocol: the CPU build runs tensor parallelism as processes too, one per rank; it cannot bind
  their threads by itself on one NUMA node, so VLLM_CPU_OMP_THREADS_BIND gives each rank its own share of the
  usable CPUs (vllm/utils/ompmultiprocessing.py refuses "auto" with fewer NUMA nodes than ranks).
* Extra `vllm serve` arguments (ONEGPU_E2E_EXTRA_ARGS, a JSON list, default none), appended to the plan's
  command: how a test shows what the kit does with a flag the engine does not know.
Everything else is the product: the plugin, the phase tests, the Docker engine, the run folder, the argv.
The receipt and the report carry a banner and a limitation saying so.
"""
from __future__ import annotations

import json
import os

import pytest
from msgspec import structs

from devkit.e2e.conftest_simulated_gpu import simulate_gpu
from onegpu.core.jsonable import to_json
from onegpu.plan.kvcache import kv_cache_estimate

CPU_BLOCK_SIZE = 128  # vllm/platforms/cpu.py: the CPU backends' block size when none is given

CPU_BANNER = ("CPU ENGINE DOUBLE: the engine is vLLM's CPU build (vllm-cpu) on a tiny random-weight model, a test "
              "of the kit against the real engine's control surface; its KV cache is sized by "
              "VLLM_CPU_KVCACHE_SPACE, not --gpu-memory-utilization, and no figure of it says anything of a GPU")


GPU_BANNER = ("GPU SIMULATED: GPU facts come from recorded NVML answers of an H200 and the engine container gets no "
              "GPU device request; the engine is vLLM's CPU build (see the CPU ENGINE DOUBLE banner)")


@pytest.fixture(scope="session")
def hardware(hardware, kit):
    return simulate_gpu(hardware, kit, GPU_BANNER)


@pytest.fixture(scope="session")
def kv_estimate(settings, checkpoint, accounting, kit):
    kv = kv_cache_estimate(checkpoint.config, settings.context_tokens, settings.kv_cache_dtype,
                           settings.prefill_chunk_tokens, block_size=CPU_BLOCK_SIZE, async_scheduling=False,
                           accounting=accounting)
    kit.receipt.set("kv_cache", to_json(kv))
    return kv


@pytest.fixture(scope="session")
def launch_spec(launch_spec, kit):
    kv_gib = os.environ.get("ONEGPU_E2E_CPU_KVCACHE_GIB", "1")
    extra = json.loads(os.environ.get("ONEGPU_E2E_ENGINE_ENV") or "{}")
    extra_args = json.loads(os.environ.get("ONEGPU_E2E_EXTRA_ARGS") or "[]")
    if len(launch_spec.gpu_uuids) > 1:
        extra = {"VLLM_CPU_OMP_THREADS_BIND": rank_cpus(len(launch_spec.gpu_uuids)), **extra}
    spec = structs.replace(
        launch_spec, gpu_uuid=None, engine_platform="cpu", command=[*launch_spec.command, *extra_args],
        environment={**launch_spec.environment, "VLLM_CPU_KVCACHE_SPACE": kv_gib, **extra},
        labels={**launch_spec.labels, "onegpu.test": "1"},
        notes=[*launch_spec.notes, f"CPU ENGINE DOUBLE: VLLM_CPU_KVCACHE_SPACE={kv_gib} GiB sizes the KV cache; "
                                   "no GPU device request" + (f"; engine env {json.dumps(extra)}" if extra else "")
                                   + (f"; extra arguments {json.dumps(extra_args)}" if extra_args else "")])
    kit.receipt.set("banners", [*kit.receipt.data.get("banners", []), CPU_BANNER])
    kit.receipt.limitation(CPU_BANNER)
    kit.table("onegpu launch plan", spec.plan_lines())
    kit.receipt.set("launch", spec.to_json())
    return spec


def rank_cpus(ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` ranks: the usable CPUs split in order, "|" between ranks."""
    cpus = sorted(os.sched_getaffinity(0))
    share = max(1, len(cpus) // ranks)
    return "|".join(",".join(str(c) for c in (cpus[r * share:(r + 1) * share] or cpus[-1:])) for r in range(ranks))

