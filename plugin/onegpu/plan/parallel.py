"""Pure: capacity per GPU of a declared multi-GPU protocol (tensor parallel TP x pipeline parallel PP, one GPU per
rank) in vLLM's own accounting.

Each rank holds its share of the checkpoint by the rules of onegpu.plan.parallel_rules (each with the vLLM file and
function that states it): only its pipeline stage's decoder layers, each tensor split or whole as its layer type
splits it, the embedding on the first stage, the final norm and the LM head on the last. That share, as a view of
the checkpoint, goes through the one-GPU offload plan unchanged (onegpu.plan.offload): every worker runs its own
offloader with the same --cpu-offload-gb. The GPU checks are judged per rank against that rank's GPU; the host
checks count every worker together. With TP 1 and PP 1 the one rank's plan is the one-GPU plan, except where the
vocabulary is not a multiple of 64: the rank counts vLLM's padding rows of the embedding and head, which the one-GPU
plan does not (at most 63 rows of each).
"""
from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass, replace
from math import prod

from onegpu.checkpoint.model import ROLES, CheckpointFacts, TensorInfo, TensorTable
from onegpu.checkpoint.tensor_roles import EMBEDDINGS_HEAD
from onegpu.core.units import gib
from onegpu.machine.model import GpuDevice, HostFacts
from onegpu.plan import kvcache
from onegpu.plan.capacity import (CONTAINER_OWN_NEEDS_BYTES, GPU_CHECKS, GPU_UTILIZATION, Verdict, _cgroup, _disk,
                                  _gib_bytes, _gpu_budget, _gpu_free, _gpu_weights, _host_offload, _host_ram, _kv_cache,
                                  _blocked, _quantization, _repack, _unknown, _weights, kit_plan, pinning_of)
from onegpu.plan.kv_pool import KvPool, LayerSpec, kv_pool
from onegpu.plan.kvcache import KvEstimate
from onegpu.plan.offload import Layout, OffloadPlan, _kind, _text_config, draft_layers, engine_layout, spans
from onegpu.plan.offload_rules import ACCOUNTING
from onegpu.plan.parallel_rules import PARALLEL_RULES, PP_ENDS_ON_THEIR_STAGES

VOCAB_PADDING = 64  # vocab_parallel_embedding.py:DEFAULT_VOCAB_PADDING_SIZE


def protocol_label(tp: int, pp: int) -> str:
    """'N-GPU protocol (TP t x PP p)', as the settings' multi_gpu block names it."""
    return f"{tp * pp}-GPU protocol (TP {tp} x PP {pp})"


# ---- where a rank sits ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankPlace:
    rank: int
    tp_rank: int
    pp_stage: int
    first_layer: int  # the stage's decoder layers are [first_layer, end_layer); one stage holds every layer
    end_layer: int
    last_stage: bool
    decoder_layers: int | None = None  # num_hidden_layers, when config.json states it

    def describe(self, gpu: GpuDevice | None) -> str:
        where = f"GPU index {gpu.index}" if gpu is not None else "its GPU not found"
        return f"rank {self.rank} ({where}, TP rank {self.tp_rank}, PP stage {self.pp_stage})"

    def holds_layer(self, layer: int) -> bool:
        return self.first_layer <= layer < self.end_layer

    @property
    def layers_text(self) -> str:
        if self.end_layer == sys.maxsize:
            return f"0-{self.decoder_layers - 1}" if self.decoder_layers else "all"
        return f"{self.first_layer}-{self.end_layer - 1}" if self.end_layer > self.first_layer else "none"


