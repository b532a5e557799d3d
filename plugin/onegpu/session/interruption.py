"""A session cut short: by Ctrl-C (SIGINT), by SIGTERM, or by the pytest-timeout backstop.

pytest records nothing for a test that a KeyboardInterrupt cuts, and nothing for the tests the session never
reaches, so verdicts built from the tests that reported would read PASSED for a batch cut after 10 of 50
requests. Here every selected test without an outcome of a cut session gets one, "interrupted", and each
cut phase says how far it got, so no interrupted phase ever reads PASSED.
"""
from __future__ import annotations

from pathlib import Path

from msgspec import Struct

from onegpu.record.entries import PhaseProgress, TestEntry
from onegpu.record.receipt import ReceiptRecord
from onegpu.requests.batch import BATCH_STEM

# pytest-timeout's failure text ("Timeout (>600.0s) from pytest-timeout."): how its signal method reports.
TIMEOUT_MARK = "from pytest-timeout."
BY_WORDS = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM", "timeout_backstop": "the timeout backstop"}
# Phases whose progress is a count of answered requests, and the receipt section holding their request file.
COUNTED = ("canary", "batch")


class Cut(Struct, frozen=True):
    """What cut the session and where: `by` is a key of BY_WORDS; nodeid/phase of the test it cut (None when
    it came between tests)."""

    by: str
    nodeid: str | None
    phase: str | None
    detail: str = ""  # e.g. "(>600.0s)" for the backstop

    @property
    def words(self) -> str:
        return f"{BY_WORDS[self.by]}{' ' + self.detail if self.detail else ''}"

    def as_json(self) -> dict:
        return {"by": self.by, "words": self.words, "test": self.nodeid, "phase": self.phase}


def timeout_detail(message: str) -> str | None:
    """"(>6.0s)" when a failure message is pytest-timeout's, else None."""
    if TIMEOUT_MARK not in message:
        return None
    start = message.find("(>")
    return message[start:message.find(")", start) + 1] if start >= 0 else ""


def unreported(selected: dict[str, str], tests: dict[str, TestEntry], cut: Cut) -> dict[str, dict]:
    """Entries for the selected tests (nodeid -> phase) that recorded no outcome: the one it cut, the rest
    never reached."""
    out = {}
    for nodeid, phase in selected.items():
        if nodeid in tests and tests[nodeid].outcome != "deselected":
            continue
        if nodeid == cut.nodeid:
            message = f"cut by {cut.words} while this test ran"
        else:
            message = f"never reached: the session was cut by {cut.words}" + (
                f" in phase {cut.phase}" if cut.phase else "")
        out[nodeid] = {"phase": phase, "outcome": "interrupted", "message": message}
    return out


def _complete_lines(path: Path) -> int:
    """Complete JSON lines of a record file (a torn last line, cut by a kill, is not counted)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def phase_progress(receipt: ReceiptRecord, folder: Path) -> dict[str, PhaseProgress]:
    """{phase: {done, of, unit}} for the request phases whose request file was read: answers on disk of the
    requests in the file (a resumed batch counts its earlier sessions' answers too)."""
    out = {}
    for phase in COUNTED:
        section = receipt.canary if phase == "canary" else receipt.batch
        request_file = section.request_file if section is not None else None
        if request_file is None or request_file.requests is None:
            continue
        if phase == "batch":
            stem = BATCH_STEM
        else:  # the canary's records are named after its request file: <stem>-requests.jsonl
            stem = Path(request_file.path or "canary-requests.jsonl").name.removesuffix("-requests.jsonl")
            stem = f"{stem}-responses"
        out[phase] = PhaseProgress(done=_complete_lines(folder / f"{stem}.jsonl"), of=request_file.requests,
                                   unit="answered")
    return out
