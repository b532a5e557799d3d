"""Pure: config.json + context + KV dtype -> the KV cache pool vLLM needs for ONE sequence (KIT.md 5).

Layer kinds: full attention (GQA, asymmetric K/V head dims), MLA (one latent per token shared by K and V),
sliding-window attention, linear attention / mamba (a constant state per sequence). Attention-only models are
counted in vLLM's own accounting (plugin/onegpu/plan/kv_pool.py: unified pages, equal-sized layer groups with padding, the
sliding window's in-flight tokens, the null block); models with recurrent state are summed layer by layer, which
vLLM's page alignment for them can exceed (said in the notes). A config shape the kit does not model is an
UNKNOWN estimate with its reason, never a guess.
"""
from __future__ import annotations

from msgspec import Struct
from msgspec.structs import replace

from onegpu.core.kv_dtypes import KV_DTYPES
from onegpu.core.units import GIB
from onegpu.plan.kv_pool import KvPool, LayerSpec, kv_pool
from onegpu.plan.vllm_versions import Accounting, assumed_newest

# --kv-cache-dtype values -> bytes per element, and those the DiffKV backends accept (kv_dtypes.py: one row each).
KV_DTYPE_BYTES = {name: row.element_bytes for name, row in KV_DTYPES.items() if row.element_bytes is not None}
DIFF_KV_DTYPES = tuple(name for name, row in KV_DTYPES.items() if row.diff_kv)
# config.json torch_dtype values -> bytes per element.
MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}

# Configs whose attention the kit does not model: (marker key or model_type, why).
_UNMODELLED = (
    ("index_topk", "DeepSeek sparse attention keeps an indexer cache the kit does not model"),
    ("attn_type_list", "per-layer attention types in attn_type_list (lightning attention) are not modelled"),
    ("num_kv_shared_layers", "layers that share another layer's KV cache are not modelled"),
)
_UNMODELLED_TYPES = {"llama4": "chunked local attention (attention_chunk_size) is not modelled",
                     "falcon_h1": "parallel attention + mamba blocks are not modelled"}
# Keys of draft (multi-token prediction) layers: vLLM builds them only for speculative decoding.
_MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers")
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear",
                "mamba": "mamba2"}


class KvLayerRow(Struct, frozen=True):
    """One kind of layer and what it holds for one sequence."""

    kind: str  # full_attention | sliding_attention | mla | linear_attention | mamba
    layers: int
    bytes_per_token: int  # one layer, one token: K + V (or the MLA latent) at the KV dtype; 0 for state rows
    window: int | None  # sliding window in tokens
    bound_tokens: int  # tokens the attention rule keeps per layer: the context, or min(context, window)
    reserved_tokens: int  # tokens vLLM reserves per layer: whole blocks of its (unified) block size
    state_bytes: int  # one layer's constant recurrent state (linear attention / mamba); 0 otherwise
    bytes: int  # this row's share of the pool for one request, padding layer slots included
    formula: str  # how the per-token (or per-state) figure is formed
    groups: int = 0  # vLLM KV cache groups these layers fill (0: not pooled, a recurrent state row)
    padded_layers: int = 0  # empty layer slots vLLM adds so every group holds the same number of layers
    block_tokens: int = 0  # tokens per block after vLLM unified the page sizes


class KvEstimate(Struct, frozen=True):
    """KV cache bytes for the configured context and one sequence; bytes None means UNKNOWN (see reason)."""

    bytes: int | None  # the smallest pool the engine accepts: one request's blocks plus the null block
    bytes_per_token_full: int | None  # what one more token of context costs over all full/MLA layers
    layers: list[KvLayerRow]
    notes: list[str]
    unknown_reason: str | None
    context_tokens: int = 0
    kv_dtype: str | None = None  # the dtype the estimate used (settings', or the model's when assumed)
    dtype_bytes: int | None = None
    block_size: int = 64  # tokens per KV block (the accounting's default on CUDA unless given)
    prefill_chunk_tokens: int = 0
    async_scheduling: bool = True
    pool: KvPool | None = None  # vLLM's pool arithmetic (None when recurrent layers are summed instead)
    accounting: str = ""  # the label of the vLLM version's rules applied (onegpu.plan.vllm_versions)


class _Unreadable(Exception):
    """The config has a shape the kit cannot turn into bytes."""


