"""The pytest-timeout backstop of an approved session: a limit above every deadline the kit keeps itself.

The kit's own deadlines (boot, requests, serve window) end things cleanly; pytest-timeout (signal method, so
finalizers run and the container comes down) only catches what hangs outside them. Its limit therefore
sums every deadline plus an allowance for hashing, which has no deadline of its own: a slow disk reading a
terabyte takes hours, so the allowance assumes a slow 25 MB/s.
"""
from __future__ import annotations

import os
from pathlib import Path

from onegpu.plan.settings import Settings

HASHING_FLOOR_BYTES_PER_S = 25_000_000
SLACK_S = 600  # probe, leftovers, teardown, report


def checkpoint_bytes(root: Path) -> int:
    """Apparent size of every file under the checkpoint (links followed; nothing is read)."""
    total = 0
    for folder, _dirs, files in os.walk(root, followlinks=True):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


def backstop_s(settings: Settings, checkpoint_size: int) -> int:
    """Seconds for pytest-timeout on each acting test: all deadlines + hashing at the floor rate + slack."""
    hashing = checkpoint_size // HASHING_FLOOR_BYTES_PER_S
    return (settings.boot_deadline_s + settings.deadline_s + settings.serve_window_s + hashing + SLACK_S)
