"""Strict safetensors header reader: the 8-byte length and the JSON header of a shard, never its data.

Hand-written on purpose: the safetensors package opens a file by memory-mapping all of it and answers a
violation with a terse error, while the kit must scan a terabyte of shards in well under a second and say
which rule broke. The rules are the format's (huggingface/safetensors), made stricter where the package is
lenient: duplicate tensor names, NaN, unknown keys in a tensor entry and a header not starting with `{`
are refused here. Files written by the safetensors package are accepted unchanged (tested against it).
"""
from __future__ import annotations

import os
import struct
import sys

from msgspec import Struct, field

from onegpu.checkpoint.safetensors_bulk import check_bulk
from onegpu.checkpoint.safetensors_format import DTYPE_BITS, MAX_COUNT, MAX_HEADER_BYTES, METADATA_KEY  # noqa: F401 (re-exported)
from onegpu.core.shown import cut
from onegpu.core.strict_json import NOT_PROVEN, StrictJSONError, loads_proven
from onegpu.core.strict_json import loads as strict_loads

_ENTRY_KEYS = frozenset(("dtype", "shape", "data_offsets"))
_LENGTH = struct.Struct("<Q")


class HeaderError(ValueError):
    """A shard breaks a safetensors rule; `shard` names the file, `rule` says which rule and how."""

    def __init__(self, shard: str, rule: str):
        self.shard = shard
        self.rule = rule
        super().__init__(f"{shard}: {rule}")


class ShardHeader(Struct, frozen=True):
    """What one shard's header declares, as columns in header order (a 1 T checkpoint has ~10^5 tensors, and
    the checkpoint facts are computed column by column): names, dtypes, shapes, and start/end byte offsets
    into the data region. header_bytes is the JSON length; file_bytes the file's size."""

    names: list[str]
    dtypes: list[str]
    shapes: list[list[int]]
    starts: list[int]
    ends: list[int]
    metadata: dict[str, str] = field(default_factory=dict)
    header_bytes: int = 0
    file_bytes: int = 0

    @classmethod
    def of_rows(cls, rows: list[tuple[str, str, list[int], int, int]], metadata: dict[str, str], header_bytes: int,
                file_bytes: int) -> "ShardHeader":
        names, dtypes, shapes, starts, ends = map(list, zip(*rows)) if rows else ([], [], [], [], [])
        return cls(names, dtypes, shapes, starts, ends, metadata, header_bytes, file_bytes)

    @property
    def tensors(self) -> list[tuple[str, str, list[int], int, int]]:
        """(name, dtype, shape, start, end) per tensor, in header order."""
        return list(zip(self.names, self.dtypes, self.shapes, self.starts, self.ends))

    @property
    def data_bytes(self) -> int:
        """Bytes of tensor data the header declares."""
        return self.file_bytes - 8 - self.header_bytes


