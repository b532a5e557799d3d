"""Pure: per-test outcomes -> one verdict per phase and one line for the whole run (the receipt's phases and
verdict, written as plain JSON)."""
from __future__ import annotations

from typing import Mapping

import msgspec

from onegpu.core.outcomes import HOME_PHASE, PHASES, consequence
from onegpu.record.entries import PhaseEntry, PhaseProgress, TestEntry
from onegpu.record.sections_plan import CapacityRow

# The worst outcome of a phase's tests decides the phase. A phase the session cut (or never reached) is
# INTERRUPTED whatever its other tests said: what it did not do is unknown, so it can never read PASSED.
_SEVERITY = {"interrupted": 5, "failed": 4, "error": 4, "blocked": 3, "skipped": 2, "passed": 1, "deselected": 0}
_VERDICT = {"interrupted": "INTERRUPTED", "failed": "FAILED", "error": "FAILED", "blocked": "BLOCKED",
            "skipped": "SKIPPED", "passed": "PASSED"}


def progress_words(p: PhaseProgress | None) -> str:
    """"10 of 50 answered", or "" when nothing was counted."""
    if p is None:
        return ""
    return f"{p.done} of {p.of} {p.unit}"


def phase_verdicts(tests: Mapping[str, TestEntry], progress: Mapping[str, PhaseProgress] | None = None
                   ) -> dict[str, dict]:
    """{phase: {verdict, code, message, counts}} for every phase, 'NOT RUN' where no test ran; an INTERRUPTED
    phase also carries `progress` ({done, of, unit}) where its requests were counted."""
    progress = progress or {}
    out: dict[str, dict] = {}
    for phase in PHASES:
        entries = [t for t in tests.values() if t.phase == phase]
        counts: dict[str, int] = {}
        for t in entries:
            outcome = str(t.outcome)
            counts[outcome] = counts.get(outcome, 0) + 1
        ran = [t for t in entries if t.outcome != "deselected"]
        waiting = [t for t in ran if t.outcome == "blocked"
                   and PHASES.index(HOME_PHASE.get(t.code or "", phase)) > PHASES.index(phase)]
        ran = [t for t in ran if t not in waiting]
        wait_note = (f"{len(waiting)} test(s) not run here: they wait on phase {HOME_PHASE[str(waiting[0].code)]} "
                     f"({waiting[0].code})") if waiting else None
        if not ran:
            out[phase] = {"verdict": "NOT RUN", "code": None, "message": wait_note, "counts": counts}
            continue
        # The worst outcome; among blocked tests, the most consequential code (a capacity failure before
        # "replayed"); ties keep the test order.
        worst = max(ran, key=lambda t: (_SEVERITY[str(t.outcome)],
                                        consequence(t.code) if t.outcome == "blocked" else 0))
        verdict = _VERDICT[str(worst.outcome)]
        out[phase] = {"verdict": verdict, "code": worst.code,
                      "message": worst.message if verdict != "PASSED" else None, "counts": counts}
        if wait_note:
            out[phase]["message"] = f"{out[phase]['message']}; {wait_note}" if out[phase]["message"] else wait_note
        # dict.fromkeys keeps the test order for codes of equal consequence (a set's order changes run to run)
        codes = sorted(dict.fromkeys(t.code for t in ran if t.outcome == "blocked" and t.code),
                       key=lambda c: -consequence(c))
        if codes:
            out[phase]["codes"] = codes  # every blocked code of the phase, the most consequential first
        if verdict == "INTERRUPTED":
            done = progress_words(progress.get(phase))
            out[phase]["progress"] = msgspec.to_builtins(progress[phase]) if phase in progress else None
            out[phase]["message"] = f"{done}; {worst.message}" if done else worst.message
    return out


def capacity_tally(capacity: list[CapacityRow] | None) -> str:
    """"no definite failure in 12 capacity checks (10 OK, 2 UNKNOWN: repack, disk)", or "" without them."""
    rows = capacity or []
    if not rows or any(c.status == "BLOCKED" for c in rows):
        return ""
    unknown = [str(c.check) for c in rows if c.status == "UNKNOWN"]
    ok = len(rows) - len(unknown)
    return (f"no definite failure in {len(rows)} capacity checks ({ok} OK"
            + (f", {len(unknown)} UNKNOWN: {', '.join(unknown)}" if unknown else "") + ")")


def _codes(phase: PhaseEntry) -> list[str]:
    """A blocked phase's codes, the most consequential first (a receipt written before `codes` has `code` only)."""
    return phase.codes or ([phase.code] if phase.code else [])


def run_verdict(phases: Mapping[str, PhaseEntry], capacity: list[CapacityRow] | None = None) -> str:
    """One line: the first interrupted phase (and which others were cut or never reached), else the first
    failure, else the most consequential blocked phase (a capacity failure outranks "replayed" and "image
    missing", and a plan blocked only because nothing may start here says what its capacity checks found),
    else what passed."""
    def with_verdict(verdict: str) -> list[str]:
        return [ph for ph in PHASES if ph in phases and phases[ph].verdict == verdict]

    cut = with_verdict("INTERRUPTED")
    if cut:
        also = f"; also interrupted: {', '.join(cut[1:])}" if cut[1:] else ""
        return f"INTERRUPTED in phase {cut[0]}: {phases[cut[0]].message}{also}"
    failed = with_verdict("FAILED")
    if failed:
        return f"FAILED in phase {failed[0]}: {phases[failed[0]].message or 'see the test report'}"
    blocked = with_verdict("BLOCKED")
    if blocked:
        lead = max(blocked, key=lambda ph: consequence(phases[ph].code))  # ties: the earliest phase
        p = phases[lead]
        line = f"BLOCKED {p.code} in phase {lead}: {p.message or 'see the test report'}"
        if consequence(p.code) == 0:
            tally = capacity_tally(capacity)
            if tally:
                line = (f"BLOCKED {p.code} in phase {lead}: {tally}, but nothing could start here: "
                        f"{p.message or 'see the test report'}")
        others = list(dict.fromkeys(c for ph in blocked for c in _codes(phases[ph]) if c != p.code))
        return line + (f"; also blocked: {', '.join(others)}" if others else "")
    passed = with_verdict("PASSED")
    if not passed:
        return "NOTHING RAN"
    return f"NO DEFINITE FAILURE FOUND in phases {', '.join(passed)} (not a claim that the model fits or runs)"
