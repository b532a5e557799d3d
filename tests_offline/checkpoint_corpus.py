"""A corpus of corrupt and malicious checkpoints: each case builds one into a folder and says how it must end.

Every case must end as Blocked with its code, and the message must name the file and the rule it broke.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from devkit.synth import INDEX_NAME, header_prefix, moe_tensors, nbytes, write_checkpoint, write_raw_shard, write_shard

SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
CONFIG = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe"}
REVISION = "0123456789abcdef0123456789abcdef01234567"


@dataclass(frozen=True)
class CorruptCase:
    name: str
    code: str
    mentions: tuple[str, ...]  # the file and the rule words the message must contain
    build: Callable[[Path], Path]  # writes the checkpoint under the given folder, returns its root


def base(folder: Path) -> Path:
    """A sound two-shard checkpoint, the starting point of every case."""
    return write_checkpoint(folder / "ckpt", CONFIG, moe_tensors(layers=2, experts=2), shards=2)


def _raw_header(text: str | bytes, data: int, declared: int | None = None) -> Callable[[Path], Path]:
    """A case whose first shard is this literal header (length prefix = its size unless declared)."""
    body = text.encode() if isinstance(text, str) else text

    def build(folder: Path) -> Path:
        root = base(folder)
        length = len(body) if declared is None else declared
        write_raw_shard(root / SHARD1, struct.pack("<Q", length) + body, data)
        return root
    return build


def _entry(dtype="F32", shape=(2,), offsets=(0, 8), **extra) -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets), **extra}


def _header(tensors: dict, data: int) -> Callable[[Path], Path]:
    return _raw_header(json.dumps(tensors), data)


def _edit_index(change: Callable[[dict], None]) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        root = base(folder)
        index = json.loads((root / INDEX_NAME).read_text())
        change(index)
        (root / INDEX_NAME).write_text(json.dumps(index))
        return root
    return build


def _write(name: str, text: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        root = base(folder)
        (root / name).write_text(text)
        return root
    return build


def _remap_shard(new_name: object) -> Callable[[Path], Path]:
    """Point every tensor of the second shard at `new_name` in the index (any JSON value, not only a name)."""
    def change(index: dict) -> None:
        index["weight_map"] = {t: (new_name if s == SHARD2 else s) for t, s in index["weight_map"].items()}
    return _edit_index(change)


def _header_over_cap(folder: Path) -> Path:
    root = base(folder)
    # The data region is sparse: a declared 100,000,001-byte header inside a file that is long enough.
    write_raw_shard(root / SHARD1, struct.pack("<Q", 100_000_001) + b"{}", 100_000_100)
    return root


def _leftover_shard(folder: Path) -> Path:
    """A shard of an earlier three-shard download left beside the current two-shard one."""
    root = base(folder)
    write_shard(root / "model-00001-of-00003.safetensors", {"model.embed_tokens.weight": ("BF16", [1024, 256])})
    return root


def _truncated_shard(folder: Path) -> Path:
    root = base(folder)
    write_raw_shard(root / SHARD1, b"\x10\x00\x00", 0)
    return root


def _stray_tensor(folder: Path) -> Path:
    root = base(folder)
    tensors = {"model.layers.0.extra.weight": ("BF16", [4, 4])}
    prefix, data = header_prefix({**_shard_tensors(root, SHARD2), **tensors})
    write_raw_shard(root / SHARD2, prefix, data)
    _fix_total(root)
    return root


def _missing_tensor(folder: Path) -> Path:
    root = base(folder)
    tensors = _shard_tensors(root, SHARD2)
    tensors.pop(next(iter(tensors)))
    prefix, data = header_prefix(tensors)
    write_raw_shard(root / SHARD2, prefix, data)
    _fix_total(root)
    return root


def _shard_tensors(root: Path, shard: str) -> dict:
    raw = (root / shard).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    return {k: (v["dtype"], v["shape"]) for k, v in header.items() if k != "__metadata__"}


def _fix_total(root: Path) -> None:
    """Make metadata.total_size agree with the headers again, so only the intended rule breaks."""
    total = sum(nbytes(d, shape) for s in (SHARD1, SHARD2) for d, shape in _shard_tensors(root, s).values())
    index = json.loads((root / INDEX_NAME).read_text())
    index["metadata"]["total_size"] = total
    (root / INDEX_NAME).write_text(json.dumps(index))


def _escaping_link(folder: Path) -> Path:
    root = base(folder)
    outside = folder / "elsewhere.safetensors"
    os.replace(root / SHARD2, outside)
    os.symlink(outside, root / SHARD2)
    return root


def _dangling_link(folder: Path) -> Path:
    root = base(folder)
    os.remove(root / SHARD2)
    os.symlink("gone.safetensors", root / SHARD2)
    return root


def _other_repo_blob(folder: Path) -> Path:
    """A cache snapshot whose shard links into a different cache repo's blobs/."""
    snapshot = folder / "models--org--good" / "snapshots" / REVISION
    write_checkpoint(snapshot, CONFIG, moe_tensors(layers=2, experts=2), shards=2)
    blob = folder / "models--org--other" / "blobs" / ("ab" * 32)
    blob.parent.mkdir(parents=True)
    os.replace(snapshot / SHARD2, blob)
    os.symlink(os.path.relpath(blob, snapshot), snapshot / SHARD2)
    return snapshot


