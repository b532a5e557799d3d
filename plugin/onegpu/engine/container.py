"""The engine container's life through the docker SDK (KIT.md 3.5, 6): create from the image ID, start,
copy the log into engine.log, wait for /health on the Unix socket within the boot deadline, and at the end
ALWAYS read the final state and logs, stop with a timeout, and remove.

Everything after `create` runs inside a try, so an interruption at any moment (Ctrl-C, SIGTERM turned into
KeyboardInterrupt, a pytest-timeout failure) still takes the container down.
"""
from __future__ import annotations

import http.client
import os
import stat
import time
from pathlib import Path
from typing import Any, Callable

from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from msgspec import Struct

from onegpu.core.jsonable import to_json
from onegpu.core.outcomes import Blocked
from onegpu.core.uds_http import uds_request
from onegpu.core.units import gib
from onegpu.engine.bootlog import BootFacts, Failure, death_in_log, explain_failure, parse_boot_log
from onegpu.engine.interrupts import GUARD
from onegpu.engine.launch import LABEL_OWNER_PID, LABEL_RUN_ID, LaunchSpec
from onegpu.engine.probe import gpu_handoff_refused
from onegpu.engine.reaper import Reaper
from onegpu.engine.sampler import Sampler
from onegpu.engine.watch import LogPump, OomWatch, last_line
from onegpu.evidence.receipt import now_iso
from onegpu.evidence.rundir import write_private

STOP_TIMEOUT_S = 30  # vLLM shuts down in seconds on SIGTERM; SIGKILL after this
POLL_S = 0.25
HEALTH_TIMEOUT_S = 2.0
PROGRESS_EVERY_S = 1.0
LOG_TAIL_LINES = 40


class EngineEnd(Struct, frozen=True):
    """Why the engine ended (at boot or while serving): the outcome code with the engine's own words.

    `quote` is the engine's line that says why (None when its log states no reason: a process killed
    before it could print one); `last_line` is the log's last line, shown only in that case.
    """

    code: str
    quote: str | None
    last_line: str
    exit_code: int | None
    oom_killed: bool | None
    oom_kills: int | None  # OOM kills the container's cgroup counted while the kit watched (None: not read)
    oom_events: int | None  # Docker's "oom" events of the container (read at teardown; None before)
    ram_cap_bytes: int | None

    def reason(self) -> str:
        """The sentence that says why: the engine's words, the RAM cap's evidence, what exit code 0 means."""
        parts = []
        if self.code == "HOST_OOM_KILLED":
            evidence = [e for e in ("Docker reports the container OOMKilled" if self.oom_killed else "",
                                    f"its cgroup counted {self.oom_kills} OOM kill(s)" if self.oom_kills else "",
                                    f"Docker sent {self.oom_events} oom event(s)" if self.oom_events else "") if e]
            parts.append(f"the RAM cap of {gib(self.ram_cap_bytes)} was exceeded: "
                         f"{', '.join(evidence) or 'the OOM killer fired in its cgroup'}")
        if self.quote:
            parts.append(f"the engine said: {self.quote!r}")
        elif self.code == "LOAD_TIMEOUT":
            parts.append(f"last log line: {self.last_line[:300]!r}")
        else:  # a process killed before it could print why (the RAM cap's kill of the API server itself)
            parts.append("the engine's log states no reason"
                         + (f"; its last line: {self.last_line[:300]!r}" if self.last_line else ""))
        if self.exit_code == 0:
            parts.append("exit code 0 is no clean stop here: vLLM's API server exits 0 once its engine core died")
        return "; ".join(parts)

    def as_json(self) -> dict:
        return to_json(self)


def engine_end(failure: Failure | None, log_text: str, state: dict, oom_first: int | None, oom_last: int | None,
               ram_cap_bytes: int | None, timed_out: bool = False) -> EngineEnd:
    """The EngineEnd of an engine that failed or died, from explain_failure's verdict (None: the log and
    state show no failure, e.g. a container that exited while the kit was still checking)."""
    if failure is None:
        failure = Failure("LOAD_TIMEOUT", None) if timed_out else Failure("ENGINE_DIED", death_in_log(log_text))
    oom_kills = oom_last - oom_first if oom_first is not None and oom_last is not None else None
    tail = last_line("\n".join(line for line in _tail(log_text) if line.strip()))
    return EngineEnd(failure.code, failure.quote, tail, state.get("exit_code"), state.get("oom_killed"),
                     oom_kills, state.get("oom_events"), ram_cap_bytes)


