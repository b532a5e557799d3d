"""The reaper's watcher (started by onegpu.engine.reaper.Reaper): it waits on the owning pytest process's pipe;
when the owner dies without releasing it, it removes the owner's engine container (onegpu.engine.reaper.reap) and
closes the dead session's evidence: CLOSED with the reason in connection-private.json and in receipt.json.

`python -m onegpu.session.reaper_watch CONTAINER_ID OWNER_PID RUN_FOLDER`
"""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from onegpu.engine.reaper import RELEASE, reap
from onegpu.evidence.journal import merge
from onegpu.evidence.receipt import fold_journal, now_iso
from onegpu.evidence.rundir import write_json
from onegpu.record.receipt import record_of


def _owner_died_reason(owner_pid: str) -> str:
    return (f"the owning pytest process (pid {owner_pid}) ended without taking its engine container down "
            "(killed or crashed); the reaper stopped and removed the container")


def close_evidence(run_folder: Path, reason: str, end: dict) -> None:
    """CLOSED with the reason in the connection file (if a window was opened) and in the receipt: its engine
    end, its serve section (a window the dead session left STARTING or READY) and its verdict."""
    closed_at = now_iso()
    connection = run_folder / "connection-private.json"
    if connection.exists():
        doc = json.loads(connection.read_bytes())
        if doc.get("state") != "CLOSED":
            doc.update(state="CLOSED", closed_at=closed_at, closed_reason=reason)
            write_json(connection, doc)
    receipt_path = run_folder / "receipt.json"
    if receipt_path.exists():
        data = fold_journal(run_folder)  # what the dead session journalled after its last whole write
        record = record_of(data)
        merge(data, ["engine", "end"], end)
        if record.serve is not None and record.serve.state != "CLOSED":  # never READY of a window that is gone
            merge(data, ["serve"], {"state": "CLOSED", "closed_at": closed_at, "closed_reason": reason,
                                    "engine_end": end})
        data["reaper"] = {"closed": True, "reason": reason, "at": closed_at}
        if record.verdict is None:
            data["verdict"] = f"INTERRUPTED: the session never finished: {reason}"
        data["finished_at"] = record.finished_at or now_iso()
        write_json(receipt_path, data)


def _exit_when_removed(client, container_id: str, acting: threading.Event) -> None:
    """A watcher never outlives its container: exit once it is removed, by whoever (unless the watcher itself
    is removing it, and has its evidence still to write)."""
    from docker.errors import NotFound

    try:
        client.api.wait(container_id, condition="removed")
    except NotFound:
        pass
    except Exception:  # noqa: BLE001  (the daemon went away: nothing left to watch)
        pass
    if not acting.is_set():
        os._exit(0)


def main(argv: list[str]) -> int:
    container_id, owner_pid, run_folder = argv[0], argv[1], Path(argv[2])
    import docker

    client = docker.from_env(timeout=60)
    acting = threading.Event()
    threading.Thread(target=_exit_when_removed, args=(docker.from_env(timeout=None), container_id, acting),
                     daemon=True).start()
    said = sys.stdin.buffer.read()  # blocks until the owner releases or dies
    acting.set()
    if said.startswith(RELEASE):
        os._exit(0)
    reason = _owner_died_reason(owner_pid)
    end = {**reap(client, container_id, owner_pid), "removed_at": now_iso(), "reason": reason}
    close_evidence(run_folder, reason, end)
    print(f"{now_iso()} {reason}: {json.dumps(end)}", flush=True)
    os._exit(0)  # the removal thread may still be blocked in its API call


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
