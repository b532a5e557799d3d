"""Pure: the measured rates against the link's upper bounds, one bar each, as an inline SVG (no script, no font).

Each row is scaled to its own bound: the dashed line is the bound (100 %), the bar the measured rate's share of
it. A rate above its bound runs past the line in red: the model of the link is contradicted, and the chart shows
it rather than clipping it.
"""
from __future__ import annotations

from html import escape
from typing import Sequence

from onegpu.plan.ceiling_record import percent
from onegpu.record.sections_insight import RateRow
from onegpu.report.svg import FONT

WIDTH, LEFT, RIGHT, ROW_H, TOP, BOTTOM = 900, 150, 250, 30, 30, 34
BAR, OVER, TRACK = "#2471a3", "#c0392b", "#eaeaea"


def _fraction(row: RateRow) -> float | None:
    return float(row.fraction) if row.fraction is not None else None


def _or_zero(value: int | float | None) -> int | float:
    """A rate the row left out reads 0 in the bar's caption."""
    return value if value is not None else 0


def rates_plot(rows: Sequence[RateRow]) -> str | None:
    """The SVG element, or None when no row has a fraction."""
    shown = [r for r in rows if _fraction(r) is not None]
    if not shown:
        return None
    scale = max(1.0, *(_fraction(r) or 0.0 for r in shown))  # the bound sits at 1/scale of the width
    plot_w = WIDTH - LEFT - RIGHT
    height = TOP + ROW_H * len(shown) + BOTTOM

    def x(share: float) -> float:
        return LEFT + share / scale * plot_w

    body = [f'<text x="{LEFT}" y="16" {FONT} font-weight="bold">measured rate as a share of the link\'s upper '
            'bound (each row scaled to its own bound)</text>']
    for i, row in enumerate(shown):
        share = _fraction(row) or 0.0
        y = TOP + i * ROW_H
        colour = OVER if share > 1 else BAR
        body += [f'<text x="{LEFT - 8}" y="{y + 15}" text-anchor="end" {FONT}>'
                 f'{escape(str(row.run))} {escape(str(row.rate))}</text>',
                 f'<rect x="{LEFT}" y="{y + 4}" width="{x(1.0) - LEFT:.1f}" height="16" fill="{TRACK}"/>',
                 f'<rect class="og-rate" x="{LEFT}" y="{y + 4}" width="{max(x(share) - LEFT, 1.0):.1f}" height="16" '
                 f'fill="{colour}"/>',
                 f'<text x="{WIDTH - RIGHT + 8}" y="{y + 15}" {FONT}>{percent(share)}: '
                 f'{_or_zero(row.measured_tps):,.2f} of at most {_or_zero(row.ceiling_tps):,.2f} tokens/s'
                 f'{" ABOVE" if share > 1 else ""}</text>']
    bottom = TOP + ROW_H * len(shown)
    body += [f'<line x1="{x(1.0):.1f}" y1="{TOP}" x2="{x(1.0):.1f}" y2="{bottom}" stroke="#333" '
             'stroke-dasharray="5,4"/>',
             f'<text x="{x(1.0):.1f}" y="{bottom + 14}" text-anchor="middle" {FONT}>upper bound (100%)</text>',
             f'<text x="{LEFT}" y="{bottom + 14}" text-anchor="middle" {FONT}>0</text>']
    return (f'<svg class="og-plot og-rates" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
            'role="img" aria-label="measured rates against the link ceiling">' + "".join(body) + "</svg>")
