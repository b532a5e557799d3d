"""Pure: the declarations of onegpu.evidence.receipt_schema enforced. Writes (`check_write`, `check_entry`) refuse a
section or key the schema does not declare; reads go through `declared_view`, whose get, [] and `in` refuse one;
`undeclared_fields` lists what a receipt read from disk holds beyond the schema."""
from __future__ import annotations

from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

from onegpu.evidence.receipt_schema import (
    SECTIONS,
    ReceiptData,
    TestEntry,
)


class UndeclaredReceiptField(KeyError):
    """A writer or a reader used a section or key that this module does not declare."""

    def __str__(self) -> str:
        return str(self.args[0])


_HINTS_CACHE: dict[Any, dict[str, Any]] = {}


def _hints(kind: Any) -> dict[str, Any]:
    found = _HINTS_CACHE.get(kind)
    if found is None:
        found = _HINTS_CACHE[kind] = get_type_hints(kind)
    return found


def _undeclared(where: str, key: Any) -> None:
    raise UndeclaredReceiptField(f"receipt field {where}.{key} is not declared in onegpu.evidence.receipt_schema")


def check_write(section: str, keys: Any = None) -> None:
    """Raise UndeclaredReceiptField unless `section` is declared and, where its type is a TypedDict, every key of
    `keys` (the keys written into it) is declared there too."""
    if section not in SECTIONS:
        _undeclared("receipt", section)
    kind = _hints(ReceiptData)[section]
    if is_typeddict(kind) and keys is not None:
        declared = _hints(kind)
        for key in keys:
            if key not in declared:
                _undeclared(section, key)


def undeclared_fields(value: Any, kind: Any = ReceiptData, where: str = "receipt") -> list[str]:
    """Every field of `value` (as read from a receipt.json) that `kind` does not declare, as dotted paths."""
    if get_origin(kind) in (Union, UnionType):
        kind = next((k for k in get_args(kind) if k is not type(None)), Any)
    out: list[str] = []
    if is_typeddict(kind) and isinstance(value, dict):
        hints = _hints(kind)
        for key, item in value.items():
            if key in hints:
                out += undeclared_fields(item, hints[key], f"{where}.{key}")
            else:
                out.append(f"{where}.{key}")
    elif get_origin(kind) is dict and is_typeddict(get_args(kind)[1]) and isinstance(value, dict):
        for key, item in value.items():
            out += undeclared_fields(item, get_args(kind)[1], f"{where}[{key!r}]")
    elif get_origin(kind) is list and get_args(kind) and isinstance(value, list):
        for item in value:
            out += undeclared_fields(item, get_args(kind)[0], f"{where}[]")
    return out


def check_entry(entry: dict) -> None:
    """A test's outcome entry against TestEntry."""
    for key in entry:
        if key not in _hints(TestEntry):
            _undeclared("tests[]", key)


class _Declared(dict):
    """A receipt dict whose reads are checked: get, [], `in` with a key its TypedDict does not declare raise
    UndeclaredReceiptField (a misspelt field in a renderer fails the test that renders it); the values of declared
    TypedDict type come back checked the same way. Otherwise a plain dict (json.dumps, iteration, copies)."""

    __slots__ = ("_where", "_kinds")

    def __init__(self, data: dict, kind: Any, where: str):
        super().__init__(data)
        self._where, self._kinds = where, _hints(kind)

    def _kind(self, key: Any) -> Any:
        kind = self._kinds.get(key)
        if kind is None:
            _undeclared(self._where, key)
        return kind

    def get(self, key: Any, default: Any = None) -> Any:
        kind = self._kind(key)
        return declared_view(super().get(key, default), kind, f"{self._where}.{key}")

    def __getitem__(self, key: Any) -> Any:
        kind = self._kind(key)
        return declared_view(super().__getitem__(key), kind, f"{self._where}.{key}")

    def __contains__(self, key: Any) -> bool:
        self._kind(key)
        return super().__contains__(key)


def declared_view(value: Any, kind: Any = ReceiptData, where: str = "receipt") -> Any:
    """`value` with its reads checked against `kind` (a TypedDict, or a dict or list of them); other values as
    they are."""
    if get_origin(kind) in (Union, UnionType):
        kind = next((k for k in get_args(kind) if k is not type(None)), Any)
    if is_typeddict(kind) and isinstance(value, dict) and not isinstance(value, _Declared):
        return _Declared(value, kind, where)
    origin, args = get_origin(kind), get_args(kind)
    if origin is dict and len(args) == 2 and is_typeddict(args[1]) and isinstance(value, dict):
        return {k: declared_view(v, args[1], f"{where}[{k!r}]") for k, v in value.items()}
    if origin is list and args and is_typeddict(args[0]) and isinstance(value, list):
        return [declared_view(v, args[0], f"{where}[]") for v in value]
    return value
