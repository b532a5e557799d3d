"""Pure data: why an engine did not come up (or died), one row per wording the engine uses.

Each row is (code, pattern, source, example): the outcome code (onegpu.core.outcomes), the regular expression
that finds the engine's own line, where the wording comes from (the vLLM file that prints it, in the releases the
kit read), and a log that shows it: a public GPU log of tests_offline/data/gpu_logs/ ("gpu_logs/NAME"), a recording
of the real CPU engine in tests_offline/data/engine_logs/ ("engine_logs/NAME"), or, for a wording only the source
shows so far, the line itself as vLLM's format string prints it. tests_offline/engine/test_failure_table.py
classifies every example by its row, and every log of the corpora by the code its sidecar names; a new wording is
one row here with its log as its test.

Rows are tried in order, each over every line, and the first row that matches a line decides: the specific
before the general (an out-of-memory error after the weights loaded is PROFILE_OOM before LOAD_OOM sees it).
`after` limits a row to lines that follow one matching it (the profiling run, the weights loaded); `phase` says
where in the log the row looks: "boot" before the server started, "any" everywhere (a kill, a CUDA error).
"""
from __future__ import annotations

import re

from msgspec import Struct


class FailureRow(Struct, frozen=True):
    code: str
    pattern: str
    source: str
    example: str  # "gpu_logs/NAME", "engine_logs/NAME" or a line as vLLM prints it
    after: str | None = None
    phase: str = "boot"  # "boot" | "any"

    def compiled(self) -> re.Pattern:
        return _compiled(self.pattern)

    def compiled_after(self) -> re.Pattern | None:
        return _compiled(self.after) if self.after else None


_CACHE: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    if pattern not in _CACHE:
        _CACHE[pattern] = re.compile(pattern)
    return _CACHE[pattern]


_OOM = (r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUDA error: out of memory|"
        r"CUDA driver error: out of memory")
# What shows the weights loaded and the engine went on to profile, warm up or capture graphs: the lines vLLM logs
# then, or the traceback frames of those steps (a traceback lists its frames before its error line).
_PAST_LOAD = (r"Model loading took|Loading model weights took|Memory profiling (?:takes|results)|"
              r"in (?:profile_run|_dummy_run|_dummy_sampler_run|capture_model|determine_available_memory|"
              r"_initialize_kv_caches|initialize_kv_cache|capture_end|compile_or_warm_up_model)\b|"
              r"with torch\.cuda\.graph\(")
_W = "vllm/v1/worker"