def kv_cache_estimate(config: dict, context_tokens: int, kv_dtype: str | None, prefill_chunk_tokens: int,
                      block_size: int | None = None, async_scheduling: bool = True,
                      accounting: Accounting | None = None) -> KvEstimate:
    """The KV pool for `context_tokens` of one sequence; never raises for a config shape (UNKNOWN instead).

    `prefill_chunk_tokens` is what the launch passes as --max-num-batched-tokens; vLLM schedules asynchronously
    by default on CUDA (two batches in flight), the CPU build never does. `accounting` names the vLLM version whose
    rules apply (the newest known, ASSUMED, when None); `block_size` None is that version's default on CUDA.
    """
    accounting = accounting or assumed_newest()
    block_size = block_size or accounting.rules.default_block_size
    base: dict = dict(context_tokens=context_tokens, block_size=block_size, prefill_chunk_tokens=prefill_chunk_tokens,
                      async_scheduling=async_scheduling, accounting=accounting.label)
    notes: list[str] = []
    try:
        cfg = _text_config(config, notes)
        dtype_name, dtype_bytes = _kv_dtype(cfg, kv_dtype, notes)
        kinds = _layer_kinds(cfg, notes)
        rows, pool = _rows(cfg, kinds, (dtype_bytes, kv_dtype), context_tokens, prefill_chunk_tokens, block_size,
                           async_scheduling, notes)
        pool = replace(pool, accounting=accounting.label) if pool is not None else None
    except _Unreadable as exc:
        return KvEstimate(bytes=None, bytes_per_token_full=None, layers=[], notes=notes,
                          unknown_reason=str(exc), kv_dtype=kv_dtype, **base)
    per_token = sum(r.layers * r.bytes_per_token for r in rows if r.kind in ("full_attention", "mla"))
    mtp = [f"{k}={cfg[k]}" for k in _MTP_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 0]
    if mtp:
        notes.append(f"draft (MTP) layers ({', '.join(mtp)}) are not counted: the launch enables no speculative "
                     "decoding")
    total = pool.required_bytes if pool is not None else sum(r.bytes for r in rows)
    return KvEstimate(bytes=total, bytes_per_token_full=per_token, layers=rows, notes=notes, unknown_reason=None,
                      kv_dtype=dtype_name, dtype_bytes=dtype_bytes, pool=pool, **base)


def _text_config(config, notes: list[str]) -> dict:
    if not isinstance(config, dict):
        raise _Unreadable(f"config.json is a {type(config).__name__}, not an object")
    inner = config.get("text_config")
    if isinstance(inner, dict) and "num_hidden_layers" not in config:
        notes.append("attention read from config.json's text_config (a multimodal wrapper)")
        return {**config, **inner}
    return config


def _int(cfg: dict, key: str, default: int | None = None, minimum: int = 1) -> int:
    """A positive integer field, or the default when absent/null; anything else is unreadable."""
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise _Unreadable(f"config.json has no {key!r}")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _Unreadable(f"config.json {key!r} = {value!r}: expected an integer >= {minimum}")
    return value


def _first_int(cfg: dict, keys: tuple[str, ...], default: int | None = None) -> int:
    for key in keys:
        if cfg.get(key) is not None:
            return _int(cfg, key)
    if default is None:
        raise _Unreadable(f"config.json has none of {', '.join(repr(k) for k in keys)}")
    return default


def _model_dtype(cfg: dict) -> tuple[str, int] | None:
    name = cfg.get("torch_dtype") or cfg.get("dtype")
    if isinstance(name, str) and name.removeprefix("torch.") in MODEL_DTYPE_BYTES:
        name = name.removeprefix("torch.")
        return name, MODEL_DTYPE_BYTES[name]
    return None


def _kv_dtype(cfg: dict, kv_dtype: str | None, notes: list[str]) -> tuple[str, int]:
    if kv_dtype not in (None, "auto"):
        if kv_dtype not in KV_DTYPE_BYTES:
            raise _Unreadable(f"KV cache dtype {kv_dtype!r} has no known element size")
        return kv_dtype, KV_DTYPE_BYTES[kv_dtype]
    model = _model_dtype(cfg)
    if model is None:
        raise _Unreadable("the settings name no kv_cache_dtype and config.json names no torch_dtype the kit knows "
                          f"({cfg.get('torch_dtype') or cfg.get('dtype')!r}): set kv_cache_dtype in the settings")
    notes.append(f"KV dtype: the settings name none, so the model's dtype {model[0]} ({model[1]} bytes per element) "
                 "is assumed, as vLLM's 'auto' does")
    return model


