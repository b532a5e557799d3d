"""Threads that watch the engine container while it lives: its log copied into engine.log as it comes, and
its cgroup's OOM-kill count (the cgroup folder vanishes at exit, so the count must be read before)."""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

from onegpu.engine.cgroup import CgroupDir, find_container_cgroup, oom_kill_count
from onegpu.evidence.rundir import open_private_append

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # vLLM colours its log prefixes on a terminal
TAIL_CHARS = 1_000_000  # the boot log kept in memory for parsing; engine.log keeps everything
OOM_POLL_S = 0.1


def last_line(text: str) -> str:
    """The last non-empty line, progress-bar carriage returns counted as line ends."""
    for line in reversed(ANSI.sub("", text).replace("\r", "\n").splitlines()):
        if line.strip():
            return line.strip()
    return ""


class LogPump:
    """Follows the container's stdout+stderr (demultiplexed by the SDK) into a 0600 engine.log."""

    def __init__(self, container, path: Path):
        self.container, self.path = container, path
        self.text = ""  # what came, bounded to the last TAIL_CHARS
        self.chars = 0
        self.error: str | None = None
        self._stream: Any = None  # the docker SDK's log stream (untyped), from start()
        self._thread: threading.Thread | None = None

    def start(self) -> "LogPump":
        self._stream = self.container.logs(stdout=True, stderr=True, stream=True, follow=True)
        self._thread = threading.Thread(target=self._run, name="onegpu-engine-log", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with open_private_append(self.path) as fh:
                for chunk in self._stream:
                    piece = chunk.decode("utf-8", "replace")
                    fh.write(piece)
                    fh.flush()
                    self.chars += len(piece)
                    self.text = (self.text + piece)[-TAIL_CHARS:]
        except Exception as exc:  # the stream ends with the container; a broken stream is noted, not fatal
            self.error = f"{type(exc).__name__}: {exc}"

    @property
    def last_line(self) -> str:
        return last_line(self.text[-4000:])

    def stop(self, timeout_s: float = 5.0) -> None:
        """Wait for the stream to end (the container stopped), then cut it if it still hangs."""
        if self._thread is None:
            return
        self._thread.join(timeout=timeout_s)
        if self._thread.is_alive() and self._stream is not None:
            try:
                self._stream.close()
            except Exception:  # closing a half-read HTTP stream may raise; the thread ends either way
                pass
            self._thread.join(timeout=2)
        self._thread = None


class OomWatch:
    """Polls the container cgroup's oom_kill count; keeps the last value seen before the folder vanished."""

    def __init__(self, container):
        self.container = container
        self.cgroup = None
        self.first: int | None = None
        self.last: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "OomWatch":
        self.container.reload()
        pid = (self.container.attrs.get("State") or {}).get("Pid")
        self.cgroup = find_container_cgroup(self.container.id, pid)
        if self.cgroup is not None:
            self.first = self.last = oom_kill_count(self.cgroup)
            self._thread = threading.Thread(target=self._run, args=(self.cgroup,), name="onegpu-oom-watch",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self, cgroup: CgroupDir) -> None:
        while not self._stop.wait(OOM_POLL_S):
            value = oom_kill_count(cgroup)
            if value is None:
                return  # the cgroup is gone: the container exited
            self.last = value

    @property
    def rose(self) -> bool | None:
        """Whether the OOM killer fired in the container's cgroup (None: the cgroup was never found)."""
        if self.first is None or self.last is None:
            return None
        return self.last > self.first

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
