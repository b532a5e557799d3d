"""receipt.json: the session's machine-readable record, rewritten atomically each time a fact lands.

A hard kill at any moment leaves the latest complete state on disk.
"""
from __future__ import annotations

import datetime as _dt
import json
import threading
from pathlib import Path

from .rundir import write_json

SCHEMA = "onegpu/receipt@1"

# The phases of KIT.md section 3, in order; every kit test belongs to one.
PHASES = ("machine", "plan", "probe", "custody", "load", "canary", "batch", "serve")


def _earlier_sessions(path: Path) -> list:
    """A resumed run folder keeps what its earlier sessions recorded, under earlier_sessions."""
    if not path.exists():
        return []
    earlier = json.loads(path.read_text())
    return [*earlier.pop("earlier_sessions", []), earlier]


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class Receipt:
    """The receipt of one run folder. Sections are plain JSON values; `save` writes the whole file."""

    def __init__(self, folder: Path, header: dict):
        self.path = folder / "receipt.json"
        self._lock = threading.Lock()
        earlier = _earlier_sessions(self.path)
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
        """Replace one top-level section and write the file."""
        with self._lock:
            self.data[section] = value
            self._write()

    def update(self, section: str, **values) -> None:
        """Merge keys into a dict section and write the file."""
        with self._lock:
            self.data.setdefault(section, {}).update(values)
            self._write()

    def timing(self, name: str, seconds: float) -> None:
        """Record one phase's own duration (hashing, probe, load, ... are kept apart)."""
        self.update("timings_s", **{name: round(seconds, 3)})

    def warn(self, text: str) -> None:
        with self._lock:
            if text not in self.data["warnings"]:
                self.data["warnings"].append(text)
                self._write()

    def limitation(self, text: str) -> None:
        with self._lock:
            if text not in self.data["limitations"]:
                self.data["limitations"].append(text)
                self._write()

    def record_test(self, nodeid: str, entry: dict) -> None:
        with self._lock:
            self.data["tests"][nodeid] = entry
            self._write()

    def save(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        write_json(self.path, self.data)
