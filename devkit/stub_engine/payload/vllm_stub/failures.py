"""The error text real vLLM prints for each failure the stub can play, and where in the boot it comes.

Wording follows the logs recorded from the real engine (vLLM 0.32.0, tests_offline/data/engine_logs/:
"No available memory for the cache blocks", the pydantic-wrapped "Model architectures [...] are not
supported for now", "Failed core proc(s): {'EngineCore': 1}" at the end of the API server's own unprefixed
traceback, a worker that "died unexpectedly" while serving then "EngineDeadError" and a normal uvicorn shutdown
with exit status 0), vLLM 0.32.0's source
for what only a GPU prints ("Failed to load model - not enough GPU memory", "Free memory on device ...
on startup is less than desired GPU memory utilization"), and public bug reports for the rest (#28143
"CUDA out of memory" during load, #1919 "Unknown quantization method", #5244 "requires you to execute
the configuration file ... trust_remote_code", the transformers "We couldn't connect to
'https://huggingface.co'" error of offline containers).
"""
from __future__ import annotations

from .logfmt import traceback_lines

SITE = "/usr/local/lib/python3.12/dist-packages"
CORE_WHERE = "core.py:708"

# Frames shared by every engine-core start failure.
_CORE_FRAMES = [
    (f"{SITE}/vllm/v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
    (f"{SITE}/vllm/v1/engine/core.py", 498, "__init__", "super().__init__(vllm_config, executor_class, log_stats,"),
]
_LOAD_FRAMES = _CORE_FRAMES + [
    (f"{SITE}/vllm/v1/engine/core.py", 83, "__init__", "self.model_executor = executor_class(vllm_config)"),
    (f"{SITE}/vllm/v1/worker/gpu_worker.py", 213, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
    (f"{SITE}/vllm/model_executor/layers/linear.py", 202, "create_weights", "weight = ModelWeightParameter(data=torch.empty("),
]
_KV_FRAMES = _CORE_FRAMES + [
    (f"{SITE}/vllm/v1/engine/core.py", 92, "__init__", "self._initialize_kv_caches(vllm_config)"),
    (f"{SITE}/vllm/v1/core/kv_cache_utils.py", 1243, "get_kv_cache_configs", "check_enough_kv_cache_memory(vllm_config, kv_cache_spec_one_worker,"),
    (f"{SITE}/vllm/v1/core/kv_cache_utils.py", 699, "check_enough_kv_cache_memory", 'raise ValueError("No available memory for the cache blocks. "'),
]
_CONFIG_FRAMES = [
    (f"{SITE}/vllm/entrypoints/cli/serve.py", 59, "cmd", "uvloop.run(run_server(args))"),
    (f"{SITE}/vllm/engine/arg_utils.py", 1164, "create_engine_config", "model_config = self.create_model_config()"),
]

OOM_TEXT = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 has a total capacity "
    "of 79.19 GiB of which 739.81 MiB is free. Including non-PyTorch memory, this process has 78.45 GiB "
    "memory in use. Of the allocated memory 77.68 GiB is allocated by PyTorch, and 1.84 MiB is reserved by "
    "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory "
    "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
# v1/worker/gpu_model_runner.py logs this before the CUDA error propagates (vLLM 0.32.0, lines 5140-5147).
LOAD_OOM_LOGGED = ("Failed to load model - not enough GPU memory. Try lowering --gpu-memory-utilization to free "
                   "memory for weights, increasing --tensor-parallel-size, or using --quantization. See "
                   "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more tips. (original error: "
                   f"{OOM_TEXT.partition(': ')[2]})")
NO_KV_TEXT = ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
              "when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
              "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
              "details.")
GPU_TAKEN_TEXT = ("ValueError: Free memory on device cuda:0 (15.32/79.19 GiB) on startup is less than desired "
                  "GPU memory utilization (0.85, 67.31 GiB). Decrease GPU memory utilization or reduce GPU "
                  "memory used by other processes.")
DIE_TEXT = ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
            "below might be incorrect.")
