"""Pure: the KV cache one rank of the multi-GPU protocol holds for one request: its attention heads' share of every
layer it serves (tensor parallel) in the layers of its stage (pipeline parallel), sized by vLLM's pool arithmetic
(onegpu.plan.kv_pool)."""
from __future__ import annotations

from msgspec import Struct
from msgspec.structs import replace

from onegpu.plan import kvcache
from onegpu.plan.kv_pool import KvPool, LayerSpec, kv_pool
from onegpu.plan.kvcache import KvEstimate
from onegpu.plan.rank_share import (
    RankPlace,
    attention_dims,
    layer_kinds,
    rank_place,
)

_SPEC_KIND = {"full_attention": "full", "sliding_attention": "sliding", "mla": "mla"}


class RankKv(Struct, frozen=True):
    """One rank's KV pool for one request; bytes None means UNKNOWN (see reason)."""

    bytes: int | None
    unknown_reason: str | None
    attention_layers: int = 0
    pool: KvPool | None = None


def _rank_bytes_per_token(group_kind: str, bytes_per_token: int, cfg: dict, tp: int) -> int | str:
    """A layer's per-token bytes on one rank (RULES 'kv_heads'), or why it cannot be split exactly."""
    if group_kind == "mla":
        return bytes_per_token  # one latent, replicated on every rank
    dims = attention_dims(cfg, group_kind == "sliding_attention")
    if dims is None:
        return "config.json does not state the KV heads"
    kv = dims[1]
    if bytes_per_token % kv:
        return f"{bytes_per_token} B per token do not split over {kv} KV heads"
    return bytes_per_token // kv * max(1, kv // tp)


def _rank_specs(pool: KvPool, cfg: dict, tp: int, kinds: list[str], place: RankPlace) -> list[LayerSpec] | str:
    """The rank's attention layers in model order, each at its per-rank bytes, or why not."""
    per_kind: dict[str, LayerSpec] = {}
    for g in pool.groups:
        per_token = _rank_bytes_per_token(g.kind, g.bytes_per_token, cfg, tp)
        if isinstance(per_token, str):
            return per_token
        per_kind[_SPEC_KIND[g.kind]] = LayerSpec(g.kind, per_token, g.window)
    specs = []
    for layer, kind in enumerate(kinds):
        if kind in per_kind and place.holds_layer(layer):
            specs.append(per_kind[kind])
    return specs


def _uniform(pool: KvPool) -> bool:
    """One KV cache group of every layer: vLLM's grouping does not depend on which stage holds which layer."""
    return all(g.groups == 1 and g.padded_layers == 0 for g in pool.groups) and \
        pool.layers_per_group == sum(g.layers for g in pool.groups)


def rank_kv(kv: KvEstimate, config: dict, tp: int, pp: int, rank: int,
            partition: tuple[int, ...] | None = None) -> RankKv:
    """One rank's share of the KV estimate: its stage's attention layers, each with KV heads / TP (at least one
    head, RULES 'kv_heads'), in vLLM's pool arithmetic (RULES 'kv_workers'). UNKNOWN where the estimate's shape
    does not split exactly."""
    if kv.bytes is None:
        return RankKv(None, kv.unknown_reason)
    if kv.pool is None:
        return RankKv(None, "the estimate sums recurrent-state layers on their own, outside vLLM's pool arithmetic; "
                            "the kit does not split them per rank")
    kinds = layer_kinds(config)
    if kinds is None:
        return RankKv(None, "the layer kinds of config.json cannot be read again to place them on the stages")
    cfg = kvcache._text_config(config, [])  # as the estimate read it
    place = rank_place(rank, tp, pp, len(kinds), partition)
    if pp > 1 and not _uniform(kv.pool):
        return RankKv(None, "layers of different KV specs form several KV cache groups over the whole model, which "
                            "vLLM projects onto each stage's layers (kv_cache_utils.py:get_kv_cache_configs); the kit "
                            "does not model that projection")
    specs = _rank_specs(kv.pool, cfg, tp, kinds, place)
    if isinstance(specs, str):
        return RankKv(None, specs)
    if not specs:
        return RankKv(0, None, 0, None)
    p = kv.pool
    pool = kv_pool(specs, p.max_model_len, p.max_num_batched_tokens, p.block_size, p.async_scheduling)
    return RankKv(pool.required_bytes, None, len(specs), pool)


def rank_estimate(kv: KvEstimate, share: RankKv) -> KvEstimate:
    """The estimate as one rank's: its bytes and pool, or UNKNOWN with the rank's reason."""
    if share.bytes is None:
        return replace(kv, bytes=None, unknown_reason=share.unknown_reason)
    return replace(kv, bytes=share.bytes, pool=share.pool)
