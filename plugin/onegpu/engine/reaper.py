"""The engine container never outlives its owner: one watcher process per engine container.

The pytest process holds the write end of a pipe whose read end is the watcher's standard input. A session
that ends normally takes its container down itself and then writes RELEASE; the watcher exits touching
nothing. When the pytest process dies without doing so (SIGKILL, a crash, an OOM kill of pytest itself), the
kernel closes its end and the watcher reads end-of-file without RELEASE: it stops (SIGTERM, SIGKILL after
STOP_TIMEOUT_S) and removes that one container, by ID, only while its labels still name the dead owner, and
writes CLOSED with the reason into connection-private.json and receipt.json. It never touches another container.

The watcher also exits as soon as its container is removed by anyone (the session, or another kit session's
leftover sweep), so it never outlives its container. It runs in its own process session, so the Ctrl-C that
the session handles itself does not reach it.

`python -m onegpu.engine.reaper CONTAINER_ID OWNER_PID RUN_FOLDER` is the watcher; `Reaper.start` starts one.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

RELEASE = b"released\n"
STOP_TIMEOUT_S = 5  # the reaped engine gets this long to stop on SIGTERM: removal well inside 15 s
LOG_NAME = "reaper.log"


class Reaper:
    """The owner's side: start the watcher; `release()` once the container is down."""

    def __init__(self, proc: subprocess.Popen, write_fd: int):
        self.proc = proc
        self._fd: int | None = write_fd

    @classmethod
    def start(cls, container_id: str, run_folder: Path) -> "Reaper":
        read_fd, write_fd = os.pipe()  # not inheritable: no other child of the session keeps the pipe open
        log = os.open(Path(run_folder) / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", "onegpu.engine.reaper", container_id, str(os.getpid()), str(run_folder)],
                stdin=read_fd, stdout=log, stderr=log, start_new_session=True,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(Path(__file__).parents[2]),
                                                                           os.environ.get("PYTHONPATH")) if p)})
        finally:
            os.close(read_fd)
            os.close(log)
        return cls(proc, write_fd)

    def release(self, timeout_s: float = 10.0) -> None:
        """The container is down: tell the watcher to exit without acting, and wait for it."""
        if self._fd is None:
            return
        try:
            os.write(self._fd, RELEASE)
        except OSError:
            pass  # the watcher already exited (its container was removed)
        finally:
            os.close(self._fd)
            self._fd = None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the watcher's side ------------------------------------------------------------------------------------

def _owner_died_reason(owner_pid: str) -> str:
    return (f"the owning pytest process (pid {owner_pid}) ended without taking its engine container down "
            "(killed or crashed); the reaper stopped and removed the container")


def close_evidence(run_folder: Path, reason: str, end: dict) -> None:
    """CLOSED with the reason in the connection file (if a window was opened) and in the receipt: its engine
    end, its serve section (a window the dead session left STARTING or READY) and its verdict."""
    from onegpu.evidence.receipt import fold_journal, now_iso
    from onegpu.evidence.rundir import write_json

    closed_at = now_iso()
    connection = run_folder / "connection-private.json"
    if connection.exists():
        doc = json.loads(connection.read_bytes())
        if doc.get("state") != "CLOSED":
            doc.update(state="CLOSED", closed_at=closed_at, closed_reason=reason)
            write_json(connection, doc)
    receipt_path = run_folder / "receipt.json"
    if receipt_path.exists():
        receipt = fold_journal(run_folder)  # what the dead session journalled after its last whole write
        engine = receipt.setdefault("engine", {})
        engine["end"] = {**(engine.get("end") or {}), **end}
        serve = receipt.get("serve")
        if serve and serve.get("state") != "CLOSED":  # the receipt never says READY of a window that is gone
            receipt["serve"] = {**serve, "state": "CLOSED", "closed_at": closed_at, "closed_reason": reason,
                                "engine_end": end}
        receipt["reaper"] = {"closed": True, "reason": reason, "at": closed_at}
        if receipt.get("verdict") is None:
            receipt["verdict"] = f"INTERRUPTED: the session never finished: {reason}"
        receipt["finished_at"] = receipt.get("finished_at") or now_iso()
        write_json(receipt_path, receipt)


def reap(client, container_id: str, owner_pid: str) -> dict:
    """Stop and remove the owner's container; what was done (never acts on a container of another owner)."""
    from docker.errors import NotFound

    from onegpu.engine.launch import KIT_LABEL, LABEL_OWNER_PID

    try:
        container = client.containers.get(container_id)
    except NotFound:
        return {"removed": True, "removed_by": "someone else before the reaper (it was gone)"}
    labels = container.labels or {}
    if labels.get(KIT_LABEL) != "1" or labels.get(LABEL_OWNER_PID) != owner_pid:
        return {"removed": False, "error": f"container {container_id[:12]} does not carry this owner's labels"}
    try:
        if container.status in ("running", "restarting", "paused"):
            container.stop(timeout=STOP_TIMEOUT_S)
        container.remove(force=True, v=True)
    except NotFound:
        pass
    return {"removed": True, "removed_by": "reaper"}


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

    from onegpu.evidence.receipt import now_iso

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
