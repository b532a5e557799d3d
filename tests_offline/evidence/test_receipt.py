"""The receipt's journal: each change lands on disk as one fsynced line (what changed, not the whole receipt),
receipt.json is written whole at the start and the end, and a session killed in between is read back whole; the
reaper's watcher (onegpu.session.reaper_watch) closes a dead session's receipt, which still reads as a record."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import signal

from onegpu.engine import reaper
from onegpu.evidence.journal import JOURNAL, apply_journal, read_receipt
from onegpu.evidence.receipt import Receipt
from onegpu.evidence.rundir import create_run_folder
from onegpu.record.receipt import check_write, read_record
from onegpu.report import compare_cli
from onegpu.session.reaper_watch import close_evidence

HEADER = {"kit": {"name": "onegpu"}, "kind": "scan"}


def test_each_change_is_one_journal_line_of_its_own_size_and_save_folds_it(tmp_path):
    folder = create_run_folder(tmp_path, "scan")
    receipt = Receipt(folder, HEADER, check_write)
    big = {"shards": [{"name": f"model-{i:05d}.safetensors", "size_bytes": 4_982_340_272} for i in range(1000)]}
    receipt.set("checkpoint", big)
    size_after_big = (folder / JOURNAL).stat().st_size
    receipt_before = (folder / "receipt.json").read_bytes()
    for n in range(50):
        receipt.record_test(f"tests_hw/test_x.py::test_{n}", {"phase": "machine", "outcome": "passed"})
    receipt.warn("w")
    receipt.warn("w")  # already there: nothing written
    receipt.add(["shown", "plan"], "a line")
    receipt.update("timings_s", hashing=1.5)
    # The big section was written once; fifty outcomes cost fifty short lines, not fifty receipts.
    grown = (folder / JOURNAL).stat().st_size - size_after_big
    assert grown < 50 * 120 + 200
    assert len((folder / JOURNAL).read_text().splitlines()) == 1 + 50 + 1 + 1 + 1
    assert (folder / "receipt.json").read_bytes() == receipt_before  # not rewritten per change
    on_disk = read_receipt(folder)
    assert on_disk == json.loads(json.dumps(receipt.data))
    assert on_disk["warnings"] == ["w"] and on_disk["shown"] == {"plan": ["a line"]}
    receipt.save()
    assert not (folder / JOURNAL).exists()
    assert json.loads((folder / "receipt.json").read_text()) == on_disk


def test_journal_lines_are_idempotent_and_a_torn_last_line_is_ignored(tmp_path):
    folder = create_run_folder(tmp_path, "scan")
    receipt = Receipt(folder, HEADER, check_write)
    receipt.record_test("t::a", {"outcome": "passed"})
    receipt.add(["warnings"], "careful")
    receipt.update("engine", reaper_pid=7)
    journal = (folder / JOURNAL).read_text()
    whole = read_receipt(folder)
    # Folding the same lines into a receipt that already holds them changes nothing (a kill between the
    # whole write and the journal's removal leaves both).
    assert apply_journal(json.loads(json.dumps(whole)), folder) == whole
    with open(folder / JOURNAL, "a") as fh:
        fh.write('["update","tests",{"t::b":{"outc')  # a write cut by the kill
    assert read_receipt(folder) == whole
    assert journal.count("\n") == 3


def test_a_resumed_folder_keeps_the_killed_session_whole_under_earlier_sessions(tmp_path):
    folder = create_run_folder(tmp_path, "batch")
    first = Receipt(folder, HEADER, check_write)
    first.record_test("t::a", {"outcome": "passed"})  # then the process dies: no save
    second = Receipt(folder, {**HEADER, "kind": "batch"}, check_write)
    assert not (folder / JOURNAL).exists()  # folded into the earlier session, never replayed onto this one
    (earlier,) = second.data["earlier_sessions"]
    assert earlier["tests"] == {"t::a": {"outcome": "passed"}}
    assert second.data["tests"] == {}
    second.record_test("t::b", {"outcome": "passed"})
    assert read_receipt(folder)["tests"] == {"t::b": {"outcome": "passed"}}


def test_a_killed_scan_session_is_read_back_with_every_outcome_that_landed(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_1_killed": (
        "import os, signal, pytest\n"
        "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_first():\n    pass\n"
        "def test_second_is_killed():\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")})
    result = kit_project.runpytest_subprocess("-m", "scan")
    assert result.ret == -signal.SIGKILL
    (folder,) = (kit_project.path / "runs").iterdir()
    assert json.loads((folder / "receipt.json").read_text())["tests"] == {}  # only the opening whole write
    tests = read_receipt(folder)["tests"]
    assert tests["tests_hw/test_1_killed.py::test_first"]["outcome"] == "passed"
    assert "tests_hw/test_1_killed.py::test_second_is_killed" not in tests
    evidence = compare_cli.load_run(folder)
    assert evidence.receipt.tests == read_record(folder).tests
    assert evidence.receipt.tests["tests_hw/test_1_killed.py::test_first"].outcome == "passed"
    assert oct(os.stat(folder / JOURNAL).st_mode & 0o777) == "0o600"


def test_the_reaper_closes_a_dead_sessions_receipt_with_its_journal_folded_in(tmp_path):
    folder = create_run_folder(tmp_path, "approve")
    receipt = Receipt(folder, HEADER, check_write)
    receipt.update("engine", container_id="c1")
    receipt.record_test("t::load", {"outcome": "passed"})  # then the owner is killed
    close_evidence(folder, "owner died", {"exit_code": 137})
    assert not (folder / JOURNAL).exists()
    closed = json.loads((folder / "receipt.json").read_text())
    assert closed["engine"] == {"container_id": "c1", "end": {"exit_code": 137}}
    assert closed["tests"] == {"t::load": {"outcome": "passed"}}
    assert closed["reaper"]["closed"] is True and closed["verdict"].startswith("INTERRUPTED")
    record = read_record(folder)  # what the reaper wrote is declared: the report reads it as a record
    assert record.reaper is not None and record.reaper.reason == "owner died" and record.finished_at
    assert record.engine is not None and record.engine.end is not None and record.engine.end.exit_code == 137


def test_the_reaper_adds_its_end_to_the_one_the_session_recorded(tmp_path):
    """An end the session recorded before it died is kept; the reaper's end as its watcher writes it (what `reap`
    did, when and why) is declared by the record."""
    folder = create_run_folder(tmp_path, "approve")
    receipt = Receipt(folder, HEADER, check_write)
    receipt.update("engine", container_id="c1", end={"status": "running", "log_chars": 10})
    end = {"removed": True, "removed_by": "reaper", "removed_at": "t2", "reason": "owner died"}
    close_evidence(folder, "owner died", end)
    closed = json.loads((folder / "receipt.json").read_text())
    assert closed["engine"]["end"] == {"status": "running", "log_chars": 10, **end}
    assert closed["verdict"] == "INTERRUPTED: the session never finished: owner died"
    engine = read_record(folder).engine
    assert engine is not None and engine.end is not None
    assert (engine.end.status, engine.end.removed_by, engine.end.log_chars) == ("running", "reaper", 10)


def test_the_reaper_closes_a_serve_window_the_dead_session_left_ready(tmp_path):
    folder = create_run_folder(tmp_path, "serve")
    receipt = Receipt(folder, HEADER, check_write)
    receipt.set("serve", {"state": "READY", "ready_at": "t0", "closed_at": None, "closed_reason": None})
    close_evidence(folder, "owner died", {"exit_code": 137})
    serve = json.loads((folder / "receipt.json").read_text())["serve"]
    assert serve["state"] == "CLOSED" and serve["closed_reason"] == "owner died" and serve["ready_at"] == "t0"
    assert serve["engine_end"] == {"exit_code": 137} and serve["closed_at"]
    record = read_record(folder).serve
    assert record is not None and record.state == "CLOSED" and record.engine_end is not None
    assert record.engine_end.exit_code == 137


def test_the_reaper_leaves_a_window_the_session_closed_as_it_was(tmp_path):
    folder = create_run_folder(tmp_path, "serve")
    receipt = Receipt(folder, HEADER, check_write)
    closed = {"state": "CLOSED", "closed_at": "t1", "closed_reason": "STOP file", "engine_end": None}
    receipt.set("serve", dict(closed))
    close_evidence(folder, "owner died", {"exit_code": 137})
    assert json.loads((folder / "receipt.json").read_text())["serve"] == closed


def test_the_reaper_starts_its_watcher_by_a_module_name_that_runs():
    """engine.reaper names the watcher's module (it lies a layer above the engine): the name resolves, and the
    module is the watcher."""
    spec = importlib.util.find_spec(reaper.WATCHER)
    assert spec is not None and spec.origin and spec.origin.endswith("onegpu/session/reaper_watch.py")
    watcher = importlib.import_module(reaper.WATCHER)
    assert watcher.close_evidence is close_evidence and callable(watcher.main)
