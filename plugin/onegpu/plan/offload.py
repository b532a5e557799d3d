"""Pure: checkpoint headers + CPU-offload budget -> where vLLM's UVA offloader puts each weight, and the host bytes
it pins for them (vLLM 0.33 accounting).

Every rule is read from vLLM's source and named in offload_rules.RULES with its file and function; the plan,
the receipt and the report show those rules beside the figures. The source read is vLLM 0.33.0; 0.32.0 (the
CPU build the kit's real-engine tests run) and 0.34.0 were read too, and the comments say where they differ. The offloader itself
(vllm/model_executor/offloader/uva.py, base.py) is the same in all three.

What the header scan cannot know stays UNKNOWN: how a quantization method repacks the offloaded weights after
loading depends on the kernel vLLM picks on the card at load (RULES["repack"]).
"""
from __future__ import annotations

import re
from typing import Iterable

from msgspec import Struct, field

from onegpu.checkpoint.consistency import _AUDIO_PARTS, _DRAFT_MODULES, _VISION_PARTS
from onegpu.checkpoint.model import CheckpointFacts, TensorInfo
from onegpu.core.units import gib


class EngineParam(Struct, frozen=True):
    """One parameter as vLLM's offloader sees it."""

    name: str  # engine name, e.g. model.layers.3.mlp.experts.routed_experts.w13_weight
    local: str  # the name --cpu-offload-params segments are matched against (relative to the offloaded module)
    nbytes: int
    module: str  # "vision tower", "audio tower" or "layer N"
    layer: int | None  # the decoder layer; None for a tower