class _BootFailed(Exception):
    def __init__(self, timed_out: bool):
        super().__init__("timed out" if timed_out else "exited")
        self.timed_out = timed_out


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    return text.replace("\r", "\n").splitlines()[-lines:]


class EngineHandle:
    """What later phases use: the socket, the spec, the boot facts, the container and its state."""

    def __init__(self, engine: "Engine"):
        self._engine = engine
        self.spec: LaunchSpec = engine.spec
        self.socket_path: str = engine.spec.socket_path
        self.log_path: Path = engine.log_path
        self.boot: BootFacts | None = None  # once ready
        self.container_id: str | None = None

    def state(self) -> dict:
        """{status, exit_code, oom_killed} of the container now (status "removed" once it is gone)."""
        return self._engine.state()

    def alive(self) -> bool:
        return self.state()["status"] == "running"

    def explain_end(self, state: dict) -> "EngineEnd":
        """Why the engine ended once it is found dead: the code, its own words from engine.log, the evidence."""
        return self._engine.explain_end(state)


class Engine:
    """One engine container, from create to removal. `launch()` returns the handle or raises Blocked."""

    def __init__(self, client, spec: LaunchSpec, run_folder: Path, boot_deadline_s: float,
                 progress: Callable[[str, bool], None] | None = None,
                 record: Callable[..., None] | None = None, stop_timeout_s: float = STOP_TIMEOUT_S,
                 sample_interval_s: float | None = None):
        self.client, self.spec, self.boot_deadline_s = client, spec, boot_deadline_s
        self.log_path = Path(run_folder) / "engine.log"
        self.samples_path = Path(run_folder) / "samples.jsonl"
        self.progress = progress or (lambda line, final: None)
        self.record = record or (lambda **kv: None)
        self.stop_timeout_s = stop_timeout_s
        self.sample_interval_s = sample_interval_s
        self.container: Any = None  # the docker SDK's Container (untyped), once created
        self.handle = EngineHandle(self)
        self.final: dict | None = None  # the end state, once close() ran
        self._end: dict = {}  # what close() establishes, step by step (final, from its start)
        self.boot_elapsed_s: float | None = None
        self._pump: LogPump | None = None
        self._oom: OomWatch | None = None
        self.sampler: Sampler | None = None
        self._started_wall: float | None = None
        self.failure: dict | None = None  # a boot failure's code, state and log tail (evidence)
        self._reaper: Reaper | None = None

    # -- launch ---------------------------------------------------------------------------------------
    def launch(self) -> EngineHandle:
        """Create, start and wait until ready. Raises Blocked (boot failure classified, evidence kept)."""
        self._started_wall = time.time()
        self._remove_stale_socket()
        try:
            self.container = self.client.containers.create(**self.spec.create_kwargs())
        except ImageNotFound:
            raise Blocked("IMAGE_MISSING", f"image {self.spec.image_id} is no longer on this Docker engine (removed "
                                           "since the plan resolved it); the kit never pulls") from None
        except BaseException:
            self._remove_half_created()  # an interrupt can land after the daemon created it
            raise
        try:
            # From here on a watcher removes the container if this process dies without doing it itself.
            self._reaper = Reaper.start(self.container.id, self.log_path.parent)
            self.handle.container_id = self.container.id
            self.record(container_id=self.container.id, name=self.spec.name, created_at=now_iso(),
                        log=self.log_path.name, reaper_pid=self._reaper.proc.pid)
            t0 = time.monotonic()
            try:
                self.container.start()
            except APIError as exc:
                raise gpu_handoff_refused(exc) or exc
            self.record(started_at=now_iso())
            self._pump = LogPump(self.container, self.log_path).start()
            self._oom = OomWatch(self.container).start()
            self.sampler = Sampler(self.samples_path, self.spec.gpu_uuid, self.container,
                                   **({"interval_s": self.sample_interval_s} if self.sample_interval_s else {}))
            self.sampler.start()
            self._wait_ready(t0)
            self.boot_elapsed_s = time.monotonic() - t0
            self.handle.boot = parse_boot_log(self._logs_now())
            self.record(ready_at=now_iso(), boot_elapsed_s=round(self.boot_elapsed_s, 3))
            return self.handle
        except _BootFailed as failure:
            raise self._classify(failure, time.monotonic() - t0) from None
        except BaseException:
            self.close()
            raise

    def _remove_stale_socket(self) -> None:
        """Remove a socket an earlier engine of this run folder left behind (one that died cannot unlink it,
        and vLLM refuses to bind an existing path: "[Errno 98] Address already in use"), so a resumed batch
        can start its engine. Only a socket is removed; anything else at that path is left for the engine to
        refuse."""
        path = Path(self.spec.socket_path)
        try:
            if stat.S_ISSOCK(path.lstat().st_mode):
                path.unlink()
                self.record(stale_socket_removed=str(path))
        except FileNotFoundError:
            pass

    def _remove_half_created(self) -> None:
        """Remove a container of this spec's name that carries our own run id and pid (else leave it)."""
        try:
            found = self.client.containers.get(self.spec.name)
        except (DockerException, OSError):
            return
        labels = found.labels or {}
        if (labels.get(LABEL_RUN_ID) == self.spec.labels.get(LABEL_RUN_ID)
                and labels.get(LABEL_OWNER_PID) == self.spec.labels.get(LABEL_OWNER_PID)):
            with GUARD.shield():
                found.remove(force=True)

    def _health_ok(self) -> bool:
        if not os.path.exists(self.spec.socket_path):
            return False
        try:
            return uds_request(self.spec.socket_path, "GET", "/health", timeout=HEALTH_TIMEOUT_S).status == 200
        except (OSError, http.client.HTTPException):
            return False  # bound but not answering yet

    def _wait_ready(self, t0: float) -> None:
        last_shown = 0.0
        while True:
            if self._health_ok():
                self.progress(self._progress_line(time.monotonic() - t0, "ready"), True)
                return
            self.container.reload()
            if self.container.status in ("exited", "dead"):
                self.progress(self._progress_line(time.monotonic() - t0, "exited"), True)
                raise _BootFailed(timed_out=False)
            elapsed = time.monotonic() - t0
            if elapsed >= self.boot_deadline_s:
                self.progress(self._progress_line(elapsed, "boot deadline passed"), True)
                raise _BootFailed(timed_out=True)
            if elapsed - last_shown >= PROGRESS_EVERY_S:
                self.progress(self._progress_line(elapsed, "booting"), False)
                last_shown = elapsed
            time.sleep(POLL_S)

    def _progress_line(self, elapsed: float, what: str) -> str:
        s = self.sampler.latest if self.sampler else {}
        parts = [f"engine {what} {elapsed:,.0f}/{self.boot_deadline_s:,.0f} s"]
        if s.get("gpu_used_bytes") is not None:
            parts.append(f"GPU {gib(s['gpu_used_bytes'])} used of {gib(s['gpu_total_bytes'])}")
        if s.get("host_available_bytes") is not None:
            parts.append(f"host RAM available {gib(s['host_available_bytes'])}")
        if s.get("container_memory_bytes") is not None:
            parts.append(f"container {gib(s['container_memory_bytes'])}")
        line = self._pump.last_line if self._pump else ""
        parts.append(f"log: {line[:120]}" if line else "log: (nothing yet)")
        return " | ".join(parts)

    def _logs_now(self) -> str:
        return self.container.logs(stdout=True, stderr=True).decode("utf-8", "replace")

    def _classify(self, failure: _BootFailed, elapsed_s: float) -> Blocked:
        """Take the container down (reading its end state first) and name the failure from log + state."""
        final = self.close()
        log_text = final.get("log_text", "")
        end = self._end_of(log_text, final, failure.timed_out)
        numbers = {"exit_code": final.get("exit_code"), "oom_killed": final.get("oom_killed"),
                   "oom_kill_count_rose": final.get("oom_kill_count_rose"), "elapsed_s": round(elapsed_s, 3),
                   "boot_deadline_s": self.boot_deadline_s}
        if failure.timed_out:
            what = f"the engine was not ready within the boot deadline of {self.boot_deadline_s:g} s"
        else:
            what = (f"the engine exited during boot after {elapsed_s:,.1f} s with exit code {final.get('exit_code')}"
                    + (" (OOMKilled)" if final.get("oom_killed") else ""))
        self.failure = {"code": end.code, "timed_out": failure.timed_out, **numbers, "quote": end.quote,
                        "reason": end.reason(), "log_tail": _tail(log_text)}
        return Blocked(end.code, f"{what}; {end.reason()}; full log in {self.log_path}", numbers)

    def _end_of(self, log_text: str, state: dict, timed_out: bool = False) -> EngineEnd:
        rose = bool(state.get("oom_kill_count_rose") or state.get("oom_events")
                    or (self._oom is not None and self._oom.rose))
        failure = explain_failure(log_text, state.get("exit_code"), bool(state.get("oom_killed")), rose, timed_out)
        oom = self._oom
        return engine_end(failure, log_text, state, oom.first if oom else None, oom.last if oom else None,
                          self.spec.mem_limit_bytes, timed_out)

    def explain_end(self, state: dict) -> EngineEnd:
        """Why the engine, found dead after it was ready, ended: its whole log read with its end state."""
        try:
            log_text = self._logs_now()  # the daemon's complete copy while the exited container is still there
        except (DockerException, OSError):
            log_text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return self._end_of(log_text, state)

    # -- the end --------------------------------------------------------------------------------------
    def state(self) -> dict:
        if self.container is None or (self.final and self.final.get("removed")):
            return {"status": "removed", "exit_code": (self.final or {}).get("exit_code"),
                    "oom_killed": (self.final or {}).get("oom_killed")}
        try:
            self.container.reload()
        except NotFound:
            return {"status": "removed", "exit_code": None, "oom_killed": None}
        st = self.container.attrs.get("State") or {}
        return {"status": st.get("Status"), "exit_code": st.get("ExitCode"), "oom_killed": st.get("OOMKilled")}

    def close(self) -> dict:
        """Read the end state and logs, stop (SIGTERM, SIGKILL after the timeout), remove. Idempotent.

        Each step runs even if an earlier one was interrupted; the first interruption is re-raised after
        the container is gone.
        """
        if self.final is not None:
            return self.final
        self.final = self._end  # the steps below fill it
        if self.container is None:
            return self._end
        pending: BaseException | None = None
        with GUARD.shield():
            for step in (self._step_state_before, self._step_stop, self._step_state_after, self._step_watchers,
                         self._step_logs, self._step_oom_events, self._step_remove, self._step_remove):
                try:
                    step()
                except Exception as exc:  # one step failing (say, the events API) must not skip the rest
                    self._end.setdefault("errors", []).append(f"{step.__name__}: {type(exc).__name__}: {exc}")
                except BaseException as exc:  # a timeout or signal mid-teardown must not skip the removal
                    pending = pending or exc
            self.record(end={k: v for k, v in self._end.items() if k != "log_text"})
            if self._reaper is not None and self._end.get("removed"):
                self._reaper.release()
        if pending is not None:
            raise pending
        if not self._end.get("removed"):
            raise RuntimeError(f"engine container {self.container.id[:12]} could not be removed: "
                               f"{self._end.get('errors')}")
        return self._end

    def _step_state_before(self) -> None:
        self._end["state_at_end"] = self.state()

    def _step_stop(self) -> None:
        if self._end["state_at_end"]["status"] in ("running", "restarting", "paused"):
            t = time.monotonic()
            self.container.stop(timeout=self.stop_timeout_s)
            self._end["stop_s"] = round(time.monotonic() - t, 3)

    def _step_state_after(self) -> None:
        st = self.state()
        self._end.update(status=st["status"], exit_code=st["exit_code"], oom_killed=st["oom_killed"],
                          stopped_at=now_iso())

    def _step_watchers(self) -> None:
        if self._pump is not None:
            self._pump.stop()
        if self._oom is not None:
            self._oom.stop()
            self._end.update(oom_kill_count_first=self._oom.first, oom_kill_count_last=self._oom.last,
                              oom_kill_count_rose=self._oom.rose)
        if self.sampler is not None:
            self._end["samples"] = self.sampler.stop()

    def _step_logs(self) -> None:
        text = self._logs_now()
        self._end["log_text"] = text
        streamed = self._pump.chars if self._pump else 0
        if len(text) != streamed or not self.log_path.exists():
            write_private(self.log_path, text)  # the daemon's complete copy replaces a partial stream
        self._end["log_chars"] = len(text)

    def _step_oom_events(self) -> None:
        since = int(self._started_wall or time.time()) - 1
        events = self.client.events(since=since, until=f"{time.time():.6f}", decode=True,
                                    filters={"container": self.container.id, "event": "oom"})
        self._end["oom_events"] = sum(1 for _ in events)

    def _step_remove(self) -> None:
        if self._end.get("removed"):
            return
        try:
            self.container.remove(force=True, v=True)
        except NotFound:
            pass
        self._end["removed"] = True
        self._end["removed_at"] = now_iso()


def facts_json(boot) -> dict | None:
    return to_json(boot) if boot is not None else None
