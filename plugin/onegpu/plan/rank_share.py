"""Pure: what each rank of a declared multi-GPU protocol (tensor parallel TP x pipeline parallel PP, one GPU per
rank) holds, in vLLM's own accounting.

Each rank holds its share of the checkpoint by the rules of onegpu.plan.parallel_rules (each with the vLLM file and
function that states it): only its pipeline stage's decoder layers, each tensor split or whole as its layer type
splits it, and the embedding, final norm and LM head where vLLM builds them. That share is a view of the checkpoint
(its tensors at their per-rank bytes) with its engine layout, which onegpu.plan.parallel plans and judges. Also here:
the splits vLLM refuses at load, and the PP placements the kit cannot make.
"""
from __future__ import annotations

import sys
from array import array
from math import prod

from msgspec import Struct
from msgspec.structs import replace

from onegpu.checkpoint.model import ROLES, CheckpointFacts, TensorInfo, TensorTable
from onegpu.checkpoint.tensor_roles import EMBEDDINGS_HEAD
from onegpu.machine.model import GpuDevice
from onegpu.plan import kvcache
from onegpu.plan.offload import Layout, _kind, _text_config, draft_layers, engine_layout
from onegpu.plan.parallel_rules import PP_ENDS_ON_THEIR_STAGES

VOCAB_PADDING = 64  # vocab_parallel_embedding.py:DEFAULT_VOCAB_PADDING_SIZE


# ---- where a rank sits ------------------------------------------------------------------------------------------

class RankPlace(Struct, frozen=True):
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

class Share(Struct, frozen=True):
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


class SplitModel(Struct, frozen=True):
    """What the shares read from config.json: the TP size, layer kinds and attention shapes."""

    cfg: dict
    tp: int
    kinds: list[str] | None  # kvcache's per-layer kind (full, sliding, mla, ...), None when it cannot read them

    @classmethod
    def of(cls, config: dict, tp: int) -> "SplitModel":
        return cls(_text_config(config), tp, layer_kinds(config))

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

class RankLayout(Struct, frozen=True):
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


def layer_kinds(cfg: dict) -> list[str] | None:
    """The decoder layers' kinds (full, sliding, mla, ...) as the KV estimate reads them; None when unreadable."""
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
    kinds = layer_kinds(ckpt.config or {}) or ["full"]
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
