"""Host facts from /proc and /sys: RAM, swap, our cgroup's limits, memlock, THP, usable CPUs, disks, WSL2, IOMMU.

The roots are parameters so recorded or hand-made trees (cgroup v1, v2, nested, unlimited) exercise the
same code as the live machine. /proc/meminfo is parsed directly rather than through psutil because psutil
reads one global procfs path, which cannot be pointed at a recorded tree per call.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from onegpu.machine.model import CgroupFacts, DiskFacts, HostFacts, IommuFacts

# cgroup v1 writes "no limit" as PAGE_COUNTER_MAX pages (9223372036854771712 on 4 KiB pages); anything at
# or beyond 2**62 bytes is no real limit on any machine that exists.
UNLIMITED_AT = 2**62


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo lines ("MemTotal:  24681236 kB") -> {key: bytes}."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            factor = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
            out[key.strip()] = int(parts[0]) * factor
    return out


def parse_limit(text: str | None) -> int | None:
    """A cgroup byte limit ("max", "-1", a number, a huge sentinel) -> bytes, or None for unlimited/unknown."""
    if text is None:
        return None
    text = text.strip()
    if text in ("max", "-1", ""):
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value < 0 or value >= UNLIMITED_AT else value


def parse_cpu_list(text: str | None) -> int | None:
    """"0-3,8,10-11" -> 7."""
    if not text or not text.strip():
        return None
    count = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        count += (int(hi) - int(lo) + 1) if hi else 1
    return count


def _own_cgroups(proc: Path) -> dict[str, str]:
    """/proc/self/cgroup -> {controller: path}; the v2 unified entry is under ''."""
    out = {}
    for line in (_read(proc / "self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for ctrl in parts[1].split(",") if parts[1] else [""]:
                out[ctrl] = parts[2]
    return out


def _chain(mount: Path, cg_path: str) -> list[Path]:
    """Our cgroup folder and its ancestors up to the mount root, innermost first.

    Inside a container without a cgroup namespace the recorded path (/docker/<id>) does not exist under the
    mount, because the mount already is our cgroup: then only the mount root is read.
    """
    rel = cg_path.strip("/")
    here = mount / rel if rel else mount
    if not here.is_dir():
        return [mount]
    chain = [here]
    while here != mount:
        here = here.parent
        chain.append(here)
    return chain


def _tightest(values) -> int | None:
    limits = [v for v in values if v is not None]
    return min(limits) if limits else None


def read_cgroup(proc: Path, sys: Path) -> CgroupFacts:
    """Memory, swap and CPU limits that apply to this process (v1 or v2, nested paths walked to the root)."""
    root = sys / "fs/cgroup"
    own = _own_cgroups(proc)
    if (root / "cgroup.controllers").exists():
        chain = _chain(root, own.get("", "/"))
        mem = _tightest(parse_limit(_read(d / "memory.max")) for d in chain)
        swap = _tightest(parse_limit(_read(d / "memory.swap.max")) for d in chain)
        usage = parse_limit(_read(chain[0] / "memory.current"))
        quotas = []
        for d in chain:
            text = (_read(d / "cpu.max") or "max").split()
            if text and text[0] != "max" and len(text) == 2:
                quotas.append(int(text[0]) / int(text[1]))
        return CgroupFacts(version=2, path=own.get("", "/"), memory_limit_bytes=mem,
                           memory_usage_bytes=usage, swap_limit_bytes=swap,
                           cpu_quota_cpus=min(quotas) if quotas else None)
    if (root / "memory").is_dir():
        mem_path = own.get("memory", "/")
        chain = _chain(root / "memory", mem_path)
        mem = _tightest(parse_limit(_read(d / "memory.limit_in_bytes")) for d in chain)
        swap = _tightest(parse_limit(_read(d / "memory.memsw.limit_in_bytes")) for d in chain)
        usage = parse_limit(_read(chain[0] / "memory.usage_in_bytes"))
        cpu_mount = next((root / n for n in ("cpu,cpuacct", "cpu") if (root / n).is_dir()), None)
        quotas = []
        if cpu_mount is not None:
            for d in _chain(cpu_mount, own.get("cpu", "/")):
                quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
                if quota and period and int(quota) > 0 and int(period) > 0:
                    quotas.append(int(quota) / int(period))
        return CgroupFacts(version=1, path=mem_path, memory_limit_bytes=mem, memory_usage_bytes=usage,
                           swap_limit_bytes=swap, cpu_quota_cpus=min(quotas) if quotas else None)
    return CgroupFacts(version=None, path=None, memory_limit_bytes=None, memory_usage_bytes=None,
                       swap_limit_bytes=None, cpu_quota_cpus=None)


def parse_memlock(limits_text: str | None) -> int | None:
    """'Max locked memory  8388608  8388608  bytes' from /proc/self/limits -> soft limit bytes (None = unlimited)."""
    for line in (limits_text or "").splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory"):].split()[0]
            return None if soft == "unlimited" else int(soft)
    return None


def parse_thp(text: str | None) -> str | None:
    """'always [madvise] never' -> 'madvise'."""
    if not text:
        return None
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return None


# Kernel command-line words that switch or tune the IOMMU: intel_iommu=on, amd_iommu=off, iommu=pt,
# iommu.passthrough=1, iommu.strict=0.
IOMMU_WORDS = ("intel_iommu=", "amd_iommu=", "iommu=", "iommu.")


def _entries(folder: Path) -> list[Path] | None:
    """A folder's entries, None when it is not there (or not readable): absent is not the same as empty."""
    try:
        return sorted(folder.iterdir())
    except OSError:
        return None