def _pattern(cfg: dict, key: str, n_layers: int) -> list:
    value = cfg[key]
    if not isinstance(value, (list, str)) or len(value) != n_layers:
        size = len(value) if isinstance(value, (list, str)) else type(value).__name__
        raise _Unreadable(f"config.json {key!r} has {size} entries for {n_layers} layers")
    return list(value)


def _layer_kinds(cfg: dict, notes: list[str]) -> list[str]:
    """One kind per decoder layer: full, sliding, mla, linear, mamba1, mamba2 or none (no cache)."""
    n = _int(cfg, "num_hidden_layers")
    model_type = cfg.get("model_type")
    for key, why in _UNMODELLED:
        if cfg.get(key) is not None:
            raise _Unreadable(f"{why} (config.json {key!r})")
    if model_type in _UNMODELLED_TYPES:
        raise _Unreadable(f"{_UNMODELLED_TYPES[model_type]} (model_type {model_type!r})")
    if cfg.get("kv_lora_rank") is not None:
        return ["mla"] * n
    if cfg.get("layer_types") is not None:
        kinds = []
        for i, name in enumerate(_pattern(cfg, "layer_types", n)):
            if name not in _LAYER_TYPES:
                raise _Unreadable(f"config.json layer_types[{i}] = {name!r} is a layer kind the kit does not model")
            kinds.append(_LAYER_TYPES[name])
        return kinds
    if cfg.get("hybrid_layer_pattern") is not None:  # MiMo: 0 = full attention, 1 = sliding window
        pattern = _pattern(cfg, "hybrid_layer_pattern", n)
        if any(p not in (0, 1) or isinstance(p, bool) for p in pattern):
            raise _Unreadable("config.json 'hybrid_layer_pattern' must hold only 0 (full) and 1 (sliding window)")
        return ["sliding" if p == 1 else "full" for p in pattern]
    if cfg.get("hybrid_override_pattern") is not None:  # Nemotron-H: M mamba2, * attention, - / E MLP or MoE
        chars = {"M": "mamba2", "*": "full", "-": "none", "E": "none"}
        pattern = _pattern(cfg, "hybrid_override_pattern", n)
        if any(c not in chars for c in pattern):
            raise _Unreadable("config.json 'hybrid_override_pattern' holds a block kind other than M, *, -, E")
        return [chars[c] for c in pattern]
    if cfg.get("attn_layer_period") is not None:  # Jamba: attention every period layers, mamba elsewhere
        period, offset = _int(cfg, "attn_layer_period"), _int(cfg, "attn_layer_offset", 0, minimum=0)
        return ["full" if i % period == offset else "mamba1" for i in range(n)]
    if model_type in ("mamba", "falcon_mamba"):
        return ["mamba1"] * n
    if model_type == "mamba2":
        return ["mamba2"] * n
    if cfg.get("sliding_window") is None or cfg.get("use_sliding_window") is False:
        return ["full"] * n
    if cfg.get("sliding_window_pattern") is not None:  # Gemma 3 / Cohere 2: every p-th layer is global
        p = _int(cfg, "sliding_window_pattern")
        return ["full" if (i + 1) % p == 0 else "sliding" for i in range(n)]
    if model_type == "gemma2":  # Gemma 2 alternates sliding and global layers
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if model_type in ("gemma3", "gemma3_text", "cohere2"):
        raise _Unreadable(f"model_type {model_type!r} without layer_types or sliding_window_pattern")
    if cfg.get("use_sliding_window") is True and cfg.get("max_window_layers") is not None:
        first = _int(cfg, "max_window_layers", minimum=0)
        return ["sliding" if i >= first else "full" for i in range(n)]
    notes.append("sliding_window applies to every layer: config.json names no layer_types or pattern")
    return ["sliding"] * n


