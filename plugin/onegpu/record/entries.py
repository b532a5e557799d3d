"""Pure: a kit test's outcome and a phase's verdict as the receipt records them (tests{} and phases{})."""
from __future__ import annotations

from msgspec import Struct

from onegpu.record.sections_plan import CapacityNumber


class TestEntry(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One kit test's outcome (onegpu.plugin): what a key left out of the receipt holds reads None."""
    __test__ = False  # not a test class, whatever pytest's name rule says

    phase: str | None = None
    duration_s: int | float | None = None
    outcome: str | None = None
    code: str | None = None
    when: str | None = None  # pytest's step that failed: setup, call or teardown
    message: str | None = None
    numbers: dict[str, CapacityNumber] | None = None  # the Blocked outcome's numbers


class PhaseProgress(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How far an interrupted request phase got (onegpu.session.interruption:phase_progress)."""
    done: int | None = None  # complete answer lines on disk
    of: int | None = None  # requests in the phase's request file
    unit: str | None = None  # "answered"


class PhaseEntry(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One phase's verdict (onegpu.record.verdicts)."""
    verdict: str | None = None
    code: str | None = None
    message: str | None = None
    counts: dict[str, int] | None = None
    codes: list[str] | None = None  # every blocked code of the phase, the most consequential first
    progress: PhaseProgress | None = None  # of an interrupted request phase
