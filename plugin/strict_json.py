"""JSON read strictly: duplicate keys and NaN/Infinity are errors, not silent last-one-wins or floats."""
from __future__ import annotations

import json


class StrictJSONError(ValueError):
    """The text is not strict JSON; the message says where and why."""


def _no_duplicates(pairs):
    # dict() in C first: the Python loop runs only when a duplicate exists (a terabyte checkpoint's headers
    # hold ~10^5 objects, so this hook is the hot path of the header scan).
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


def loads(text: str | bytes):
    """Parse strict JSON; raises StrictJSONError with the position for malformed input."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise StrictJSONError("nested too deeply") from None
