"""The live progress line of long steps (hashing, booting): rewritten in place on a terminal; in a CI log a
plain line at most every CI_INTERVAL_S, so the log stays readable."""
from __future__ import annotations

import time
from contextlib import nullcontext

CI_INTERVAL_S = 10.0  # without a terminal, one plain progress line per this many seconds


class TerminalProgress:
    """The live hashing line: rewritten in place on a terminal; a plain line every CI_INTERVAL_S in CI logs."""

    def __init__(self, config):
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        self.capture = config.pluginmanager.get_plugin("capturemanager")
        self.tty = bool(self.reporter is not None and self.reporter.isatty)
        self.last: float | None = None

    def __call__(self, line: str, final: bool) -> None:
        if self.reporter is None:
            return
        now = time.monotonic()
        if not self.tty and not final and self.last is not None and now - self.last < CI_INTERVAL_S:
            return
        first, self.last = self.last is None, now
        # Fixture setup runs under output capture: the line must reach the real terminal.
        with self.capture.global_and_fixture_disabled() if self.capture else nullcontext():
            if first:
                self.reporter.ensure_newline()
            if self.tty:
                self.reporter.rewrite(f"onegpu {line}", erase=True)
                if final:
                    self.reporter.write_line("")
            else:
                self.reporter.write_line(f"onegpu {line}")
