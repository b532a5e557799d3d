"""Tiny real checkpoints with random weights, for tests against the real vLLM engine.

    python -m devkit.real_engine.tiny_models OUT_DIR [--model qwen3-moe|mimo-v2-flash|all]

Each model is written to OUT_DIR/<name>/ as a complete Hugging Face folder: config.json, generation_config.json,
real safetensors shards (two or more) with model.safetensors.index.json, and a byte-level BPE tokenizer trained
here on a built-in text (tokenizer.json, tokenizer_config.json with a chat template). Nothing is downloaded.

The weights are random (seeded: the same bytes on every run), BF16 with std 0.02, norms as ones; the tensor
names and shapes are the ones vLLM's model class for the architecture loads with its own `load_weights`, so
an engine reads them from the files (no `--load-format dummy`). The sizes are picked for vLLM's CPU build:
every attention head size is one its CPU attention accepts (32, 64, 80, 96, 112, 128, 160, 192, 224, 256,
512) and every matrix side is a multiple of 32 (its CPU MoE kernels ask for that).

* qwen3-moe: `Qwen3MoeForCausalLM` (vllm/model_executor/models/qwen3_moe.py): 2 layers, 4 experts, top-2,
  q/k norms per head, no shared expert; the config fields of a published Qwen3-MoE config.json.
* mimo-v2-flash: `MiMoV2FlashForCausalLM` (vllm/model_executor/models/mimo_v2.py): the first 6 layers of the
  published MiMo-V2-Flash layout: `hybrid_layer_pattern` [0, 1, 1, 1, 1, 0] (full attention at layers 0
  and 5, sliding window in between), `moe_layer_freq` [0, 1, 1, 1, 1, 1] (layer 0 dense), K head 192 /
  V head 128, twice the KV heads on sliding-window layers, attention sink biases on sliding-window layers
  only, sigmoid routing with an `e_score_correction_bias`, partial rotary embedding, two rope thetas.
  Transformers' MiMoV2FlashConfig derives its own `layer_types` / `mlp_layer_types` from the layer count
  (full at 0 and every 6th), and its rope from built-in thetas (5e6 full, 1e4 sliding, factor 0.334), so 6
  layers and those thetas keep its reading and vLLM's identical.

On vLLM's CPU build, K != V makes mimo_v2.py pick the TRITON_ATTN_DIFFKV backend, which has no CPU kernel:
the engine loads these weights and starts, and the first request fails in Triton. Only a layout with
`v_head_dim` == `head_dim` (and the same for `swa_`) would run on the CPU attention, which takes the sinks.
"""
from __future__ import annotations

import argparse
import json
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEED = 20260417
STD = 0.02
BYTES_PER_ELEMENT = {"BF16": 2, "F32": 4}

# Special tokens in the Qwen convention both real tokenizers follow: <|endoftext|> doubles as bos and pad,
# <|im_end|> ends a turn and the generation.
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
TOKENIZER_VOCAB = 1024
MAX_POSITIONS = 4096

# ChatML, as the real Qwen3 and MiMo templates lay turns out (without their tool and reasoning branches).
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- endif -%}"
)

# The tokenizer's training text: plain prose, chat turns and numbers, so common words and the chat markup
# become single tokens. Any text still round-trips: byte-level BPE falls back to single bytes.
TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. A small model with random weights cannot say anything useful,
but it can be loaded, it can answer a request, and it can stop when it is told to stop. That is all a test of
the engine needs: the files must be read, the weights must land where the model expects them, and the server
must answer on its port.

system: You are a helpful assistant. Answer briefly and say when you do not know.
user: What is the capital of France?
assistant: The capital of France is Paris.
user: How many legs does a spider have?
assistant: A spider has eight legs.
user: Please count from one to ten.
assistant: One, two, three, four, five, six, seven, eight, nine, ten.
user: What time is it?
assistant: I do not know the time, because I cannot see a clock.

Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 16 24 32 48 64 96 128 192 256 512 1024 2048 4096 8192 65536.
Dates such as 2026-04-17 and times such as 12:30 appear in logs; sizes such as 20 MB, 96 GB and 1.5 TB
appear in reports. Percentages: 5%, 50%, 99.9%.

A mixture of experts sends each token to a few experts out of many. The router scores every expert, keeps
the best ones, and the layer adds their outputs together. Attention looks back over the tokens before the
current one; a sliding window looks back over the last few only, which keeps the cache small. The weights of
the experts are most of the model, so they are the part that is moved to host memory when the graphics card
is too small to hold everything.