def _remove(name: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        root = base(folder)
        os.remove(root / name)
        return root
    return build


def _no_tokenizer(folder: Path) -> Path:
    root = base(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        os.remove(root / name)
    return root


def _no_weights(folder: Path) -> Path:
    root = base(folder)
    for name in (INDEX_NAME, SHARD1, SHARD2):
        os.remove(root / name)
    return root


def _huge_index(folder: Path) -> Path:
    root = base(folder)
    with open(root / INDEX_NAME, "r+b") as fh:
        fh.truncate(100_000_001)  # sparse: never written, refused on its size alone
    return root


C, INC, M = "CHECKPOINT_CORRUPT", "CHECKPOINT_INCOMPLETE", "CHECKPOINT_MISSING"
F32_A = {"a": _entry()}
CASES: list[CorruptCase] = [
    # shard headers
    CorruptCase("header_length_beyond_file", C, (SHARD1, "runs past the end"), _raw_header("{}", 0, declared=4096)),
    CorruptCase("header_length_over_cap", C, (SHARD1, "100,000,000-byte limit"), _header_over_cap),
    CorruptCase("file_shorter_than_length_field", C, (SHARD1, "too short"), _truncated_shard),
    CorruptCase("header_length_zero", C, (SHARD1, "JSON object"), _raw_header(b"", 0)),
    CorruptCase("header_not_json", C, (SHARD1, "not strict JSON"), _raw_header("{dtype: F32}", 0)),
    CorruptCase("header_json_list", C, (SHARD1, "JSON object"), _raw_header('[{"a": 1}]', 0)),
    CorruptCase("header_leading_space", C, (SHARD1, "starting with '{'"), _raw_header(" " + json.dumps(F32_A), 8)),
    CorruptCase("header_not_utf8", C, (SHARD1, "not UTF-8"), _raw_header(b'{"\xff\xfe":{}}', 0)),
    CorruptCase("duplicate_tensor_names", C, (SHARD1, "duplicate key 'a'"),
                _raw_header('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                            '"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}', 16)),
    CorruptCase("nan_in_header", C, (SHARD1, "NaN"),
                _raw_header('{"__metadata__":{"x":"1"},"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,8]}}', 8)),
    CorruptCase("integer_of_5000_digits", C, (SHARD1, "not strict JSON"),
                _raw_header('{"a":{"dtype":"F32","shape":[' + "9" * 5000 + '],"data_offsets":[0,8]}}', 8)),
    CorruptCase("nested_100000_deep", C, (SHARD1, "not strict JSON"),
                _raw_header('{"a":' + "[" * 100_000 + "]" * 100_000 + "}", 0)),
    CorruptCase("unknown_dtype", C, (SHARD1, "unknown dtype 'F128'"), _header({"a": _entry("F128")}, 8)),
    CorruptCase("megabyte_tensor_name", C, (SHARD1, "unknown dtype", "..."), _header({"x" * 2**20: _entry("Q")}, 8)),
    CorruptCase("unknown_key_in_entry", C, (SHARD1, "exactly dtype, shape and data_offsets"),
                _header({"a": _entry(offsets_hint=[0, 8])}, 8)),
    CorruptCase("negative_shape", C, (SHARD1, "non-negative integers"), _header({"a": _entry(shape=(-2,))}, 8)),
    CorruptCase("float_shape", C, (SHARD1, "non-negative integers"), _header({"a": _entry(shape=(2.0,))}, 8)),
    CorruptCase("element_count_overflow", C, (SHARD1, "overflows"),
                _header({"a": _entry(shape=(2**32, 2**32), offsets=(0, 8))}, 8)),
    CorruptCase("offsets_overlap", C, (SHARD1, "an overlap"),
                _header({"a": _entry(), "b": _entry(offsets=(4, 12))}, 12)),
    CorruptCase("offsets_gap", C, (SHARD1, "a gap"), _header({"a": _entry(), "b": _entry(offsets=(16, 24))}, 24)),
    CorruptCase("offsets_beyond_64_bits", C, (SHARD1, "below 2**63"),
                _header({"a": _entry(offsets=(2**70, 2**70 + 8))}, 8)),
    CorruptCase("offsets_not_from_zero", C, (SHARD1, "must start at 0"), _header({"a": _entry(offsets=(8, 16))}, 16)),
    CorruptCase("offsets_end_before_start", C, (SHARD1, "data_offsets [8, 0]"),
                _header({"a": _entry(), "b": _entry(offsets=(8, 0))}, 8)),
    CorruptCase("file_longer_than_declared", C, (SHARD1, "must end exactly"), _header(F32_A, 9)),
    CorruptCase("file_shorter_than_declared", C, (SHARD1, "must end exactly"), _header(F32_A, 7)),
    CorruptCase("sub_byte_odd_count", C, (SHARD1, "whole number of bytes"),
                _header({"a": _entry("F4", shape=(3,), offsets=(0, 2))}, 2)),
    CorruptCase("metadata_not_strings", C, (SHARD1, "__metadata__['step'] must be a string"),
                _header({"__metadata__": {"step": 1}, **F32_A}, 8)),
    # index
    CorruptCase("index_names_missing_shard", INC, (SHARD2, "missing"), _remove(SHARD2)),
    CorruptCase("index_parent_path", C, ("../x.safetensors", "'..'"), _remap_shard("../x.safetensors")),
    CorruptCase("index_absolute_path", C, ("/etc/passwd", "absolute"), _remap_shard("/etc/passwd")),
    CorruptCase("index_shard_not_a_string", C, (INDEX_NAME, "must be a shard file name"), _remap_shard(7)),
    CorruptCase("symlink_escapes_root", C, (SHARD2, "outside the checkpoint root"), _escaping_link),
    CorruptCase("link_into_other_cache_repo", C, (SHARD2, "outside"), _other_repo_blob),
    CorruptCase("dangling_shard_link", INC, (SHARD2, "a link to a missing file"), _dangling_link),
    CorruptCase("tensor_in_header_not_in_index", C, ("model.layers.0.extra.weight", SHARD2, "the index says nothing"),
                _stray_tensor),
    CorruptCase("shard_the_index_does_not_list", C, ("model-00001-of-00003.safetensors", "does not list it"),
                _leftover_shard),
    CorruptCase("tensor_in_index_not_in_header", INC, (SHARD2, "in no shard header"), _missing_tensor),
    CorruptCase("total_size_mismatch", C, (INDEX_NAME, "total_size is 12 bytes"),
                _edit_index(lambda ix: ix["metadata"].update(total_size=12))),
    CorruptCase("total_size_not_integer", C, (INDEX_NAME, "total_size must be a non-negative integer"),
                _edit_index(lambda ix: ix["metadata"].update(total_size="12"))),
    CorruptCase("index_not_json", C, (INDEX_NAME, "not strict JSON"), _write(INDEX_NAME, '{"weight_map": {')),
    CorruptCase("index_duplicate_keys", C, (INDEX_NAME, "duplicate key 'weight_map'"),
                _write(INDEX_NAME, '{"weight_map": {}, "weight_map": {}}')),
    CorruptCase("weight_map_not_object", C, (INDEX_NAME, "weight_map must be an object"),
                _edit_index(lambda ix: ix.update(weight_map=[SHARD1, SHARD2]))),
    CorruptCase("weight_map_empty", C, (INDEX_NAME, "names no tensors"),
                _edit_index(lambda ix: ix.update(weight_map={}))),
    CorruptCase("index_over_size_cap", C, (INDEX_NAME, "limit"), _huge_index),
    # config, tokenizer, folder
    CorruptCase("config_not_json", C, ("config.json", "not strict JSON"), _write("config.json", "{'a': 1}")),
    CorruptCase("config_nan", C, ("config.json", "NaN"), _write("config.json", '{"rope_theta": NaN}')),
    CorruptCase("config_a_list", C, ("config.json", "JSON object"), _write("config.json", "[]")),
    CorruptCase("no_tokenizer", INC, ("tokenizer", "no tokenizer file"), _no_tokenizer),
    CorruptCase("no_config", M, ("config.json", "missing"), _remove("config.json")),
    CorruptCase("no_index_no_single_shard", M, (INDEX_NAME, "model.safetensors"), _no_weights),
    CorruptCase("no_folder", M, ("does not exist",), lambda folder: folder / "absent"),
]
