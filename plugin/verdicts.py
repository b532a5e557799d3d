"""Pure: per-test outcomes -> one verdict per phase and one line for the whole run."""
from __future__ import annotations

from .receipt import PHASES

# The worst outcome of a phase's tests decides the phase.
_SEVERITY = {"failed": 4, "error": 4, "blocked": 3, "skipped": 2, "passed": 1, "deselected": 0}


def phase_verdicts(tests: dict[str, dict]) -> dict[str, dict]:
    """{phase: {verdict, code, message, counts}} for every phase, 'NOT RUN' where no test ran."""
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
        verdict = {"failed": "FAILED", "error": "FAILED", "blocked": "BLOCKED",
                   "skipped": "SKIPPED", "passed": "PASSED"}[worst["outcome"]]
        out[phase] = {"verdict": verdict, "code": worst.get("code"),
                      "message": worst.get("message") if verdict != "PASSED" else None, "counts": counts}
    return out


def run_verdict(phases: dict[str, dict]) -> str:
    """One line: the first failure, else the first blocked phase, else what passed."""
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
