"""One GPU, one session (KIT.md 10): an exclusive lock per GPU UUID for an approve_load session's lifetime.

The lock is a bound Linux abstract Unix socket named after the GPU: binding is taking the lock, and the
kernel releases it when the holder exits in any way (SIGKILL included), so nothing stale is ever left on
disk. A small thread answers connections with the holder's pid and run folder, so a second session can
say who holds the card.

Limitation: abstract socket names are scoped to a network namespace. Two sessions on one host in different
network namespaces (say, one inside a container) do not see each other's lock.
"""
from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time

from onegpu.core.limitations import GPU_LOCK
from onegpu.core.outcomes import Blocked

ANSWER_TIMEOUT_S = 2.0
LIMITATION = GPU_LOCK  # limitations.py: the sentence the public summary may quote


def lock_name(gpu_uuid: str) -> str:
    """The abstract socket name (leading NUL: no file on disk)."""
    return f"\0onegpu-gpu-{gpu_uuid}"


def ask_holder(gpu_uuid: str) -> dict | None:
    """What the current holder says about itself; None when it does not answer in time."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(ANSWER_TIMEOUT_S)
            sock.connect(lock_name(gpu_uuid))
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
        return json.loads(data.decode())
    except (OSError, ValueError):
        return None


class GpuLock:
    """Held from `acquire()` to `release()` (or the process's end)."""

    def __init__(self, gpu_uuid: str, run_folder: str):
        self.gpu_uuid, self.run_folder = gpu_uuid, run_folder
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.since: float | None = None

    def acquire(self) -> "GpuLock":
        """Take the lock; raises Blocked GPU_LOCKED naming the holder when another session has it."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(lock_name(self.gpu_uuid))
        except OSError as exc:
            sock.close()
            if exc.errno != errno.EADDRINUSE:
                raise
            holder = ask_holder(self.gpu_uuid) or {}
            who = (f"pid {holder.get('pid')}, run folder {holder.get('run_folder')}" if holder
                   else "a process that does not answer (it may be exiting)")
            raise Blocked("GPU_LOCKED", f"GPU {self.gpu_uuid} is held by another kit session: {who}; wait for "
                          "it to end or select another GPU", {"holder_pid": holder.get("pid"),
                                                              "holder_run_folder": holder.get("run_folder")}) from None
        sock.listen(16)
        sock.settimeout(0.5)
        self._sock, self.since = sock, time.time()
        self._thread = threading.Thread(target=self._answer, args=(sock,), name="onegpu-gpu-lock", daemon=True)
        self._thread.start()
        return self

    def _answer(self, sock: socket.socket) -> None:
        answer = json.dumps({"pid": os.getpid(), "run_folder": self.run_folder, "gpu_uuid": self.gpu_uuid,
                             "since": self.since}).encode()
        while not self._stopping.is_set():
            try:
                conn, _ = sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(ANSWER_TIMEOUT_S)
                    conn.sendall(answer)
                except OSError:
                    pass

    def release(self) -> None:
        """Give the lock up (idempotent)."""
        if self._sock is None:
            return
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._sock.close()
        self._sock = None

    def describe(self) -> str:
        return f"GPU {self.gpu_uuid} locked for this session (pid {os.getpid()}); a second session on it is GPU_LOCKED"

    def __enter__(self) -> "GpuLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


class GpuSetLock:
    """The multi-GPU protocol's hold: one GpuLock per GPU of the set, all or none (a lock another session holds
    lets go of the ones taken before it)."""

    def __init__(self, gpu_uuids: list[str], run_folder: str):
        self.locks = [GpuLock(uuid, run_folder) for uuid in gpu_uuids]

    @property
    def since(self) -> float | None:
        return self.locks[0].since if self.locks else None

    def acquire(self) -> "GpuSetLock":
        taken: list[GpuLock] = []
        try:
            for lock in self.locks:
                taken.append(lock.acquire())
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise
        return self

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()

    def describe(self) -> str:
        return (f"GPUs {', '.join(lock.gpu_uuid for lock in self.locks)} locked for this session (pid "
                f"{os.getpid()}), each by its own UUID; a second session on any of them is GPU_LOCKED")

    def __enter__(self) -> "GpuSetLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
