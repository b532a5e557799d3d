"""Runs INSIDE an engine image: vLLM's own KV cache accounting for a config, with vLLM's own functions.

Reads a JSON list of cases (its first argument), prints a JSON object on stdout: the vLLM version imported and one
result per case. Each case names a config.json (a dict), max_model_len, max_num_batched_tokens, async_scheduling,
block_size and the KV dtype's element size. The layer specs are built as the model's attention layers build them
(vllm/model_executor/models/mimo_v2.py: hybrid_layer_pattern 1 = a sliding-window layer with the swa_* heads and
sliding_window_size; qwen3_moe and llama: every layer full attention); everything after that - page unification,
grouping, padding, the blocks a request needs, the null block, the capacity the boot line prints - is vLLM's code,
not the kit's. The same file runs against three releases, whose functions moved and took a config builder from
0.33 on (vllm/v1/core/kv_cache_planning.py, kv_cache_config_builder.py); where a signature differs, the call is
chosen by the function's own parameter names, never by re-implementing it.
"""
import inspect
import json
import sys

# torch and vLLM exist only inside the engine images this file runs in; the host's venv (where mypy runs) has
# neither, and no stubs of them are published.
import torch  # type: ignore[import-not-found]
import vllm  # type: ignore[import-not-found]
from vllm.config import VllmConfig  # type: ignore[import-not-found]
from vllm.v1.core import kv_cache_utils as kcu  # type: ignore[import-not-found]
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec  # type: ignore[import-not-found]

try:  # 0.33 and 0.34: the planning functions and the platform's config builder
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_planning import DefaultKVCacheConfigBuilder  # type: ignore[import-not-found]
except ImportError:  # 0.32: everything in kv_cache_utils, no builder
    planning, DefaultKVCacheConfigBuilder = kcu, None

DTYPES = {1: torch.float8_e4m3fn, 2: torch.bfloat16}
BUILDER = DefaultKVCacheConfigBuilder() if DefaultKVCacheConfigBuilder is not None else None


def layer_specs(cfg: dict, block_size: int, dtype) -> dict:
    specs = {}
    pattern = cfg.get("hybrid_layer_pattern") or [0] * cfg["num_hidden_layers"]
    for i, sliding in enumerate(pattern):
        if sliding == 1:
            specs[f"model.layers.{i}.self_attn.attn"] = SlidingWindowSpec(
                block_size=block_size, num_kv_heads=cfg["swa_num_key_value_heads"], head_size=cfg["swa_head_dim"],
                head_size_v=cfg.get("swa_v_head_dim", cfg["swa_head_dim"]), dtype=dtype,
                sliding_window=cfg["sliding_window_size"])
        else:
            head = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
            specs[f"model.layers.{i}.self_attn.attn"] = FullAttentionSpec(
                block_size=block_size, num_kv_heads=cfg["num_key_value_heads"], head_size=head,
                head_size_v=cfg.get("v_head_dim", head), dtype=dtype)
    return specs


def new_config() -> VllmConfig:
    """A default VllmConfig; on a machine without a GPU the CUDA build cannot infer its device ("Failed to infer
    device type", vllm/config/device.py), so there the device is named: CUDA, whose accounting is asked for."""
    try:
        return VllmConfig()
    except RuntimeError as exc:
        if "Failed to infer device type" not in str(exc):
            raise
        from vllm.config import DeviceConfig

        return VllmConfig(device_config=DeviceConfig(device="cuda"))


def vllm_config(case: dict) -> VllmConfig:
    config = new_config()
    model = type("ModelConfigView", (), {})()  # only the two lengths the KV functions read
    model.max_model_len = model.original_max_model_len = case["max_model_len"]
    object.__setattr__(config, "model_config", model)
    config.scheduler_config.max_num_batched_tokens = case["max_num_batched_tokens"]
    config.scheduler_config.async_scheduling = case["async_scheduling"]
    config.cache_config.block_size = case["block_size"]
    config.cache_config.kv_cache_layout = "LBNHC"  # the default layout (attention/backends/utils.py)
    # CUDA (and the CPU build) support the hybrid KV cache manager (platforms/cuda.py: support_hybrid_kv_cache); in
    # a container without a GPU the platform is unspecified, whose answer is no, and the manager would be off: it
    # is set as a CUDA machine resolves it.
    config.scheduler_config.disable_hybrid_kv_cache_manager = False
    return config


def call(function, config, *rest):
    """function(config, *rest), with the config builder first where this release's signature asks for one."""
    if next(iter(inspect.signature(function).parameters)) == "builder":
        return function(BUILDER, config, *rest)
    return function(config, *rest)


def pool_bytes_per_block(config, groups) -> int:
    if hasattr(planning, "_pool_bytes_per_block_from_builder") and BUILDER is not None:
        return planning._pool_bytes_per_block_from_builder(BUILDER, config, groups)
    return planning._pool_bytes_per_block(config, groups)


def account(case: dict) -> dict:
    config = vllm_config(case)
    specs = layer_specs(case["config"], case["block_size"], DTYPES[case["dtype_bytes"]])
    groups = planning.get_kv_cache_groups(config, dict(specs))
    per_block = pool_bytes_per_block(config, groups)
    needed = call(planning._max_memory_usage_bytes_from_groups, config, groups)
    out = {"max_in_flight_tokens": config.max_in_flight_tokens, "bytes_per_block": per_block,
           "request_bytes": needed, "required_bytes": needed + per_block,
           "groups": [{"layers": len(g.layer_names), "block_size": g.kv_cache_spec.block_size,
                       "page_bytes": g.kv_cache_spec.page_size_bytes,
                       "kind": type(g.kv_cache_spec).__name__} for g in groups]}
    if case.get("available_bytes"):
        make = BUILDER.get_kv_cache_config_from_groups if BUILDER is not None else planning.get_kv_cache_config_from_groups
        kv_config = make(config, groups, case["available_bytes"])
        tokens, concurrency = kcu.get_kv_cache_capacity(config, kv_config)
        out.update(capacity_tokens=tokens, concurrency=concurrency, num_blocks=kv_config.num_blocks)
    # vLLM's own admission check: it refuses one byte less than the required pool, accepts the pool itself.
    out["refuses_one_byte_less"] = _refuses(config, groups, needed + per_block - 1, needed)
    out["accepts_required"] = not _refuses(config, groups, needed + per_block, needed)
    return out


def _refuses(config, groups, available: int, needed: int) -> bool:
    check = planning._check_enough_kv_cache_memory
    args = [available - pool_bytes_per_block(config, groups), lambda: needed, config.model_config.max_model_len,
            lambda _: 0]
    if "hint" in inspect.signature(check).parameters:  # 0.34 words its refusal with a hint of what to change
        args.append("")
    try:
        check(*args)
    except ValueError:
        return True
    return False


if __name__ == "__main__":
    json.dump({"vllm_version": vllm.__version__, "vllm_file": vllm.__file__,
               "results": [account(case) for case in json.loads(sys.argv[1])]}, sys.stdout)
