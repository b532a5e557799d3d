"""Session fixture of the serve phase: the loopback adapter window on top of the engine fixture.

The window closes in its test (STOP file or deadline) or, failing that, when the session ends; either way
the connection file says CLOSED with the reason and the receipt's "serve" section says why. The engine
fixture's own teardown then stops and removes the container.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .batch import explain_death
from .glue import blocked_as_xfail
from .outcomes import Blocked

if TYPE_CHECKING:
    from .serve_window import ServeWindow, WindowClosed


def announce(config, line: str) -> None:
    """Print a line now, past pytest's output capture (the operator needs the path while the window waits)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    terminal = config.pluginmanager.getplugin("terminalreporter")
    if capture is None or terminal is None:
        print(line, flush=True)
        return
    with capture.global_and_fixture_disabled():
        terminal.ensure_newline()
        terminal.write_line(line)


def _record(kit, window: ServeWindow, closed: WindowClosed | None = None) -> None:
    doc = window.file.doc
    kit.receipt.set("serve", {
        "state": doc["state"], "connection_file": str(window.connection_path), "url": doc["url"],
        "model": doc["model"], "window_s": doc["window_s"], "ready_at": doc["ready_at"],
        "deadline": doc["deadline"], "closed_at": doc["closed_at"], "closed_reason": doc["closed_reason"],
        "cut_in_flight": closed.cut_in_flight if closed else None,
        "engine_end": window.engine_end,
        "transport": closed.transport if closed else None,
        "note": "the transport log is a record of calls through the adapter, not a grade",
    })
    if closed is not None and closed.ready_s is not None:
        kit.receipt.timing("serve", closed.ready_s)


@pytest.fixture(scope="session")
def serve_window(pytestconfig, live_hardware, engine, settings, kit):
    """The open serve window (READY); closed at session end if its test did not close it."""
    # Imported here: the adapter's asyncio and uvloop are for a serve session only, not every session's start.
    from .serve_window import ServeWindow, WindowNotReady, ready_line

    window = ServeWindow(kit.run_folder, str(engine.socket_path), settings.model_id, settings.serve_window_s,
                         engine_state=lambda: None if engine.alive() else engine.state(),
                         upstream_timeout_s=settings.request_timeout_s,
                         explain_end=lambda state: explain_death(engine, state))
    _record(kit, window)
    announce(pytestconfig, f"onegpu serve: connection file {window.connection_path} (STARTING)")
    try:
        try:
            window.wait_ready()
        except WindowNotReady as exc:
            if exc.engine_state is None:
                raise
            _record(kit, window)
            with blocked_as_xfail():
                raise Blocked(window.engine_end["code"], str(exc)) from None
        _record(kit, window)
        announce(pytestconfig, f"onegpu serve: {ready_line(window)}")
        yield window
    finally:
        closed = window.close("the session ended before the window closed itself (interrupted or failed)")
        _record(kit, window, closed)
        announce(pytestconfig, f"onegpu serve: window CLOSED: {window.file.doc['closed_reason']}")
