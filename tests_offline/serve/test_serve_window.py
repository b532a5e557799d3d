"""The serve window: connection-file states, the STOP/deadline watch, closing, and the pytest session.

The engine behind the adapter is the in-process double on a real Unix socket; the session test runs
`pytest -m "approve_load and serve"` on the real plugin with the engine fixture pointed at that double.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import stat
import threading
import time

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.serve.window import (
    STOP_FILE,
    ConnectionFile,
    ServeWindow,
    StateError,
    WindowNotReady,
    close_reason,
    hold_open,
    next_state,
)
from tests_offline.fake_engine import FakeEngine, call
from tests_offline.paths import REPO_ROOT

REPO_ROOT = REPO_ROOT


@pytest.fixture
def engine():
    fake = FakeEngine()
    yield fake
    fake.close()


def open_window(tmp_path, engine, window_s=600.0, gone=None, grace_s=5.0) -> ServeWindow:
    return ServeWindow(tmp_path, engine.socket_path, "fake-org/fake-model", window_s,
                       engine_state=lambda: gone[0] if gone else None, grace_s=grace_s)


def test_connection_state_moves_only_forward():
    assert next_state(None, "STARTING") == "STARTING"
    assert next_state("STARTING", "READY") == "READY" and next_state("READY", "CLOSED") == "CLOSED"
    assert next_state("STARTING", "CLOSED") == "CLOSED"  # never ready, closed with its reason
    for current, new in [(None, "READY"), ("READY", "STARTING"), ("CLOSED", "READY"), ("CLOSED", "CLOSED"),
                         ("STARTING", "OPEN")]:
        with pytest.raises(StateError, match=f"from {current} to {new}"):
            next_state(current, new)


def test_close_reasons_in_order_stop_engine_deadline():
    gone = {"status": "exited", "exit_code": 137, "oom_killed": True}
    assert "STOP file appeared" in close_reason(True, 0, 10, 10, gone)
    assert "exit code 137, OOM-killed True" in close_reason(False, 0, 10, 10, gone)
    assert close_reason(False, 10, 10, 10, None) == "the deadline passed (10 s after READY)"
    assert close_reason(False, 9.9, 10, 10, None) is None


def test_connection_file_is_private_and_complete(tmp_path):
    file = ConnectionFile(tmp_path / "connection-private.json", "http://127.0.0.1:5", "k", "org/m", 60)
    file.move("STARTING")
    assert stat.S_IMODE(os.stat(file.path).st_mode) == 0o600
    doc = json.loads(file.path.read_text())
    assert (doc["state"], doc["url"], doc["openai_base_url"], doc["api_key"], doc["model"]) == (
        "STARTING", "http://127.0.0.1:5", "http://127.0.0.1:5/v1", "k", "org/m")
    assert doc["deadline"] is None  # counted from READY, so unknown before it
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically, no leftovers


def test_ready_only_once_health_answers_200_through_the_adapter(tmp_path, engine):
    engine.health_status = 503
    window = open_window(tmp_path, engine)
    try:
        assert json.loads(window.connection_path.read_text())["state"] == "STARTING"
        waiter = threading.Thread(target=window.wait_ready)
        waiter.start()
        time.sleep(1.2)
        assert json.loads(window.connection_path.read_text())["state"] == "STARTING"
        started_health_at = time.time()
        engine.health_status = 200
        waiter.join(10)
        doc = json.loads(window.connection_path.read_text())
        assert doc["state"] == "READY" and len(doc["api_key"]) == 43  # secrets.token_urlsafe(32)
        ready = dt.datetime.fromisoformat(doc["ready_at"]).timestamp()
        assert ready >= int(started_health_at)
        assert dt.datetime.fromisoformat(doc["deadline"]).timestamp() - ready == 600
        assert call(window.adapter.port, "GET", "/v1/models", key=doc["api_key"])[0] == 200
    finally:
        window.close("test over")


def test_never_ready_closes_with_the_reason(tmp_path, engine):
    engine.health_status = 500
    window = open_window(tmp_path, engine)
    with pytest.raises(WindowNotReady, match="did not answer 200 within 1 s"):
        window.wait_ready(timeout_s=1)
    doc = json.loads(window.connection_path.read_text())
    assert doc["state"] == "CLOSED" and doc["closed_reason"].startswith("never ready")


def test_deadline_counts_from_ready_not_from_start(tmp_path, engine):
    engine.health_status = 503
    window = open_window(tmp_path, engine, window_s=0.5)
    threading.Timer(1.0, lambda: setattr(engine, "health_status", 200)).start()
    window.wait_ready()
    reason = window.wait(poll_s=0.05)
    waited = time.monotonic() - window.ready_mono
    window.close(reason)
    assert reason == "the deadline passed (0.5 s after READY)" and 0.5 <= waited < 1.0


def test_stop_file_closes_the_window_and_later_calls_find_it_closed(tmp_path, engine):
    window = open_window(tmp_path, engine)
    window.wait_ready()
    key = window.key
    threading.Timer(0.3, lambda: (tmp_path / STOP_FILE).touch()).start()
    lines = hold_open(window)
    doc = json.loads(window.connection_path.read_text())
    assert doc["state"] == "CLOSED" and "STOP file appeared" in doc["closed_reason"]
    assert lines[0].startswith("serve window CLOSED: a STOP file appeared")
    assert "1 calls (1 forwarded" in lines[1]  # the READY probe itself went through the adapter
    with pytest.raises(ConnectionRefusedError):
        call(window.adapter.port, "GET", "/health", key=key)
    with pytest.raises(StateError):
        window.file.move("READY")


def test_engine_ending_the_window_is_blocked_engine_died(tmp_path, engine):
    gone = [None]
    window = open_window(tmp_path, engine, gone=gone)
    window.wait_ready()
    gone[0] = {"status": "exited", "exit_code": 1, "oom_killed": False}
    with pytest.raises(Blocked) as caught:
        hold_open(window)
    assert caught.value.code == "ENGINE_DIED"
    assert json.loads(window.connection_path.read_text())["closed_reason"].startswith("the engine container stopped")


def test_closing_cuts_what_outlives_the_grace_period_and_says_so(tmp_path, engine):
    engine.chunks, engine.token_delay_s = 100, 0.1
    window = open_window(tmp_path, engine, grace_s=0.3)
    window.wait_ready()
    body = json.dumps({"model": "fake-org/fake-model", "prompt": "x", "stream": True}).encode()
    client = threading.Thread(target=lambda: pytest.raises(Exception, call, window.adapter.port, "POST",
                                                           "/v1/completions", body, key=window.key))
    client.start()
    while engine.chunks_sent == 0:
        time.sleep(0.01)
    closed = window.close("a STOP file appeared in the run folder")
    client.join(10)
    assert closed.cut_in_flight == 1 and closed.transport["cut"] == 1
    assert json.loads(window.connection_path.read_text())["closed_reason"].endswith("1 call(s) in flight were cut")


SERVE_CONFTEST = '''
import threading, time, json
from types import SimpleNamespace
import pytest
from tests_offline.fake_engine import FakeEngine

EVENTS = []

@pytest.fixture(scope="session")
def live_hardware():
    return None

@pytest.fixture(scope="session")
def settings():
    return SimpleNamespace(model_id="fake-org/fake-model", serve_window_s=300, request_timeout_s=60)

@pytest.fixture(scope="session")
def engine(kit):
    fake = FakeEngine()
    def stop_when_ready():
        path = kit.run_folder / "connection-private.json"
        while not (path.exists() and json.loads(path.read_text())["state"] == "READY"):
            time.sleep(0.05)
        (kit.run_folder / "STOP").touch()
    threading.Thread(target=stop_when_ready, daemon=True).start()
    handle = SimpleNamespace(socket_path=fake.socket_path, alive=lambda: True, state=lambda: None)
    yield handle
    EVENTS.append(json.loads((kit.run_folder / "connection-private.json").read_text())["state"])
    (kit.run_folder / "engine-teardown.json").write_text(json.dumps(EVENTS))
    fake.close()
'''


def test_serve_session_prints_the_file_waits_for_stop_and_records_why(kit_project):
    shutil.copy(REPO_ROOT / "tests_hw" / "test_8_serve.py", kit_project.path / "tests_hw")
    (kit_project.path / "tests_hw" / "conftest.py").write_text(SERVE_CONFTEST)
    out = kit_project.path / "run"
    result = kit_project.runpytest("-m", "approve_load and serve", "--out", str(out), "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*onegpu serve: connection file */connection-private.json (STARTING)*",
                                 "*onegpu serve: serve window READY at http://127.0.0.1:*",
                                 "*window CLOSED: a STOP file appeared in the run folder*"])
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["serve"]["state"] == "CLOSED" and "STOP" in receipt["serve"]["closed_reason"]
    assert receipt["serve"]["transport"]["calls"] >= 1 and "serve" in receipt["timings_s"]
    assert json.loads((out / "engine-teardown.json").read_text()) == ["CLOSED"]  # window closed before the engine
    assert stat.S_IMODE(os.stat(out / "connection-private.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out / "transport.jsonl").st_mode) == 0o600


def test_serve_window_is_not_opened_by_a_plain_approval(kit_project):
    shutil.copy(REPO_ROOT / "tests_hw" / "test_8_serve.py", kit_project.path / "tests_hw")
    (kit_project.path / "tests_hw" / "conftest.py").write_text(SERVE_CONFTEST)
    result = kit_project.runpytest("-m", "approve_load", "--out", str(kit_project.path / "run"), "-p", "no:randomly")
    result.assert_outcomes(deselected=2)
