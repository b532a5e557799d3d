"""What a user sees from two sessions, against the snapshots recorded before: a scan of the flash demo checkpoint on
the research target's replayed profile, and an approve_load session on the stub engine. The run
folder's files (their names, modes and contents), the terminal lines and the exit code must be the same, once
devkit/run_folder_snapshot.py has put placeholders where time, the run, the throwaway folder or this machine
enter. Its RULES table says what is replaced and why; tests_offline/data/run_folder_snapshot/ holds the snapshots.

A change that is meant to change what the user sees records new snapshots with the command the failure names.
"""
from __future__ import annotations

import pytest

from devkit import run_folder_snapshot as snapshots


def compare(actual: dict) -> None:
    name = actual["session"]
    path = snapshots.snapshot_path(name)
    if not path.is_file():
        pytest.fail(f"no snapshot at {path}: record it with `{snapshots.REGENERATE} --session {name}`", pytrace=False)
    expected = snapshots.read(name)
    if actual != expected:
        pytest.fail(f"{name}: what the session showed differs from {path.name}; after a change that is meant to "
                    f"change it, record it again with `{snapshots.REGENERATE} --session {name}`\n"
                    f"{snapshots.diff(expected, actual)}", pytrace=False)


def test_a_demo_scan_shows_what_it_showed(tmp_path):
    compare(snapshots.snapshot(snapshots.run_scan(tmp_path)))


def test_an_approval_on_the_stub_engine_shows_what_it_showed(docker_client, stub_tag, tmp_path):
    compare(snapshots.snapshot(snapshots.run_approve(tmp_path, stub_tag)))
