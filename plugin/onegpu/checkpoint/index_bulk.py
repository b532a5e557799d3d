"""A checkpoint's index (model.safetensors.index.json) decoded in bulk, with each shard name one object.

A terabyte MoE checkpoint's index maps ~10^5 tensor names to ~10^3 shard files. Read as plain JSON it holds a
string object per entry for the shard (~11 MiB at 1.4 x 10^5 entries, next to the 13 MiB text): the peak memory of
the whole scan. Here msgspec decodes it against the usual shape of an index, exactly `weight_map` (names to one of
the folder's .safetensors files) and an optional `metadata`, so every entry points at one shared string per shard.

The answer is the index as strict_json.loads reads it, or None: None when it cannot be proven equal (a backslash,
a float or an integer beyond 64 bits in the metadata, another top-level key, a shard that is not a file of the
folder, a colon the result does not account for, which is how a dropped duplicate key shows). The caller then
reads the file the plain way, which finds and names whatever rule is broken. This module never rejects an index.
"""
from __future__ import annotations

from itertools import repeat
from typing import Any, Literal

import msgspec

from onegpu.core.strict_json import colons_accounted


def decode_index(raw: bytes, shard_files: list[str]) -> dict | None:
    """{"weight_map": ..., ["metadata": ...]} as strict JSON reads `raw`, or None when that is not proven."""
    # Shard names with a colon would need their colons counted per entry; no common layout has one.
    if not shard_files or b"\\" in raw or any(":" in name for name in shard_files):
        return None
    weight_map_type: Any = dict[str, Literal[tuple(shard_files)]]  # type: ignore[misc]  # files known at run time
    index_type = msgspec.defstruct("Index", [("weight_map", weight_map_type), ("metadata", object, msgspec.UNSET)],
                                   forbid_unknown_fields=True)
    try:
        index: Any = msgspec.json.decode(raw, type=index_type)
    except msgspec.DecodeError:  # ValidationError included
        return None
    weight_map, metadata = index.weight_map, index.metadata
    metadata_colons = 0 if metadata is msgspec.UNSET else colons_accounted(metadata)
    if metadata_colons is None:
        return None
    keys = 1 + (metadata is not msgspec.UNSET) + len(weight_map)
    inside = sum(map(str.count, weight_map, repeat(":")))
    if raw.count(b":") != keys + inside + metadata_colons:
        return None
    return {"weight_map": weight_map} if metadata is msgspec.UNSET else {"weight_map": weight_map,
                                                                         "metadata": metadata}
