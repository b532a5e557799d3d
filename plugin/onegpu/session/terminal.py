"""Pure: the lines a kit session prints at the end: facts, tables, the verdict table, where the evidence is."""
from __future__ import annotations

from typing import TYPE_CHECKING

from onegpu.core.outcomes import PHASES
from onegpu.record.receipt import record_of
from onegpu.record.verdicts import phase_verdicts, run_verdict

if TYPE_CHECKING:  # the type only: the session module imports pytest, and this module is pure
    from onegpu.session.state import KitSession


def summary_lines(kit: KitSession) -> list[str]:
    receipt, run_folder = kit.receipt, kit.run_folder
    assert receipt is not None and run_folder is not None, "a session's summary comes after its run folder opened"
    record = record_of(receipt.data)
    lines: list[str] = []
    for banner in record.banners:
        lines.append(f"*** {banner} ***")
    shown = [(phase, line) for phase in PHASES for line in kit.shown[phase]]
    if shown:
        lines.append("")
        lines.append("onegpu facts")
        lines += [f"  [{phase}] {line}" for phase, line in shown]
    blocked: dict[str, int] = {}
    for test in record.tests.values():
        if test.outcome == "blocked":
            key = f"BLOCKED {test.code}: {test.message}"
            blocked[key] = blocked.get(key, 0) + 1
    if blocked:
        lines.append("")
        lines.append("onegpu blocked facts")
        lines += [f"  {reason} ({n} test{'s' if n > 1 else ''})" for reason, n in blocked.items()]
    for title, block in kit.tables.items():
        lines.append("")
        lines.append(title)
        lines += [f"  {row}" for row in block]
    for warning in record.warnings:
        lines.append(f"WARNING: {warning}")
    share = run_folder / "summary-share.md"
    if share.exists():
        lines.append(f"public summary: {share} (the one to post; review report.html before sharing it)")
    phases = record.phases or record_of({"phases": phase_verdicts(record.tests)}).phases
    lines.append("")
    lines.append("onegpu verdicts (one line per phase)")
    for phase in PHASES:
        p = phases[phase]
        detail = f" {p.code}: {p.message}" if p.code else (f": {p.message}" if p.message else "")
        lines.append(f"  {phase:<8} {p.verdict}{detail}")
    lines.append(f"  run      {record.verdict or run_verdict(phases, record.capacity)}")
    lines.append(f"run folder: {run_folder}")
    lines.append(f"report:     {run_folder / 'report.html'}")
    return lines


def deselected_line(kit: KitSession) -> str:
    """What the kit deselected, adding up to the kit's part of pytest's "N deselected" header count."""
    parts = []
    if kit.held_back and not kit.approved:
        parts.append(f"{kit.held_back} that act (hash, start a container, send requests): approve with: pytest -m "
                     "approve_load --settings=s.json [--requests=r.jsonl --protocol=p.json] (serve window: -m "
                     "\"approve_load and serve\")")
    elif kit.held_back:
        parts.append(f"{kit.held_back} that act but are not part of this approval (the batch needs --requests and "
                     "--protocol; the serve window needs -m \"approve_load and serve\")")
    if kit.held_for_options_count:
        parts.append(f"{kit.held_for_options_count} that need an option not given "
                     f"({', '.join(kit.held_for_options)})")
    if kit.held_for_protocol:
        parts.append(f"{kit.held_for_protocol} that check the multi-GPU protocol (the settings declare no multi_gpu)"
                     if kit.protocol_held == "multi_gpu" else
                     f"{kit.held_for_protocol} that claim the one-GPU protocol (the settings declare multi_gpu)")
    total = kit.held_back + kit.held_for_options_count + kit.held_for_protocol
    return f"onegpu: {total} test(s) deselected: " + "; ".join(parts)