Once upon a time there was a little robot who wanted to learn to read. Every morning it opened a book, looked
at the letters, and tried to guess what they meant. At first it guessed wrong most of the time. Then it
noticed that some letters often stood together, and that some groups of letters came back again and again.
It gave each group a name, and after a while it could read whole words at once. The robot was very happy,
and it read every book in the library before the winter was over.

Rain is expected tomorrow in the north, with sunny spells in the south and a light wind from the west.
Temperatures will reach eighteen degrees in the afternoon and fall to nine degrees at night.

def add(a, b):
    return a + b

for i in range(10):
    print(i, add(i, i))

{"name": "value", "list": [1, 2, 3], "flag": true, "nothing": null}
Quotes "like these" and 'these', brackets (round) [square] {curly}, and marks: ! ? ; : , . - _ / \\ | @ # & *.
Accents and symbols: café, naïve, Zürich, São Paulo, 東京, °C, €, ±, →.
"""


@dataclass(frozen=True)
class TinyModel:
    """One checkpoint to write: its folder name, config.json, and tensors (name -> dtype, shape) in file order."""
    name: str
    config: dict
    tensors: dict[str, tuple[str, tuple[int, ...]]]
    shards: int


# --- tokenizer -----------------------------------------------------------------------------------------------

def train_tokenizer():
    """A byte-level BPE tokenizer trained on TRAINING_TEXT; the special tokens take ids 0, 1, 2."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    # No prefix space: decode(encode(text)) gives back text byte for byte.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(TRAINING_TEXT.splitlines(keepends=True), trainer=trainer)
    return tokenizer


def token_ids(tokenizer) -> dict[str, int]:
    """bos/eos/pad ids as config.json and generation_config.json name them."""
    return {"bos_token_id": tokenizer.token_to_id(ENDOFTEXT), "eos_token_id": tokenizer.token_to_id(IM_END),
            "pad_token_id": tokenizer.token_to_id(ENDOFTEXT)}


def tokenizer_config(tokenizer) -> dict:
    added = {str(tokenizer.token_to_id(token)): {"content": token, "lstrip": False, "normalized": False,
                                                 "rstrip": False, "single_word": False, "special": True}
             for token in SPECIAL_TOKENS}
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": added,
        "bos_token": ENDOFTEXT,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        # Byte-level text needs no clean-up; the default would eat spaces before punctuation on decode.
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def generation_config(ids: dict[str, int]) -> dict:
    # Qwen's and MiMo's generation configs stop at either end token.
    return {"bos_token_id": ids["bos_token_id"], "eos_token_id": [ids["eos_token_id"], ids["pad_token_id"]],
            "pad_token_id": ids["pad_token_id"]}


# --- models --------------------------------------------------------------------------------------------------

def qwen3_moe(vocab_size: int, ids: dict[str, int]) -> TinyModel:
    """Qwen3MoeForCausalLM with the fields of a published Qwen3-MoE config.json (Qwen3-30B-A3B's), shrunk."""
    config = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": vocab_size,
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": 2,
        "max_position_embeddings": MAX_POSITIONS,
        "initializer_range": 0.02,
        "output_router_logits": False,
        "router_aux_loss_coef": 0.001,
        "tie_word_embeddings": False,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        **ids,
    }
    return TinyModel("qwen3-moe", config, qwen3_moe_tensors(config), shards=2)


def qwen3_moe_tensors(c: dict) -> dict:
    """Per layer: q/k/v/o, per-head q/k RMSNorms, the router `mlp.gate` and per-expert gate/up/down."""
    hidden, head, experts, moe = c["hidden_size"], c["head_dim"], c["num_experts"], c["moe_intermediate_size"]
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("BF16", (c["vocab_size"], hidden))}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        tensors |= {
            p + "input_layernorm.weight": ("BF16", (hidden,)),
            p + "self_attn.q_proj.weight": ("BF16", (c["num_attention_heads"] * head, hidden)),
            p + "self_attn.k_proj.weight": ("BF16", (c["num_key_value_heads"] * head, hidden)),
            p + "self_attn.v_proj.weight": ("BF16", (c["num_key_value_heads"] * head, hidden)),
            p + "self_attn.o_proj.weight": ("BF16", (hidden, c["num_attention_heads"] * head)),
            p + "self_attn.q_norm.weight": ("BF16", (head,)),
            p + "self_attn.k_norm.weight": ("BF16", (head,)),
            p + "post_attention_layernorm.weight": ("BF16", (hidden,)),
            p + "mlp.gate.weight": ("BF16", (experts, hidden)),
        }
        tensors |= _experts(p + "mlp.experts.", experts, hidden, moe)
    tensors |= {"model.norm.weight": ("BF16", (hidden,)),
                "lm_head.weight": ("BF16", (c["vocab_size"], hidden))}
    return tensors


