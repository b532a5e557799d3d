"""A valid safetensors header checked in bulk: the entry rules in C, the rest as passes over columns.

A terabyte MoE checkpoint's headers hold ~10^5 tensor entries; checked one by one in Python they cost more
than reading them. Here msgspec decodes the header against the entry schema (exactly dtype, shape and
data_offsets; a dtype of the table; non-negative 64-bit integers; two offsets), and the sizes, the tiling
and the file length are a few map/zip/sorted passes over the whole shard. The answer is the checked
tensors or None: None means some rule may be broken (or the text is merely unusual), and the caller then
runs the entry-by-entry reader, which finds the rule and names it. So this module never decides that a
header is bad, only that it is good, and only by the same rules.
"""
from __future__ import annotations

import re
from itertools import repeat
from math import prod
from operator import attrgetter, itemgetter, mod, mul, rshift, sub
from typing import Annotated, Literal

import msgspec

from onegpu.checkpoint.safetensors_format import DTYPE_BITS, MAX_COUNT, METADATA_KEY

_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
# One tensor entry: exactly these three keys (unknown ones refused, missing ones too), checked in C.
_Entry = msgspec.defstruct("Entry", [("dtype", Literal[tuple(DTYPE_BITS)]), ("shape", list[_Count]),
                                     ("data_offsets", tuple[_Count, _Count])],
                           forbid_unknown_fields=True, gc=False)
_DECODER = msgspec.json.Decoder(dict[str, _Entry])  # type: ignore[valid-type]  # a struct made at run time
_METADATA_FIRST = b'{"%s":' % METADATA_KEY.encode()
# A metadata object as safetensors writes it: compact, strings only (the text has no backslash).
_METADATA_VALUE = re.compile(rb'null|\{(?:"[^"]*":"[^"]*"(?:,"[^"]*":"[^"]*")*)?\}')
_DTYPE, _SHAPE, _OFFSETS = attrgetter("dtype"), attrgetter("shape"), attrgetter("data_offsets")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)


def check_bulk(raw: bytes, file_bytes: int):
    """((names, dtypes, shapes, starts, ends), metadata) when the header keeps every rule, else None."""
    # No backslash: every string is literal, so the colon count below can prove there is no duplicate key.
    if not raw.startswith(b"{") or b"\\" in raw:
        return None
    split = _split_metadata(raw)
    if split is None:
        return None
    body, metadata = split
    try:
        entries_by_name = _DECODER.decode(body)
    except msgspec.DecodeError:
        return None
    if not entries_by_name or METADATA_KEY in entries_by_name:
        return None
    names, entries = list(entries_by_name), list(entries_by_name.values())
    dtypes, shapes = list(map(_DTYPE, entries)), list(map(_SHAPE, entries))
    elements = list(map(prod, shapes))
    bits = list(map(mul, elements, map(DTYPE_BITS.__getitem__, dtypes)))
    if max(elements) > MAX_COUNT or max(bits) > MAX_COUNT * 8:
        return None
    kinds = set(dtypes)
    if any(DTYPE_BITS[d] % 8 for d in kinds) and any(map(mod, bits, repeat(8))):
        return None  # sub-byte elements that do not fill whole bytes
    offsets = list(map(_OFFSETS, entries))
    starts, ends = list(map(_FIRST, offsets)), list(map(_SECOND, offsets))
    if list(map(sub, ends, starts)) != list(map(rshift, bits, repeat(3))):
        return None
    # Sorted by (start, end) the tensors must tile the data region from 0, which must end at the file's end.
    tiles = sorted(offsets)
    tile_starts, tile_ends = list(map(_FIRST, tiles)), list(map(_SECOND, tiles))
    if tile_starts[0] != 0 or tile_starts[1:] != tile_ends[:-1] or 8 + len(raw) + tile_ends[-1] != file_bytes:
        return None
    # Every colon of the text is a key of the result or sits inside one of its strings (dtype names have
    # none), else the decoder dropped a duplicate key somewhere.
    keys = len(names) + 3 * len(entries) + (0 if raw is body else 1 + len(metadata))
    inside = "".join(names).count(":") + "".join(metadata).count(":") + "".join(metadata.values()).count(":")
    if raw.count(b":") != keys + inside:
        return None
    return (names, dtypes, shapes, starts, ends), metadata


def _split_metadata(raw: bytes) -> tuple[bytes, dict] | None:
    """(the header without its metadata member, the metadata); the header itself when it has none first.

    Only a metadata member written first and compact is taken out (what safetensors writes); anywhere else
    it fails the entry schema and the caller reads the header entry by entry.
    """
    if not raw.startswith(_METADATA_FIRST):
        return raw, {}
    value = _METADATA_VALUE.match(raw, len(_METADATA_FIRST))
    if value is None or raw[value.end():value.end() + 1] != b",":
        return None
    try:
        metadata = msgspec.json.decode(value.group()) or {}
    except msgspec.DecodeError:
        return None
    return b"{" + raw[value.end() + 1:], metadata

