"""Pure: samples.jsonl lines -> one inline SVG of GPU memory and host RAM over time (no script, no external font).

Two panels share the time axis (seconds since the first sample): the selected GPU's used memory against its
total, and the host's available RAM with the container's memory. The timed phases (probe, hashing, load, canary,
batch, serve: the receipt's timeline, wall clock) are shaded bands across both. Long series are thinned to the
minimum and maximum of each time bucket, so peaks survive and a day of samples stays a small file.
"""
from __future__ import annotations

import math
from html import escape
from typing import Sequence

from onegpu.core.units import GIB

WIDTH, PANEL_H, LEFT, RIGHT, TOP, GAP, BOTTOM = 900, 170, 70, 20, 28, 52, 36
MAX_POINTS = 1200  # per series, after thinning
FONT = 'font-family="sans-serif" font-size="11"'  # a generic family: the viewer's own font, never fetched

PHASE_FILL = "#f5b041"  # the phase bands, drawn faint under the lines

# (sample key, label, colour) per panel
GPU_SERIES = [("gpu_used_bytes", "GPU memory used", "#c0392b")]
HOST_SERIES = [("host_available_bytes", "host available RAM", "#2471a3"),
               ("container_memory_bytes", "container memory", "#7d3c98")]


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _wall(samples: Sequence[dict]) -> bool:
    return any(_number(s.get("t")) is not None for s in samples)


def _clock(samples: Sequence[dict]) -> list[float | None]:
    """Seconds since the first sample: wall time `t` when present (it survives a resumed run), else elapsed_s."""
    times = [_number(s.get("t" if _wall(samples) else "elapsed_s")) for s in samples]
    known = [t for t in times if t is not None]
    start = min(known) if known else 0.0
    return [None if t is None else t - start for t in times]


def phase_bands(samples: Sequence[dict], timeline: dict | None) -> list[tuple[str, float, float]]:
    """(phase, start, end) in seconds since the first sample, for each timed phase that ends after it; none where
    the samples carry no wall time to place them by."""
    if not timeline or not _wall(samples):
        return []
    first = min(t for s in samples if (t := _number(s.get("t"))) is not None)
    bands = []
    for name, span in timeline.items():
        if isinstance(span, list) and len(span) == 2:
            start, end = _number(span[0]), _number(span[1])
            if start is not None and end is not None and end >= first and end >= start:
                bands.append((str(name), max(0.0, start - first), end - first))
    return sorted(bands, key=lambda b: b[1])


def series(samples: Sequence[dict], key: str) -> list[tuple[float, float]]:
    """(seconds, GiB) points of one sample field, in time order, thinned to at most MAX_POINTS."""
    points = sorted((t, v / GIB) for t, s in zip(_clock(samples), samples)
                    if t is not None and (v := _number(s.get(key))) is not None)
    return thin(points, MAX_POINTS)


