"""SIGTERM as Ctrl-C: a real SIGTERM to this process raises KeyboardInterrupt where the main thread is, and is
held back (then raised) while a container is being taken down."""
from __future__ import annotations

import os
import signal
import time

import pytest

from onegpu.engine.interrupts import SigtermGuard


@pytest.fixture
def guard():
    g = SigtermGuard()
    assert g.install()
    yield g
    g.uninstall()


def test_sigterm_interrupts_a_sleep_at_once(guard):
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    assert time.monotonic() - started < 5 and guard.received == 1


def test_sigterm_during_a_teardown_waits_for_it_then_interrupts(guard):
    finished = []
    with pytest.raises(KeyboardInterrupt, match="containers are down"):
        with guard.shield():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the teardown goes on
            finished.append(True)
    assert finished == [True]


def test_uninstall_restores_the_previous_handler():
    previous = signal.getsignal(signal.SIGTERM)
    g = SigtermGuard()
    g.install()
    assert signal.getsignal(signal.SIGTERM) != previous
    g.uninstall()
    assert signal.getsignal(signal.SIGTERM) == previous
