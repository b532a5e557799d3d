"""Pure: the KV cache pool vLLM needs for one request of max_model_len tokens, in vLLM's own accounting.

The rules (the same arithmetic in vLLM 0.32, 0.33 and 0.34, checked against each release's own functions; only the
default block size and the file differ, onegpu.plan.vllm_versions):
* pages: a layer's page is block_size tokens of its K + V (vllm/v1/kv_cache_interface.py AttentionSpec.page_size_bytes);
  when pages differ, every smaller page takes a block size scaled up to the largest page, or is padded to it when
  the largest is not a multiple (vllm/v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size);
* groups: layers of one spec form buckets; every KV cache group holds the same number of layers, the smallest
  bucket's count (the largest's when it is under 1.5 x the smallest), and a bucket that does not divide evenly
  is padded with empty layer slots (_get_kv_cache_groups_uniform_page_size);
* one block of the pool is a page for every layer slot of a group (_get_kv_cache_bytes_per_block, LBNHC layout);
* blocks one request needs: full attention cdiv(max_model_len, block_size) (FullAttentionSpec.max_memory_usage_bytes);
  sliding window cdiv(min(window - 1 + in-flight tokens, max_model_len), block_size) + 1, the in-flight tokens being
  max_num_batched_tokens x the concurrent batches, 2 with async scheduling (VllmConfig.max_in_flight_tokens,
  SlidingWindowSpec.max_admission_blocks_per_request);
* the request's blocks are summed over every group (_max_memory_usage_bytes_from_groups), and the pool must also
  hold the null block the block pool keeps back (get_kv_cache_configs: check_memory = available - one block);
* the boot line's "KV cache size: N tokens" is the pool's blocks / a request's blocks x max_model_len
  (get_kv_cache_capacity), not a count of token slots.
"""
from __future__ import annotations

import math

from msgspec import Struct

from onegpu.plan.vllm_versions import BLOCK_SIZE_SOURCE, VersionRules

_I = "vllm/v1/kv_cache_interface.py"


def kv_rules(rules: VersionRules) -> tuple:
    """Each KV rule with where `rules`' release states it (the planning functions moved to kv_cache_planning.py in
    0.33); the receipt and the report carry them beside the offload rules."""
    u = rules.kv_module
    out = [
        ("kv_block_size", f"{rules.default_block_size} tokens per block: vLLM {rules.series}'s default on CUDA, as the "
                          "launch passes no --block-size", (BLOCK_SIZE_SOURCE,)),
        ("kv_page", "a layer's page is block_size tokens of its K + V; smaller pages take a block size scaled up to "
                    "the largest page, or are padded to it when it is not a multiple",
         (f"{_I}:AttentionSpec.page_size_bytes", f"{u}:unify_kv_cache_spec_page_size")),
        ("kv_groups", "layers of one spec are dealt into KV cache groups of equal size, the smallest spec's layer "
                      "count (the largest's when under 1.5 x the smallest); a spec that does not divide evenly gets "
                      "empty layer slots; the layout is vLLM's default, layer-outermost LBNHC (a backend that asks "
                      "for a block-outermost layout packs mixed pages otherwise: not modelled)",
         (f"{u}:_get_kv_cache_groups_uniform_page_size", "vllm/v1/attention/backends/utils.py:"
                                                        "_DEFAULT_LAYOUT_PREFERENCE")),
        ("kv_block", "one pool block is a page for every layer slot of the widest group",
         (f"{u}:_get_kv_cache_bytes_per_block",)),
        ("kv_request", "a request at max_model_len takes cdiv(max_model_len, block) blocks per full-attention group "
                       "and cdiv(min(window - 1 + in-flight tokens, max_model_len), block) + 1 per sliding-window "
                       "group; in-flight tokens = max_num_batched_tokens x 2 with async scheduling (vLLM's default on "
                       "CUDA), x 1 without; the blocks of every group add up",
         (f"{_I}:FullAttentionSpec.max_memory_usage_bytes", f"{_I}:SlidingWindowSpec.max_admission_blocks_per_request",
          "vllm/config/vllm.py:VllmConfig.max_in_flight_tokens", f"{u}:_max_memory_usage_bytes_from_groups")),
        ("kv_null_block", "the pool must hold one request plus the null block the block pool keeps back",
         (f"{u}:get_kv_cache_configs (check_memory = available - one block)",)),
        ("kv_capacity", "the boot line's 'KV cache size: N tokens' is the pool's whole blocks over a request's blocks, "
                        "times max_model_len", ("vllm/v1/core/kv_cache_utils.py:get_kv_cache_capacity",)),
    ]
    return tuple(out)


def kv_rules_json(rules: VersionRules) -> list[dict]:
    return [{"rule": key, "text": text, "sources": list(sources)} for key, text, sources in kv_rules(rules)]


