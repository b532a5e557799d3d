"""Pure: receipt.json's data and its journal (receipt.journal.jsonl) as plain JSON: one journal line applied, a
journal folded in, a value merged in, and a run folder's receipt data read as its session last recorded it
(onegpu.record.receipt reads it as a typed record; onegpu.evidence.receipt writes both files)."""
from __future__ import annotations

import json
from pathlib import Path

SCHEMA = "onegpu/receipt@1"
JOURNAL = "receipt.journal.jsonl"


def _apply(data: dict, event: list) -> None:
    """One journal line applied to the receipt's data: ["set", section, value], ["update", section, {..}]
    or ["add", [section, key...], item] (appended to the list there when absent)."""
    op, where, value = event
    if op == "set":
        data[where] = value
    elif op == "update":
        data.setdefault(where, {}).update(value)
    elif op == "add":
        *parents, last = where
        node = data
        for key in parents:
            node = node.setdefault(key, {})
        items = node.setdefault(last, [])
        if value not in items:
            items.append(value)
    else:
        raise ValueError(f"unknown receipt journal operation {op!r}")


def merge(data: dict, where: list[str], values: dict) -> None:
    """Write `values` into the object at `where` (section, then keys) of receipt data, creating what is missing."""
    node = data
    for key in where:
        node = node.setdefault(key, {})
    node.update(values)


def apply_journal(data: dict, folder: Path) -> dict:
    """`data` (receipt.json as read) with the journal of `folder` folded in; a line cut by a kill is ignored."""
    path = folder / JOURNAL
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return data
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the torn last line of a session killed mid-write
        _apply(data, event)
    return data


def read_receipt(folder: Path) -> dict:
    """The receipt data of a run folder as its session last recorded it, finished or not (onegpu.record reads it
    as a typed record)."""
    return apply_journal(json.loads((folder / "receipt.json").read_bytes()), folder)
