"""Runs INSIDE the real-engine image: vLLM's own KV cache accounting for a config, with vLLM's own functions.

Reads a JSON list of cases (its first argument), prints a JSON list of results on stdout. Each case names a config.json
(a dict), max_model_len, max_num_batched_tokens, async_scheduling, block_size and the KV dtype's element size.
The layer specs are built as the model's attention layers build them (vllm/model_executor/models/mimo_v2.py:
hybrid_layer_pattern 1 = a sliding-window layer with the swa_* heads and sliding_window_size; qwen3_moe: every
layer full attention); everything after that - page unification, grouping, padding, the blocks a request
needs, the null block, the capacity the boot line prints - is vLLM's code, not the kit's.
"""
import json
import sys

# torch and vLLM exist only inside the real-engine image this file runs in; the host's venv (where mypy runs) has
# neither, and no stubs of them are published.
import torch  # type: ignore[import-not-found]
from vllm.config import VllmConfig  # type: ignore[import-not-found]
from vllm.v1.core import kv_cache_utils as kcu  # type: ignore[import-not-found]
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec  # type: ignore[import-not-found]

DTYPES = {1: torch.float8_e4m3fn, 2: torch.bfloat16}


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


def vllm_config(case: dict) -> VllmConfig:
    config = VllmConfig()
    model = type("ModelConfigView", (), {})()  # only the two lengths the KV functions read
    model.max_model_len = model.original_max_model_len = case["max_model_len"]
    object.__setattr__(config, "model_config", model)
    config.scheduler_config.max_num_batched_tokens = case["max_num_batched_tokens"]
    config.scheduler_config.async_scheduling = case["async_scheduling"]
    config.cache_config.block_size = case["block_size"]
    config.cache_config.kv_cache_layout = "LBNHC"  # the default layout (attention/backends/utils.py)
    return config


def account(case: dict) -> dict:
    config = vllm_config(case)
    specs = layer_specs(case["config"], case["block_size"], DTYPES[case["dtype_bytes"]])
    groups = kcu.get_kv_cache_groups(config, dict(specs))
    per_block = kcu._pool_bytes_per_block(config, groups)
    needed = kcu._max_memory_usage_bytes_from_groups(config, groups)
    out = {"max_in_flight_tokens": config.max_in_flight_tokens, "bytes_per_block": per_block,
           "request_bytes": needed, "required_bytes": needed + per_block,
           "groups": [{"layers": len(g.layer_names), "block_size": g.kv_cache_spec.block_size,
                       "page_bytes": g.kv_cache_spec.page_size_bytes,
                       "kind": type(g.kv_cache_spec).__name__} for g in groups]}
    if case.get("available_bytes"):
        kv_config = kcu.get_kv_cache_config_from_groups(config, groups, case["available_bytes"])
        tokens, concurrency = kcu.get_kv_cache_capacity(config, kv_config)
        out.update(capacity_tokens=tokens, concurrency=concurrency, num_blocks=kv_config.num_blocks)
    # vLLM's own admission check: it refuses one byte less than the required pool, accepts the pool itself.
    out["refuses_one_byte_less"] = _refuses(config, groups, needed + per_block - 1)
    out["accepts_required"] = not _refuses(config, groups, needed + per_block)
    return out


def _refuses(config, groups, available: int) -> bool:
    try:
        kcu._check_enough_kv_cache_memory(
            available - kcu._pool_bytes_per_block(config, groups),
            lambda: kcu._max_memory_usage_bytes_from_groups(config, groups),
            config.model_config.max_model_len, lambda _: 0)
    except ValueError:
        return True
    return False


if __name__ == "__main__":
    json.dump([account(case) for case in json.loads(sys.argv[1])], sys.stdout)
