"""Synthetic checkpoints for tests: real safetensors headers over sparse data regions (no weights written).

A shard is the 8-byte little-endian header length, the JSON header padded with spaces to 8 bytes (as the
safetensors package writes it), then a data region made by truncate(), so a terabyte costs no disk.
"""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

# Bits per element, as the safetensors format defines them. Written out here, not imported from the reader
# under test, so a wrong entry in the reader's table cannot hide behind the same entry in the writer.
BITS = {
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
}

SYNTHETIC_METADATA = {"onegpu.synthetic": "header-only: no weights"}
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def nbytes(dtype: str, shape) -> int:
    """Data bytes of one tensor (elements x bits / 8, rounded up)."""
    return (math.prod(shape) * BITS[dtype] + 7) // 8


def header_prefix(tensors: dict, metadata: dict | None = None) -> tuple[bytes, int]:
    """The 8-byte length plus the padded JSON header for `tensors` laid out in order; and the data bytes."""
    header: dict = {}
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = nbytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def write_raw_shard(path: Path, prefix: bytes, data_bytes: int) -> Path:
    """Write an arbitrary header prefix followed by a sparse data region of `data_bytes`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(prefix)
        fh.truncate(len(prefix) + data_bytes)
    return path


def write_shard(path, tensors: dict, metadata: dict | None = None) -> int:
    """Write one shard: tensors {name: (dtype, shape)} in order, sparse data; returns its data bytes."""
    prefix, data = header_prefix(tensors, metadata)
    write_raw_shard(Path(path), prefix, data)
    return data


def shard_names(shards: int) -> list[str]:
    """The Hugging Face shard file names for `shards` shards."""
    return [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]


def split_tensors(tensors: dict, shards: int) -> list[dict]:
    """Split tensors into `shards` consecutive groups of (nearly) equal count, order kept."""
    items = list(tensors.items())
    if shards < 1 or shards > max(1, len(items)):
        raise ValueError(f"cannot split {len(items)} tensors into {shards} shards")
    per, extra = divmod(len(items), shards)
    groups, start = [], 0
    for i in range(shards):
        end = start + per + (1 if i < extra else 0)
        groups.append(dict(items[start:end]))
        start = end
    return groups


def write_tokenizer(root: Path) -> None:
    """A minimal tokenizer.json and tokenizer_config.json (enough for presence checks)."""
    (root / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}))
    (root / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 4096}))


def write_checkpoint(root, config: dict | None, tensors: dict, shards: int = 1, tokenizer: bool = True,
                     metadata: dict | None = None, single_file: bool = False) -> Path:
    """Write a complete checkpoint folder; returns its path.

    config.json (unless config is None), the shards with a correct model.safetensors.index.json
    (weight_map in tensor order, metadata.total_size = sum of data bytes), tokenizer files when asked.
    single_file=True with shards=1 writes model.safetensors and no index.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    if config is not None:
        (root / "config.json").write_text(json.dumps(config, indent=2))
    if tokenizer:
        write_tokenizer(root)
    if single_file:
        if shards != 1:
            raise ValueError("single_file needs shards=1")
        write_shard(root / SINGLE_NAME, tensors, metadata)
        return root
    weight_map, total = {}, 0
    for name, group in zip(shard_names(shards), split_tensors(tensors, shards)):
        total += write_shard(root / name, group, metadata)
        weight_map.update(dict.fromkeys(group, name))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / INDEX_NAME).write_text(json.dumps(index, indent=2))
    return root


def moe_tensors(layers: int = 4, experts: int = 8, hidden: int = 256, moe_intermediate: int = 128,
                dense_layers: int = 1, intermediate: int = 512, vocab: int = 1024, heads: int = 4,
                kv_heads: int = 2, head_dim: int = 64, expert_dtype: str = "BF16", dense_dtype: str = "BF16",
                expert_scales: bool = False, shared_experts: bool = True, tied: bool = False) -> dict:
    """A DeepSeek/Qwen-MoE-shaped tensor table {name: (dtype, shape)}.

    expert_scales adds per-expert `weight_scale_inv` F32 blocks (128x128) next to each expert weight,
    as block-FP8 checkpoints carry them.
    """
    t: dict = {"model.embed_tokens.weight": (dense_dtype, [vocab, hidden])}
    for i in range(layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = ("BF16", [hidden])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [hidden])
        t[p + "self_attn.q_proj.weight"] = (dense_dtype, [heads * head_dim, hidden])
        t[p + "self_attn.k_proj.weight"] = (dense_dtype, [kv_heads * head_dim, hidden])
        t[p + "self_attn.v_proj.weight"] = (dense_dtype, [kv_heads * head_dim, hidden])
        t[p + "self_attn.o_proj.weight"] = (dense_dtype, [hidden, heads * head_dim])
        if i < dense_layers:
            for proj, shape in (("gate_proj", [intermediate, hidden]), ("up_proj", [intermediate, hidden]),
                                ("down_proj", [hidden, intermediate])):
                t[p + f"mlp.{proj}.weight"] = (dense_dtype, shape)
            continue
        t[p + "mlp.gate.weight"] = ("BF16", [experts, hidden])
        for e in range(experts):
            for proj, shape in (("gate_proj", [moe_intermediate, hidden]), ("up_proj", [moe_intermediate, hidden]),
                                ("down_proj", [hidden, moe_intermediate])):
                name = p + f"mlp.experts.{e}.{proj}."
                t[name + "weight"] = (expert_dtype, shape)
                if expert_scales:
                    t[name + "weight_scale_inv"] = ("F32", [-(-shape[0] // 128), -(-shape[1] // 128)])
        if shared_experts:
            for proj, shape in (("gate_proj", [moe_intermediate, hidden]), ("up_proj", [moe_intermediate, hidden]),
                                ("down_proj", [hidden, moe_intermediate])):
                t[p + f"mlp.shared_experts.{proj}.weight"] = (dense_dtype, shape)
    t["model.norm.weight"] = ("BF16", [hidden])
    if not tied:
        t["lm_head.weight"] = (dense_dtype, [vocab, hidden])
    return t