def pp_layer_range(num_layers: int, stage: int, pp: int, partition: tuple[int, ...] | None = None) -> tuple[int, int]:
    """The decoder layers [start, end) of one PP stage (RULES 'pp_layers', vllm/distributed/utils.py:get_pp_indices):
    num_layers // pp each, the remainder added one each to the stages before the last, counted back from the
    second-to-last; `partition` is VLLM_PP_LAYER_PARTITION when the launch sets it."""
    if partition is not None:
        if len(partition) != pp or sum(partition) != num_layers:
            raise ValueError(f"layer partition {list(partition)} must have {pp} entries summing to {num_layers}")
        parts = list(partition)
    else:
        parts = [num_layers // pp] * pp
        for i in range(2, num_layers % pp + 2):
            parts[-i] += 1
    start = sum(parts[:stage])
    return start, start + parts[stage]


def rank_place(rank: int, tp: int, pp: int, num_layers: int | None,
               partition: tuple[int, ...] | None = None) -> RankPlace:
    """rank = PP stage x TP + TP rank (RULES 'rank_order'); one stage holds every layer, whatever their count."""
    stage, tp_rank = divmod(rank, tp)
    if pp == 1 or num_layers is None:
        first, end = 0, sys.maxsize
    else:
        first, end = pp_layer_range(num_layers, stage, pp, partition)
    return RankPlace(rank, tp_rank, stage, first, end, stage == pp - 1, num_layers)


# ---- each tensor's share on a rank ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Share:
    """A rank holds ceil(bytes x num / den) of a tensor, by the named rule."""

    num: int
    den: int
    rule: str

    def of(self, nbytes: int) -> int:
        return -(-nbytes * self.num // self.den)

    def exact(self, nbytes: int) -> bool:
        return nbytes * self.num % self.den == 0


WHOLE = Share(1, 1, "tp_replicated")
UNRULED = Share(1, 1, "tp_unknown")
_COLUMN = frozenset(("q_proj", "gate_proj", "up_proj", "gate_up_proj", "q_b_proj", "kv_b_proj"))
_ROW = frozenset(("o_proj", "down_proj", "out_proj"))
_KV = frozenset(("k_proj", "v_proj"))
_FUSED_QKV = frozenset(("qkv_proj",))
_REPLICATED = frozenset(("gate", "router", "q_a_proj", "kv_a_proj_with_mqa", "fused_qkv_a_proj", "shared_expert_gate"))
_PER_HEAD = frozenset(("attention_sink_bias", "sinks"))
_HEAD_PARTS = (".lm_head.", ".embed_out.", ".output.")
_PACKED = frozenset(("U8", "I8"))


@dataclass(frozen=True)
class SplitModel:
    """What the shares read from config.json: the TP size, layer kinds and attention shapes."""

    cfg: dict
    tp: int
    kinds: list[str] | None  # kvcache's per-layer kind (full, sliding, mla, ...), None when it cannot read them

    @classmethod
    def of(cls, config: dict, tp: int) -> "SplitModel":
        return cls(_text_config(config), tp, _layer_kinds(config))

    def sliding(self, layer: int | None) -> bool:
        return bool(self.kinds and layer is not None and layer < len(self.kinds) and self.kinds[layer] == "sliding")


def _cfg_int(cfg: dict, keys: tuple[str, ...], default: int | None) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def attention_dims(cfg: dict, sliding: bool) -> tuple[int, int, int, int] | None:
    """(heads, KV heads, K head dim, V head dim) of a full or sliding-window layer, read with the keys
    onegpu.plan.kvcache reads (MiMo's swa_* keys for its sliding layers); None when config.json lacks them."""
    heads = _cfg_int(cfg, ("swa_num_attention_heads", "num_attention_heads") if sliding
                     else ("num_attention_heads",), None)
    if heads is None:
        return None
    kv = _cfg_int(cfg, ("swa_num_key_value_heads", "num_key_value_heads") if sliding
                  else ("num_global_key_value_heads", "num_key_value_heads"), heads)
    hidden = _cfg_int(cfg, ("hidden_size",), None)
    dk = _cfg_int(cfg, ("swa_head_dim", "head_dim") if sliding else ("global_head_dim", "head_dim"),
                  hidden // heads if hidden else None)
    if dk is None or kv is None:
        return None
    dv = _cfg_int(cfg, ("swa_v_head_dim", "v_head_dim") if sliding else ("v_head_dim",), dk)
    return heads, kv, dk, dv or dk


def _kv_share(model: SplitModel, layer: int | None) -> Share:
    dims = attention_dims(model.cfg, model.sliding(layer))
    if dims is None:
        return UNRULED
    return Share(1, min(model.tp, dims[1]), "tp_kv")


def _fused_qkv_share(model: SplitModel, layer: int | None) -> Share:
    """q rows / TP plus one rank's KV heads of k and v rows, over all the rows (RULES 'tp_fused_qkv')."""
    dims = attention_dims(model.cfg, model.sliding(layer))
    if dims is None:
        return UNRULED
    heads, kv, dk, dv = dims
    rank_rows = heads // model.tp * dk + max(1, kv // model.tp) * (dk + dv)
    return Share(rank_rows, heads * dk + kv * (dk + dv), "tp_fused_qkv")


def _expert_share(parts: list[str], tp: int) -> Share:
    """Every expert on every rank, its intermediate size / TP; the down projection's bias whole (RULES 'tp_experts')."""
    rest = parts[len(parts) - 1 - parts[::-1].index("experts") + 1:]
    if rest and rest[0].isdigit():
        rest = rest[1:]
    proj, leaf = (rest[0] if rest else ""), parts[-1]
    down = proj.startswith(("down_proj", "w2"))
    bias = leaf == "bias" or leaf.endswith("_bias") or proj.endswith("_bias")
    return Share(1, 1, "tp_experts") if down and bias else Share(1, tp, "tp_experts")


def _vocab_share(t: TensorInfo, tp: int) -> Share:
    """padded vocab / TP rows of the checkpoint's vocab rows (RULES 'tp_vocab'); a tensor that is not a
    [vocab, hidden] matrix (a scale) is split by TP."""
    if len(t.shape) != 2 or t.dtype in _PACKED:
        return Share(1, tp, "tp_vocab")
    vocab = t.shape[0]
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    return Share(padded // tp, vocab, "tp_vocab")


def tensor_share(t: TensorInfo, model: SplitModel) -> Share:
    """A decoder-layer tensor's share on one rank, by its module (the name part before the parameter)."""
    parts = t.name.split(".")
    leaf, module = parts[-1], (parts[-2] if len(parts) > 1 else "")
    if prod(t.shape) <= 1:
        return WHOLE  # a per-tensor scalar (RULES 'tp_scales')
    if leaf in _PER_HEAD:
        return Share(1, model.tp, "tp_heads")
    if ".experts." in f".{t.name}.":
        return _expert_share(parts, model.tp)
    if "norm" in module or module in _REPLICATED:
        return WHOLE
    if module in _COLUMN:
        return Share(1, model.tp, "tp_column")
    if module in _ROW:
        row_whole = leaf == "bias" or ("scale" in leaf and t.shape[-1] == 1)  # bias, per-channel scale
        return Share(1, 1, "tp_row") if row_whole else Share(1, model.tp, "tp_row")
    if module in _KV:
        return _kv_share(model, t.layer)
    if module in _FUSED_QKV:
        return _fused_qkv_share(model, t.layer)
    return UNRULED


# ---- a rank's view of the checkpoint -----------------------------------------------------------------------------

@dataclass(frozen=True)
class RankLayout:
    """One rank's parameters: the checkpoint as that rank holds it, and the engine layout of that view."""

    place: RankPlace
    ckpt: CheckpointFacts  # the rank's tensors at their per-rank bytes (shapes are the checkpoint's)
    layout: Layout
    embeddings_head_bytes: int  # the embedding / LM head part of layout.stays_bytes
    other_stays_bytes: int  # the final norm and any other top-level tensor
    counted_whole: tuple[str, ...]  # tensor groups without a rule, counted whole on this rank (an upper bound)
    rounded_up: tuple[str, ...]  # tensor groups whose share was rounded up to whole bytes
    ends_on_every_stage: str | None = None  # the architecture whose embedding, norm and head every stage counts


def _is_head(name: str) -> bool:
    return any(part in f".{name}." for part in _HEAD_PARTS) or name.startswith("output.")


def _tied(cfg: dict, firsts: list[TensorInfo]) -> bool:
    """tie_word_embeddings with no head tensor: the last stage builds the embedding for the head to share."""
    return bool(cfg.get("tie_word_embeddings")) and not any(
        t.role == EMBEDDINGS_HEAD and _is_head(t.name) for t in firsts)


def _ends_split(ckpt: CheckpointFacts) -> bool:
    """Whether vLLM builds this architecture's embedding, final norm and head only on their stages (RULES 'pp_ends')."""
    return bool(ckpt.architectures) and ckpt.architectures[0] in PP_ENDS_ON_THEIR_STAGES


def _stays_placement(t: TensorInfo, place: RankPlace, tied: bool, tp: int, split: bool) -> tuple[bool, Share, str]:
    """(held on this rank, share, 'head' | 'other') of a tensor outside the decoder layers (RULES 'pp_ends')."""
    if t.role == EMBEDDINGS_HEAD:
        held = place.last_stage if _is_head(t.name) else (place.pp_stage == 0 or (tied and place.last_stage))
        return held or not split, _vocab_share(t, tp), "head"
    if "norm" in t.name:
        return place.last_stage or not split, WHOLE, "other"
    return True, UNRULED, "other"


def _group_placement(t: TensorInfo, kind: str, place: RankPlace, model: SplitModel,
                     tied: bool, split: bool) -> tuple[bool, Share, str | None]:
    """(held on this rank, share, stays part) of one tensor group, classified by its first tensor."""
    if kind == "layer":
        return t.layer is not None and place.holds_layer(t.layer), tensor_share(t, model), None
    if kind == "stays":
        return _stays_placement(t, place, tied, model.tp, split)
    # draft layers, towers left out, tensors mapped to nothing: never loaded; rank 0 reports them once
    return place.rank == 0, WHOLE, None


def _layer_kinds(cfg: dict) -> list[str] | None:
    try:
        return kvcache._layer_kinds(kvcache._text_config(cfg, []), [])
    except kvcache._Unreadable:
        return None


def _subtable(table: TensorTable, held: list[bool], shares: list[Share]) -> tuple[TensorTable, set[int]]:
    """The held groups' tensors at their shared bytes, order kept; and the groups whose share was rounded up."""
    rows = [i for i, g in enumerate(table.group_of) if held[g]]
    renumber: dict[int, int] = {}
    for g, keep in enumerate(held):
        if keep:
            renumber[g] = len(renumber)
    rounded: set[int] = set()
    nbytes = array("q")
    for i in rows:
        share = shares[table.group_of[i]]
        if not share.exact(table.nbytes[i]):
            rounded.add(table.group_of[i])
        nbytes.append(share.of(table.nbytes[i]))
    dims, ends = array("q"), array("q")
    for i in rows:
        dims.extend(table.shape_dims[table.shape_ends[i - 1] if i else 0:table.shape_ends[i]])
        ends.append(len(dims))
    position = {i: n for n, i in enumerate(rows)}
    sub = TensorTable(
        names=tuple(table.names[i] for i in rows), dtypes=table.dtypes,
        dtype_of=bytes(table.dtype_of[i] for i in rows), nbytes=nbytes, shape_dims=dims, shape_ends=ends,
        shards=table.shards, shard_of=array("q", (table.shard_of[i] for i in rows)),
        role_of=bytes(table.role_of[i] for i in rows), layers=array("q", (table.layers[i] for i in rows)),
        group_of=array("q", (renumber[table.group_of[i]] for i in rows)),
        group_names=tuple(table.group_names[g] for g in renumber),
        group_first=array("q", (position[table.group_first[g]] for g in renumber)))
    return sub, rounded


def _view(ckpt: CheckpointFacts, sub: TensorTable) -> CheckpointFacts:
    """The checkpoint facts of a rank's tensors: bytes by role and dtype recounted; counts by element dropped."""
    by_role = {role: 0 for role in ckpt.bytes_by_role}
    by_dtype: dict[str, int] = {}
    for role, dtype, nbytes in zip(sub.role_of, sub.dtype_of, sub.nbytes):
        by_role[ROLES[role]] = by_role.get(ROLES[role], 0) + nbytes
        by_dtype[sub.dtypes[dtype]] = by_dtype.get(sub.dtypes[dtype], 0) + nbytes
    return replace(ckpt, tensors=sub, weight_bytes=sum(sub.nbytes), bytes_by_role=by_role, bytes_by_dtype=by_dtype,
                   params_by_dtype={}, packed_bytes_by_dtype={}, index_total_size=None)


def rank_layout(ckpt: CheckpointFacts, tp: int, pp: int, rank: int,
                partition: tuple[int, ...] | None = None) -> RankLayout:
    """What rank `rank` of a TP x PP launch holds (PARALLEL_RULES), as a checkpoint view and its engine layout."""
    cfg = _text_config(ckpt.config or {})
    n = cfg.get("num_hidden_layers")
    layers = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    place = rank_place(rank, tp, pp, layers, partition)
    table = ckpt.tensors
    firsts = [table[i] for i in table.group_first]
    drafts = draft_layers(firsts, layers)
    model = SplitModel.of(ckpt.config or {}, tp)
    tied, split = _tied(cfg, firsts), _ends_split(ckpt)
    placements = [_group_placement(t, _kind(t, drafts), place, model, tied, split) for t in firsts]
    held, shares = [p[0] for p in placements], [p[1] for p in placements]
    sub, rounded = _subtable(table, held, shares)
    view = _view(ckpt, sub)
    group_bytes = [0] * len(table.group_names)
    for g, nbytes in zip(sub.group_of, sub.nbytes):
        group_bytes[g] += nbytes
    kept = [g for g, keep in enumerate(held) if keep]
    head = sum(group_bytes[new] for new, g in enumerate(kept) if placements[g][2] == "head")
    other = sum(group_bytes[new] for new, g in enumerate(kept) if placements[g][2] == "other")
    one_stage = place.pp_stage == 0 and place.last_stage
    return RankLayout(place, view, engine_layout(view), head, other,
                      tuple(table.group_names[g] for g in kept if shares[g] is UNRULED),
                      tuple(table.group_names[g] for g in sorted(rounded)),
                      None if split or one_stage else (ckpt.architectures or ["an architecture not stated"])[0])


_QKV = "linear.py:QKVParallelLinear.__init__"
_MOE = "fused_moe/layer.py:FusedMoE.__init__"
_VOCAB = "vocab_parallel_embedding.py:VocabParallelEmbedding.__init__"


def split_refusals(ckpt: CheckpointFacts, tp: int) -> list[str]:
    """Why vLLM would refuse to build this split at load (RULES 'tp_divisible'), each with the vLLM function that
    refuses it; empty when it builds."""
    cfg = _text_config(ckpt.config or {})
    problems = []
    kinds = _layer_kinds(ckpt.config or {}) or ["full"]
    for sliding in sorted({k == "sliding" for k in kinds if k in ("full", "sliding")}):
        dims = attention_dims(cfg, sliding)
        if dims is None:
            continue
        heads, kv = dims[0], dims[1]
        what = "sliding-window" if sliding else "attention"
        if heads % tp:
            problems.append(f"{what} heads {heads} are not divisible by TP {tp} ({_QKV})")
        if kv >= tp and kv % tp:
            problems.append(f"{what} KV heads {kv} are not divisible by TP {tp} ({_QKV})")
        if kv < tp and tp % kv:
            problems.append(f"TP {tp} is not a multiple of the {kv} {what} KV heads ({_QKV})")
    if "mla" in kinds and isinstance(cfg.get("num_attention_heads"), int) and cfg["num_attention_heads"] % tp:
        problems.append(f"MLA attention heads {cfg['num_attention_heads']} are not divisible by TP {tp} "
                        "(deepseek_v2.py:DeepseekV2MLAAttention.__init__)")
    moe = cfg.get("moe_intermediate_size")
    if isinstance(moe, int) and moe % tp and ckpt.bytes_by_role.get("routed_experts"):
        problems.append(f"the experts' moe_intermediate_size {moe} is not divisible by TP {tp} ({_MOE})")
    vocab = cfg.get("vocab_size")
    if isinstance(vocab, int) and vocab > 0 and (-(-vocab // VOCAB_PADDING) * VOCAB_PADDING) % tp:
        problems.append(f"the vocabulary {vocab}, padded to a multiple of {VOCAB_PADDING}, is not divisible by TP {tp} "
                        f"({_VOCAB})")
    return problems


def split_unplaced(ckpt: CheckpointFacts, pp: int) -> str | None:
    """Why the kit cannot place the PP stages (vLLM may still load the model: a config can name its layer count
    otherwise), or None."""
    layers = _text_config(ckpt.config or {}).get("num_hidden_layers")
    if pp > 1 and not (isinstance(layers, int) and not isinstance(layers, bool) and layers > 0):
        return ("config.json states no num_hidden_layers, so the kit cannot place the PP stages' layers: what each "
                "stage holds is not known")
    return None


def rank_plans(ckpt: CheckpointFacts, tp: int, pp: int, budget_bytes: int, pinning: str = "rounded",
               partition: tuple[int, ...] | None = None) -> list[OffloadPlan]:
    """Each rank's offload plan, rank by rank: the same budget per worker (RULES 'per_worker_offload') over that
    rank's own parameters, through the one-GPU plan's own loop (onegpu.plan.capacity.kit_plan)."""
    plans = []
    for rank in range(tp * pp):
        rl = rank_layout(ckpt, tp, pp, rank, partition)
        plans.append(kit_plan(rl.ckpt, budget_bytes, pinning, layout=rl.layout))
    return plans


# ---- KV cache per rank -------------------------------------------------------------------------------------------

_SPEC_KIND = {"full_attention": "full", "sliding_attention": "sliding", "mla": "mla"}


@dataclass(frozen=True)
class RankKv:
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
    kinds = _layer_kinds(config)
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


def _rank_estimate(kv: KvEstimate, share: RankKv) -> KvEstimate:
    """The estimate as one rank's: its bytes and pool, or UNKNOWN with the rank's reason."""
    if share.bytes is None:
        return replace(kv, bytes=None, unknown_reason=share.unknown_reason)
    return replace(kv, bytes=share.bytes, pool=share.pool)


# ---- everything one rank needs -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RankFacts:
    place: RankPlace
    gpu: GpuDevice | None
    layout: RankLayout
    plan: OffloadPlan
    kv: KvEstimate  # the rank's own estimate (bytes None: UNKNOWN with its reason)


def rank_facts(settings, gpus: list[GpuDevice | None], ckpt: CheckpointFacts, kv: KvEstimate, tp: int, pp: int,
               partition: tuple[int, ...] | None = None) -> list[RankFacts]:
    """Every rank in rank order; GPU i of `gpus` is rank i (RULES 'rank_order')."""
    if len(gpus) != tp * pp:
        raise ValueError(f"{len(gpus)} GPUs for TP {tp} x PP {pp} = {tp * pp} ranks")
    budget = _gib_bytes(settings.cpu_offload_gib)
    out = []
    for rank, gpu in enumerate(gpus):
        rl = rank_layout(ckpt, tp, pp, rank, partition)
        plan = kit_plan(rl.ckpt, budget, pinning_of(settings), layout=rl.layout)
        share = rank_kv(kv, ckpt.config or {}, tp, pp, rank, partition)
        out.append(RankFacts(rl.place, gpu, rl, plan, _rank_estimate(kv, share)))
    return out


def host_total_plan(plans: list[OffloadPlan]) -> OffloadPlan:
    """Every worker's offload as one plan for the host checks: what they offload and pin adds up. The peak is the
    sum of each worker's peak (the workers load at the same time: an upper bound, reached when their worst moments
    coincide)."""
    def total(attr: str) -> int:
        return sum(getattr(p, attr) for p in plans)

    touched = sorted({layer for p in plans for layer in p.layers_touched})
    return replace(plans[0], offloaded=[x for p in plans for x in p.offloaded], offloaded_bytes=total("offloaded_bytes"),
                   pinned_rounded_bytes=total("pinned_rounded_bytes"), pinned_exact_bytes=total("pinned_exact_bytes"),
                   peak_bytes=total("peak_bytes"), offerable_bytes=total("offerable_bytes"),
                   loaded_bytes=total("loaded_bytes"), gpu_resident_bytes=total("gpu_resident_bytes"),
                   stays_bytes=total("stays_bytes"), draft_bytes=total("draft_bytes"),
                   never_loaded_bytes=total("never_loaded_bytes"), not_loaded_bytes=total("not_loaded_bytes"),
                   tower_offloaded_bytes=total("tower_offloaded_bytes"), engine_only_bytes=total("engine_only_bytes"),
                   layers_on_cpu=sorted({layer for p in plans for layer in p.layers_on_cpu}), partial_layer=None,
                   partial_on_cpu=[], partial_of=0, layers_touched=touched)


# ---- the verdicts ------------------------------------------------------------------------------------------------

_SEVERITY = {"BLOCKED": 2, "UNKNOWN": 1, "OK": 0}
_MARGINS = {"gpu_free": ("free_bytes", "need_bytes"), "gpu_budget": ("budget_bytes", None),
            "gpu_weights": ("gpu_budget_bytes", "gpu_resident_bytes"), "kv_cache": ("gpu_budget_bytes", "need_bytes")}


def _margin(check: str, v: Verdict) -> int | None:
    """Bytes to spare on this rank for this check (negative: short), from the verdict's own numbers."""
    have, need = _MARGINS[check]
    if v.status == "UNKNOWN" or v.numbers.get(have) is None:
        return None
    return v.numbers[have] - ((v.numbers.get(need) or 0) if need else 0)


def _worst(check: str, verdicts: list[Verdict]) -> int:
    """The rank whose verdict leads: BLOCKED before UNKNOWN before OK, then the least to spare."""
    def key(i: int):
        margin = _margin(check, verdicts[i])
        return -_SEVERITY[verdicts[i].status], margin if margin is not None else sys.maxsize, i

    return min(range(len(verdicts)), key=key)


def _rank_row(r: RankFacts, v: Verdict, check: str) -> dict:
    row = {"rank": r.place.rank, "gpu_index": r.gpu.index if r.gpu is not None else None,
           "tp_rank": r.place.tp_rank, "pp_stage": r.place.pp_stage, "status": v.status, "code": v.code,
           "margin_bytes": _margin(check, v)}
    row.update({k: val for k, val in v.numbers.items() if isinstance(val, (int, str, bool)) or val is None})
    return row


def _spare(check: str, v: Verdict) -> str:
    margin = _margin(check, v)
    if margin is None:
        return ""
    return f" ({gib(margin)} to spare)" if margin >= 0 else f" (short by {gib(-margin)})"


def _combined(check: str, label: str, ranks: list[RankFacts], per_rank: list[Verdict]) -> Verdict:
    """One check over every rank: BLOCKED if any rank is; the worst rank named, every rank listed."""
    w = _worst(check, per_rank)
    lead, place = per_rank[w], ranks[w].place
    blocked = sum(v.status == "BLOCKED" for v in per_rank)
    summary = "; ".join(f"rank {r.place.rank} {v.status}{' ' + v.code if v.code else ''}{_spare(check, v)}"
                        for r, v in zip(ranks, per_rank))
    head = (f"{blocked} of {len(ranks)} ranks BLOCKED, worst" if blocked else
            "a rank is UNKNOWN" if lead.status == "UNKNOWN" else "every rank passes, tightest")
    message = f"{label}: {head} {place.describe(ranks[w].gpu)}: {lead.message}. Every rank: {summary}"
    numbers = {**lead.numbers, "protocol": label, "worst_rank": place.rank,
               "ranks": [_rank_row(r, v, check) for r, v in zip(ranks, per_rank)]}
    return Verdict(check, lead.status, lead.code, message, numbers)


def _rank_gpu_verdicts(settings, r: RankFacts, calibration, not_judged: str | None) -> dict[str, Verdict]:
    """The four GPU checks of one rank against its own GPU, as capacity.py judges one GPU; the weights and KV checks
    UNKNOWN for `not_judged` (a split vLLM refuses, or stages the kit cannot place)."""
    if r.gpu is None:
        why = f"{r.place.describe(None)}: its GPU is not on this machine; the GPU side is not known"
        return {c: _unknown(c, why) for c in GPU_CHECKS}
    reserve = calibration.reserve_bytes if calibration is not None else _gib_bytes(settings.gpu_reserve_gib)
    budget = int(r.gpu.total_bytes * GPU_UTILIZATION) - reserve
    out = {"gpu_free": _gpu_free(r.gpu), "gpu_budget": _gpu_budget(settings, r.gpu, budget, calibration),
           "gpu_weights": _gpu_weights(r.layout.ckpt, r.plan, budget),
           "kv_cache": _kv_cache(r.kv, r.plan.gpu_resident_bytes, budget)}
    if not_judged is not None:
        out["gpu_weights"] = _unknown("gpu_weights", not_judged, gpu_budget_bytes=budget)
        out["kv_cache"] = _unknown("kv_cache", not_judged, gpu_budget_bytes=budget)
    return out


def _stage_ends(r: RankFacts) -> str:
    """What the rank's stage holds besides its decoder layers (RULES 'pp_ends'), never offered to the offloader."""
    held = []
    if r.layout.embeddings_head_bytes:
        held.append(f"embeddings/head {gib(r.layout.embeddings_head_bytes)}")
    if r.layout.other_stays_bytes:
        norm = r.place.last_stage or r.layout.ends_on_every_stage
        held.append(f"{'final norm' if norm else 'top-level tensors without a rule'} "
                    f"{gib(r.layout.other_stays_bytes)}")
    everywhere = (f", counted on every stage: {r.layout.ends_on_every_stage} is not an architecture whose vLLM model "
                  "was read to build them only on their stages (an upper bound)"
                  if r.layout.ends_on_every_stage else "")
    return f" + {' and '.join(held)} (never offloaded{everywhere})" if held else ""


def _rank_where(r: RankFacts) -> str:
    """One rank's layers and where its offload lands, in words."""
    plan = r.plan
    moved = (f"offloads {len(plan.offloaded)} parameters, {gib(plan.offloaded_bytes)} logical, pinned "
             f"{gib(plan.pinned_bytes)}, from layers {spans(plan.layers_touched)}" if plan.offloaded
             else "offloads nothing")
    return (f"{r.place.describe(r.gpu)}: decoder layers {r.place.layers_text}{_stage_ends(r)}; {moved}; "
            f"{gib(plan.gpu_resident_bytes)} of weights on its GPU")


def _offload_plan_verdict(ckpt: CheckpointFacts, ranks: list[RankFacts], label: str, refusal: str | None,
                          unplaced: str | None = None) -> Verdict:
    """Each rank's share and offload in words, with per-rank numbers."""
    plans = [r.plan for r in ranks]
    total = host_total_plan(plans)
    rule = PARALLEL_RULES["per_worker_offload"]
    rows = [{"rank": r.place.rank, "tp_rank": r.place.tp_rank, "pp_stage": r.place.pp_stage,
             "first_layer": r.place.first_layer, "end_layer": r.place.end_layer if r.place.end_layer != sys.maxsize
             else None, "offloaded_bytes": r.plan.offloaded_bytes, "pinned_bytes": r.plan.pinned_bytes,
             "peak_bytes": r.plan.peak_bytes, "loaded_bytes": r.plan.loaded_bytes,
             "gpu_resident_bytes": r.plan.gpu_resident_bytes, "embeddings_head_bytes": r.layout.embeddings_head_bytes,
             "other_stays_bytes": r.layout.other_stays_bytes, "parameters": len(r.plan.offloaded)} for r in ranks]
    nums = dict(protocol=label, budget_bytes=plans[0].budget_bytes, budget_per_worker=True,
                offloaded_bytes=total.offloaded_bytes, pinning=total.pinning, pinned_bytes=total.pinned_bytes,
                pinned_rounded_bytes=total.pinned_rounded_bytes, pinned_exact_bytes=total.pinned_exact_bytes,
                peak_bytes=total.peak_bytes, loaded_bytes=total.loaded_bytes,
                gpu_resident_bytes=total.gpu_resident_bytes, accounting=ACCOUNTING, ranks=rows,
                rules=list(PARALLEL_RULES))
    if not ckpt.tensors:
        return _unknown("offload_plan", f"{label}: no per-tensor facts: the ranks' shares cannot be computed", **nums)
    if refusal is not None:  # a definite failure at load: the plan cannot be run as declared
        return _blocked("offload_plan", "PARALLEL_SPLIT_REFUSED", f"{label}: {refusal}", **nums)
    if unplaced is not None:
        return _unknown("offload_plan", f"{label}: {unplaced}", **nums)
    parts = [f"{label}, {ACCOUNTING}: each worker runs its own offloader with the same budget "
             f"{gib(plans[0].budget_bytes)} over its own share of the weights ({rule.short()})"]
    parts += [_rank_where(r) for r in ranks]
    whole = sorted({name for r in ranks for name in r.layout.counted_whole})
    if whole:
        parts.append(f"{len(whole)} tensor groups of modules without a split rule are counted whole on every rank, "
                     f"an upper bound (e.g. {whole[0]})")
    rounded = sorted({name for r in ranks for name in r.layout.rounded_up})
    if rounded:
        parts.append(f"{len(rounded)} tensor groups do not split into whole bytes per rank and are rounded up "
                     f"(e.g. {rounded[0]}; {PARALLEL_RULES['tp_scales'].short()})")
    parts.append("experts are split by TP on every rank: the launch passes no --enable-expert-parallel")
    return Verdict("offload_plan", "OK", None, "; ".join(parts), nums)


def _own_needs_text(workers: int) -> str:
    return (f"{gib(workers * CONTAINER_OWN_NEEDS_BYTES)} ASSUMED for the container's own needs: "
            f"{gib(CONTAINER_OWN_NEEDS_BYTES)} per worker process x {workers} (engine process, tokenizer, CUDA host "
            "context)")


def _host_verdicts(settings, host: HostFacts, ckpt: CheckpointFacts, ranks: list[RankFacts],
                   label: str) -> list[Verdict]:
    """The host checks over every worker together: pinned bytes and peaks added up, own needs once per worker."""
    total = host_total_plan([r.plan for r in ranks])
    workers = len(ranks)
    own = workers * CONTAINER_OWN_NEEDS_BYTES
    cap = _gib_bytes(settings.container_ram_gib)
    container_need = total.peak_bytes + own
    per_rank = [{"rank": r.place.rank, "pinned_bytes": r.plan.pinned_bytes, "peak_bytes": r.plan.peak_bytes,
                 "offloaded_bytes": r.plan.offloaded_bytes} for r in ranks]
    verdicts = [_host_offload(total, cap, own, _own_needs_text(workers)),
                _host_ram(settings, host, cap, total, container_need), _cgroup(settings, host, cap, container_need),
                _repack(ckpt, total)]
    summed = f"{label}, every worker together (the {workers} workers' peaks added up, an upper bound)"
    contexts = (summed, summed, summed, f"{label}, every worker's offloaded parameters")
    return [replace(v, message=f"{context}: {v.message}",
                    numbers={**v.numbers, "protocol": label, "workers": workers, "ranks": per_rank})
            for v, context in zip(verdicts, contexts)]


def parallel_capacity_verdicts(settings, gpus: list[GpuDevice | None], host: HostFacts, ckpt: CheckpointFacts,
                               kv: KvEstimate, run_disk_free_bytes: int | None, tp: int, pp: int, calibration=None,
                               partition: tuple[int, ...] | None = None,
                               ranks: list[RankFacts] | None = None) -> list[Verdict]:
    """Every check of capacity.CHECKS for the TP x PP protocol, in that order. GPU checks per rank against that
    rank's GPU (BLOCKED if any rank is, the worst rank named, every rank listed); host checks over every worker.
    `ranks`: rank_facts of the same arguments, when the caller already has them (the per-rank split is the costly
    part)."""
    label = protocol_label(tp, pp)
    ranks = ranks if ranks is not None else rank_facts(settings, gpus, ckpt, kv, tp, pp, partition)
    problems = split_refusals(ckpt, tp)
    refusal = f"vLLM refuses this split at load: {'; '.join(problems)}" if problems else None
    unplaced = split_unplaced(ckpt, pp)
    per_rank = [_rank_gpu_verdicts(settings, r, calibration, refusal or unplaced) for r in ranks]
    host_checks = _host_verdicts(settings, host, ckpt, ranks, label)
    if unplaced is not None:  # every stage would be counted with every layer: no figure to judge the host by
        host_checks = [_unknown(v.check, f"{label}: {unplaced}") for v in host_checks]
    return [_weights(ckpt), _quantization(ckpt), _offload_plan_verdict(ckpt, ranks, label, refusal, unplaced),
            *[_combined(c, label, ranks, [v[c] for v in per_rank]) for c in GPU_CHECKS],
            *host_checks, _disk(run_disk_free_bytes)]


# ---- the table ---------------------------------------------------------------------------------------------------

def rank_rows(settings, gpus: list[GpuDevice | None], ckpt: CheckpointFacts, kv: KvEstimate, tp: int, pp: int,
              calibration=None, partition: tuple[int, ...] | None = None,
              ranks: list[RankFacts] | None = None) -> list[str]:
    """One row per rank (GPU, TP rank, PP stage, layers, weights on its GPU, offloaded logical and pinned, KV,
    budget) and a row with the host total."""
    ranks = ranks if ranks is not None else rank_facts(settings, gpus, ckpt, kv, tp, pp, partition)
    reserve = calibration.reserve_bytes if calibration is not None else _gib_bytes(settings.gpu_reserve_gib)
    rows = [f"{'rank':<5} {'GPU':<5} {'TP':>3} {'PP':>3} {'layers':<10} {'weights on GPU':>15} {'offloaded':>13} "
            f"{'pinned':>13} {'KV':>13} {'GPU budget':>13}"]
    for r in ranks:
        budget = int(r.gpu.total_bytes * GPU_UTILIZATION) - reserve if r.gpu is not None else None
        rows.append(f"{r.place.rank:<5} {str(r.gpu.index) if r.gpu else '?':<5} {r.place.tp_rank:>3} "
                    f"{r.place.pp_stage:>3} {r.place.layers_text:<10} {gib(r.plan.gpu_resident_bytes):>15} "
                    f"{gib(r.plan.offloaded_bytes):>13} {gib(r.plan.pinned_bytes):>13} {gib(r.kv.bytes):>13} "
                    f"{gib(budget):>13}")
    total = host_total_plan([r.plan for r in ranks])
    own = len(ranks) * CONTAINER_OWN_NEEDS_BYTES
    rows.append(f"{'host total, every worker':<44} {gib(total.offloaded_bytes):>13} {gib(total.pinned_bytes):>13}"
                f"  peak {gib(total.peak_bytes)} + {gib(own)} ASSUMED own needs ({len(ranks)} x "
                f"{gib(CONTAINER_OWN_NEEDS_BYTES)}) = {gib(total.peak_bytes + own)}")
    return rows