def _attention(cfg: dict, sliding: bool, dtype: tuple[int, str | None], notes: list[str]) -> tuple[int, str]:
    """(bytes per token per layer, formula) of a GQA layer, K and V head dims kept apart."""
    dtype_bytes, kv_dtype = dtype
    heads = _int(cfg, "num_attention_heads")
    if cfg.get("num_key_value_heads") is None and not sliding:
        notes.append("config.json has no num_key_value_heads: every attention head keeps its own K and V (MHA)")
    full_kv = _first_int(cfg, ("num_global_key_value_heads", "num_key_value_heads"), heads)
    default_dim = cfg.get("head_dim") or _int(cfg, "hidden_size") // heads
    full_k = _first_int(cfg, ("global_head_dim", "head_dim"), default_dim)
    full_v = _first_int(cfg, ("v_head_dim",), full_k)
    if sliding:
        kv = _first_int(cfg, ("swa_num_key_value_heads", "num_key_value_heads"), heads)
        k = _first_int(cfg, ("swa_head_dim", "head_dim"), default_dim)
        v = _first_int(cfg, ("swa_v_head_dim", "v_head_dim"), k)
    else:
        kv, k, v = full_kv, full_k, full_v
    if k != v:
        if kv_dtype not in (None, *DIFF_KV_DTYPES):
            raise _Unreadable(f"KV cache dtype {kv_dtype!r}: K and V head sizes differ ({k} / {v}), which only vLLM's "
                              f"DiffKV attention backends run, and they accept {', '.join(DIFF_KV_DTYPES)} only")
        note = f"K and V head dims differ ({k} / {v}): counted apart, as vLLM's DiffKV attention backends store them"
        if note not in notes:
            notes.append(note)
    per_token = kv * (k + v) * dtype_bytes
    return per_token, f"{kv} KV heads x ({k} K + {v} V) x {dtype_bytes} B = {per_token:,} B per token per layer"


def _state(cfg: dict, kind: str, notes: list[str]) -> tuple[int, str]:
    """(bytes, formula) of one layer's constant recurrent state: a convolution window plus an SSM state."""
    model = _model_dtype(cfg)
    if model is None:
        raise _Unreadable("recurrent state needs the model's torch_dtype, which config.json does not name")
    conv_b = model[1]
    ssm_name = cfg.get("mamba_ssm_dtype")
    ssm_b = MODEL_DTYPE_BYTES.get(ssm_name, conv_b) if isinstance(ssm_name, str) else conv_b
    if kind == "linear":  # gated delta-net (Qwen3-Next / Qwen3.5)
        nk, dk = _int(cfg, "linear_num_key_heads"), _int(cfg, "linear_key_head_dim")
        nv, dv = _int(cfg, "linear_num_value_heads"), _int(cfg, "linear_value_head_dim")
        conv_dim, width = 2 * nk * dk + nv * dv, _int(cfg, "linear_conv_kernel_dim") - 1
        ssm, ssm_text = nv * dk * dv, f"{nv} x {dk} x {dv}"
    elif kind == "mamba1":
        d_inner = _first_int(cfg, ("mamba_expand", "expand")) * _int(cfg, "hidden_size")
        conv_dim, width = d_inner, _first_int(cfg, ("mamba_d_conv", "conv_kernel")) - 1
        d_state = _first_int(cfg, ("mamba_d_state", "state_size"))
        ssm, ssm_text = d_inner * d_state, f"{d_inner} x {d_state}"
    else:  # mamba2
        n_heads = _first_int(cfg, ("mamba_num_heads", "num_heads"))
        head_dim = _first_int(cfg, ("mamba_head_dim", "head_dim"))
        d_state = _first_int(cfg, ("ssm_state_size", "mamba_d_state", "state_size"))
        conv_dim = n_heads * head_dim + 2 * _first_int(cfg, ("n_groups", "mamba_n_groups")) * d_state
        width = _first_int(cfg, ("conv_kernel", "mamba_d_conv")) - 1
        ssm, ssm_text = n_heads * head_dim * d_state, f"{n_heads} x {head_dim} x {d_state}"
    total = conv_dim * width * conv_b + ssm * ssm_b
    note = "recurrent states use the model's dtype (mamba_ssm_dtype for the SSM part when set), not the KV dtype"
    if note not in notes:
        notes.append(note)
    return total, (f"conv {conv_dim} x {width} x {conv_b} B + state {ssm_text} x {ssm_b} B = {total:,} B "
                   "per layer per sequence")


def _window(cfg: dict) -> int:
    # MiMo-V2's attention layers take sliding_window_size (vllm/model_executor/models/mimo_v2.py); others take
    # sliding_window.
    return _first_int(cfg, ("sliding_window_size", "sliding_window") if cfg.get("hybrid_layer_pattern") is not None
                      else ("sliding_window", "sliding_window_size"))


def _layer_spec(cfg: dict, kind: str, dtype: tuple[int, str | None], notes: list[str]) -> tuple[LayerSpec, str]:
    if kind == "mla":
        rank, rope = _int(cfg, "kv_lora_rank"), _int(cfg, "qk_rope_head_dim")
        per = (rank + rope) * dtype[0]
        return LayerSpec("mla", per), (f"latent ({rank} kv_lora_rank + {rope} qk_rope_head_dim) x {dtype[0]} B = "
                                       f"{per:,} B per token per layer, one latent shared by K and V")
    per, formula = _attention(cfg, kind == "sliding", dtype, notes)
    if kind == "sliding":
        return LayerSpec("sliding_attention", per, _window(cfg)), formula
    return LayerSpec("full_attention", per), formula


