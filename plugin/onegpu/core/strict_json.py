"""JSON read strictly: duplicate keys, NaN/Infinity and numbers beyond a 64-bit float are errors, not silent
last-one-wins, infinities or floats.

`load_file` is the one reader of the kit's JSON files (settings, plan.json, receipts, manifests): bounded, strict,
its errors worded without the file's name so that each caller says which file and which option.

Two readers with one meaning. `loads` is the reference: the standard library's parser with hooks that refuse
duplicates and constants, and that names where the text breaks. `loads_proven` is for the large files of a
checkpoint (a terabyte checkpoint's index and headers hold ~10^5 objects, where a Python hook per object
costs more than parsing): it parses with msgspec (strict RFC 8259, in C, ~4x faster) and keeps the result
only when it can prove the reference would have returned the same value, else it answers NOT_PROVEN and the
caller runs `loads`. msgspec keeps the last of duplicate keys, and its float and very large integer
readings may differ from the standard library's, so a result is proven only when the text has no backslash
(every string is literal), no float and no integer beyond 64 bits came back, and the colons of the text
equal the keys of the result plus the colons inside its strings: a dropped duplicate would leave a colon
the result does not account for.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import msgspec

from onegpu.core.shown import cut

_INF = float("inf")

# What loads_proven answers when the fast reading is not proven equal to `loads` (None is a JSON value).
NOT_PROVEN = object()


class StrictJSONError(ValueError):
    """The text is not strict JSON; the message says where and why."""


def _no_duplicates(pairs):
    # dict() in C first: the Python loop runs only when a duplicate exists.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _value in pairs:
            if key in seen:
                raise StrictJSONError(f"duplicate key {key!r}")
            seen.add(key)
    return obj


def _no_constants(name):
    raise StrictJSONError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    # The standard library reads 1e400 as inf: the very value NaN/Infinity are refused to keep out.
    value = float(text)
    if value in (_INF, -_INF):
        raise StrictJSONError(f"{cut(text, 40)} is beyond the range of a 64-bit float")
    return value


def loads(text: str | bytes):
    """Parse strict JSON; raises StrictJSONError with the position for malformed input."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants,
                          parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise StrictJSONError("nested too deeply") from None


def loads_proven(raw: bytes):
    """The value `loads(raw.decode())` returns, or NOT_PROVEN (never an exception) when that is not certain."""
    if b"\\" in raw:
        return NOT_PROVEN
    try:
        value = msgspec.json.decode(raw)
        accounted = colons_accounted(value)
    except (msgspec.DecodeError, RecursionError):
        return NOT_PROVEN
    if accounted is None or accounted != raw.count(b":"):
        return NOT_PROVEN
    return value


def colons_accounted(value) -> int | None:
    """Keys of every object in `value` plus the colons inside its strings; None when a float or an integer
    beyond 64 bits is in it."""
    kind = type(value)
    if kind is str:
        return value.count(":")
    if kind is dict:
        count = len(value) + "".join(value).count(":")
        try:  # an object of strings (an index's weight_map: 10^5 of them) in two C-level calls
            return count + "".join(value.values()).count(":")
        except TypeError:
            items = value.values()
    elif kind is list:
        count, items = 0, value
    elif kind is int:
        return 0 if value.bit_length() <= 64 else None
    elif kind is float:
        return None
    else:  # bool, None
        return 0
    for item in items:
        inner = colons_accounted(item)
        if inner is None:
            return None
        count += inner
    return count


class JSONFileError(ValueError):
    """A JSON file the kit cannot take. `kind` is "missing", "unreadable", "too_large" or "not_json"; `size` is
    the file's size in bytes where it was too large; the message says why without naming the file."""

    def __init__(self, kind: str, message: str, size: int | None = None):
        super().__init__(message)
        self.kind, self.size = kind, size


def read_bounded(path: Path, limit: int) -> bytes:
    """A file's bytes, refused (too_large, with its size) beyond `limit` without reading more than one byte past it."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            raw = b"" if size > limit else fh.read(limit + 1)  # a file that grows while read stops one byte over
    except FileNotFoundError:
        raise JSONFileError("missing", "no such file") from None
    except OSError as exc:
        raise JSONFileError("unreadable", f"cannot read ({exc.strerror})") from None
    if size > limit or len(raw) > limit:
        size = max(size, len(raw))
        raise JSONFileError("too_large", f"{size:,} bytes, over the {limit:,} a file of its kind holds", size)
    return raw


def load_file(path: Path, limit: int):
    """(value, bytes) of a strict JSON file of at most `limit` bytes; raises JSONFileError."""
    raw = read_bounded(path, limit)
    try:
        return loads(raw), raw
    except (StrictJSONError, UnicodeDecodeError) as exc:
        raise JSONFileError("not_json", str(exc)) from None
