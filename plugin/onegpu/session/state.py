"""What one kit session carries between hooks and fixtures (kept in pytest's stash, never a global)."""
from __future__ import annotations

from pathlib import Path

import pytest
from msgspec import Struct, field

from onegpu.core.outcomes import PHASES
from onegpu.evidence.receipt import Receipt
from onegpu.record.sections_insight import Ceiling, RateRow
from onegpu.session.interruption import Cut


class KitSession(Struct):
    """State of the session: the run folder (None until kit tests are selected) and what was shown."""

    command_line: list[str]
    run_folder: Path | None = None
    receipt: Receipt | None = None
    kind: str = "scan"
    markexpr: str = ""  # the -m expression as the operator typed it
    approved: bool = False  # the expression names approve_load for at least one acting test
    held_back: int = 0  # approve_load tests deselected for want of approval
    held_for_options: list[str] = field(default_factory=list)  # options whose tests were deselected (not given)
    held_for_options_count: int = 0
    held_for_protocol: int = 0  # tests of the GPU protocol the settings do not declare (one-GPU or multi-GPU)
    protocol_held: str = ""  # which: "multi_gpu" or "one_gpu"
    shown: dict[str, list[str]] = field(default_factory=lambda: {p: [] for p in PHASES})
    tables: dict[str, list[str]] = field(default_factory=dict)  # titled blocks printed at the end
    shown_recorded: bool = False  # the receipt holds its "shown" section: later lines are added one by one
    tables_recorded: bool = False  # the receipt holds its "tables" section: later tables are merged in
    blocked: dict[str, dict] = field(default_factory=dict)  # nodeid -> Blocked.as_json()
    replayed: bool = False
    synthetic_checkpoint: bool = False
    selected: dict[str, str] = field(default_factory=dict)  # nodeid -> phase of every kit test that will run
    running: str | None = None  # the kit test in progress (still set when an interrupt cut it)
    cut: Cut | None = None  # once the timeout backstop cut a test
    ceiling: Ceiling | None = None  # the latest link ceiling the receipt holds (the probe's measured link, else the scan's)
    rates: list[RateRow] = field(default_factory=list)  # the measured rates against it, the receipt's rates_vs_ceiling

    def show(self, phase: str, line: str) -> None:
        """A fact line for the terminal and the receipt (one per fact, in the order established)."""
        if line not in self.shown[phase]:
            self.shown[phase].append(line)
            if self.receipt is None:
                return
            if self.shown_recorded:
                self.receipt.add(["shown", phase], line)  # one journal line, not every line shown so far
            else:
                self.receipt.set("shown", {p: list(lines) for p, lines in self.shown.items()})
                self.shown_recorded = True

    def table(self, title: str, lines: list[str]) -> None:
        self.tables[title] = lines
        if self.receipt is None:
            return
        if self.tables_recorded:
            self.receipt.update("tables", **{title: list(lines)})
        else:
            self.receipt.set("tables", {t: list(rows) for t, rows in self.tables.items()})
            self.tables_recorded = True


KIT_KEY = pytest.StashKey[KitSession]()


def kit_of(config) -> KitSession:
    return config.stash[KIT_KEY]
