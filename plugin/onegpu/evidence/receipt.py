"""receipt.json: the session's machine-readable record.

Each fact or outcome is appended as it lands to receipt.journal.jsonl beside it (one fsynced line, before the
next test starts), so a session costs what changed, not a re-encoding of everything it knows per outcome: a
1,000-shard checkpoint's per-file facts are encoded once, not once per test. receipt.json itself is written
whole when the session opens its run folder and when it finishes, and the journal is then removed. A session
killed in between leaves receipt.json and the journal; `read_receipt` (onegpu.evidence.journal) folds the one
into the other (every line is idempotent: a set, a merge or an add-if-absent), and every reader of a run folder
in the kit reads the result through onegpu.record.receipt, as one typed record.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
from pathlib import Path
from typing import Callable, TextIO

from onegpu.evidence.journal import JOURNAL, SCHEMA, read_receipt
from onegpu.evidence.rundir import open_private_append, write_json


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def fold_journal(folder: Path) -> dict:
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
    """The receipt of one run folder. Sections are plain JSON values; each change is checked by `check` (section,
    value, the section so far: onegpu.record.receipt.check_write, which raises on a value the record does not
    declare or a state that moves back) and journalled
    as it lands; `save` writes the whole receipt.json."""

    def __init__(self, folder: Path, header: dict, check: Callable[[str, object, object], None]):
        self._check = check
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

    def set(self, section: str, value) -> None:
        """Replace one top-level section."""
        self._check(section, value, self.data[section] if section in self.data else None)
        with self._lock:
            self.data[section] = value
            self._log(["set", section, value])

    def update(self, section: str, **values) -> None:
        """Merge keys into a dict section."""
        self._check(section, values, self.data[section] if section in self.data else None)
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
        value: object = [item]
        for key in reversed(where[1:]):
            value = {key: value}
        self._check(where[0], value, None)
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
        self._check("tests", {nodeid: entry}, None)
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