QUANT_METHODS = ["aqlm", "awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "modelopt",
                 "modelopt_fp4", "marlin", "bitblas", "gguf", "gptq_marlin_24", "gptq_marlin", "gptq_bitblas",
                 "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "hqq", "experts_int8", "ipex",
                 "quark", "moe_wna16", "torchao", "auto-round", "rtn", "inc", "mxfp4"]
ARCHS = ["LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
         "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM"]


# vLLM 0.34.0 words its KV refusals with a hint of what to change (v1/core/kv_cache_planning.py:
# _more_kv_cache_memory_hint, _check_enough_kv_cache_memory); with the extensible KV cache and a
# --gpu-memory-utilization below 1.0, the hint names the utilization. A card another process holds is no longer
# refused at start (v1/worker/utils.py:request_memory): the cache measured after warmup is too small instead, and
# shrink_kv_cache_configs refuses it.
_HINT_034 = ("The KV cache gets what is left after {used_by} within `gpu_memory_utilization`=0.85; increase it (with "
             "the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or `max_num_seqs`.")
NO_KV_TEXT_034 = ("ValueError: No available memory for the cache blocks. "
                  + _HINT_034.format(used_by="the model and its activations")
                  + " See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
TAKEN_AFTER_WARMUP_034 = (
    "ValueError: To serve at least one request with the model's max seq len (8192), (1.0 GiB KV cache is needed, "
    "which is larger than the available KV cache memory (0.19 GiB). Based on the available memory, the estimated "
    "maximum model length is 1536. " + _HINT_034.format(used_by="the model, its activations, CUDA graphs and warmup")
    + " CUDA graphs take less with fewer or smaller capture sizes in the compilation config. Decreasing "
      "`max_model_len` also reduces what is needed. See https://docs.vllm.ai/en/latest/configuration/"
      "conserving_memory/ for more details.")
_KV_FRAMES_034 = _CORE_FRAMES + [
    (f"{SITE}/vllm/v1/engine/core.py", 427, "_initialize_kv_caches", "num_blocks = finalize_extensible_kv_cache("),
    (f"{SITE}/vllm/v1/core/kv_cache_planning.py", 1900, "finalize_extensible_kv_cache", "shrink_kv_cache_configs("),
    (f"{SITE}/vllm/v1/core/kv_cache_planning.py", 1124, "_check_enough_kv_cache_memory", "raise ValueError("),
]


def engine_failure(kind: str, voice: str = "cuda") -> tuple[str, list[str]]:
    """(when, lines) for failures of the engine core: when is "load" (during weight loading) or "kv"; `voice` is
    the release whose words are used (voices.py: "0.34-cuda" words the KV refusals as 0.34.0 does)."""
    if voice == "0.34-cuda" and kind == "no_kv_memory":
        return "kv", ["EngineCore failed to start."] + traceback_lines(_KV_FRAMES, NO_KV_TEXT_034)
    if voice == "0.34-cuda" and kind == "gpu_memory_taken":
        return "kv", ["EngineCore failed to start."] + traceback_lines(_KV_FRAMES_034, TAKEN_AFTER_WARMUP_034)
    if kind == "load_oom":
        return "load", [LOAD_OOM_LOGGED, "EngineCore failed to start."] + traceback_lines(_LOAD_FRAMES, OOM_TEXT)
    if kind == "no_kv_memory":
        return "kv", ["EngineCore failed to start."] + traceback_lines(_KV_FRAMES, NO_KV_TEXT)
    if kind == "gpu_memory_taken":
        frames = _CORE_FRAMES + [(f"{SITE}/vllm/v1/worker/gpu_worker.py", 239, "init_device",
                                  "raise ValueError(")]
        return "load", ["EngineCore failed to start."] + traceback_lines(frames, GPU_TAKEN_TEXT)
    if kind == "die_at_boot":
        return "kv", ["EngineCore failed to start."] + traceback_lines(_CORE_FRAMES, DIE_TEXT)
    raise ValueError(kind)


def config_failure(kind: str, model: str) -> list[str]:
    """Lines of a failure raised while the API server reads the model config (before the engine)."""
    if kind == "unsupported_quant":
        final = (f"ValueError: Unknown quantization method: stubq. Must be one of {QUANT_METHODS}.")
    elif kind == "unsupported_arch":  # raised inside ModelConfig's pydantic validation (fail-unknown-arch.log)
        final = ("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
                 f"  Value error, Model architectures ['StubUnknownForCausalLM'] are not supported for now. "
                 f"Supported architectures: dict_keys({ARCHS}) [type=value_error, input_value=ArgsKwargs((), "
                 "{'model': ...}), input_type=ArgsKwargs]\n"
                 "    For further information visit https://errors.pydantic.dev/2.14/v/value_error")
    elif kind == "trust_remote_code":
        final = (f"ValueError: Loading {model} requires you to execute the configuration file in that repo on "
                 "your local machine. Make sure you have read the code there to avoid malicious use, then set "
                 "the option `trust_remote_code=True` to remove this error.")
    elif kind == "needs_network":
        final = ("OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find "
                 "them in the cached files.\nCheckout your internet connection or see how to run the library in "
                 "offline mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'.")
    else:
        raise ValueError(kind)
    return traceback_lines(_CONFIG_FRAMES, final)


def network_attempt_lines(host: str = "huggingface.co") -> list[str]:
    """What the download library logs when the connection cannot even start (no route, no interface)."""
    return [
        f"'(MaxRetryError(\"HTTPSConnectionPool(host='{host}', port=443): Max retries exceeded with url: "
        f"/api/models/stub/stub-kernels/revision/main (Caused by NewConnectionError('<urllib3.connection."
        f"HTTPSConnection object at 0x7f3a2c1d5e50>: Failed to establish a new connection: [Errno 101] Network "
        f"is unreachable'))\"), '(Request ID: 00000000-0000-0000-0000-000000000000)')' thrown while requesting "
        f"GET https://{host}/api/models/stub/stub-kernels/revision/main",
    ]


_API_FRAMES = [
    (f"{SITE}/vllm/entrypoints/cli/serve.py", 156, "cmd", "uvloop.run(run_server(args))"),
    (f"{SITE}/vllm/v1/engine/core_client.py", 682, "__init__", "with launch_core_engines("),
    (f"{SITE}/vllm/v1/engine/utils.py", 1431, "wait_for_engine_startup", "raise RuntimeError("),
]


def api_server_gave_up() -> list[str]:
    """The API server's last words after its engine core died at start: its own traceback, printed without a
    process prefix (the core process is named EngineCore)."""
    return traceback_lines(_API_FRAMES, "RuntimeError: Engine core initialization failed. See root cause above. "
                                        "Failed core proc(s): {'EngineCore': 1}")


# A worker that dies while serving, as recorded in died-after-start.log: the engine core's lines, then the API
# server's; the API server then shuts down like a normal stop and exits 0.
WORKER_DIED = "Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor."
CORE_DEAD = ["EngineCore encountered a fatal error."] + traceback_lines(
    [(f"{SITE}/vllm/v1/engine/core.py", 1702, "_handle_client_request", 'raise RuntimeError("Executor failed.")')],
    "RuntimeError: Executor failed.")
API_DEAD = ["AsyncLLM output_handler failed.",
            "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
            "See stack trace (above) for the root cause."]
# What vLLM's API server answers to the request in flight when its engine dies (HTTP 500).
ENGINE_DEAD_ANSWER = {"error": {"message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
                                "type": "InternalServerError", "param": None, "code": 500}}
SHUTDOWN = ["INFO:     Shutting down", "INFO:     Waiting for application shutdown.",
            "INFO:     Application shutdown complete."]


def engine_dead_lines() -> list[str]:
    """Every line of an engine that dies while serving (die_after_requests, crash_mid_stream), unprefixed."""
    return [WORKER_DIED, *CORE_DEAD, *API_DEAD, *SHUTDOWN]
