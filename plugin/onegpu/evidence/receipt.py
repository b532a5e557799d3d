"""receipt.json: the session's machine-readable record.

Each fact or outcome is appended as it lands to receipt.journal.jsonl beside it (one fsynced line, before the
next test starts), so a session costs what changed, not a re-encoding of everything it knows per outcome: a
1,000-shard checkpoint's per-file facts are encoded once, not once per test. receipt.json itself is written
whole when the session opens its run folder and when it finishes, and the journal is then removed. A session
killed in between leaves receipt.json and the journal; `read_receipt` folds the one into the other (every
line is idempotent: a set, a merge or an add-if-absent), and every reader of a run folder in the kit uses it.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
from pathlib import Path
from typing import TextIO

from onegpu.evidence.receipt_check import check_entry, check_write, declared_view
from onegpu.evidence.receipt_schema import SCHEMA, ReceiptData
from onegpu.evidence.rundir import open_private_append, write_json

JOURNAL = "receipt.journal.jsonl"



def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


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


def read_receipt(folder: Path) -> ReceiptData:
    """The receipt of a run folder as its session last recorded it, finished or not."""
    return declared_view(apply_journal(json.loads((folder / "receipt.json").read_bytes()), folder))


def fold_journal(folder: Path) -> ReceiptData:
    """Fold the journal into receipt.json (written whole, atomically), then remove it; the receipt."""
    data = read_receipt(folder)
    if (folder / JOURNAL).exists():
        write_json(folder / "receipt.json", data)
        (folder / JOURNAL).unlink()
    return data


def _earlier_sessions(folder: Path) -> list:
    """A resumed run folder keeps what its earlier sessions recorded, under earlier_sessions."""
    if not (folder / "receipt.json").exists():
        return []
    earlier = fold_journal(folder)  # first, so the new session's journal never follows an old one's lines
    return [*earlier.pop("earlier_sessions", []), earlier]


class Receipt:
    """The receipt of one run folder. Sections are plain JSON values; each change is journalled as it lands,
    `save` writes the whole receipt.json."""

    def __init__(self, folder: Path, header: dict):
        self.path = folder / "receipt.json"
        self.journal_path = folder / JOURNAL
        self._lock = threading.Lock()
        self._journal: TextIO | None = None
        earlier = _earlier_sessions(folder)
        self.data: dict = {
            "schema": SCHEMA,
            **header,
            "started_at": now_iso(),
            "finished_at": None,
            "tests": {},
            "phases": {},
            "timings_s": {},
            "warnings": [],
            "limitations": [],
        }
        if earlier:
            self.data["earlier_sessions"] = earlier
        self.save()

    def view(self) -> ReceiptData:
        """The data as renderers read it: every read checked against the schema (receipt_check.declared_view)."""
        return declared_view(self.data)

    def set(self, section: str, value) -> None:
        """Replace one top-level section."""
        check_write(section, value.keys() if isinstance(value, dict) else None)
        with self._lock:
            self.data[section] = value
            self._log(["set", section, value])

    def update(self, section: str, **values) -> None:
        """Merge keys into a dict section."""
        check_write(section, values)
        with self._lock:
            self.data.setdefault(section, {}).update(values)
            self._log(["update", section, values])

    def timing(self, name: str, seconds: float) -> None:
        """Record one phase's own duration (hashing, probe, load, ... are kept apart), called as it ends: its wall
        clock span too, [start, end] in seconds since the epoch, for the memory plot's phase marks."""
        end = time.time()
        self.update("timings_s", **{name: round(seconds, 3)})
        self.update("timeline", **{name: [round(end - seconds, 3), round(end, 3)]})

    def warn(self, text: str) -> None:
        self.add(["warnings"], text)

    def limitation(self, text: str) -> None:
        self.add(["limitations"], text)

    def add(self, where: list[str], item) -> None:
        """Append `item` to the list at `where` (section, then keys) unless it is there already."""
        with self._lock:
            *parents, last = where
            node = self.data
            for key in parents:
                node = node.setdefault(key, {})
            items = node.setdefault(last, [])
            if item not in items:
                items.append(item)
                self._log(["add", where, item])

    def record_test(self, nodeid: str, entry: dict) -> None:
        check_entry(entry)
        with self._lock:
            self.data["tests"][nodeid] = entry
            self._log(["update", "tests", {nodeid: entry}], durable=True)

    def save(self) -> None:
        """Write the whole receipt.json (atomically), then drop the journal it now holds."""
        with self._lock:
            write_json(self.path, self.data)
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self.journal_path.unlink(missing_ok=True)

    def _log(self, event: list, durable: bool = False) -> None:
        """One journal line, written before the caller goes on: a killed process loses nothing it recorded (the
        kernel holds what was written). A test's outcome also waits for the disk (fsync), which makes every line
        before it durable too: a machine that loses power keeps each outcome and the facts that led to it,
        for one disk flush per test rather than per fact."""
        journal = self._journal
        if journal is None:
            journal = self._journal = open_private_append(self.journal_path)
        journal.write(json.dumps(event, separators=(",", ":"), default=str) + "\n")
        journal.flush()
        if durable:
            os.fsync(journal.fileno())