def thin(points: list[tuple[float, float]], limit: int) -> list[tuple[float, float]]:
    """Keep the lowest and highest point of each of limit/2 equal time buckets (peaks are what matter)."""
    if len(points) <= limit:
        return points
    t0, t1 = points[0][0], points[-1][0]
    buckets: dict[int, list[tuple[float, float]]] = {}
    n = max(1, limit // 2)
    for p in points:
        index = min(n - 1, int((p[0] - t0) / ((t1 - t0) or 1) * n))
        buckets.setdefault(index, []).append(p)
    kept: list[tuple[float, float]] = []
    for group in buckets.values():
        low, high = min(group, key=lambda p: p[1]), max(group, key=lambda p: p[1])
        kept += sorted({low, high})
    return kept


def nice_ticks(high: float, count: int = 4) -> list[float]:
    """0 and round steps (1, 2 or 5 x 10^k) up to at least `high`."""
    if high <= 0:
        return [0.0, 1.0]
    raw = high / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return [i * step for i in range(int(math.ceil(high / step - 1e-9)) + 1)]


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == 0 else f"{value:,.1f}"


def _bands(top: int, bands: list[tuple[str, float, float]], x, labelled: bool) -> list[str]:
    out = []
    for i, (name, start, end) in enumerate(bands):
        left, right = x(start), x(end)
        out.append(f'<rect class="og-phase" x="{left:.1f}" y="{top}" width="{max(right - left, 1.0):.1f}" '
                   f'height="{PANEL_H}" fill="{PHASE_FILL}" fill-opacity="0.18" stroke="{PHASE_FILL}"/>')
        if labelled:  # staggered, so neighbouring short phases keep readable names
            out.append(f'<text x="{left + 3:.1f}" y="{top + 12 + 12 * (i % 3)}" {FONT} fill="#7e5109">'
                       f'{escape(name)}</text>')
    return out


def _panel(top: int, title: str, lines: list[tuple[str, str, list]], t_max: float, y_top: float | None,
           x_ticks: list[float], bands: Sequence[tuple[str, float, float]] = (), labelled: bool = False) -> list[str]:
    plot_w = WIDTH - LEFT - RIGHT
    values = [v for _, _, pts in lines for _, v in pts]
    y_ticks = nice_ticks(max([*values, y_top or 0.0]) if values else 1.0)
    y_max = y_ticks[-1] or 1.0

    def x(t: float) -> float:
        return LEFT + t / (t_max or 1.0) * plot_w

    def y(v: float) -> float:
        return top + PANEL_H - v / y_max * PANEL_H

    out = [f'<text x="{LEFT}" y="{top - 10}" {FONT} font-weight="bold">{escape(title)}</text>',
           f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" fill="#fbfbfb" stroke="#999"/>',
           *_bands(top, list(bands), x, labelled)]
    for v in y_ticks:
        out.append(f'<line x1="{LEFT}" y1="{y(v):.1f}" x2="{LEFT + plot_w}" y2="{y(v):.1f}" stroke="#e3e3e3"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end" {FONT}>{_fmt(v)} GiB</text>')
    for t in x_ticks:
        out.append(f'<line x1="{x(t):.1f}" y1="{top}" x2="{x(t):.1f}" y2="{top + PANEL_H}" stroke="#eee"/>')
        out.append(f'<text x="{x(t):.1f}" y="{top + PANEL_H + 14}" text-anchor="middle" {FONT}>{_fmt(t)} s</text>')
    if y_top is not None:
        out.append(f'<line x1="{LEFT}" y1="{y(y_top):.1f}" x2="{LEFT + plot_w}" y2="{y(y_top):.1f}" '
                   f'stroke="#555" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{LEFT + plot_w - 4}" y="{y(y_top) - 4:.1f}" text-anchor="end" {FONT}>'
                   f'card total {_fmt(y_top)} GiB</text>')
    legend_x = LEFT + 7 * len(title) + 24  # after the bold title (about 7 px a character at 11 px)
    if not values:
        out.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{top + PANEL_H / 2:.0f}" text-anchor="middle" {FONT} '
                   'fill="#777">no readings in the samples</text>')
    for label, colour, pts in lines:
        shown = label if pts else f"{label}: no readings"
        out.append(f'<rect x="{legend_x}" y="{top - 19}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{legend_x + 14}" y="{top - 10}" {FONT}>{escape(shown)}</text>')
        legend_x += 24 + 7 * len(shown)
        if len(pts) == 1:
            (t, v), = pts
            out.append(f'<circle cx="{x(t):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>')
        elif pts:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
    return out


def memory_plot(samples: Sequence[dict], timeline: dict | None = None) -> str | None:
    """The SVG element (a string), or None when no sample holds a GPU or host memory reading; `timeline` (the
    receipt's) marks the phases."""
    gpu = [(label, colour, series(samples, key)) for key, label, colour in GPU_SERIES]
    host = [(label, colour, series(samples, key)) for key, label, colour in HOST_SERIES]
    everything = [p for _, _, pts in gpu + host for p in pts]
    if not everything:
        return None
    bands = phase_bands(samples, timeline)
    t_max = max([t for t, _ in everything] + [end for _, _, end in bands])
    x_ticks = nice_ticks(t_max, 6) if t_max > 0 else [0.0]
    t_max = x_ticks[-1] if t_max > 0 else 1.0
    totals = [v / GIB for s in samples if (v := _number(s.get("gpu_total_bytes"))) is not None]
    height = TOP + 2 * PANEL_H + GAP + BOTTOM
    body = [*_panel(TOP, "selected GPU: memory used (NVML)", gpu, t_max, max(totals) if totals else None, x_ticks,
                    bands, labelled=True),
            *_panel(TOP + PANEL_H + GAP, "host: available RAM, and the engine container's memory", host, t_max,
                    None, x_ticks, bands),
            f'<text x="{LEFT + (WIDTH - LEFT - RIGHT) / 2:.0f}" y="{height - 6}" text-anchor="middle" {FONT}>'
            f'seconds since the first sample ({len(samples)} samples' +
            (f'; shaded: the timed phases {", ".join(escape(b[0]) for b in bands)}' if bands else "") + ')</text>']
    return (f'<svg class="og-plot" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="GPU memory and host RAM over time">'
            + "".join(body) + "</svg>")
