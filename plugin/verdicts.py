"""Pure: per-test outcomes -> one verdict per phase and one line for the whole run."""
from __future__ import annotations

from .receipt import PHASES

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


def phase_verdicts(tests: dict[str, dict], progress: dict[str, dict] | None = None) -> dict[str, dict]:
    """{phase: {verdict, code, message, counts}} for every phase, 'NOT RUN' where no test ran; an INTERRUPTED
    phase also carries `progress` ({done, of, unit}) where its requests were counted."""
    progress = progress or {}
    out = {}
    for phase in PHASES:
        entries = [t for t in tests.values() if t.get("phase") == phase]
        counts: dict[str, int] = {}
        for t in entries:
            counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
        ran = [t for t in entries if t["outcome"] != "deselected"]
        if not ran:
            out[phase] = {"verdict": "NOT RUN", "code": None, "message": None, "counts": counts}
            continue
        worst = max(ran, key=lambda t: _SEVERITY[t["outcome"]])
        verdict = _VERDICT[worst["outcome"]]
        out[phase] = {"verdict": verdict, "code": worst.get("code"),
                      "message": worst.get("message") if verdict != "PASSED" else None, "counts": counts}
        if verdict == "INTERRUPTED":
            done = progress_words(progress.get(phase))
            out[phase]["progress"] = progress.get(phase)
            out[phase]["message"] = f"{done}; {worst['message']}" if done else worst["message"]
    return out


def run_verdict(phases: dict[str, dict]) -> str:
    """One line: the first interrupted phase (and which others were cut or never reached), else the first
    failure, else the first blocked phase, else what passed."""
    cut = [ph for ph in PHASES if phases.get(ph, {}).get("verdict") == "INTERRUPTED"]
    if cut:
        also = f"; also interrupted: {', '.join(cut[1:])}" if cut[1:] else ""
        return f"INTERRUPTED in phase {cut[0]}: {phases[cut[0]]['message']}{also}"
    for wanted in ("FAILED", "BLOCKED"):
        for phase in PHASES:
            p = phases.get(phase, {})
            if p.get("verdict") == wanted:
                what = f"BLOCKED {p['code']}" if wanted == "BLOCKED" else "FAILED"
                return f"{what} in phase {phase}: {p.get('message') or 'see the test report'}"
    passed = [ph for ph in PHASES if phases.get(ph, {}).get("verdict") == "PASSED"]
    if not passed:
        return "NOTHING RAN"
    return f"NO DEFINITE FAILURE FOUND in phases {', '.join(passed)} (not a claim that the model fits or runs)"
