"""Phase 8, serve: the native-harness window behind the loopback adapter (KIT.md 7)."""
import pytest

from onegpu.serve import window as s

pytestmark = [pytest.mark.approve_load, pytest.mark.serve, pytest.mark.phase("serve")]


def test_adapter_answers_health_end_to_end_before_ready(serve_window, fact):
    fact(s.ready_line, serve_window)


def test_window_stays_open_until_stop_file_or_deadline(serve_window, fact):
    fact(s.hold_open, serve_window)
