"""Header-only safetensors shards: a real header over a SPARSE data region (no weight byte is written).

A shard is what the safetensors format defines: an 8-byte little-endian header length, the JSON header
(padded with spaces to a multiple of 8, as the safetensors package writes it), then the data region. Here
the data region is made by truncate(), so the file has its full size but the file system stores only the
header: a terabyte of shards costs a few megabytes of disk.

Hand-written on purpose: the safetensors package can only save tensors it holds in memory, and these
tensors are never materialised. Nothing here knows about any model; callers pass (name, dtype, shape).
"""
from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

from onegpu.checkpoint.safetensors_header import DTYPE_BITS  # the kit's own table: one list of dtypes and bit sizes

INDEX_NAME = "model.safetensors.index.json"

Tensor = tuple[str, str, tuple[int, ...]]  # (name, safetensors dtype, shape)


def tensor_bytes(dtype: str, shape) -> int:
    """Data bytes of one tensor: elements x bits / 8; raises ValueError for an unknown dtype or a partial byte."""
    if dtype not in DTYPE_BITS:
        raise ValueError(f"unknown safetensors dtype {dtype!r}")
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8:
        raise ValueError(f"{dtype} {list(shape)} does not fill a whole number of bytes")
    return bits // 8


def shard_prefix(tensors: list[Tensor], metadata: dict[str, str] | None = None) -> tuple[bytes, int]:
    """(8-byte length + padded JSON header, data bytes) for `tensors` laid out back to back in list order."""
    header: dict = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, dtype, shape in tensors:
        if name in header:
            raise ValueError(f"tensor {name!r} appears twice in one shard")
        end = offset + tensor_bytes(dtype, shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, end]}
        offset = end
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, offset


def write_shard(path: Path, tensors: list[Tensor], metadata: dict[str, str] | None = None) -> int:
    """Write one shard with a sparse data region; returns its data bytes. Raises OSError from the file system."""
    prefix, data = shard_prefix(tensors, metadata)
    with open(path, "wb") as fh:
        fh.write(prefix)
        fh.truncate(len(prefix) + data)  # a hole: the file system allocates no block for it
    return data


def split_by_bytes(tensors: list[Tensor], max_shard_bytes: int) -> list[list[Tensor]]:
    """Consecutive groups whose data stays within max_shard_bytes (a larger tensor gets a shard of its own)."""
    groups: list[list[Tensor]] = [[]]
    size = 0
    for tensor in tensors:
        n = tensor_bytes(tensor[1], tensor[2])
        if groups[-1] and size + n > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(tensor)
        size += n
    return [g for g in groups if g]


def write_sharded(root: Path, tensors: list[Tensor], max_shard_bytes: int,
                  metadata: dict[str, str] | None = None) -> dict:
    """Write `model-XXXXX-of-YYYYY.safetensors` shards and model.safetensors.index.json into `root`.

    The index has metadata.total_size (the sum of tensor data bytes, as Hugging Face writes it) and a
    weight_map naming each tensor's shard. Returns the index. Raises ValueError for bad tensors, OSError
    from the file system.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    groups = split_by_bytes(tensors, max_shard_bytes)
    weight_map: dict[str, str] = {}
    total = 0
    for number, group in enumerate(groups, start=1):
        name = f"model-{number:05d}-of-{len(groups):05d}.safetensors"
        total += write_shard(root / name, group, metadata)
        for tensor_name, _dtype, _shape in group:
            if tensor_name in weight_map:
                raise ValueError(f"tensor {tensor_name!r} appears in two shards")
            weight_map[tensor_name] = name
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (root / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
    return index


def allocated_bytes(root: Path) -> int:
    """Bytes the file system really allocated for every file under root (st_blocks x 512)."""
    total = 0
    for folder, _dirs, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(folder, name)).st_blocks * 512
    return total
