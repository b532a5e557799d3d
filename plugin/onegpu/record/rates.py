"""Pure: the rates a request run measured (its UNSCORED summary) set against the link's ceilings (the receipt's
"ceiling" section), as the receipt keeps them (rates_vs_ceiling) and the terminal shows them.

The measured rates are lower bounds (an answer's elapsed time holds its prefill and its decode), so a measured rate
above a ceiling contradicts the model of the link, and is said so, never hidden.
"""
from __future__ import annotations

import math

from onegpu.plan.ceiling_record import UPPER, percent
from onegpu.record.sections_insight import Ceiling, RateRow
from onegpu.record.sections_requests import RequestSummary


def _finite(value: int | float | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def measured_against(record: Ceiling | None, summary: RequestSummary | None, what: str) -> list[RateRow]:
    """The measured rates of a request run (its UNSCORED summary) as fractions of the ceilings: one row per rate;
    [] where either side is missing."""
    if record is None or summary is None or record.offloaded is False:
        return []
    rows = []
    decode = _finite(record.decode_tps.get("1")) if record.decode_tps is not None else None
    prefill = _finite(record.prefill_tps)
    for rate, measured, ceiling, why in (
            ("decode", _finite(summary.output_tokens_per_s), decode,
             "output tokens / elapsed per answer, summed: a lower bound on the decode rate (the elapsed time holds "
             "the prefill too)"),
            ("prefill", _finite(summary.prompt_tokens_per_s), prefill,
             "prompt tokens / elapsed per answer, summed: a lower bound on the prefill rate (the elapsed time holds "
             "the decode too)")):
        if measured is None or ceiling is None:
            continue
        fraction = measured / ceiling if ceiling else None
        status = "ABOVE THE CEILING: contradicts the model of the link" if fraction is not None and fraction > 1 \
            else "below the ceiling"
        rows.append(RateRow(run=what, rate=rate, measured_tps=round(measured, 3), ceiling_tps=round(ceiling, 3),
                            fraction=float(f"{fraction:.4g}") if fraction is not None else None, status=status,
                            why=why, link_basis=record.link.basis if record.link is not None else None))
    return rows


def measured_lines(rows: list[RateRow]) -> list[str]:
    """One line per row that has a fraction: the measured rate, its share of the bound, and the status."""
    return [f"{r.run} {r.rate}: measured at least {r.measured_tps:,.2f} tokens/s = "
            f"{percent(r.fraction)} of the link's {UPPER.lower()} {r.ceiling_tps:,.2f} tokens/s "
            f"(link {r.link_basis}); {r.status}" for r in rows if r.fraction is not None]
