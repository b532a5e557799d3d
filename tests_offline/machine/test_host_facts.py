"""Host facts read from hand-made /proc and /sys trees (cgroup v1 and v2, nested, unlimited, containers),
then from this machine, checked against sources that do not share the kit's code."""
from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

import psutil
import pytest

from onegpu.machine.host import (
    UNLIMITED_AT,
    disk_facts,
    parse_cpu_list,
    parse_iommu_cmdline,
    parse_limit,
    parse_meminfo,
    parse_memlock,
    parse_thp,
    read_cgroup,
    read_host_facts,
    read_iommu,
)
from onegpu.machine.model import IommuFacts

GiB = 2**30
# What cgroup v1 writes for "no limit" on 4 KiB pages (PAGE_COUNTER_MAX rounded down to a page).
V1_UNLIMITED = "9223372036854771712\n"

MEMINFO = """\
MemTotal:       24681236 kB
MemFree:         1234567 kB
MemAvailable:   24285760 kB
Buffers:          123456 kB
Cached:          9876543 kB
SwapTotal:       8388604 kB
SwapFree:        8000000 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""
LIMITS = """\
Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max stack size            8388608              unlimited            bytes
Max locked memory         {memlock}            {memlock}            bytes
Max address space         unlimited            unlimited            bytes
"""


def make_tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (relative path -> text) under root; return root."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def base_proc(cgroup: str, *, allowed="0-3", memlock="8388608", release="6.8.0-60-generic") -> dict[str, str]:
    return {
        "proc/meminfo": MEMINFO,
        "proc/self/cgroup": cgroup,
        "proc/self/status": f"Name:\tpython3\nCpus_allowed:\tf\nCpus_allowed_list:\t{allowed}\n",
        "proc/self/limits": LIMITS.format(memlock=memlock),
        "proc/sys/kernel/osrelease": release + "\n",
        "proc/sys/kernel/hostname": "tower\n",
        "proc/version": f"Linux version {release} (builder@host) #1 SMP\n",
        "sys/devices/system/cpu/online": "0-15\n",
        "sys/devices/system/node/online": "0-1\n",
        "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
    }


def read(root: Path, disks=()):
    return read_host_facts(list(disks), proc=root / "proc", sys=root / "sys")


# --- small parsers -----------------------------------------------------------------------------------------

def test_meminfo_lines_become_bytes():
    mem = parse_meminfo(MEMINFO)
    assert mem["MemTotal"] == 24681236 * 1024
    assert mem["MemAvailable"] == 24285760 * 1024
    assert mem["SwapFree"] == 8000000 * 1024
    assert mem["HugePages_Total"] == 0  # a count, not kB: kept as is


@pytest.mark.parametrize("text, expected", [
    ("max\n", None), ("-1\n", None), ("", None), (None, None), ("garbage", None),
    (V1_UNLIMITED, None), (str(UNLIMITED_AT), None), ("9223372036854775807", None),
    ("17179869184\n", 16 * GiB), ("0", 0),
])
def test_cgroup_limit_values(text, expected):
    assert parse_limit(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("0-3,8,10-11\n", 7), ("0", 1), ("0-127", 128), ("", None), (None, None), ("  \n", None),
])
def test_cpu_lists_are_counted(text, expected):
    assert parse_cpu_list(text) == expected


@pytest.mark.parametrize("memlock, expected", [("unlimited", None), ("8388608", 8 * 2**20), ("65536", 65536)])
def test_memlock_soft_limit(memlock, expected):
    assert parse_memlock(LIMITS.format(memlock=memlock)) == expected


@pytest.mark.parametrize("text, expected", [
    ("always [madvise] never\n", "madvise"), ("[always] madvise never\n", "always"),
    ("always madvise [never]\n", "never"), ("", None), (None, None),
])
def test_transparent_hugepage_mode(text, expected):
    assert parse_thp(text) == expected


# --- cgroup v1 -------------------------------------------------------------------------------------------

V1_SELF = "12:memory:/user.slice/job.scope\n11:cpu,cpuacct:/user.slice/job.scope\n1:name=systemd:/\n"


def v1_tree(tmp_path, *, job_limit=V1_UNLIMITED, slice_limit=V1_UNLIMITED, memsw=V1_UNLIMITED,
            job_quota="-1\n", slice_quota="-1\n"):
    mem, cpu = "sys/fs/cgroup/memory", "sys/fs/cgroup/cpu,cpuacct"
    return make_tree(tmp_path, {
        **base_proc(V1_SELF),
        f"{mem}/memory.limit_in_bytes": V1_UNLIMITED,
        f"{mem}/user.slice/memory.limit_in_bytes": slice_limit,
        f"{mem}/user.slice/job.scope/memory.limit_in_bytes": job_limit,
        f"{mem}/user.slice/job.scope/memory.memsw.limit_in_bytes": memsw,
        f"{mem}/user.slice/job.scope/memory.usage_in_bytes": "1073741824\n",
        f"{cpu}/cpu.cfs_quota_us": "-1\n", f"{cpu}/cpu.cfs_period_us": "100000\n",
        f"{cpu}/user.slice/cpu.cfs_quota_us": slice_quota, f"{cpu}/user.slice/cpu.cfs_period_us": "100000\n",
        f"{cpu}/user.slice/job.scope/cpu.cfs_quota_us": job_quota,
        f"{cpu}/user.slice/job.scope/cpu.cfs_period_us": "100000\n",
    })


def test_v1_huge_unlimited_values_read_as_no_limit(tmp_path):
    cg = read_cgroup(v1_tree(tmp_path) / "proc", tmp_path / "sys")
    assert (cg.version, cg.path) == (1, "/user.slice/job.scope")
    assert cg.memory_limit_bytes is None and cg.swap_limit_bytes is None and cg.cpu_quota_cpus is None
    assert cg.memory_usage_bytes == GiB


def test_v1_limits_memsw_and_quota_are_read(tmp_path):
    root = v1_tree(tmp_path, job_limit=f"{64 * GiB}\n", memsw=f"{64 * GiB}\n", job_quota="150000\n")
    cg = read_cgroup(root / "proc", root / "sys")
    assert cg.memory_limit_bytes == 64 * GiB
    assert cg.swap_limit_bytes == 64 * GiB
    assert cg.cpu_quota_cpus == 1.5


def test_v1_ancestor_with_the_tighter_limit_wins(tmp_path):
    root = v1_tree(tmp_path, job_limit=f"{64 * GiB}\n", slice_limit=f"{32 * GiB}\n",
                   job_quota="800000\n", slice_quota="200000\n")
    cg = read_cgroup(root / "proc", root / "sys")
    assert cg.memory_limit_bytes == 32 * GiB
    assert cg.cpu_quota_cpus == 2.0


def test_v1_separate_cpu_mount_is_found(tmp_path):
    root = make_tree(tmp_path, {
        **base_proc("4:memory:/\n2:cpuacct:/\n1:cpu:/\n"),
        "sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
        "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "300000\n", "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
    })
    assert read_cgroup(root / "proc", root / "sys").cpu_quota_cpus == 3.0


def test_v1_container_path_missing_under_the_mount_reads_the_mount_root(tmp_path):
    # Inside a container without a cgroup namespace /proc/self/cgroup names the host path, but the mount
    # already is the container's own cgroup.
    root = make_tree(tmp_path, {
        **base_proc("12:memory:/docker/3f2a9c\n11:cpu,cpuacct:/docker/3f2a9c\n"),
        "sys/fs/cgroup/memory/memory.limit_in_bytes": f"{2 * GiB}\n",
        "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": f"{2 * GiB}\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "50000\n",
        "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    })
    cg = read_cgroup(root / "proc", root / "sys")
    assert (cg.memory_limit_bytes, cg.swap_limit_bytes, cg.cpu_quota_cpus) == (2 * GiB, 2 * GiB, 0.5)


# --- cgroup v2 -------------------------------------------------------------------------------------------

V2_LEAF = "sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"
V2_PARENT = "sys/fs/cgroup/user.slice/user-1000.slice"


def v2_tree(tmp_path, *, leaf_max="max\n", parent_max="max\n", leaf_swap="max\n", parent_swap="max\n",
            leaf_cpu="max 100000\n", parent_cpu="max 100000\n", allowed="0-3"):
    return make_tree(tmp_path, {
        **base_proc("0::/user.slice/user-1000.slice/session-3.scope\n", allowed=allowed),
        "sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
        f"{V2_PARENT}/memory.max": parent_max, f"{V2_PARENT}/memory.swap.max": parent_swap,
        f"{V2_PARENT}/cpu.max": parent_cpu,
        f"{V2_LEAF}/memory.max": leaf_max, f"{V2_LEAF}/memory.swap.max": leaf_swap, f"{V2_LEAF}/cpu.max": leaf_cpu,
        f"{V2_LEAF}/memory.current": "524288000\n",
    })


def test_v2_max_everywhere_is_no_limit(tmp_path):
    root = v2_tree(tmp_path)
    cg = read_cgroup(root / "proc", root / "sys")
    assert (cg.version, cg.path) == (2, "/user.slice/user-1000.slice/session-3.scope")
    assert cg.memory_limit_bytes is None and cg.swap_limit_bytes is None and cg.cpu_quota_cpus is None
    assert cg.memory_usage_bytes == 524288000


def test_v2_numbers_are_read(tmp_path):
    root = v2_tree(tmp_path, leaf_max=f"{96 * GiB}\n", leaf_swap="0\n", leaf_cpu="200000 100000\n")
    cg = read_cgroup(root / "proc", root / "sys")
    assert (cg.memory_limit_bytes, cg.swap_limit_bytes, cg.cpu_quota_cpus) == (96 * GiB, 0, 2.0)


def test_v2_ancestor_with_the_tighter_limit_wins(tmp_path):
    root = v2_tree(tmp_path, leaf_max=f"{96 * GiB}\n", parent_max=f"{48 * GiB}\n",
                   parent_swap=f"{4 * GiB}\n", parent_cpu="150000 100000\n", leaf_cpu="400000 100000\n")
    cg = read_cgroup(root / "proc", root / "sys")
    assert (cg.memory_limit_bytes, cg.swap_limit_bytes, cg.cpu_quota_cpus) == (48 * GiB, 4 * GiB, 1.5)


def test_v2_container_path_missing_under_the_mount_reads_the_mount_root(tmp_path):
    root = make_tree(tmp_path, {
        **base_proc("0::/system.slice/docker-3f2a9c.scope\n"),
        "sys/fs/cgroup/cgroup.controllers": "cpu memory pids\n",
        "sys/fs/cgroup/memory.max": f"{8 * GiB}\n",
        "sys/fs/cgroup/memory.swap.max": "max\n",
        "sys/fs/cgroup/cpu.max": "400000 100000\n",
        "sys/fs/cgroup/memory.current": "1048576\n",
    })
    cg = read_cgroup(root / "proc", root / "sys")
    assert (cg.memory_limit_bytes, cg.swap_limit_bytes, cg.cpu_quota_cpus) == (8 * GiB, None, 4.0)
    assert cg.memory_usage_bytes == 1048576


def test_no_cgroup_filesystem_means_no_known_limit(tmp_path):
    root = make_tree(tmp_path, base_proc(""))
    cg = read_cgroup(root / "proc", root / "sys")
    assert cg.version is None and cg.path is None
    assert (cg.memory_limit_bytes, cg.swap_limit_bytes, cg.cpu_quota_cpus) == (None, None, None)


# --- the whole host --------------------------------------------------------------------------------------

def test_host_facts_from_a_recorded_tree(tmp_path):
    root = v2_tree(tmp_path, leaf_cpu="150000 100000\n", allowed="0-3,8,10-11")
    host = read(root, disks=[("run folder", tmp_path / "runs" / "not-yet")])
    assert host.hostname == "tower" and host.kernel == "6.8.0-60-generic"
    assert (host.ram_total_bytes, host.ram_available_bytes) == (24681236 * 1024, 24285760 * 1024)
    assert (host.swap_total_bytes, host.swap_free_bytes) == (8388604 * 1024, 8000000 * 1024)
    assert host.ram_stated_by_operator is False
    assert host.memlock_limit_bytes == 8 * 2**20
    assert host.transparent_hugepages == "madvise"
    assert host.cpus_online == 16 and host.numa_nodes == 2
    assert host.cpus_usable == 1.5  # affinity allows 7 CPUs, the cgroup quota 1.5: the smaller counts
    assert host.wsl2 is False
    assert [d.label for d in host.disks] == ["run folder"]


def test_affinity_counts_when_there_is_no_quota(tmp_path):
    host = read(v2_tree(tmp_path, allowed="0-3,8,10-11"))
    assert host.cpus_usable == 7


def test_unlimited_memlock_reads_as_none(tmp_path):
    host = read(make_tree(tmp_path, base_proc("", memlock="unlimited")))
    assert host.memlock_limit_bytes is None


def test_wsl2_kernel_is_recognised(tmp_path):
    host = read(make_tree(tmp_path, base_proc("", release="5.15.153.1-microsoft-standard-WSL2")))
    assert host.wsl2 is True


def test_missing_files_are_unknown_not_zero(tmp_path):
    host = read(make_tree(tmp_path, {"proc/self/status": "Name:\tx\n"}))
    assert host.ram_total_bytes is None and host.swap_total_bytes is None
    assert host.cpus_online is None and host.cpus_usable is None and host.numa_nodes is None
    assert host.transparent_hugepages is None and host.kernel is None and host.hostname is None


def test_disk_of_a_path_not_yet_created_is_measured_at_its_nearest_ancestor(tmp_path):
    disk = disk_facts("run folder", tmp_path / "a" / "b" / "c")
    usage = shutil.disk_usage(tmp_path)
    assert disk.path == str(tmp_path / "a" / "b" / "c")
    assert disk.total_bytes == usage.total
    assert abs(disk.free_bytes - usage.free) < 64 * 2**20  # other writers share the disk


# --- IOMMU ---------------------------------------------------------------------------------------------

CMDLINE = "BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=1234 ro intel_iommu=on iommu=pt iommu.strict=0 quiet splash\n"


def iommu_tree(tmp_path, *, units=("dmar0", "dmar1"), groups=None, cmdline=CMDLINE) -> Path:
    """A fake /sys and /proc: IOMMU units as folders of /sys/class/iommu, groups with their domain type."""
    groups = {"0": "DMA-FQ", "1": "identity", "2": "DMA-FQ", "3": None} if groups is None else groups
    files = {f"sys/kernel/iommu_groups/{g}/type": t + "\n" for g, t in groups.items() if t is not None}
    files |= {f"sys/kernel/iommu_groups/{g}/reset_method": "flr\n" for g, t in groups.items() if t is None}
    files |= {f"sys/class/iommu/{unit}/uevent": "" for unit in units}
    files |= {"sys/class/net/lo/uevent": ""}
    if cmdline is not None:
        files["proc/cmdline"] = cmdline
    root = make_tree(tmp_path, files)
    for folder in ("sys/class/iommu", "sys/kernel/iommu_groups"):  # present even when empty
        (root / folder).mkdir(parents=True, exist_ok=True)
    return root


@pytest.mark.parametrize("text, expected", [
    (CMDLINE, ["intel_iommu=on", "iommu=pt", "iommu.strict=0"]),
    ("ro amd_iommu=off iommu.passthrough=1 quiet\n", ["amd_iommu=off", "iommu.passthrough=1"]),
    ("ro quiet noiommu_words=1\n", []),
    (None, None),
])
def test_iommu_words_of_the_kernel_command_line(text, expected):
    assert parse_iommu_cmdline(text) == expected


def test_active_iommu_with_groups_and_their_domain_types(tmp_path):
    root = iommu_tree(tmp_path)
    assert read_iommu(root / "proc", root / "sys") == IommuFacts(
        active=True, groups=4, domain_types=["DMA-FQ", "identity"],
        cmdline=["intel_iommu=on", "iommu=pt", "iommu.strict=0"])


def test_no_iommu_unit_is_an_inactive_iommu(tmp_path):
    root = iommu_tree(tmp_path, units=(), groups={}, cmdline="ro intel_iommu=off\n")
    assert read_iommu(root / "proc", root / "sys") == IommuFacts(
        active=False, groups=0, domain_types=[], cmdline=["intel_iommu=off"])


def test_no_iommu_class_at_all_is_inactive_when_sys_class_is_readable(tmp_path):
    root = make_tree(tmp_path, {"sys/class/net/lo/uevent": "", "proc/cmdline": "ro\n"})
    assert read_iommu(root / "proc", root / "sys") == IommuFacts(active=False, groups=None, domain_types=[],
                                                                 cmdline=[])


def test_unreadable_iommu_facts_are_unknown_not_off(tmp_path):
    assert read_iommu(tmp_path / "proc", tmp_path / "sys") == IommuFacts(active=None, groups=None,
                                                                         domain_types=[], cmdline=None)


def test_host_facts_carry_the_iommu(tmp_path):
    root = iommu_tree(tmp_path)
    make_tree(root, base_proc(""))
    host = read(root)
    assert host.iommu is not None and host.iommu.active is True and host.iommu.groups == 4


# --- this machine ----------------------------------------------------------------------------------------

def test_live_host_facts_agree_with_independent_sources(tmp_path):
    host = read_host_facts([("run folder", tmp_path)])
    vm = psutil.virtual_memory()
    assert host.ram_total_bytes == vm.total
    assert abs(host.ram_available_bytes - vm.available) < 512 * 2**20  # other processes allocate meanwhile
    assert host.swap_total_bytes == psutil.swap_memory().total
    affinity = len(os.sched_getaffinity(0))
    quota = host.cgroup.cpu_quota_cpus
    assert host.cpus_usable == (min(affinity, quota) if quota else affinity)
    assert host.cpus_online == psutil.cpu_count(logical=True)
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert host.memlock_limit_bytes == (None if soft == resource.RLIM_INFINITY else soft)
    assert host.cgroup.version in (1, 2)
    statvfs = os.statvfs(tmp_path)
    assert host.disks[0].total_bytes == statvfs.f_blocks * statvfs.f_frsize
    assert host.kernel == os.uname().release
    iommu_units = Path("/sys/class/iommu")
    assert host.iommu is not None
    assert host.iommu.active == (bool(os.listdir(iommu_units)) if iommu_units.is_dir() else False)
    words = Path("/proc/cmdline").read_text().split()
    assert host.iommu.cmdline == [w for w in words if w.partition("=")[0] in ("intel_iommu", "amd_iommu", "iommu")
                                  or w.startswith("iommu.")]
