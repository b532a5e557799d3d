"""Fact objects (msgspec Structs) <-> JSON, so every fact written to a run folder can be read back (replay).

Hand-written rather than msgspec's own conversion because the errors name the JSON path the way the kit's other
input errors do, and because it understands exactly the few shapes our facts use: nested facts, `X | None`,
`list[X]`, `dict[str, X]` and plain JSON values.
"""
from __future__ import annotations

import types
import typing

from msgspec import Struct
from msgspec.structs import fields as struct_fields


class FactsFormatError(ValueError):
    """A JSON document does not have the shape of the fact object it claims to be."""


def to_json(obj):
    """A fact object (or list/dict of them) as plain JSON values: nested facts too, tuples as lists."""
    if isinstance(obj, Struct):
        return {name: to_json(getattr(obj, name)) for name in obj.__struct_fields__}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    return obj


def from_json(cls, data, where: str = "$"):
    """Rebuild `cls` from `to_json` output; raises FactsFormatError naming the JSON path on a mismatch."""
    return _convert(cls, data, where)


def _convert(tp, value, where):
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, where)
            except FactsFormatError as exc:
                errors.append(str(exc))
        raise FactsFormatError(errors[0] if errors else f"{where}: unexpected null")
    if origin in (list, tuple):
        if not isinstance(value, list):
            raise FactsFormatError(f"{where}: expected a list, got {type(value).__name__}")
        return [_convert(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)] if args else list(value)
    if origin is dict:
        if not isinstance(value, dict):
            raise FactsFormatError(f"{where}: expected an object, got {type(value).__name__}")
        return {k: _convert(args[1], v, f"{where}.{k}") for k, v in value.items()} if args else dict(value)
    if isinstance(tp, type) and issubclass(tp, Struct):
        if not isinstance(value, dict):
            raise FactsFormatError(f"{where}: expected an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        fields = {f.name: f for f in struct_fields(tp)}
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise FactsFormatError(f"{where}: unknown field(s) {', '.join(unknown)}")
        kwargs = {}
        for name, f in fields.items():
            if name in value:
                kwargs[name] = _convert(hints[name], value[name], f"{where}.{name}")
            elif f.required:
                raise FactsFormatError(f"{where}.{name}: missing")
        return tp(**kwargs)
    if tp is typing.Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FactsFormatError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise FactsFormatError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    return value
