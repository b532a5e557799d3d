"""The hardware facts as data: what a scan reads, what a profile replays (schema onegpu/hardware@1).

Bytes everywhere; None means "not known" (never zero). A fact that could not be read carries its reason
in an `error` field rather than a guess.
"""
from __future__ import annotations

from pathlib import Path

from msgspec import Struct, field

from onegpu.core import strict_json
from onegpu.core.jsonable import FactsFormatError, from_json, to_json

SCHEMA = "onegpu/hardware@1"
MAX_PROFILE_BYTES = 10_000_000  # a recorded machine: a few kilobytes


class GpuProcess(Struct, frozen=True):
    pid: int
    used_bytes: int | None


def pci_address(bus_id: str) -> tuple[int, ...] | str:
    """A PCI bus id as numbers (domain, bus, device, function), in bus order: '00000000:01:00.0' (NVML's bus id) and
    '0000:01:00.0' (its legacy form) are one device; text that is not a bus id stays text."""
    text = bus_id.strip().lower()
    try:
        return tuple(int(part, 16) for part in text.replace(".", ":").split(":"))
    except ValueError:
        return text


class GpuDevice(Struct, frozen=True):
    index: int
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int  # what the driver reports free (NVML v2), not total minus used
    used_bytes: int
    reserved_bytes: int | None  # driver/firmware reserve (NVML memory v2); None on drivers without v2
    mig_enabled: bool | None  # None: the card does not support MIG
    compute_processes: list[GpuProcess]
    pci_bus_id: str
    pcie_link_gen: int | None = None
    pcie_link_width: int | None = None
    pcie_max_link_gen: int | None = None
    pcie_max_link_width: int | None = None
    numa_node: int | None = None
    bar1_total_bytes: int | None = None  # the PCIe BAR1 window; as large as the memory = resizable BAR on


class GpuLink(Struct, frozen=True):
    """What lies between two cards of this machine, as NVML reports it; None = not reported."""
    a: int  # device indexes, a < b
    b: int
    topology: str | None  # NVML common ancestor: INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE or SYSTEM
    p2p_read: str | None  # NVML peer-access status: OK, DISABLED_BY_REGKEY, CHIPSET_NOT_SUPPORTED, ...
    p2p_write: str | None
    nvlinks: int | None  # active NVLink links from a that end at b itself (not at an NVSwitch); 0 without NVLink


class GpuFacts(Struct, frozen=True):
    nvml_loaded: bool
    error: str | None
    driver_version: str | None
    cuda_driver_version: str | None
    devices: list[GpuDevice]
    links: list[GpuLink] = field(default_factory=list)  # every pair of devices; none with fewer than two

    def link_between(self, a: int, b: int) -> GpuLink | None:
        """The recorded pair of device indexes a and b, in either order; None when it was not recorded."""
        return next((link for link in self.links if {link.a, link.b} == {a, b}), None)


class CgroupFacts(Struct, frozen=True):
    version: int | None  # 1, 2, or None when no cgroup filesystem is mounted
    path: str | None  # the kit process's own cgroup, e.g. /user.slice/session-3.scope
    memory_limit_bytes: int | None  # the tightest limit on the path up to the root; None = unlimited
    memory_usage_bytes: int | None
    swap_limit_bytes: int | None  # memory+swap (v1) or swap.max (v2); None = unlimited
    cpu_quota_cpus: float | None  # cpu quota / period; None = unlimited


class DiskFacts(Struct, frozen=True):
    label: str  # "run folder", "checkpoint"
    path: str
    free_bytes: int
    total_bytes: int


class IommuFacts(Struct, frozen=True):
    """The IOMMU, a precondition of fast PCIe peer-to-peer traffic: one that translates DMA degrades or breaks it."""
    active: bool | None  # an IOMMU is registered under /sys/class/iommu; None: /sys/class not readable
    groups: int | None  # entries of /sys/kernel/iommu_groups; None: the folder is absent
    domain_types: list[str]  # distinct default-domain types of the groups: DMA, DMA-FQ, identity (passthrough)
    cmdline: list[str] | None  # the kernel command line's IOMMU words; None: /proc/cmdline not readable


class HostFacts(Struct, frozen=True):
    hostname: str | None
    kernel: str | None
    ram_total_bytes: int | None  # None: unknown (a profile may leave it for the operator to state)
    ram_available_bytes: int | None
    ram_stated_by_operator: bool
    swap_total_bytes: int | None
    swap_free_bytes: int | None
    cgroup: CgroupFacts
    memlock_limit_bytes: int | None  # None = unlimited
    transparent_hugepages: str | None  # the selected mode: always / madvise / never
    cpus_online: int | None
    cpus_usable: float | None  # affinity and cgroup quota applied
    numa_nodes: int | None
    wsl2: bool
    disks: list[DiskFacts] = field(default_factory=list)
    iommu: IommuFacts | None = None  # None: not read (profiles and run folders written before it was)


class DockerFacts(Struct, frozen=True):
    reachable: bool
    error: str | None
    endpoint: str  # where the SDK connects, e.g. unix:///var/run/docker.sock
    remote: bool  # tcp:// or ssh:// endpoint: another machine's RAM
    rootless: bool  # a rootless daemon runs in a user namespace with its own limits
    server_version: str | None
    api_version: str | None
    swap_limit: bool | None
    memory_limit: bool | None
    cgroup_version: str | None
    runtimes: list[str]
    nvidia_runtime: bool  # an "nvidia" runtime is registered
    nvidia_hook: bool  # nvidia-container-runtime-hook found beside a local daemon (the --gpus path)
    cdi_gpu_devices: list[str]  # CDI device names such as nvidia.com/gpu=0
    daemon_mem_total_bytes: int | None
    daemon_name: str | None

    @property
    def can_hand_gpus(self) -> bool:
        return self.reachable and (self.nvidia_runtime or self.nvidia_hook or bool(self.cdi_gpu_devices))


class HardwareFacts(Struct, frozen=True):
    schema: str
    source: str  # "live", "replayed", or "composed" (a shipped profile assembled from public outputs)
    recorded_at: str
    gpu: GpuFacts
    host: HostFacts
    docker: DockerFacts
    profile: str | None = None  # the replayed profile's name
    description: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def replayed(self) -> bool:
        return self.source == "replayed"


def facts_to_json(facts: HardwareFacts) -> dict:
    return to_json(facts)


def facts_from_json(data: dict, where: str = "profile") -> HardwareFacts:
    """Rebuild facts from JSON; raises FactsFormatError naming the field on any mismatch."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise FactsFormatError(f"{where}: schema must be {SCHEMA!r}, found {found!r}")
    return from_json(HardwareFacts, data, where)


def load_profile(path: Path) -> HardwareFacts:
    """Read a recorded profile (or a run folder's hardware.json) for --hardware replay."""
    try:
        data, _ = strict_json.load_file(path, MAX_PROFILE_BYTES)
    except strict_json.JSONFileError as exc:
        problem = "no such file" if exc.kind == "missing" else f"not readable JSON ({exc})"
        raise FactsFormatError(f"--hardware {path}: {problem}") from None
    try:
        return facts_from_json(data, where="$")
    except FactsFormatError as exc:
        raise FactsFormatError(f"--hardware {path}: {exc}") from None
