"""One timer for one connection, for whichever of its deadlines applies now (idle, head, body, ...).

A deadline is moved by writing it down; the timer, when it fires, re-arms itself for a deadline that moved
later. A sliding deadline ("no progress for N s") moves with each `progress()` call, which only notes the
time: a body or an engine answer making progress costs no timer call.
"""
from __future__ import annotations

import asyncio
from typing import Callable


class Deadline:
    """`set(kind, seconds)` replaces the deadline; `expired(kind)` is called once it passes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, expired: Callable[[str], None]):
        self._loop, self._expired = loop, expired
        self._timer: asyncio.TimerHandle | None = None
        self.kind: str | None = None
        self._at = 0.0
        self._window: float | None = None  # for a sliding deadline: seconds after the last progress
        self._progress = 0.0

    def set(self, kind: str, seconds: float, sliding: bool = False) -> None:
        """The deadline is now `kind`, `seconds` from now (and, if sliding, from each later progress)."""
        self.kind, self._window = kind, seconds if sliding else None
        self._at = when = self._loop.time() + seconds
        if self._timer is None or self._timer.when() > when:
            self.cancel()
            self._timer = self._loop.call_at(when, self._fire)

    def progress(self) -> None:
        self._progress = self._loop.time()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        due = self._at if self._window is None else max(self._at, self._progress + self._window)
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._fire)
            return
        kind, self.kind = self.kind, None
        assert kind is not None  # set() names the deadline before it arms the timer
        self._expired(kind)
