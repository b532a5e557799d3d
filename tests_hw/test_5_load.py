"""Phase 5, the load: the engine container boots within its deadline and its boot log is kept and read."""
import pytest

pytestmark = [pytest.mark.approve_load, pytest.mark.phase("load")]


def test_engine_is_ready_within_the_boot_deadline(engine):
    assert engine.alive(), engine.state()


def test_boot_log_is_kept_and_says_the_server_started(engine):
    assert engine.log_path.stat().st_size > 0
    assert engine.boot.server_started, "the engine answers /health but its boot log has no server start line"