def _read_exactly(fh, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = fh.read(left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_header(path, shard: str | None = None) -> ShardHeader:
    """Read and check one shard's header (two reads, no data). `shard` names it in errors (default: path).

    Raises HeaderError for every broken rule; OSError when the file cannot be opened or read.
    """
    shard = shard if shard is not None else str(path)
    with open(path, "rb", buffering=0) as fh:
        file_bytes = os.fstat(fh.fileno()).st_size
        if file_bytes < 8:
            raise HeaderError(shard, f"the file is {file_bytes} bytes, too short for the 8-byte header length")
        (n,) = _LENGTH.unpack(_read_exactly(fh, 8))
        if n > MAX_HEADER_BYTES:
            raise HeaderError(shard, f"the header length {n:,} bytes exceeds the {MAX_HEADER_BYTES:,}-byte limit")
        if 8 + n > file_bytes:
            raise HeaderError(shard, f"the header length {n:,} bytes runs past the end of the "
                                     f"{file_bytes:,}-byte file")
        raw = _read_exactly(fh, n)
    if len(raw) != n:
        raise HeaderError(shard, f"the file ended after {len(raw):,} of the {n:,} header bytes")
    return parse_header(raw, file_bytes, shard)


def parse_header(raw: bytes, file_bytes: int, shard: str) -> ShardHeader:
    """Check the header bytes of a `file_bytes`-long shard against every rule; raises HeaderError."""
    checked = check_bulk(raw, file_bytes)
    if checked is not None:
        (names, dtypes, shapes, starts, ends), metadata = checked
        return ShardHeader(names, dtypes, shapes, starts, ends, metadata, len(raw), file_bytes)
    # Something is off (or merely unusual): the entry-by-entry reading finds it and names the rule.
    return parse_header_by_entry(raw, file_bytes, shard)


def parse_header_by_entry(raw: bytes, file_bytes: int, shard: str) -> ShardHeader:
    """The reference reading of parse_header: every rule, entry by entry, naming the first one broken."""
    if not raw.startswith(b"{"):
        raise HeaderError(shard, "the header must be a JSON object starting with '{'")
    try:
        obj = decode_json(raw)
    except ValueError as exc:
        raise HeaderError(shard, f"the header is {exc}") from None
    if type(obj) is not dict:
        raise HeaderError(shard, f"the header must be a JSON object, not {_kind(obj)}")
    metadata = _metadata(obj.get(METADATA_KEY), shard)
    tensors = [_entry(name, info, shard) for name, info in obj.items() if name != METADATA_KEY]
    end = _check_layout(tensors, shard)
    if 8 + len(raw) + end != file_bytes:
        raise HeaderError(shard, f"the file is {file_bytes:,} bytes but 8 + header {len(raw):,} + data {end:,} "
                                 f"= {8 + len(raw) + end:,} bytes: the data region must end exactly at the file's end")
    return ShardHeader.of_rows(tensors, metadata, len(raw), file_bytes)


def decode_json(raw: bytes):
    """UTF-8 bytes -> strict JSON value; raises ValueError saying "not UTF-8 ..." or "not strict JSON: ..."."""
    value = loads_proven(raw)
    if value is not NOT_PROVEN:
        return value
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 (byte {exc.start})") from None
    try:
        return strict_loads(text)
    except StrictJSONError as exc:
        raise ValueError(f"not strict JSON: {exc}") from None
    except ValueError:  # int() refuses digit strings beyond sys.get_int_max_str_digits()
        raise ValueError(f"not strict JSON: a number has more than {sys.get_int_max_str_digits()} digits") from None


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _metadata(value, shard: str) -> dict[str, str]:
    if value is None:  # absent (or null, which the safetensors package also reads as absent)
        return {}
    if type(value) is not dict:
        raise HeaderError(shard, f"__metadata__ must be an object of strings, not {_kind(value)}")
    for key, item in value.items():
        if type(item) is not str:
            raise HeaderError(shard, f"__metadata__[{brief(key)}] must be a string, not {_kind(item)}")
    return value


def _entry(name: str, info, shard: str) -> tuple[str, str, list[int], int, int]:
    """One tensor entry checked: exactly dtype, shape, data_offsets; sizes agree."""
    if type(info) is not dict:
        raise HeaderError(shard, f"tensor {brief(name)} must be an object, not {_kind(info)}")
    if info.keys() != _ENTRY_KEYS:
        missing = sorted(_ENTRY_KEYS - info.keys())
        extra = sorted(info.keys() - _ENTRY_KEYS)
        what = "; ".join(x for x in (missing and f"missing {missing}", extra and f"unknown {extra}") if x)
        raise HeaderError(shard, f"tensor {brief(name)} must have exactly dtype, shape and data_offsets ({what})")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    bits = DTYPE_BITS.get(dtype) if type(dtype) is str else None
    if bits is None:
        raise HeaderError(shard, f"tensor {brief(name)} has unknown dtype {brief(dtype)}")
    if type(shape) is not list:
        raise HeaderError(shard, f"tensor {brief(name)} shape must be a list of non-negative integers")
    elements = 1
    for dim in shape:
        if type(dim) is not int or dim < 0:
            raise HeaderError(shard, f"tensor {brief(name)} shape {brief(shape)} must hold non-negative integers")
        if dim > MAX_COUNT:
            raise HeaderError(shard, f"tensor {brief(name)} shape dimension {brief(dim)} overflows 64 bits")
        elements *= dim
    if elements > MAX_COUNT or elements * bits > MAX_COUNT * 8:
        raise HeaderError(shard, f"tensor {brief(name)} shape {brief(shape)} overflows: its element count is "
                                 "beyond 2**63")
    if (elements * bits) % 8:
        raise HeaderError(shard, f"tensor {brief(name)}: {elements} elements of {dtype} ({bits} bits) do not fill "
                                 "a whole number of bytes")
    if (type(offsets) is not list or len(offsets) != 2 or type(offsets[0]) is not int
            or type(offsets[1]) is not int or not 0 <= offsets[0] <= MAX_COUNT or not 0 <= offsets[1] <= MAX_COUNT):
        raise HeaderError(shard, f"tensor {brief(name)} data_offsets must be [start, end], two non-negative "
                                 "integers below 2**63")
    start, end = offsets
    if end - start != (elements * bits) >> 3:
        raise HeaderError(shard, f"tensor {brief(name)} data_offsets [{start}, {end}] span {end - start} bytes but "
                                 f"{dtype} {shape} needs {(elements * bits) >> 3}")
    return name, dtype, shape, start, end


def brief(value, limit: int = 80) -> str:
    """repr() of a value from a file, cut to `limit` characters so a hostile name cannot flood a message."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"<a {value.bit_length()}-bit integer>"
    return cut(repr(value), limit)


def _check_layout(tensors: list, shard: str) -> int:
    """Offsets sorted must tile the data region from 0 with no gap or overlap; returns its end."""
    expected, previous = 0, None
    for name, _dtype, _shape, start, end in sorted(tensors, key=lambda t: (t[3], t[4])):
        if start != expected:
            if previous is None:
                raise HeaderError(shard, f"data offsets must start at 0; the first tensor {brief(name)} starts "
                                         f"at {start}")
            how = "a gap" if start > expected else "an overlap"
            raise HeaderError(shard, f"{how} in the data offsets: tensor {brief(name)} starts at {start} but "
                                     f"{brief(previous)} ends at {expected}")
        expected, previous = end, name
    if expected > MAX_COUNT:
        raise HeaderError(shard, f"the data region of {expected} bytes overflows 64 bits")
    return expected
