"""Byte units: the one place GiB and MiB are defined, and the way every message shows a byte count."""
from __future__ import annotations

GIB = 2**30
MIB = 2**20


def gib(n_bytes: float | int | None) -> str:
    """Bytes shown as GiB with two decimals, the unit every message uses."""
    if n_bytes is None:
        return "unknown"
    return f"{n_bytes / GIB:,.2f} GiB"


def size_text(n_bytes: int) -> str:
    """Bytes below a GiB in MiB (an 8 MiB limit, a 256 MiB BAR), the rest as gib() shows them."""
    return f"{n_bytes / MIB:,.0f} MiB" if n_bytes < GIB else gib(n_bytes)
