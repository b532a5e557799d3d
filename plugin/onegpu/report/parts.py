"""Pure: the small HTML pieces the report sections are built from; every value passes through `e` (escaped)."""
from __future__ import annotations

import re
from html import escape
from typing import TypeGuard, TypeVar

from onegpu.record.base import Section
from onegpu.record.receipt import ReceiptRecord

S = TypeVar("S", bound=Section)

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # terminal colour and cursor sequences in engine log lines
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

STATUS_CLASS = {"OK": "og-ok", "PASSED": "og-ok", "BLOCKED": "og-blocked", "UNKNOWN": "og-unknown",
                "FAILED": "og-bad", "INTERRUPTED": "og-bad", "NOT RUN": "og-notrun", "SKIPPED": "og-unknown", "WARNING": "og-blocked"}

# Scoped to .og, plus the page order: pytest-html's own styles stay as they are. The kit's summary comes right
# after the title, then pytest-html's filters and results table, then its environment table (Python, plugins).
CSS = """
body{display:flex;flex-direction:column}
body>h1{order:0;color:#a00;font-size:20px}body>p{order:1}body>.summary{order:2}
#results-table{order:3}#environment-header{order:4}#environment{order:5}footer{order:6}
.og{color:#222;font-size:13px;max-width:1250px}
.og h3{font-size:15px;margin:18px 0 6px;padding-bottom:2px;border-bottom:2px solid #ccc;color:#111}
.og h4{font-size:13px;margin:10px 0 4px;color:#111}
.og table{border-collapse:collapse;margin:4px 0}
.og td,.og th{border:1px solid #ddd;padding:3px 6px;vertical-align:top;text-align:left}
.og th{background:#f0f0f0}
.og td.og-k{color:#555;white-space:nowrap}
.og-review{background:#fff3cd;border:2px solid #c9a400;padding:8px;font-weight:bold;font-size:14px}
.og-banner{background:#fde2e1;border:2px solid #c0392b;color:#7b1d15;padding:8px;font-weight:bold;font-size:14px}
.og-verdict{font-size:16px;font-weight:bold;padding:6px;border-left:6px solid #999}
p.og-ok,.og-verdict.og-ok{border-color:#2e7d32}p.og-blocked,.og-verdict.og-blocked{border-color:#e67e22}
.og-verdict.og-bad{border-color:#c0392b}
td.og-ok,span.og-ok{color:#2e7d32;font-weight:bold}
td.og-blocked,span.og-blocked,p.og-blocked{color:#b35900;font-weight:bold}
td.og-bad{color:#c0392b;font-weight:bold}td.og-unknown{color:#8a6d00;font-weight:bold}td.og-notrun{color:#888}
.og-notrun-text{color:#666;font-style:italic}
.og-unscored{display:inline-block;background:#444;color:#fff;padding:1px 6px;font-weight:bold;font-size:12px}
.og-note{color:#555}.og-num{font-family:monospace}
.og-pre{background:#f6f6f6;border:1px solid #ddd;padding:6px;white-space:pre-wrap;word-break:break-all;
font-size:12px;color:#222;max-height:420px;overflow:auto}
.og-plot{border:1px solid #ddd;background:#fff}
.og-alarm{background:#fde2e1;border-left:6px solid #c0392b;color:#7b1d15;padding:6px;font-weight:bold}
li.og-bad{color:#c0392b}
.og-operator{display:inline-block;background:#1f4e79;color:#fff;padding:1px 6px;font-weight:bold;font-size:12px}
"""


def page_style() -> str:
    return f"<style>{CSS}</style>"


def e(value) -> str:
    """Escaped text of any value (None reads as 'not recorded'); terminal colour codes dropped, other control
    characters shown as \\xNN."""
    text = ANSI.sub("", "not recorded" if value is None else str(value))
    return escape(CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text), quote=True)


def text(value) -> str:
    """Plain text of a value for use inside a longer line (None reads as 'not recorded'); escape the line."""
    return "not recorded" if value is None else str(value)


def num(value) -> str:
    """An integer with thousands separators; anything else as text."""
    if isinstance(value, bool) or value is None:
        return "not recorded" if value is None else str(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def section(key: str, title: str, body: str) -> str:
    """One titled block; `body` is already HTML (built from escaped parts)."""
    return f'<div class="og" id="og-{escape(key)}"><h3>{escape(title)}</h3>{body}</div>'


def kv(rows: list[tuple[str, object]]) -> str:
    """A two-column table of label and value."""
    cells = "".join(f'<tr><td class="og-k">{e(k)}</td><td>{e(v)}</td></tr>' for k, v in rows)
    return f"<table>{cells}</table>"


def table(header: list[str], rows: list[list], status_col: int | None = None) -> str:
    """A table; the cell in `status_col` is coloured by its status word (OK, BLOCKED, UNKNOWN, ...)."""
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            cls = STATUS_CLASS.get(str(cell)) if i == status_col else None
            cells.append(f'<td class="{cls}">{e(cell)}</td>' if cls else f"<td>{e(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not rows:
        body.append(f'<tr><td colspan="{len(header)}" class="og-notrun">none</td></tr>')
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def recorded(part: S | None) -> TypeGuard[S]:
    """Whether a receipt section (or a part of one) holds at least one value: one written as {} reads as not
    recorded, as one left out does."""
    return part is not None and part != type(part)()


def held(part: S | None) -> S | None:
    """A section as recorded, or None where it holds nothing."""
    return part if recorded(part) else None


def fields(part: Section | None) -> list[tuple[str, object]]:
    """The keys a section holds, with their values, in the order its type declares them (a key left out, or
    written null, reads None and is not listed)."""
    if part is None:
        return []
    return [(k, v) for k in part.__struct_fields__ if (v := getattr(part, k)) is not None]


def _why_not_run(receipt: ReceiptRecord, phase: str) -> str:
    reasons = sorted({t.message or "" for t in receipt.tests.values()
                      if t.phase == phase and t.outcome == "deselected"} - {""})
    return "; ".join(reasons) if reasons else "no test of this phase was selected in this session"


def absent(receipt: ReceiptRecord, phase: str, what: str = "") -> str:
    """Why a section has no data: its phase did not run, was blocked, failed, or recorded nothing."""
    p = receipt.phases.get(phase)
    verdict = p.verdict if p is not None else None
    lead = f"{what}: " if what else ""
    if p is None or verdict in (None, "NOT RUN"):
        why = _why_not_run(receipt, phase) if receipt.tests else "the session recorded no test outcome"
        text = f"{lead}not run (phase {phase}: {why})"
    elif verdict == "BLOCKED":
        text = f"{lead}not established: phase {phase} BLOCKED {p.code}: {p.message}"
    elif verdict in ("FAILED", "INTERRUPTED"):
        text = f"{lead}not established: phase {phase} {verdict}: {p.message}"
    else:
        text = f"{lead}not recorded (phase {phase}: {verdict})"
    return f'<p class="og-notrun-text">{e(text)}</p>'


def multi_gpu_protocol(receipt: ReceiptRecord) -> str | None:
    """The "N-GPU protocol (TP x PP)" a run declared, or None for the one-GPU protocol."""
    return (receipt.selection.protocol if receipt.selection is not None else None) or None


# What a multi-GPU run's measured figures are: the sampler reads rank 0's card, the boot log has a line per worker.
RANK0_GPU = "rank 0's GPU only"
ONE_WORKER = "one worker's log line (each worker logs its own)"