FAILURES: tuple[FailureRow, ...] = (
    # the host's RAM: a kill says so wherever it lands, before or after the server started
    FailureRow("HOST_OOM_KILLED", r"Out of memory: Killed process", "the kernel's OOM killer (dmesg), as quoted with "
               "the engine's log", "gpu_logs/gap-hostoom-offload-experts-marlin-repack-v0_12-2x3090", phase="any"),
    FailureRow("HOST_OOM_KILLED", r"ray\.exceptions\.OutOfMemoryError: Task was killed due to the node running low "
               r"on memory|Ray killed this worker|where the task \(.*\) was running was [\d.]+GB / [\d.]+GB",
               "Ray's memory monitor (ray/_private/memory_monitor), under vLLM's Ray executor",
               "gpu_logs/hostoom-v0_8_0-dsv3-16xh20-ray-memmonitor", phase="any"),
    # a card another process holds
    FailureRow("GPU_BUSY", r"Free memory on device (?:\S+ )?\([^)]*\) on startup is less than (?:desired GPU memory "
               r"utilization|the engine's budget after excluding external process's weights)",
               f"{_W}/utils.py:request_memory (0.32-0.34; refused only without the extensible KV cache from 0.34), "
               f"{_W}/gpu_worker.py:Worker.init_device (older)", "gpu_logs/fail-gpu-busy-v1-dp0-4gib"),
    FailureRow("GPU_BUSY", r"Externally held weights on device \S+ \([^)]*\) exceed the desired GPU memory",
               f"{_W}/utils.py:request_memory (0.32-0.34)",
               "ValueError: Externally held weights on device cuda:0 (70.0/79.19 GiB) exceed the desired GPU memory "
               "utilization (0.85, 67.31 GiB). Increase GPU memory utilization or reduce GPU memory used by other "
               "processes."),
    FailureRow("GPU_BUSY", r"Error in memory profiling\. Initial free memory [\d.]+ GiB",
               f"{_W}/gpu_worker.py:Worker.determine_available_memory (its assertion: another process released GPU "
               "memory while the engine profiled)", "gpu_logs/fail-gpu-busy-profiling-assert-v0_29_0-h100nvl"),
    # the GPU's memory: after the weights loaded, then while loading
    FailureRow("PROFILE_OOM", r"CUDA out of memory occurred when warming up sampler",
               f"{_W}/gpu_model_runner.py:GPUModelRunner._dummy_sampler_run",
               "gpu_logs/fail-profile-oom-sampler-gptoss120b-h100"),
    FailureRow("PROFILE_OOM", _OOM, "torch's out-of-memory error raised in vLLM's profiling run, warmup or CUDA graph "
               f"capture ({_W}/gpu_worker.py:determine_available_memory, compile_or_warm_up_model)",
               "gpu_logs/fail-profile-oom-cudagraph-v1-tp4", after=_PAST_LOAD),
    FailureRow("LOAD_OOM", r"Failed to load model - not enough GPU memory|Failed to create unquantized linear "
               r"weights: CUDA out of memory", f"{_W}/gpu_model_runner.py:GPUModelRunner.load_model, "
               "vllm/model_executor/layers/linear.py:UnquantizedLinearMethod.create_weights",
               "gpu_logs/gap-fail-load-oom-not-enough-gpu-memory-tp2-3090"),
    FailureRow("LOAD_OOM", _OOM, "torch's out-of-memory error while the weights load (before any profiling)",
               "gpu_logs/fail-load-oom-v0_13_0-h20"),
    # the KV cache
    FailureRow("NO_KV_MEMORY", r"No available memory for the cache blocks|insufficient\b.*\bKV cache|on kv cache "
               r"allocation is less than requested memory for kv|Cannot auto-fit max_model_len: not enough GPU memory",
               "vllm/v1/core/kv_cache_utils.py:_check_enough_kv_cache_memory (kv_cache_planning.py from 0.33), "
               "_auto_fit_max_model_len (0.34)", "engine_logs/fail-no-kv-memory"),
    FailureRow("NO_KV_MEMORY", r"Available KV cache memory: -[\d.]+ GiB",
               f"{_W}/gpu_worker.py:Worker.determine_available_memory: a negative budget, which the check after it "
               "refuses", "gpu_logs/fail-no-kv-memory-negative-gptoss120b-h100"),
    FailureRow("CONTEXT_EXCEEDS_KV", r"KV cache is needed, which is larger than the available KV cache memory",
               "vllm/v1/core/kv_cache_utils.py:_check_enough_kv_cache_memory (kv_cache_planning.py from 0.33; 0.34 "
               "also after warmup, shrink_kv_cache_configs)", "gpu_logs/fail-kv-too-small-v1-1m-ctx"),
    FailureRow("CONTEXT_EXCEEDS_KV", r"The model's max seq len \(\d+\) is larger than the maximum number of tokens "
               r"that can be stored in KV cache", "vllm/worker/worker.py:raise_if_cache_size_invalid (the V0 engine)",
               "gpu_logs/fail-kv-too-small-v0-rtx3090"),
    FailureRow("CONTEXT_TOO_LONG", r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len",
               "vllm/config/model.py:_get_and_verify_max_len", "engine_logs/fail-context-too-long"),
    # the checkpoint and the model
    FailureRow("UNSUPPORTED_QUANT", r"Unknown quantization method|The quantization method \S+ is not supported for "
               r"the current GPU|Unsupported quantization|No MXFP4 MoE backend supports the deployment configuration|"
               r"Quantization scheme is not supported for|type fp8e4nv not supported in this architecture",
               "vllm/config/model.py:_verify_quantization, vllm/model_executor/layers/quantization/ (get_min_capability, "
               "oracle/mxfp4.py), compressed_tensors.py:_check_scheme_supported, Triton's fp8 types",
               "gpu_logs/fail-unsupported-quant-fp8-cc86-ray"),
    FailureRow("UNSUPPORTED_ARCH", r"Model architectures \[[^\]]*\] are not supported for now|does not recognize this "
               r"architecture|Model architecture \S+ (?:was supported in vLLM until|is not supported in-tree anymore)|"
               r"Model architectures \[[^\]]*\] failed to be inspected|Error in inspecting model architecture",
               "vllm/model_executor/models/registry.py:_ModelRegistry.inspect_model_cls, _raise_for_unsupported",
               "engine_logs/fail-unknown-arch"),
    FailureRow("WEIGHTS_NOT_FOUND", r"Cannot find any model weights with",
               "vllm/model_executor/model_loader/default_loader.py:DefaultModelLoader._prepare_weights",
               "gpu_logs/fail-missing-weights-safetensors-format-tp2"),
    FailureRow("CHECKPOINT_INCOMPLETE", r"Weight files referenced in index but missing|Following weights were not "
               r"initialized from checkpoint", "vllm/model_executor/model_loader/weight_utils.py",
               "engine_logs/fail-shard-missing"),
    FailureRow("CONFIG_INVALID", r"Value error, (?:Expecting value|Expecting property name|Unterminated string|"
               r"Invalid control character|Extra data): line \d+ column \d+|json\.decoder\.JSONDecodeError",
               "vllm/config/model.py (the model's config.json read inside ModelConfig's validation)",
               "gpu_logs/fail-other-modelconfig-json-v0_10_2-minicpm"),
    FailureRow("TRUST_REMOTE_CODE_REQUIRED", r"requires you to execute the configuration file|contains custom code "
               r"which must be executed|consider setting `trust_remote_code=True`|Please pass the argument "
               r"`trust_remote_code=True`", "transformers' dynamic module check, raised through vLLM's config",
               "gpu_logs/fail-other-trust-remote-code-v0_4_3"),
    # the GPU, the processes and the machine
    FailureRow("NO_ATTENTION_BACKEND", r"No valid attention backend found for \S+ with",
               "vllm/platforms/cuda.py:CudaPlatform.get_attn_backend_cls (0.30-0.34: every backend refused the "
               "layer's head size, dtype, KV cache dtype, block size or the card's compute capability)",
               "gpu_logs/fail-no-attn-backend-v0_31_0-t4-block8"),
    FailureRow("GPU_UNSUPPORTED", r"no kernel image is available for execution on the device|Bfloat16 is only "
               r"supported on GPUs with compute capability of at least", "torch's CUDA error for a compute "
               "capability the build has no kernels for; vllm/platforms/cuda.py:check_if_supports_dtype",
               "gpu_logs/fail-other-no-kernel-image-v1-rtx50"),
    FailureRow("CUDA_ERROR", r"\bcutlass_gemm_caller, \S+:\d+, \w", "csrc/libtorch_stable/quantization/w8a8/cutlass/"
               "c3x/cutlass_gemm_caller.cuh:c3x::cutlass_gemm_caller (CUTLASS_CHECK: a w8a8 GEMM's CUTLASS status, "
               "raised as 'function, file:line, status')", "gpu_logs/fail-other-cutlass-error-internal-v0_30-gb10",
               phase="any"),
    FailureRow("DISTRIBUTED_INIT_FAILED", r"NCCL error|nccl(?:Internal|UnhandledCuda|System|InvalidUsage|Remote)"
               r"Error|DistBackendError|peer access is not supported between these two devices|Proxy Call to rank "
               r"\d+ failed", "torch.distributed and NCCL while vLLM starts its tensor/pipeline-parallel groups "
               "(vllm/distributed/parallel_state.py, device_communicators/)",
               "gpu_logs/fail-nccl-unhandled-cuda-v1-8gpu"),
    FailureRow("HOST_MEMORY_EXHAUSTED", r"unable to mmap \d+ bytes from file .*Cannot allocate memory|"
               r"RunaiStreamerMemoryLimitException", "safetensors' mmap and the Run:ai model streamer's memory limit "
               "(vllm/model_executor/model_loader/)", "gpu_logs/gap-fail-other-host-enomem-mmap-safetensors-v0_9x"),
    FailureRow("HOST_MEMORY_EXHAUSTED", r"Available memory on node \d+ \([^)]*\) on startup is less than desired CPU "
               r"memory utilization", "vllm/v1/worker/cpu_worker.py:CPUWorker.init_device (the CPU build, 0.32.0)",
               "(VllmWorker-0 pid=43) ERROR 12-03 10:14:21 [multiproc_executor.py:671] ValueError: Available memory "
               "on node 0 (3.61/6.0 GiB) on startup is less than desired CPU memory utilization (0.85, 5.1 GiB). On "
               "the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved "
               "(despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization "
               "0.5`) or reduce CPU memory used by other processes."),
    FailureRow("SHM_TOO_SMALL", r"Insufficient space in /dev/shm", "vllm/distributed/device_communicators/"
               "shm_broadcast.py", "engine_logs/fail-shm-too-small"),
    FailureRow("INVALID_ENGINE_ARGUMENT", r"\berror: argument [^:]+: invalid \w+(?: value)?:",
               "argparse, for a flag the version knows given a value it refuses (vllm/engine/arg_utils.py)",
               "gpu_logs/fail-bad-flag-invalid-choice-load-format"),
    FailureRow("RUNTIME_INCOMPATIBLE", r"\berror: unrecognized arguments:", "argparse, for a flag the version does "
               "not know (vllm/entrypoints/cli/main.py)", "engine_logs/fail-unknown-flag"),
    FailureRow("RUNTIME_NEEDS_NETWORK", r"Network is unreachable|We couldn't connect to 'https://huggingface\.co'|"
               r"Temporary failure in name resolution|Name or service not known|Failed to establish a new connection|"
               r"outgoing traffic has been disabled", "huggingface_hub, transformers and urllib3 in a container "
               "without a network", "OSError: We couldn't connect to 'https://huggingface.co' to load the files, "
               "and couldn't find them in the cached files."),
    # after the server started: what ended a serving engine, where the log says
    FailureRow("CUDA_ERROR", r"CUDA error: (?:an illegal memory access was encountered|device-side assert triggered|"
               r"unspecified launch failure|misaligned address)|cudaErrorIllegalAddress",
               "torch's CUDA errors, raised in a forward step", "gpu_logs/died-gb10-gptoss120b-illegal-mem",
               phase="any"),
)
