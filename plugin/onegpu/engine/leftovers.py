"""Leftover kit containers (KIT.md 10): find those labelled by the kit, tell whether their owner is alive,
remove those whose owner is dead. Containers without the kit's label are never listed, let alone touched.
"""
from __future__ import annotations

import os
from pathlib import Path

from msgspec import Struct

from onegpu.engine.launch import (
    KIT_LABEL,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_PIDNS,
    LABEL_OWNER_START,
    LABEL_ROLE,
    LABEL_RUN_ID,
    Owner,
)

STOP_TIMEOUT_S = 10


def _proc_start_ticks(pid: int, proc: Path = Path("/proc")) -> int | None:
    """A process's start time in clock ticks since boot (/proc/<pid>/stat field 22); None if gone.

    Read from /proc rather than psutil.create_time() because the raw tick count is exact: a float
    derived from it could differ in its last digits between two readings.
    """
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after the last ')'.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])  # field 22 overall = index 19 after pid and comm


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _pidns(pid: int | str = "self") -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def current_owner() -> Owner:
    """This process, as container labels record it."""
    pid = os.getpid()
    return Owner(pid=pid, start_ticks=_proc_start_ticks(pid), boot_id=_boot_id(), pidns=_pidns(),
                 uid=os.getuid(), gid=os.getgid())


class OwnerJudgement(Struct, frozen=True):
    dead: bool | None  # None: cannot be judged from here (another PID namespace): left alone
    why: str


def judge_owner(labels: dict, boot_id: str | None, pidns: str | None, start_ticks_of) -> OwnerJudgement:
    """Pure: whether the owner recorded in `labels` is dead, given this host's boot id and PID namespace and
    a function pid -> start ticks (None when no such process)."""
    pid_text = labels.get(LABEL_OWNER_PID, "")
    if not pid_text.isdigit():
        return OwnerJudgement(None, "no owner pid label")
    if labels.get(LABEL_OWNER_HOST) and boot_id and labels[LABEL_OWNER_HOST] != boot_id:
        return OwnerJudgement(True, "created before the last reboot (another boot id): no process survives that")
    if labels.get(LABEL_OWNER_PIDNS) and pidns and labels[LABEL_OWNER_PIDNS] != pidns:
        return OwnerJudgement(None, f"owner pid {pid_text} lives in another PID namespace; not judged from here")
    now = start_ticks_of(int(pid_text))
    if now is None:
        return OwnerJudgement(True, f"owner pid {pid_text} is gone")
    recorded = labels.get(LABEL_OWNER_START, "")
    if recorded.isdigit() and int(recorded) != now:
        return OwnerJudgement(True, f"pid {pid_text} was reused by a process started at another time")
    return OwnerJudgement(False, f"owner pid {pid_text} is alive")


def _row(container, judgement: OwnerJudgement) -> dict:
    labels = container.labels or {}
    return {"id": container.id[:12], "name": container.name, "status": container.status,
            "run_id": labels.get(LABEL_RUN_ID), "role": labels.get(LABEL_ROLE),
            "owner_pid": labels.get(LABEL_OWNER_PID), "owner_dead": judgement.dead, "why": judgement.why}


def _scan(client, extra_labels: dict | None) -> list[tuple]:
    """(container, row) for every container (running or not) with the kit's label, its owner judged."""
    filters = {"label": [f"{KIT_LABEL}=1", *(f"{k}={v}" for k, v in (extra_labels or {}).items())]}
    boot, ns = _boot_id(), _pidns()
    rows = []
    # ignore_removed: another session may remove its own container between the list and the inspection.
    for container in client.containers.list(all=True, filters=filters, ignore_removed=True):
        # The filter ran on the daemon; check the label again here so nothing unlabelled is ever touched.
        if (container.labels or {}).get(KIT_LABEL) != "1":
            continue
        rows.append((container, _row(container, judge_owner(container.labels, boot, ns, _proc_start_ticks))))
    return rows


def find_kit_containers(client, extra_labels: dict | None = None) -> list[dict]:
    """Rows for every kit-labelled container, its owner judged. Read-only."""
    return [row for _, row in _scan(client, extra_labels)]


def remove_dead_owner_containers(client, extra_labels: dict | None = None) -> list[dict]:
    """Remove kit containers whose owner is dead (stop with a timeout, then remove); the rows of all kit
    containers found, each saying whether it was removed."""
    from docker.errors import APIError, NotFound  # the docker SDK (and requests) only where a container is acted on

    report = []
    for container, row in _scan(client, extra_labels):
        row["removed"] = False
        if row["owner_dead"]:
            try:
                if container.status == "running":
                    container.stop(timeout=STOP_TIMEOUT_S)
                container.remove(force=True)
                row["removed"] = True
            except NotFound:
                row["removed"] = True  # gone meanwhile (e.g. its own session's teardown won the race)
            except APIError as exc:
                row["error"] = str(exc)
        report.append(row)
    return report


def describe(rows: list[dict] | None, acted: bool) -> list[str]:
    """Lines for the terminal: one per kit container found (None: not looked for, the facts are replayed)."""
    if rows is None:
        return ["leftover kit containers not looked for: the hardware facts are replayed from another machine"]
    if not rows:
        return ["no kit-labelled containers on this Docker daemon"]
    lines = []
    for r in rows:
        fate = ("removed" if r.get("removed") else "left alone") if acted else \
            ("would be removed by an approve_load session" if r["owner_dead"] else "left alone")
        lines.append(f"kit container {r['name']} ({r['id']}, {r['status']}, run {r['run_id']}): {r['why']}; {fate}")
    return lines


def summary(rows: list[dict]) -> str:
    """One line: how many kit containers were found and removed before this session started its own."""
    removed = [r for r in rows if r.get("removed")]
    kept = [r for r in rows if not r.get("removed")]
    return (f"{len(removed)} kit container(s) of dead sessions removed"
            + (f" ({', '.join(r['name'] for r in removed)})" if removed else "")
            + f"; {len(kept)} of live sessions left alone")