def parse_iommu_cmdline(text: str | None) -> list[str] | None:
    """'BOOT_IMAGE=/vmlinuz ro intel_iommu=on iommu=pt quiet' -> ['intel_iommu=on', 'iommu=pt']."""
    if text is None:
        return None
    return [word for word in text.split() if word.startswith(IOMMU_WORDS)]


def _iommu_active(sys: Path) -> bool | None:
    """The kernel registers every active IOMMU unit under /sys/class/iommu (dmar0, ivhd0, ...)."""
    units = _entries(sys / "class/iommu")
    if units is not None:
        return bool(units)
    # No iommu class at all means no IOMMU driver registered, but only if /sys/class itself can be read.
    return False if _entries(sys / "class") is not None else None


def read_iommu(proc: Path, sys: Path) -> IommuFacts:
    """Whether an IOMMU is active, its groups and their default-domain type, and what the kernel was told.

    A group's `type` says whether DMA is translated (DMA, DMA-FQ) or passed through (identity).
    """
    groups = _entries(sys / "kernel/iommu_groups")
    types = {(_read(group / "type") or "").strip() for group in groups or []}
    return IommuFacts(
        active=_iommu_active(sys),
        groups=None if groups is None else len(groups),
        domain_types=sorted(t for t in types if t),
        cmdline=parse_iommu_cmdline(_read(proc / "cmdline")),
    )


def disk_facts(label: str, path: Path) -> DiskFacts:
    """Free space where `path` will live: the nearest existing ancestor is measured."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    return DiskFacts(label=label, path=str(path), free_bytes=usage.free, total_bytes=usage.total)


def read_host_facts(disks: list[tuple[str, Path]], proc: Path = Path("/proc"),
                    sys: Path = Path("/sys")) -> HostFacts:
    """Read this host (or a recorded /proc and /sys tree)."""
    mem = parse_meminfo(_read(proc / "meminfo") or "")
    cgroup = read_cgroup(proc, sys)
    status = _read(proc / "self/status") or ""
    allowed = next((line.split(":", 1)[1] for line in status.splitlines()
                    if line.startswith("Cpus_allowed_list:")), None)
    affinity = parse_cpu_list(allowed)
    usable = [v for v in (affinity, cgroup.cpu_quota_cpus) if v is not None]
    release = (_read(proc / "sys/kernel/osrelease") or "").strip() or None
    version = _read(proc / "version") or ""
    return HostFacts(
        hostname=(_read(proc / "sys/kernel/hostname") or "").strip() or None,
        kernel=release,
        ram_total_bytes=mem.get("MemTotal"),
        ram_available_bytes=mem.get("MemAvailable"),
        ram_stated_by_operator=False,
        swap_total_bytes=mem.get("SwapTotal"),
        swap_free_bytes=mem.get("SwapFree"),
        cgroup=cgroup,
        memlock_limit_bytes=parse_memlock(_read(proc / "self/limits")),
        transparent_hugepages=parse_thp(_read(sys / "kernel/mm/transparent_hugepage/enabled")),
        cpus_online=parse_cpu_list(_read(sys / "devices/system/cpu/online")),
        cpus_usable=min(usable) if usable else None,
        numa_nodes=parse_cpu_list(_read(sys / "devices/system/node/online")),
        wsl2="microsoft" in (release or "").lower() or "microsoft" in version.lower(),
        disks=[disk_facts(label, p) for label, p in disks],
        iommu=read_iommu(proc, sys),
    )

