"""Pure: the UNSCORED summary of a request run, from its record lines. Nothing here is, or is called, a score."""
from __future__ import annotations

import statistics

UNSCORED = "UNSCORED"
NOT_A_SCORE = "UNSCORED: a transport record, not a score"
TRANSPORT = "the engine's Unix socket, one request at a time"
MAX_IDS_LISTED = 50
NO_RECORD = "NO RECORD (never sent)"


def _first_choice_text(body) -> str | None:
    """The generated text of the first choice (chat content or completion text); None if there is none."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    text = message.get("content") if isinstance(message, dict) else choices[0].get("text")
    return text if isinstance(text, str) else ""


def _finish_reasons(body) -> list:
    choices = body.get("choices") if isinstance(body, dict) else None
    return [c.get("finish_reason") for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def _capped(ids: list[str]) -> list[str]:
    return ids[:MAX_IDS_LISTED]


def summarize(expected_ids: list[str], responses: list[dict], errors: list[dict], timings: list[dict]) -> dict:
    """Counts and transport rates of a run over all its sessions (record lines as written by onegpu.requests.batch).

    expected_ids: the request file's custom_ids in file order.
    """
    expected = set(expected_ids)
    answers: dict[str, dict] = {}
    for line in responses:
        cid = line.get("custom_id")
        if cid in expected and cid not in answers:
            answers[cid] = line.get("response") or {}
    last_error = {e.get("custom_id"): (e.get("error") or {}).get("code", "ERROR") for e in errors}
    last_timing = {t.get("custom_id"): t for t in timings if t.get("status_code") is not None}
    missing = [cid for cid in expected_ids if cid not in answers]
    error_ids: dict[str, list[str]] = {}
    for cid in missing:
        error_ids.setdefault(last_error.get(cid, NO_RECORD), []).append(cid)
    length_limited, empty, ok = [], [], []
    for cid in expected_ids:
        if cid not in answers:
            continue
        status, body = answers[cid].get("status_code"), answers[cid].get("body")
        if not isinstance(status, int) or not 200 <= status < 300:
            error_ids.setdefault(f"HTTP {status}", []).append(cid)
            continue
        ok.append(cid)
        if "length" in _finish_reasons(body):
            length_limited.append(cid)
        text = _first_choice_text(body)
        if text is None or not text.strip():
            empty.append(cid)
    rate = _rate(ok, answers, last_timing)
    return {
        "label": UNSCORED, "note": NOT_A_SCORE,
        "expected": len(expected_ids), "received": len(answers), "answered_2xx": len(ok),
        "missing": len(missing), "missing_ids": _capped(missing),
        "errors": {code: len(ids) for code, ids in error_ids.items()},
        "error_ids": {code: _capped(ids) for code, ids in error_ids.items()},
        "length_limited": len(length_limited), "length_limited_ids": _capped(length_limited),
        "empty_generations": len(empty), "empty_generation_ids": _capped(empty),
        **rate,
    }


def _rate(ok: list[str], answers: dict, timings: dict) -> dict:
    """Output (and prompt) tokens per second over the answered requests that report usage and have a timing: lower
    bounds on the decode (and prefill) rate, since each answer's elapsed time holds both."""
    tokens, seconds, n, elapsed, ttfb, prompt = 0, 0.0, 0, [], [], 0
    for cid in ok:
        usage = answers[cid].get("body", {}).get("usage") if isinstance(answers[cid].get("body"), dict) else None
        timing = timings.get(cid)
        if timing is None:
            continue
        elapsed.append(timing.get("elapsed_s", 0.0))
        if timing.get("ttfb_s") is not None:
            ttfb.append(timing["ttfb_s"])
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if isinstance(completion, int) and not isinstance(completion, bool):
            tokens, seconds, n = tokens + completion, seconds + timing.get("elapsed_s", 0.0), n + 1
            prompted = usage.get("prompt_tokens") if isinstance(usage, dict) else None
            prompt += prompted if isinstance(prompted, int) and not isinstance(prompted, bool) else 0
    return {
        "rate_label": f"output tokens per second measured through this transport ({TRANSPORT}) over {n} "
                      "requests",
        "measured_requests": n, "output_tokens": tokens, "measured_elapsed_s": round(seconds, 3),
        "output_tokens_per_s": round(tokens / seconds, 3) if n and seconds > 0 else None,
        "prompt_tokens": prompt,
        "prompt_tokens_per_s": round(prompt / seconds, 3) if n and seconds > 0 and prompt else None,
        "median_elapsed_s": round(statistics.median(elapsed), 3) if elapsed else None,
        "median_ttfb_s": round(statistics.median(ttfb), 3) if ttfb else None,
    }


def unaccounted(summary: dict) -> list[str]:
    """Requests neither answered nor recorded as an error (empty whenever the records are whole)."""
    return summary["error_ids"].get(NO_RECORD, [])


def not_answered(summary: dict) -> list[str]:
    """One line per kind of failure among requests without an HTTP 2xx answer (empty: all answered)."""
    return [f"{code}: {', '.join(ids)}" for code, ids in summary["error_ids"].items()]