def pow2(n: int) -> int:
    """torch's PowerOf2Ceil: the pinned block a request of n bytes gets (n itself when n is a power of two)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


# ---- which tensor is what ---------------------------------------------------------------------------------------

_MTP_PARTS = frozenset(("mtp", "mtp_layers", "mtp_block", "nextn"))
# MiMo-V2 Omni maps "audio_tokenizer." to nothing, so it is never loaded
# (mimo_v2_omni.py:MiMoV2OmniForCausalLM.hf_to_vllm_mapper)
_NEVER_LOADED_PARTS = frozenset(("audio_tokenizer",))
_TOWER_KINDS = (("vision tower", _VISION_PARTS), ("audio tower", _AUDIO_PARTS))


def _text_config(config: dict) -> dict:
    inner = config.get("text_config")
    return {**config, **inner} if isinstance(inner, dict) else config


def _kind(t: TensorInfo, drafts: set[int]) -> str:
    """'vision tower', 'audio tower', 'draft', 'not loaded', 'layer' or 'stays' for one tensor."""
    parts = t.name.split(".")
    modules = set(parts[:-1])
    if not modules.isdisjoint(_NEVER_LOADED_PARTS):
        return "not loaded"
    for kind, tower_parts in _TOWER_KINDS:
        if not modules.isdisjoint(tower_parts):
            return kind
    if not modules.isdisjoint(_MTP_PARTS):
        return "draft"
    if t.layer is None:
        return "stays"
    if t.layer in drafts:
        return "draft"  # DeepSeek-style draft layers numbered past the decoder: make_layers builds range(N) only
    return "layer"


# ---- engine names and order ---------------------------------------------------------------------------------------

_EXPERT = re.compile(r"^(?P<owner>.*\.experts)\.\d+\.(?P<proj>[A-Za-z0-9_]+)\.(?P<suffix>.+)$")
# FusedMoE's expert mapping: gate/up (w1/w3) load into w13_<suffix>, down (w2) into w2_<suffix>
_EXPERT_GROUP = {"gate_proj": "w13", "up_proj": "w13", "w1": "w13", "w3": "w13", "down_proj": "w2", "w2": "w2"}
_STACKED = re.compile(r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.")
_STACK_INTO = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "gate_proj": "gate_up_proj",
               "up_proj": "gate_up_proj"}
# The order each MoE method registers the experts' parameters (create_weights):
# mxfp4.py:Mxfp4MoEMethod, fp8.py:Fp8MoEMethod, unquantized_fused_moe_method.py:UnquantizedFusedMoEMethod.
_EXPERT_ORDER = {
    "mxfp4": ("w13_weight", "w13_weight_scale", "w2_weight", "w2_weight_scale", "w13_bias", "w2_bias"),
    "fp8": ("w13_weight", "w2_weight", "w13_bias", "w2_bias", "w13_weight_scale_inv", "w2_weight_scale_inv",
            "w13_weight_scale", "w2_weight_scale"),
    None: ("w13_weight", "w13_bias", "w2_weight", "w2_bias"),
}
_ATTENTION = frozenset(("self_attn", "attention", "attn", "self_attention"))
_MLP = frozenset(("mlp", "block_sparse_moe", "feed_forward", "moe"))
_QKV = frozenset(("qkv_proj", "q_proj", "k_proj", "v_proj", "query_key_value", "wqkv"))
_OUT = frozenset(("o_proj", "out_proj", "dense", "wo"))


def engine_name(name: str) -> str:
    """The engine parameter a checkpoint tensor loads into (RULES['engine_params'])."""
    m = _EXPERT.match(name)
    if m:
        # 0.32-0.34: the expert weights live in the MoE runner's RoutedExperts child (layer.py:FusedMoEFactory,
        # runner/moe_runner.py:MoERunner.__init__ registers it as `routed_experts`)
        group = _EXPERT_GROUP.get(m["proj"], m["proj"])
        return f"{m['owner']}.routed_experts.{group}_{m['suffix'].replace('.', '_')}"
    if ".experts." in name:
        return name
    return _STACKED.sub(lambda s: f".{_STACK_INTO[s[1]]}.", name, count=1)


def expert_method(quant) -> str | None:
    """Which MoE method vLLM gives the experts: fp8.py:Fp8Config.get_quant_method returns Mxfp4MoEMethod when the
    fp8 config says store_dtype mxfp4, Fp8MoEMethod otherwise."""
    if quant.method == "mxfp4" or quant.store_dtype == "mxfp4":
        return "mxfp4"
    if quant.method == "fp8":
        return "fp8"
    return None


def _suffix_rank(local: str) -> int:
    # LinearBase and the quantization method: weight, then its scales, then the bias
    last = local.rsplit(".", 1)[-1]
    return 0 if last == "weight" else 1 if "scale" in last else 2 if last == "bias" else 3


def _rank(local: str, method: str | None) -> tuple:
    """Where a decoder-layer parameter comes in named_parameters order (RULES['order'])."""
    parts = local.split(".")
    head = parts[0]
    if head in _ATTENTION:
        sub = parts[1] if len(parts) > 2 else ""
        within = 0 if len(parts) == 2 else 1 if sub in _QKV else 2 if sub in _OUT else 3
        return 0, within, _suffix_rank(local)
    if head in _MLP and len(parts) > 2:
        sub = parts[1]
        if sub in ("gate", "router"):
            return 1, 0, _suffix_rank(local)
        if sub == "experts":
            order = _EXPERT_ORDER.get(method, _EXPERT_ORDER[None])
            return 1, 1, order.index(parts[-1]) if parts[-1] in order else len(order)
        if sub.startswith("shared_expert"):
            return 1, 2, _suffix_rank(local)
        return 1, 3 if sub == "gate_up_proj" else 4 if sub == "down_proj" else 5, _suffix_rank(local)
    if head == "input_layernorm":
        return 2, 0, 0
    if head == "post_attention_layernorm":
        return 2, 1, 0
    return 3, 0, _suffix_rank(local)


def _tower_key(t: TensorInfo) -> int:
    # patch embedding before the blocks, the blocks in order, the merger after (registration order of the towers)
    if t.layer is not None:
        return t.layer
    return -1 if "embed" in t.name else 10**9


def _local_in_layer(name: str, layer: int) -> str:
    marker = f".{layer}."
    i = name.find(marker)
    return name[i + len(marker):] if i >= 0 else name


def _local_in_tower(name: str, tower_parts) -> str:
    parts = name.split(".")
    start = next(i for i, p in enumerate(parts) if p in tower_parts)
    return ".".join(parts[start:])


class Layout(Struct, frozen=True):
    """The checkpoint's tensors as the engine holds them, in the offloader's order."""

    towers: dict[str, list[EngineParam]]  # "vision tower" / "audio tower" -> parameters in order
    layers: list[EngineParam]  # decoder-layer parameters, layer by layer, in named_parameters order
    tower_bytes: dict[str, int]
    stays_bytes: int  # embeddings, head, final norm: never offered to the offloader
    draft_bytes: int  # MTP layers: not loaded
    never_loaded_bytes: int
    decoder_layers: int | None  # num_hidden_layers, when config.json states it
    engine_only_bytes: int = 0  # parameters the engine creates that no checkpoint tensor fills (KV scales)


def draft_layers(tensors: Iterable[TensorInfo], decoder_layers: int | None) -> set[int]:
    """Layers numbered past num_hidden_layers that hold draft modules (eh_proj, enorm, ...): draft layers."""
    return {t.layer for t in tensors if decoder_layers is not None and t.layer is not None
            and t.layer >= decoder_layers and not set(t.name.split(".")[:-1]).isdisjoint(_DRAFT_MODULES)}


def engine_layout(ckpt: CheckpointFacts) -> Layout:
    cfg = _text_config(ckpt.config or {})
    n = cfg.get("num_hidden_layers")
    layers = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    method = expert_method(ckpt.quant)
    table = ckpt.tensors
    # Every rule below reads a name's modules and layer, never its expert number (engine_name drops it): each
    # expert group of the table (names that differ only there) is classified once, by its first tensor, with the
    # group's bytes summed. A 1 T MoE checkpoint's ~1.4 x 10^5 tensors are ~10^3 groups.
    group_bytes = [0] * len(table.group_names)
    for group, nbytes in zip(table.group_of, table.nbytes):
        group_bytes[group] += nbytes
    groups = {name: [nbytes, table[i], i]  # collapsed name -> [bytes, its first tensor, that tensor's index]
              for name, nbytes, i in zip(table.group_names, group_bytes, table.group_first)}
    drafts = draft_layers((t for _, t, _ in groups.values()), layers)
    decoder: dict[str, list] = {}  # engine name -> [bytes, layer, local, first index]
    towers: dict[str, dict[str, list]] = {"vision tower": {}, "audio tower": {}}
    stays = draft = never = engine_only = 0
    for nbytes, t, i in groups.values():
        kind = _kind(t, drafts)
        if kind == "layer":
            key = engine_name(t.name)
            entry = decoder.get(key)
            if entry is None:
                decoder[key] = [nbytes, t.layer, _local_in_layer(key, t.layer), i]
            else:
                entry[0] += nbytes
        elif kind in towers:
            key = engine_name(t.name)
            entry = towers[kind].get(key)
            if entry is None:
                parts = dict(_TOWER_KINDS)[kind]
                towers[kind][key] = [nbytes, _tower_key(t), _local_in_tower(key, parts), i]
            else:
                entry[0] += nbytes
        elif kind == "draft":
            draft += nbytes
        elif kind == "not loaded":
            never += nbytes
        else:
            stays += nbytes
    if ckpt.quant.method == "fp8":
        # fp8.py:Fp8Config.get_quant_method gives every Attention layer Fp8KVCacheMethod, whose
        # kv_cache.py:BaseKVCacheMethod.create_weights registers four float32 scalars (q, k, v, prob scales) that no
        # checkpoint tensor fills: the offloader moves them like any parameter (4 bytes each)
        heads = {}
        for key, (_, layer, local, index) in list(decoder.items()):
            head = local.split(".", 1)[0]
            if head in _ATTENTION and layer not in heads:
                heads[layer] = (key[: len(key) - len(local)] + head, index)
        for layer, (prefix, index) in heads.items():
            for j, scale in enumerate(("q_scale", "k_scale", "v_scale", "prob_scale")):
                name = f"{prefix}.attn.{scale}"
                decoder.setdefault(name, [4, layer, name.split(f".{layer}.", 1)[1], index + j / 10])
                engine_only += 4
    ordered = sorted(decoder.items(), key=lambda kv: (kv[1][1], _rank(kv[1][2], method), kv[1][3]))
    params = [EngineParam(name, local, size, f"layer {layer}", layer) for name, (size, layer, local, _) in ordered]
    tower_params = {
        kind: [EngineParam(name, local, size, kind, None)
               for name, (size, _, local, _) in sorted(found.items(), key=lambda kv: (kv[1][1], kv[1][3]))]
        for kind, found in towers.items() if found}
    return Layout(towers=tower_params, layers=params,
                  tower_bytes={k: sum(p.nbytes for p in v) for k, v in tower_params.items()},
                  stays_bytes=stays, draft_bytes=draft, never_loaded_bytes=never, decoder_layers=layers,
                  engine_only_bytes=engine_only)


# ---- the offload itself -------------------------------------------------------------------------------------------

class OffloadPlan(Struct, frozen=True):
    budget_bytes: int
    pinning: str  # "rounded" | "exact"
    language_model_only: bool
    towers: dict[str, int]  # tower -> bytes, as the checkpoint holds them
    selected: tuple[str, ...]  # --cpu-offload-params names; () offers every parameter
    offloaded: list[EngineParam]  # in the order the engine moves them
    offloaded_bytes: int  # logical: what "Total CPU offloaded parameters" reports
    pinned_rounded_bytes: int
    pinned_exact_bytes: int
    peak_bytes: int  # host bytes at the worst moment of offloading (pinned so far + the pageable copy in flight)
    offerable_bytes: int  # every parameter the offloader is offered (towers when built, decoder layers)
    loaded_bytes: int  # what the engine holds (weights minus drafts, left-out towers, unmapped; plus KV scales)
    gpu_resident_bytes: int  # loaded - offloaded
    stays_bytes: int
    draft_bytes: int
    never_loaded_bytes: int
    layers_on_cpu: list[int]  # decoder layers with every parameter offloaded
    partial_layer: int | None  # the layer the budget ends in (some parameters offloaded)
    partial_on_cpu: list[str] = field(default_factory=list)  # its offloaded parameters (module-relative)
    partial_of: int = 0  # how many parameters that layer has
    layers_touched: list[int] = field(default_factory=list)  # layers with at least one parameter offloaded
    decoder_layers: int | None = None
    tower_offloaded_bytes: int = 0
    not_loaded_bytes: int = 0  # drafts, towers left out, tensors mapped to nothing
    engine_only_bytes: int = 0

    @property
    def pinned_bytes(self) -> int:
        return self.pinned_rounded_bytes if self.pinning == "rounded" else self.pinned_exact_bytes

    @property
    def largest_offloaded_bytes(self) -> int:
        return max((p.nbytes for p in self.offloaded), default=0)


def _selected(p: EngineParam, names: tuple[str, ...]) -> bool:
    # uva.py:_maybe_offload_to_cpu: f".{param}." in f".{prefix}{name}." (whole dot-separated segments)
    return not names or any(f".{n}." in f".{p.local}." for n in names)


def offload_plan(ckpt: CheckpointFacts, budget_bytes: int, pinning: str = "rounded",
                 language_model_only: bool | None = None, selected: tuple[str, ...] = (),
                 layout: Layout | None = None) -> OffloadPlan:
    """What vLLM 0.33's UVA offloader moves for `budget_bytes` (--cpu-offload-gb x 2^30), and what it pins.

    `language_model_only` None means left out exactly when the checkpoint has tower tensors. `layout` is
    engine_layout(ckpt), when the caller already has it (it is the costly part: one pass over every tensor).
    """
    layout = layout or engine_layout(ckpt)
    lmo = bool(layout.towers) if language_model_only is None else language_model_only
    offered = ([] if lmo else [p for kind in ("vision tower", "audio tower") for p in layout.towers.get(kind, [])])
    offered += layout.layers
    moved: list[EngineParam] = []
    total = pinned_r = pinned_x = peak = 0
    for p in offered:
        if total >= budget_bytes:
            break  # uva.py: once the running total reaches the budget, nothing more moves
        if not _selected(p, selected):
            continue
        moved.append(p)
        total += p.nbytes
        pinned_r += pow2(p.nbytes)
        pinned_x += p.nbytes
        # the pageable copy of this parameter is alive while its pinned buffer is filled
        peak = max(peak, (pinned_r if pinning == "rounded" else pinned_x) + p.nbytes)
    left_out = sum(layout.tower_bytes.values()) if lmo else 0
    loaded = ckpt.weight_bytes - layout.draft_bytes - layout.never_loaded_bytes - left_out + layout.engine_only_bytes
    per_layer: dict[int, int] = {}
    for p in layout.layers:
        if p.layer is not None:  # always, for a decoder parameter
            per_layer[p.layer] = per_layer.get(p.layer, 0) + 1
    moved_per_layer: dict[int, list[str]] = {}
    for p in moved:
        if p.layer is not None:
            moved_per_layer.setdefault(p.layer, []).append(p.local)
    full = [k for k, v in moved_per_layer.items() if len(v) == per_layer[k]]
    partial = [k for k in moved_per_layer if len(moved_per_layer[k]) < per_layer[k]]
    cut = partial[-1] if partial and not selected else None
    return OffloadPlan(
        budget_bytes=budget_bytes, pinning=pinning, language_model_only=lmo, towers=dict(layout.tower_bytes),
        selected=tuple(selected), offloaded=moved, offloaded_bytes=total, pinned_rounded_bytes=pinned_r,
        pinned_exact_bytes=pinned_x, peak_bytes=peak, offerable_bytes=sum(p.nbytes for p in offered),
        loaded_bytes=loaded, gpu_resident_bytes=loaded - total, stays_bytes=layout.stays_bytes,
        draft_bytes=layout.draft_bytes, never_loaded_bytes=layout.never_loaded_bytes, layers_on_cpu=sorted(full),
        partial_layer=cut, partial_on_cpu=moved_per_layer.get(cut, []) if cut is not None else [],
        partial_of=per_layer.get(cut, 0) if cut is not None else 0, layers_touched=sorted(moved_per_layer),
        decoder_layers=layout.decoder_layers,
        tower_offloaded_bytes=sum(p.nbytes for p in moved if p.layer is None),
        not_loaded_bytes=layout.draft_bytes + layout.never_loaded_bytes + left_out,
        engine_only_bytes=layout.engine_only_bytes)


def spans(numbers: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive numbers
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{first}-{last}" if last > first else f"{first}" for first, last in runs) or "none"


def where_lines(plan: OffloadPlan) -> str:
    """Which layers end on the CPU, in words (the parameters of a layer cut in part: how many, up to which)."""
    n = plan.decoder_layers
    if not plan.offloaded:
        return "nothing is offloaded: every loaded weight stays on the GPU"
    parts = []
    if plan.tower_offloaded_bytes:
        parts.append(f"towers {gib(plan.tower_offloaded_bytes)} first")
    if plan.selected:
        parts.append(f"the selected parameters of decoder layers {spans(plan.layers_touched)}")
    else:
        if plan.layers_on_cpu:
            parts.append(f"decoder layers {spans(plan.layers_on_cpu)} whole")
        if plan.partial_layer is not None:
            total = plan.partial_of or len(plan.partial_on_cpu)
            parts.append(f"layer {plan.partial_layer} in part ({len(plan.partial_on_cpu)} of its {total} parameters, "
                         f"up to {plan.partial_on_cpu[-1]})")
    on_gpu = [k for k in range(n)] if n else []
    on_gpu = [k for k in on_gpu if k not in plan.layers_touched]
    gpu = f"; decoder layers {spans(on_gpu)} stay on the GPU" if n else ""
    return "on the CPU: " + ", ".join(parts) + gpu
