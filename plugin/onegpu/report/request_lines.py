"""Pure: the UNSCORED summary of a request run (onegpu.requests.batch_summary:summarize, as the receipt records it)
as lines, for the terminal and the report. Nothing here is, or is called, a score."""
from __future__ import annotations

from typing import TypeVar

from onegpu.record.sections_requests import RequestSummary

T = TypeVar("T")


class IncompleteSummary(ValueError):
    """A summary lacks a figure its lines need (a receipt cut mid-write, or edited by hand): summarize always
    writes every one."""


def _need(value: T | None, name: str) -> T:
    if value is None:
        raise IncompleteSummary(f"the summary records no {name}")
    return value


def _ids(ids: list[str], total: int) -> str:
    more = f", ... {total - len(ids)} more" if total > len(ids) else ""
    return f" ({', '.join(ids)}{more})" if ids else ""


def summary_lines(summary: RequestSummary) -> list[str]:
    """The summary as terminal lines; the first says UNSCORED. Raises IncompleteSummary when a figure a line
    needs is not recorded."""
    s = summary
    missing = _need(s.missing, "missing")
    lines = [_need(s.note, "note"),
             f"expected {_need(s.expected, 'expected')}, received {_need(s.received, 'received')} "
             f"({_need(s.answered_2xx, 'answered_2xx')} with HTTP 2xx), "
             f"missing {missing}{_ids(_need(s.missing_ids, 'missing_ids'), missing)}"]
    errors = _need(s.errors, "errors")
    if errors:
        error_ids = _need(s.error_ids, "error_ids")
        shown = []
        for code, n in errors.items():
            try:
                ids = error_ids[code]
            except KeyError:
                raise IncompleteSummary(f"the summary records no error_ids of {code}") from None
            shown.append(f"{code} {n}{_ids(ids, n)}")
        lines.append("errors: " + "; ".join(shown))
    else:
        lines.append("errors: none")
    length_limited = _need(s.length_limited, "length_limited")
    lines.append(f"length-limited choices (finish_reason \"length\"): {length_limited}"
                 f"{_ids(_need(s.length_limited_ids, 'length_limited_ids'), length_limited)}")
    empty = _need(s.empty_generations, "empty_generations")
    lines.append(f"empty generations: {empty}"
                 f"{_ids(_need(s.empty_generation_ids, 'empty_generation_ids'), empty)}")
    rate = "n/a (no answered request reported usage)" if s.output_tokens_per_s is None else (
        f"{s.output_tokens_per_s:.2f} ({_need(s.output_tokens, 'output_tokens')} tokens in "
        f"{_need(s.measured_elapsed_s, 'measured_elapsed_s')} s)")
    lines.append(f"{_need(s.rate_label, 'rate_label')}: {rate}")
    if s.median_elapsed_s is not None:
        lines.append(f"median elapsed {s.median_elapsed_s} s, median time to first byte {s.median_ttfb_s} s "
                     "per request (through this transport)")
    return lines
