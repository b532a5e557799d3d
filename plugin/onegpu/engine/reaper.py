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

`Reaper.start` starts one watcher: the session's program `python -m onegpu.session.reaper_watch CONTAINER_ID
OWNER_PID RUN_FOLDER` (named, not imported: the watcher closes the session's evidence, a layer above the
engine); `reap` is what it does to the container.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

RELEASE = b"released\n"
STOP_TIMEOUT_S = 5  # the reaped engine gets this long to stop on SIGTERM: removal well inside 15 s
LOG_NAME = "reaper.log"
WATCHER = "onegpu.session.reaper_watch"


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
                [sys.executable, "-m", WATCHER, container_id, str(os.getpid()), str(run_folder)],
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
