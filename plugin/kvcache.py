"""Pure: config.json + context + KV dtype -> the KV cache bytes ONE sequence needs (KIT.md 5).

Layer kinds: full attention (GQA, asymmetric K/V head dims), MLA (one latent per token shared by K and V),
sliding-window attention (bounded by the window; vLLM reserves window - 1 + prefill chunk tokens in whole
blocks plus one, and the larger of the two is judged), linear attention / mamba (a constant state per
sequence). A config shape the kit does not model is an UNKNOWN estimate with its reason, never a guess.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_BLOCK_SIZE = 16  # vLLM's default KV block (tokens); the launch passes no --block-size

# --kv-cache-dtype values -> bytes per element.
KV_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "half": 2, "float32": 4}
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


@dataclass(frozen=True)
class KvLayerRow:
    """One kind of layer and what it holds for one sequence."""

    kind: str  # full_attention | sliding_attention | mla | linear_attention | mamba
    layers: int
    bytes_per_token: int  # one layer, one token: K + V (or the MLA latent) at the KV dtype; 0 for state rows
    window: int | None  # sliding window in tokens
    bound_tokens: int  # tokens the attention rule keeps per layer: the context, or min(context, window)
    reserved_tokens: int  # tokens vLLM reserves per layer, in whole blocks
    state_bytes: int  # one layer's constant recurrent state (linear attention / mamba); 0 otherwise
    bytes: int  # all layers of this row, judged on the larger of bound and reservation
    formula: str  # how the per-token (or per-state) figure is formed


@dataclass(frozen=True)
class KvEstimate:
    """KV cache bytes for the configured context and one sequence; bytes None means UNKNOWN (see reason)."""

    bytes: int | None
    bytes_per_token_full: int | None  # what one more token of context costs over all full/MLA layers
    layers: list[KvLayerRow]
    notes: list[str]
    unknown_reason: str | None
    context_tokens: int = 0
    kv_dtype: str | None = None  # the dtype the estimate used (settings', or the model's when assumed)
    dtype_bytes: int | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    prefill_chunk_tokens: int = 0


class _Unreadable(Exception):
    """The config has a shape the kit cannot turn into bytes."""


def kv_cache_estimate(config: dict, context_tokens: int, kv_dtype: str | None, prefill_chunk_tokens: int,
                      block_size: int = DEFAULT_BLOCK_SIZE) -> KvEstimate:
    """KV bytes for `context_tokens` of one sequence; never raises for a config shape (UNKNOWN instead)."""
    base = dict(context_tokens=context_tokens, block_size=block_size, prefill_chunk_tokens=prefill_chunk_tokens)
    notes: list[str] = []
    try:
        cfg = _text_config(config, notes)
        dtype_name, dtype_bytes = _kv_dtype(cfg, kv_dtype, notes)
        kinds = _layer_kinds(cfg, notes)
        rows = _rows(cfg, kinds, dtype_bytes, context_tokens, prefill_chunk_tokens, block_size, notes)
    except _Unreadable as exc:
        return KvEstimate(bytes=None, bytes_per_token_full=None, layers=[], notes=notes,
                          unknown_reason=str(exc), kv_dtype=kv_dtype, **base)
    per_token = sum(r.layers * r.bytes_per_token for r in rows if r.kind in ("full_attention", "mla"))
    mtp = [f"{k}={cfg[k]}" for k in _MTP_KEYS if isinstance(cfg.get(k), int) and cfg[k] > 0]
    if mtp:
        notes.append(f"draft (MTP) layers ({', '.join(mtp)}) are not counted: the launch enables no speculative "
                     "decoding")
    if len({r.kind for r in rows}) > 1:
        notes.append("hybrid model: vLLM gives every layer group the same page size, so its pool can round "
                     "these figures up")
    return KvEstimate(bytes=sum(r.bytes for r in rows), bytes_per_token_full=per_token, layers=rows, notes=notes,
                      unknown_reason=None, kv_dtype=dtype_name, dtype_bytes=dtype_bytes, **base)


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


def _attention(cfg: dict, sliding: bool, dtype_bytes: int, notes: list[str]) -> tuple[int, str]:
    """(bytes per token per layer, formula) of a GQA layer, K and V head dims kept apart."""
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
        note = (f"K and V head dims differ ({k} / {v}): counted apart; an engine that pads V to {k} would need "
                f"{k / ((k + v) / 2):.2f}x these layers' bytes")
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


def _rows(cfg, kinds, dtype_bytes, context, chunk, block, notes) -> list[KvLayerRow]:
    rows: list[KvLayerRow] = []
    full_tokens = math.ceil(context / block) * block
    for kind in dict.fromkeys(k for k in kinds if k != "none"):
        count = kinds.count(kind)
        if kind == "mla":
            rank, rope = _int(cfg, "kv_lora_rank"), _int(cfg, "qk_rope_head_dim")
            per = (rank + rope) * dtype_bytes
            formula = (f"latent ({rank} kv_lora_rank + {rope} qk_rope_head_dim) x {dtype_bytes} B = {per:,} B per "
                       "token per layer, one latent shared by K and V")
            rows.append(KvLayerRow("mla", count, per, None, context, full_tokens, 0,
                                   count * per * max(context, full_tokens), formula))
        elif kind == "full":
            per, formula = _attention(cfg, False, dtype_bytes, notes)
            rows.append(KvLayerRow("full_attention", count, per, None, context, full_tokens, 0,
                                   count * per * max(context, full_tokens), formula))
        elif kind == "sliding":
            window = _first_int(cfg, ("sliding_window", "sliding_window_size"))
            per, formula = _attention(cfg, True, dtype_bytes, notes)
            bound = min(context, window)
            # vLLM keeps the last window - 1 tokens plus one prefill chunk, capped at the context, in whole
            # blocks, plus one block because the window need not start on a block boundary.
            reserved = (math.ceil(min(window - 1 + chunk, context) / block) + 1) * block
            rows.append(KvLayerRow("sliding_attention", count, per, window, bound, reserved, 0,
                                   count * per * max(bound, reserved), formula))
        else:
            state, formula = _state(cfg, kind, notes)
            rows.append(KvLayerRow("linear_attention" if kind == "linear" else "mamba", count, 0, None, 0, 0,
                                   state, count * state, formula))
    return rows


def describe_kv(kv: KvEstimate) -> list[str]:
    """Lines for the terminal: the total, one line per layer kind, then the notes."""
    if kv.bytes is None:
        return [f"KV cache for {kv.context_tokens:,} tokens: UNKNOWN ({kv.unknown_reason})"]
    lines = [f"KV cache for {kv.context_tokens:,} tokens, one sequence, {kv.kv_dtype}: {kv.bytes:,} bytes "
             f"({kv.bytes / 2**30:,.2f} GiB)"]
    for r in kv.layers:
        if r.state_bytes:
            lines.append(f"  {r.layers} {r.kind} layers: {r.formula}; {r.bytes:,} B")
        elif r.window is not None:
            lines.append(f"  {r.layers} {r.kind} layers (window {r.window:,}): {r.formula}; window bound "
                         f"{r.bound_tokens:,} tokens, vLLM reserves {r.reserved_tokens:,} (window - 1 + prefill chunk "
                         f"{kv.prefill_chunk_tokens:,}, whole {kv.block_size}-token blocks + 1); judged on the larger: "
                         f"{r.bytes:,} B")
        else:
            lines.append(f"  {r.layers} {r.kind} layers: {r.formula}; x {max(r.bound_tokens, r.reserved_tokens):,} "
                         f"tokens = {r.bytes:,} B")
    return lines + [f"  note: {n}" for n in kv.notes]

