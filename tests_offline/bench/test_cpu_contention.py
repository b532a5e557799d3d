"""The hashing benchmark's contention: busy processes in one cpu control group, the benchmark in another, and
nothing left behind. If both ended in the same group, the benchmark would measure thread-by-thread sharing, not
the neighbour-in-another-group case it reports."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks.cpu_contention import V1_CPU, V2_ROOT
from tests_offline.docker_required import skip_unless_ci
from tests_offline.paths import REPO_ROOT

CHILD = '''
import json, os, sys
from benchmarks.cpu_contention import contended, cpu_hierarchy

def cpu_group(pid):
    for line in open(f"/proc/{pid}/cgroup"):
        number, controllers, path = line.rstrip("\\n").split(":", 2)
        if "cpu" in controllers.split(",") or (number == "0" and cpu_hierarchy().name == "cgroup"):
            return path

name = sys.argv[1]
with contended(1, name=name) as description:
    load = cpu_hierarchy() / f"{name}-load"
    spinners = [int(p) for p in (load / "cgroup.procs").read_text().split()]
    inside = {"self": cpu_group(os.getpid()), "spinners": spinners,
              "spinner_groups": [cpu_group(p) for p in spinners],
              "spinner_cmdlines": [open(f"/proc/{p}/cmdline", "rb").read().decode() for p in spinners]}
after = {"self": cpu_group(os.getpid()), "groups_left": [p.name for p in cpu_hierarchy().iterdir() if p.name.startswith(name)],
         "spinners_alive": [p for p in inside["spinners"] if os.path.exists(f"/proc/{p}")]}
print(json.dumps({"inside": inside, "after": after, "description": description}))
'''


def test_busy_processes_and_the_benchmark_sit_in_two_groups_and_leave_nothing_behind():
    hierarchy = V1_CPU if (V1_CPU / "cgroup.procs").exists() else V2_ROOT
    if os.geteuid() != 0 or not os.access(hierarchy / "cgroup.procs", os.W_OK):
        # CI runs as root (it installs Debian packages and starts dockerd) on a machine whose cgroups it can write.
        skip_unless_ci(f"making cpu control groups needs root and a writable {hierarchy}",
                       "root and a writable cpu cgroup hierarchy")
    name = f"onegpu-test-{os.getpid()}"
    out = subprocess.run([sys.executable, "-c", CHILD, name], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    inside, after = seen["inside"], seen["after"]
    assert inside["self"] == f"/{name}-self"
    assert len(inside["spinners"]) == 1 and inside["spinner_groups"] == [f"/{name}-load"]
    assert "while True" in inside["spinner_cmdlines"][0]
    assert after == {"self": "/", "groups_left": [], "spinners_alive": []}
    assert "1 busy process(es)" in seen["description"]
