"""Pure: per-test outcomes -> one verdict per phase and one line for the whole run."""
from __future__ import annotations

from typing import Mapping

from onegpu.core.outcomes import HOME_PHASE, PHASES, consequence
from onegpu.evidence.receipt_schema import PhaseEntry, TestEntry

# The worst outcome of a phase's tests decides the phase. A phase the session cut (or never reached) is
# INTERRUPTED whatever its other tests said: what it did not do is unknown, so it can never read PASSED.
_SEVERITY = {"interrupted": 5, "failed": 4, "error": 4, "blocked": 3, "skipped": 2, "passed": 1, "deselected": 0}
_VERDICT = {"interrupted": "INTERRUPTED", "failed": "FAILED", "error": "FAILED", "blocked": "BLOCKED",
            "skipped": "SKIPPED", "passed": "PASSED"}


def progress_words(p: dict | None) -> str:
    """"10 of 50 answered", or "" when nothing was counted."""
    if not p:
        return ""
    return f"{p['done']} of {p['of']} {p['unit']}"


def phase_verdicts(tests: Mapping[str, TestEntry], progress: dict[str, dict] | None = None) -> dict[str, PhaseEntry]:
    """{phase: {verdict, code, message, counts}} for every phase, 'NOT RUN' where no test ran; an INTERRUPTED
    phase also carries `progress` ({done, of, unit}) where its requests were counted."""
    progress = progress or {}
    out: dict[str, PhaseEntry] = {}
    for phase in PHASES:
        entries = [t for t in tests.values() if t.get("phase") == phase]
        counts: dict[str, int] = {}
        for t in entries:
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
        ran = [t for t in entries if t["outcome"] != "deselected"]
        waiting = [t for t in ran if t["outcome"] == "blocked"
                   and PHASES.index(HOME_PHASE.get(t.get("code") or "", phase)) > PHASES.index(phase)]
        ran = [t for t in ran if t not in waiting]
        wait_note = (f"{len(waiting)} test(s) not run here: they wait on phase {HOME_PHASE[waiting[0]['code']]} "
                     f"({waiting[0]['code']})") if waiting else None
        if not ran:
            out[phase] = {"verdict": "NOT RUN", "code": None, "message": wait_note, "counts": counts}
            continue
        # The worst outcome; among blocked tests, the most consequential code (a capacity failure before
        # "replayed"); ties keep the test order.
        worst = max(ran, key=lambda t: (_SEVERITY[t["outcome"]],
                                        consequence(t.get("code")) if t["outcome"] == "blocked" else 0))
        verdict = _VERDICT[worst["outcome"]]
        out[phase] = {"verdict": verdict, "code": worst.get("code"),
                      "message": worst.get("message") if verdict != "PASSED" else None, "counts": counts}
        if wait_note:
            out[phase]["message"] = f"{out[phase]['message']}; {wait_note}" if out[phase]["message"] else wait_note
        # dict.fromkeys keeps the test order for codes of equal consequence (a set's order changes run to run)
        codes = sorted(dict.fromkeys(t["code"] for t in ran if t["outcome"] == "blocked" and t.get("code")),
                       key=lambda c: -consequence(c))
        if codes:
            out[phase]["codes"] = codes  # every blocked code of the phase, the most consequential first
        if verdict == "INTERRUPTED":
            done = progress_words(progress.get(phase))
            out[phase]["progress"] = progress.get(phase)
            out[phase]["message"] = f"{done}; {worst['message']}" if done else worst["message"]
    return out


def capacity_tally(capacity: list[dict] | None) -> str:
    """"no definite failure in 12 capacity checks (10 OK, 2 UNKNOWN: repack, disk)", or "" without them."""
    rows = [c for c in capacity or [] if isinstance(c, dict)]
    if not rows or any(c.get("status") == "BLOCKED" for c in rows):
        return ""
    unknown = [str(c.get("check")) for c in rows if c.get("status") == "UNKNOWN"]
    ok = len(rows) - len(unknown)
    return (f"no definite failure in {len(rows)} capacity checks ({ok} OK"
            + (f", {len(unknown)} UNKNOWN: {', '.join(unknown)}" if unknown else "") + ")")


def _codes(phase: PhaseEntry) -> list[str]:
    """A blocked phase's codes, the most consequential first (a receipt written before `codes` has `code` only)."""
    code = phase.get("code")
    return phase.get("codes") or ([code] if code else [])


def run_verdict(phases: Mapping[str, PhaseEntry], capacity: list[dict] | None = None) -> str:
    """One line: the first interrupted phase (and which others were cut or never reached), else the first
    failure, else the most consequential blocked phase (a capacity failure outranks "replayed" and "image
    missing", and a plan blocked only because nothing may start here says what its capacity checks found),
    else what passed."""
    cut = [ph for ph in PHASES if phases.get(ph, {}).get("verdict") == "INTERRUPTED"]
    if cut:
        also = f"; also interrupted: {', '.join(cut[1:])}" if cut[1:] else ""
        return f"INTERRUPTED in phase {cut[0]}: {phases[cut[0]]['message']}{also}"
    failed = [ph for ph in PHASES if phases.get(ph, {}).get("verdict") == "FAILED"]
    if failed:
        return f"FAILED in phase {failed[0]}: {phases[failed[0]].get('message') or 'see the test report'}"
    blocked = [ph for ph in PHASES if phases.get(ph, {}).get("verdict") == "BLOCKED"]
    if blocked:
        lead = max(blocked, key=lambda ph: consequence(phases[ph].get("code")))  # ties: the earliest phase
        p = phases[lead]
        line = f"BLOCKED {p['code']} in phase {lead}: {p.get('message') or 'see the test report'}"
        if consequence(p["code"]) == 0:
            tally = capacity_tally(capacity)
            if tally:
                line = (f"BLOCKED {p['code']} in phase {lead}: {tally}, but nothing could start here: "
                        f"{p.get('message') or 'see the test report'}")
        others = list(dict.fromkeys(c for ph in blocked for c in _codes(phases[ph]) if c != p["code"]))
        return line + (f"; also blocked: {', '.join(others)}" if others else "")
    passed = [ph for ph in PHASES if phases.get(ph, {}).get("verdict") == "PASSED"]
    if not passed:
        return "NOTHING RAN"
    return f"NO DEFINITE FAILURE FOUND in phases {', '.join(passed)} (not a claim that the model fits or runs)"