def mimo_v2_flash(vocab_size: int, ids: dict[str, int]) -> TinyModel:
    """MiMoV2FlashForCausalLM with the field names of the published MiMo-V2-Flash config.json, shrunk.

    vLLM's mimo_v2.py reads `hybrid_layer_pattern` (1 = sliding window), `moe_layer_freq` (1 = MoE),
    `swa_*` head counts and sizes, `sliding_window_size`, `add_swa_attention_sink_bias`, `swa_rope_theta`,
    `partial_rotary_factor`, `attention_value_scale` and `layernorm_epsilon`; transformers' MiMoV2FlashConfig
    reads `sliding_window`, `head_dim`/`v_head_dim` and derives the layer types; both spellings are here, as
    in the published file. `attention_chunk_size` is in the published file too (vLLM strips it on load).
    """
    layers = 6
    config = {
        "architectures": ["MiMoV2FlashForCausalLM"],
        "model_type": "mimo_v2_flash",
        "vocab_size": vocab_size,
        "hidden_size": 256,
        "intermediate_size": 512,
        "moe_intermediate_size": 128,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 192,
        "v_head_dim": 128,
        "swa_num_attention_heads": 4,
        "swa_num_key_value_heads": 2,
        "swa_head_dim": 192,
        "swa_v_head_dim": 128,
        "hybrid_layer_pattern": [0, 1, 1, 1, 1, 0],
        "moe_layer_freq": [0, 1, 1, 1, 1, 1],
        "sliding_window": 128,
        "sliding_window_size": 128,
        "attention_chunk_size": 128,
        "add_swa_attention_sink_bias": True,
        "add_full_attention_sink_bias": False,
        "attention_value_scale": 0.707,
        "rope_theta": 5000000,
        "swa_rope_theta": 10000,
        "partial_rotary_factor": 0.334,
        "layernorm_epsilon": 1e-05,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": None,
        "scoring_func": "sigmoid",
        "topk_method": "noaux_tc",
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": None,
        "max_position_embeddings": MAX_POSITIONS,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "use_cache": True,
        "torch_dtype": "bfloat16",
        **ids,
    }
    return TinyModel("mimo-v2-flash", config, mimo_v2_flash_tensors(config), shards=3)


def mimo_v2_flash_tensors(c: dict) -> dict:
    """Per layer: q/k/v/o of the layer's attention kind (K and V head sizes differ), a sink bias per head on
    sliding-window layers, then a dense MLP (moe_layer_freq 0) or the router, its F32 correction bias and
    per-expert gate/up/down. The router is F32: vLLM builds it in `moe_router_dtype`, float32 by default."""
    hidden, experts, moe = c["hidden_size"], c["n_routed_experts"], c["moe_intermediate_size"]
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("BF16", (c["vocab_size"], hidden))}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        swa = c["hybrid_layer_pattern"][layer] == 1
        kind = "swa_" if swa else ""
        heads, kv_heads = c[kind + "num_attention_heads"], c[kind + "num_key_value_heads"]
        k_head, v_head = c[kind + "head_dim"], c[kind + "v_head_dim"]
        tensors |= {
            p + "input_layernorm.weight": ("BF16", (hidden,)),
            p + "self_attn.q_proj.weight": ("BF16", (heads * k_head, hidden)),
            p + "self_attn.k_proj.weight": ("BF16", (kv_heads * k_head, hidden)),
            p + "self_attn.v_proj.weight": ("BF16", (kv_heads * v_head, hidden)),
            p + "self_attn.o_proj.weight": ("BF16", (hidden, heads * v_head)),
        }
        if swa and c["add_swa_attention_sink_bias"]:
            tensors[p + "self_attn.attention_sink_bias"] = ("BF16", (heads,))
        tensors[p + "post_attention_layernorm.weight"] = ("BF16", (hidden,))
        if c["moe_layer_freq"][layer]:
            tensors |= {p + "mlp.gate.weight": ("F32", (experts, hidden)),
                        p + "mlp.gate.e_score_correction_bias": ("F32", (experts,))}
            tensors |= _experts(p + "mlp.experts.", experts, hidden, moe)
        else:
            inter = c["intermediate_size"]
            tensors |= {p + "mlp.gate_proj.weight": ("BF16", (inter, hidden)),
                        p + "mlp.up_proj.weight": ("BF16", (inter, hidden)),
                        p + "mlp.down_proj.weight": ("BF16", (hidden, inter))}
    tensors |= {"model.norm.weight": ("BF16", (hidden,)),
                "lm_head.weight": ("BF16", (c["vocab_size"], hidden))}
    return tensors


