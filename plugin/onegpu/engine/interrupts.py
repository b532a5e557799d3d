"""SIGTERM as Ctrl-C: a SIGTERM to pytest raises KeyboardInterrupt in the main thread, so pytest ends the
session through its normal path and every finalizer (container stop and removal first) runs.

Python's default for SIGTERM is to die at once, which would leave the engine container running. While a
container is being taken down the guard is "shielded": a second signal is remembered, not raised, so it
cannot cut the removal short.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


class SigtermGuard:
    """Installs the handler on `install()` (main thread only), restores the previous one on `uninstall()`."""

    def __init__(self):
        self._previous = None
        self._installed = False
        self._shield_depth = 0
        self._held = 0  # signals that arrived while shielded
        self.received = 0

    def install(self) -> bool:
        """True if installed (False outside the main thread, where signals cannot be handled)."""
        if self._installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self._installed = True
        return True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else signal.SIG_DFL)
            self._installed = False

    def _handle(self, signum, frame) -> None:
        self.received += 1
        if self._shield_depth:
            self._held += 1  # raised when the teardown is done
            return
        raise KeyboardInterrupt("SIGTERM received: stopping the kit's containers and ending the session")

    @contextmanager
    def shield(self):
        """Hold SIGTERM back while the block runs (a container is being stopped and removed); a SIGTERM that
        came meanwhile is raised as KeyboardInterrupt when the block is done."""
        self._shield_depth += 1
        try:
            yield
        finally:
            self._shield_depth -= 1
            if not self._shield_depth and self._held and self._installed:
                self._held = 0
                raise KeyboardInterrupt("SIGTERM received: the kit's containers are down; ending the session")


GUARD = SigtermGuard()
