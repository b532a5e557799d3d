"""A running container's memory cgroup, read directly: memory in use and the OOM-kill count.

The cgroup folder disappears the moment the container exits, so callers read it while the container
lives and keep the last value they saw. Both cgroup v1 (memory controller) and v2 (unified) are read.
"""
from __future__ import annotations

from pathlib import Path

from msgspec import Struct

CGROUP_ROOT = Path("/sys/fs/cgroup")


class CgroupDir(Struct, frozen=True):
    version: int  # 1 or 2
    path: Path


def cgroup_from_proc(text: str, root: Path = CGROUP_ROOT) -> CgroupDir | None:
    """Pure over /proc/<pid>/cgroup text: the process's memory cgroup folder (v1 memory line, else v2)."""
    v2 = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if "memory" in controllers.split(","):
            return CgroupDir(1, root / "memory" / rel.lstrip("/"))
        if controllers == "" and parts[0] == "0":
            v2 = CgroupDir(2, root / rel.lstrip("/"))
    return v2


def find_container_cgroup(container_id: str, pid: int | None, root: Path = CGROUP_ROOT) -> CgroupDir | None:
    """The container's memory cgroup folder, or None when it cannot be found from here.

    First through the container's init process (works for every cgroup driver when we share the daemon's
    PID namespace); then the places the cgroupfs and systemd drivers put containers.
    """
    if pid:
        try:
            found = cgroup_from_proc(Path(f"/proc/{pid}/cgroup").read_text(), root)
        except OSError:
            found = None
        if found and found.path.is_dir():
            return found
    candidates = [CgroupDir(1, root / "memory" / "docker" / container_id),
                  CgroupDir(1, root / "memory" / "system.slice" / f"docker-{container_id}.scope"),
                  CgroupDir(2, root / "system.slice" / f"docker-{container_id}.scope"),
                  CgroupDir(2, root / "docker" / container_id)]
    for c in candidates:
        if c.path.is_dir() and (c.path / ("memory.usage_in_bytes" if c.version == 1 else "memory.current")).exists():
            return c
    return None


def memory_bytes(cg: CgroupDir) -> int | None:
    """Memory charged to the cgroup now (v1 memory.usage_in_bytes, v2 memory.current); None once gone."""
    name = "memory.usage_in_bytes" if cg.version == 1 else "memory.current"
    try:
        return int((cg.path / name).read_text().strip())
    except (OSError, ValueError):
        return None


def parse_oom_kill(text: str) -> int | None:
    """Pure: the `oom_kill N` count in v1 memory.oom_control or v2 memory.events text."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value.strip())
    return None


def oom_kill_count(cg: CgroupDir) -> int | None:
    """How many processes the cgroup's OOM killer has killed; None once gone (or on kernels without it)."""
    name = "memory.oom_control" if cg.version == 1 else "memory.events"
    try:
        return parse_oom_kill((cg.path / name).read_text())
    except OSError:
        return None