def _rows(cfg, kinds, dtype, context, chunk, block, async_scheduling, notes) -> tuple[list[KvLayerRow], KvPool | None]:
    attention = [k for k in kinds if k in ("full", "sliding", "mla")]
    states = [k for k in kinds if k not in ("full", "sliding", "mla", "none")]
    specs, formulas = [], {}
    for kind in attention:
        spec, formula = _layer_spec(cfg, kind, dtype, notes)
        specs.append(spec)
        formulas[spec] = formula
    if not states:
        if not specs:
            raise _Unreadable("config.json describes no layer that keeps a KV cache")
        pool = kv_pool(specs, context, chunk, block, async_scheduling)
        rows = [KvLayerRow(g.kind, g.layers, g.bytes_per_token, g.window,
                           min(context, g.window) if g.window else context, g.blocks_per_request * g.block_tokens, 0,
                           g.bytes_per_request, formulas[spec],
                           g.groups, g.padded_layers, g.block_tokens)
                for g, spec in zip(pool.groups, dict.fromkeys(specs))]
        return rows, pool
    # Recurrent state beside attention: vLLM aligns attention pages to the state page, which the kit does not
    # model; each layer kind is summed on its own (whole blocks for attention, one state per recurrent layer).
    notes.append("recurrent layers: vLLM pads attention pages to the recurrent state's page, which the kit does not "
                 "model; this figure sums each layer kind on its own and vLLM's pool can be larger")
    rows = []
    for spec in dict.fromkeys(specs):
        count = specs.count(spec)
        sub = kv_pool([spec] * count, context, chunk, block, async_scheduling)
        (g,) = sub.groups
        rows.append(KvLayerRow(g.kind, count, g.bytes_per_token, g.window,
                               min(context, g.window) if g.window else context, g.blocks_per_request * g.block_tokens,
                               0, sub.request_bytes, formulas[spec], 1, 0, g.block_tokens))
    for kind in dict.fromkeys(states):
        count = kinds.count(kind)
        state, formula = _state(cfg, kind, notes)
        rows.append(KvLayerRow("linear_attention" if kind == "linear" else "mamba", count, 0, None, 0, 0,
                               state, count * state, formula))
    return rows, None


def describe_kv(kv: KvEstimate) -> list[str]:
    """Lines for the terminal: the total, one line per layer kind, the pool arithmetic, then the notes."""
    if kv.bytes is None:
        return [f"KV cache for {kv.context_tokens:,} tokens: UNKNOWN ({kv.unknown_reason})"]
    lines = [f"KV cache for {kv.context_tokens:,} tokens, one sequence, {kv.kv_dtype}: {kv.bytes:,} bytes "
             f"({kv.bytes / GIB:,.2f} GiB), {kv.accounting}"]
    for r in kv.layers:
        if r.state_bytes:
            lines.append(f"  {r.layers} {r.kind} layers: {r.formula}; {r.bytes:,} B")
            continue
        slots = (f" in {r.groups} group(s)" + (f" + {r.padded_layers} padding layer slot(s)" if r.padded_layers
                                                else "")) if r.groups else ""
        in_flight = (2 if kv.async_scheduling else 1) * kv.prefill_chunk_tokens
        held = (f"window {r.window:,}: keeps window - 1 + {in_flight:,} in-flight tokens" if r.window is not None
                else "keeps the whole context")
        lines.append(f"  {r.layers} {r.kind} layers{slots}: {r.formula}; {held}, "
                     f"{r.reserved_tokens:,} tokens in {r.block_tokens}-token blocks = {r.bytes:,} B")
    if kv.pool is not None:
        p = kv.pool
        lines.append(f"  pool: {p.layers_per_group} layer slots per group x page = {p.bytes_per_block:,} B per block; "
                     f"{p.blocks_per_request:,} blocks per request = {p.request_bytes:,} B + 1 null block; in flight "
                     f"{p.in_flight_tokens:,} tokens = max-num-batched-tokens {p.max_num_batched_tokens:,} x "
                     f"{2 if p.async_scheduling else 1} (async scheduling {'on' if p.async_scheduling else 'off'})")
    return lines + [f"  note: {n}" for n in kv.notes]