def _experts(prefix: str, experts: int, hidden: int, inter: int) -> dict:
    """The per-expert Hugging Face layout (`experts.<e>.gate_proj.weight`) vLLM's FusedMoE mapping reads."""
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for expert in range(experts):
        p = f"{prefix}{expert}."
        tensors |= {p + "gate_proj.weight": ("BF16", (inter, hidden)),
                    p + "up_proj.weight": ("BF16", (inter, hidden)),
                    p + "down_proj.weight": ("BF16", (hidden, inter))}
    return tensors


MODELS = {"qwen3-moe": qwen3_moe, "mimo-v2-flash": mimo_v2_flash}


# --- weights and shards --------------------------------------------------------------------------------------

def tensor_bytes(name: str, dtype: str, shape: tuple[int, ...]) -> bytes:
    """The tensor's data, little-endian: norms ones, the router's correction bias zeros, the rest N(0, STD).

    Each tensor has its own generator seeded from SEED and its name, so a value never depends on file order.
    """
    count = int(np.prod(shape))
    if name.endswith("norm.weight"):
        values = np.ones(count, dtype=np.float32)
    elif name.endswith("e_score_correction_bias"):
        values = np.zeros(count, dtype=np.float32)
    else:
        rng = np.random.default_rng([SEED, zlib.crc32(name.encode())])
        values = (rng.standard_normal(count, dtype=np.float32) * STD).astype(np.float32)
    if dtype == "F32":
        return values.astype("<f4").tobytes()
    return to_bf16(values).astype("<u2").tobytes()


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounding to nearest even as torch does."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def split_shards(tensors: dict, shards: int) -> list[list[str]]:
    """Tensor names in file order cut into `shards` runs of about equal bytes: a tensor goes to the run its
    first byte falls in."""
    sizes = [BYTES_PER_ELEMENT[d] * int(np.prod(s)) for d, s in tensors.values()]
    total, done = sum(sizes), 0
    runs: list[list[str]] = [[] for _ in range(shards)]
    for name, size in zip(tensors, sizes):
        runs[min(shards - 1, done * shards // total)].append(name)
        done += size
    if not all(runs):
        raise ValueError(f"shards: {shards} shards leave one empty; one tensor is over 1/{shards} of the model")
    return runs


def safetensors_file(tensors: dict, names: list[str]) -> bytes:
    """A safetensors file: 8-byte header length, the JSON header padded to 8 bytes, then the data."""
    header: dict[str, dict] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in names:
        dtype, shape = tensors[name]
        blob = tensor_bytes(name, dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


# --- folders -------------------------------------------------------------------------------------------------

def write_model(out_dir: Path, model: TinyModel, tokenizer) -> Path:
    folder = Path(out_dir) / model.name
    folder.mkdir(parents=True, exist_ok=True)
    runs = split_shards(model.tensors, model.shards)
    weight_map: dict[str, str] = {}
    for number, names in enumerate(runs, start=1):
        shard = f"model-{number:05d}-of-{len(runs):05d}.safetensors"
        (folder / shard).write_bytes(safetensors_file(model.tensors, names))
        weight_map |= {name: shard for name in names}
    total = sum(BYTES_PER_ELEMENT[d] * int(np.prod(s)) for d, s in model.tensors.values())
    _write_json(folder / "model.safetensors.index.json", {"metadata": {"total_size": total},
                                                          "weight_map": weight_map})
    _write_json(folder / "config.json", model.config)
    _write_json(folder / "generation_config.json", generation_config(token_ids(tokenizer)))
    (folder / "tokenizer.json").write_text(tokenizer.to_str(pretty=True) + "\n", encoding="utf-8")
    _write_json(folder / "tokenizer_config.json", tokenizer_config(tokenizer))
    return folder


def _write_json(path: Path, value: dict) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build(out_dir, names=tuple(MODELS)) -> dict[str, Path]:
    """Write the named models under out_dir; returns name -> folder."""
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        raise ValueError(f"--model: unknown model {unknown[0]!r}; known: {', '.join(MODELS)} or all")
    tokenizer = train_tokenizer()
    vocab_size, ids = tokenizer.get_vocab_size(), token_ids(tokenizer)
    return {name: write_model(Path(out_dir), MODELS[name](vocab_size, ids), tokenizer) for name in names}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.real_engine.tiny_models",
                                     description="Write tiny random-weight checkpoints for the real vLLM engine.")
    parser.add_argument("out_dir", type=Path, help="folder to write <model>/ folders into")
    parser.add_argument("--model", choices=[*MODELS, "all"], default="all")
    args = parser.parse_args(argv)
    names = tuple(MODELS) if args.model == "all" else (args.model,)
    for name, folder in build(args.out_dir, names).items():
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"{name}: {folder} ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
