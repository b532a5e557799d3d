"""Pure: the boot log's facts as one table, the only one the kit says them from: the load phase's terminal line,
report.html's boot section and summary-share.md's boot line each lay out the same rows, with the same figures
in the same words. A row whose figure the log did not print reads NOT_REPORTED (the terminal line leaves it out).
"""
from __future__ import annotations

from typing import Callable

from onegpu.record.sections_load import BootFacts

NOT_REPORTED = "not reported in the log"


def _gib(value: float) -> str:
    return f"{value:,.2f} GiB"


def _tokens(value: int | float | None) -> str:
    return f"{int(value or 0):,} tokens"


# (label, the figure the row stands on, what the row says); the order is the order the engine logs them in.
ROWS: tuple[tuple[str, Callable[[BootFacts], int | float | None], Callable[[BootFacts], str]], ...] = (
    ("weights", lambda f: f.load_gib,
     lambda f: f"{_gib(f.load_gib or 0)} loaded in {f.load_s or 0:,.1f} s"),
    ("CPU offload", lambda f: f.cpu_offload_gib, lambda f: f"{_gib(f.cpu_offload_gib or 0)} of parameters"),
    ("KV cache pool", lambda f: f.kv_cache_gib, lambda f: f"{_gib(f.kv_cache_gib or 0)} = {_tokens(f.kv_cache_tokens)}"),
    ("maximum concurrency", lambda f: f.max_concurrency,
     lambda f: f"{f.max_concurrency or 0:,.2f}x at {_tokens(f.concurrency_tokens)}"),
)


def boot_fact_rows(facts: BootFacts | None) -> list[tuple[str, str | None]]:
    """(label, what the log says) for every row; None where the log did not print the row's figure."""
    facts = facts or BootFacts()
    return [(label, say(facts) if figure(facts) is not None else None) for label, figure, say in ROWS]


def terminal_line(facts: BootFacts | None, elapsed_s: float) -> str:
    """The load phase's fact line: how long the boot took, then every row the log printed."""
    return "; ".join([f"engine ready on its Unix socket after {elapsed_s:,.1f} s",
                      *(f"{label} {said}" for label, said in boot_fact_rows(facts) if said is not None)])


def share_line(facts: BootFacts | None, ready_after: str) -> str:
    """summary-share.md's boot line (numbers and the table's own words only)."""
    return "; ".join([f"ready after {ready_after}",
                      *(f"{label} {said or NOT_REPORTED}" for label, said in boot_fact_rows(facts))])
