"""CPU contention for a benchmark: busy processes in a control group of their own, the benchmark in another.

The scheduler shares CPU time between control groups by weight, then between the threads inside each group. A
kit run by an operator lives in one group (a login session's slice) and a busy neighbour usually in another (a
service, a container), each with the same weight: two hashing threads then share what their group gets instead
of taking a CPU each. Busy processes in the benchmark's own group would compete thread by thread instead, which
is not the case to measure. Both groups are made under the cpu controller (cgroup v1's cpu hierarchy, or the
unified hierarchy with the cpu controller enabled at its root); making them needs root.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

V1_CPU = Path("/sys/fs/cgroup/cpu")
V2_ROOT = Path("/sys/fs/cgroup")
BUSY = "while True:\n    pass\n"


def cpu_hierarchy() -> Path:
    """The root of the hierarchy that holds the cpu controller; SystemExit naming what is missing."""
    if (V1_CPU / "cgroup.procs").exists():
        return V1_CPU
    controllers = V2_ROOT / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        enabled = (V2_ROOT / "cgroup.subtree_control").read_text().split()
        if "cpu" not in enabled:
            (V2_ROOT / "cgroup.subtree_control").write_text("+cpu")
        return V2_ROOT
    raise SystemExit("--contend needs the cpu controller (cgroup v1 /sys/fs/cgroup/cpu, or cgroup v2 with cpu)")


def _move(pid: int, group: Path) -> None:
    (group / "cgroup.procs").write_text(str(pid))


@contextlib.contextmanager
def contended(busy: int, name: str = "onegpu-bench") -> Iterator[str]:
    """While inside: `busy` processes spinning in group <name>-load and this process (and every child it starts
    from now on) in group <name>-self, under the same cpu controller with the same weight. Yields a description.
    Everything is put back on exit: the busy processes killed, this process returned to the root, both groups
    removed."""
    if os.geteuid() != 0:
        raise SystemExit("--contend needs root: it makes two cpu control groups")
    root = cpu_hierarchy()
    own, load = root / f"{name}-self", root / f"{name}-load"
    own.mkdir(exist_ok=True)
    load.mkdir(exist_ok=True)
    spinners: list[subprocess.Popen] = []
    try:
        for _ in range(busy):
            spinner = subprocess.Popen([sys.executable, "-c", BUSY], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            spinners.append(spinner)
            _move(spinner.pid, load)
        _move(os.getpid(), own)
        yield (f"{busy} busy process(es) in control group {load.name}, the benchmark and its children in "
               f"{own.name} ({'cgroup v1' if root == V1_CPU else 'cgroup v2'}, cpu controller, equal weights)")
    finally:
        _move(os.getpid(), root)
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        for group in (own, load):
            with contextlib.suppress(OSError):
                group.rmdir()