class LayerSpec(Struct, frozen=True):
    """One attention layer's cache, as its Attention layer describes it to vLLM."""

    kind: str  # full_attention | sliding_attention | mla
    bytes_per_token: int  # K + V (or the MLA latent) at the KV dtype
    window: int | None = None

    @property
    def slots_kind(self) -> tuple:
        """Layers of one slots kind need the same number of token slots (vLLM's 'uniform type')."""
        return ("window", self.window) if self.kind == "sliding_attention" else ("full",)


class PoolGroup(Struct, frozen=True):
    """The KV cache groups of one layer spec."""

    kind: str
    bytes_per_token: int
    window: int | None
    layers: int  # real layers of this spec
    groups: int  # vLLM KV cache groups they fill
    padded_layers: int  # empty layer slots added so every group holds the same number of layers
    block_tokens: int  # block size after the pages were unified
    page_bytes: int  # one layer's page (padded when unification pads it)
    tokens_held: int  # tokens one request keeps per layer before whole blocks
    blocks_per_request: int  # per group

    @property
    def bytes_per_request(self) -> int:
        """This spec's share of one request: its layer slots (padding included) x page x blocks."""
        return (self.layers + self.padded_layers) * self.page_bytes * self.blocks_per_request


class KvPool(Struct, frozen=True):
    """vLLM's pool arithmetic for the configured context, prefill chunk and scheduling."""

    groups: list[PoolGroup]
    layers_per_group: int  # layer slots of the widest group
    bytes_per_block: int
    blocks_per_request: int  # over every group
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    async_scheduling: bool
    in_flight_tokens: int
    accounting: str = ""  # the label of the version's rules applied (onegpu.plan.vllm_versions.Accounting.label)

    @property
    def request_bytes(self) -> int:
        """What vLLM says one max_model_len request needs ('X GiB KV cache is needed')."""
        return self.bytes_per_block * self.blocks_per_request

    @property
    def required_bytes(self) -> int:
        """The smallest pool vLLM starts with: one request plus the null block."""
        return self.bytes_per_block * (self.blocks_per_request + 1)

    def capacity(self, available_bytes: int) -> tuple[int, float]:
        """(tokens, concurrency) the boot line prints for a pool of available_bytes."""
        num_blocks = available_bytes // self.bytes_per_block
        concurrency = num_blocks / self.blocks_per_request
        return int(concurrency * self.max_model_len), concurrency


def _tokens_held(spec: LayerSpec, max_model_len: int, in_flight: int) -> int:
    if spec.kind == "sliding_attention" and spec.window is not None:
        return min(spec.window - 1 + in_flight, max_model_len)
    return max_model_len


def _blocks(spec: LayerSpec, tokens: int, block: int) -> int:
    # +1 for a sliding window: the window need not start on a block boundary.
    return math.ceil(tokens / block) + (1 if spec.kind == "sliding_attention" else 0)


def kv_pool(specs: list[LayerSpec], max_model_len: int, max_num_batched_tokens: int, block_size: int,
            async_scheduling: bool) -> KvPool:
    """vLLM's pool for these layers (in model order); specs must not be empty."""
    in_flight = (2 if async_scheduling else 1) * max_num_batched_tokens
    buckets: dict[LayerSpec, int] = {}
    for spec in specs:
        buckets[spec] = buckets.get(spec, 0) + 1
    kinds = {s.slots_kind for s in buckets}
    if len(kinds) == 1:
        # One group of every layer: identical specs, or specs that need the same token slots (uniform type),
        # whose block is every layer's own page side by side.
        spec0 = next(iter(buckets))
        tokens = _tokens_held(spec0, max_model_len, in_flight)
        blocks = _blocks(spec0, tokens, block_size)
        rows = [PoolGroup(s.kind, s.bytes_per_token, s.window, n, 1, 0, block_size, block_size * s.bytes_per_token,
                          tokens, blocks) for s, n in buckets.items()]
        per_block = sum(r.page_bytes * r.layers for r in rows)
        return KvPool(rows, len(specs), per_block, blocks, block_size, max_model_len, max_num_batched_tokens,
                      async_scheduling, in_flight)
    page = max(block_size * s.bytes_per_token for s in buckets)
    counts = list(buckets.values())
    group_size = min(counts) if max(counts) >= 1.5 * min(counts) else max(counts)
    rows = []
    for spec, n in buckets.items():
        own = block_size * spec.bytes_per_token
        block = block_size * page // own if page % own == 0 else block_size  # scaled up, or the page padded
        groups = math.ceil(n / group_size)
        tokens = _tokens_held(spec, max_model_len, in_flight)
        rows.append(PoolGroup(spec.kind, spec.bytes_per_token, spec.window, n, groups, groups * group_size - n, block,
                              page, tokens, _blocks(spec, tokens, block)))
    return KvPool(rows, group_size, group_size * page, sum(r.groups * r.blocks_per_request for r in rows),
                  block_size, max_model_len, max_num_batched_tokens, async_scheduling, in_flight)
