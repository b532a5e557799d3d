"""Pure: the machine phase's sections (onegpu.phases.machine; leftovers and the GPU lock: onegpu.phases.probe),
as read from receipt.json."""
from __future__ import annotations

from onegpu.record.base import Section

# ---- hardware: onegpu.machine.model.HardwareFacts as facts_to_json writes it (schema onegpu/hardware@1).
# Bytes everywhere; None means "not known" (never zero).


class GpuProcess(Section, frozen=True):
    """onegpu.machine.model:GpuProcess (via machine.py:hardware)."""

    pid: int | None = None
    used_bytes: int | None = None


class GpuDevice(Section, frozen=True):
    """onegpu.machine.model:GpuDevice (via machine.py:hardware)."""

    index: int | None = None
    name: str | None = None
    uuid: str | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None  # what the driver reports free (NVML v2), not total minus used
    used_bytes: int | None = None
    reserved_bytes: int | None = None  # driver/firmware reserve (NVML memory v2)
    mig_enabled: bool | None = None  # None: the card does not support MIG
    compute_processes: list[GpuProcess] | None = None
    pci_bus_id: str | None = None
    pcie_link_gen: int | None = None
    pcie_link_width: int | None = None
    pcie_max_link_gen: int | None = None
    pcie_max_link_width: int | None = None
    numa_node: int | None = None
    bar1_total_bytes: int | None = None  # the PCIe BAR1 window; as large as the memory = resizable BAR on


class GpuLink(Section, frozen=True):
    """onegpu.machine.model:GpuLink (via machine.py:hardware): what lies between two cards, as NVML reports it."""

    a: int | None = None  # device indexes, a < b
    b: int | None = None
    topology: str | None = None  # NVML common ancestor: INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE or SYSTEM
    p2p_read: str | None = None  # NVML peer-access status: OK, DISABLED_BY_REGKEY, CHIPSET_NOT_SUPPORTED, ...
    p2p_write: str | None = None
    nvlinks: int | None = None  # active NVLink links from a that end at b itself (not at an NVSwitch)


class GpuFacts(Section, frozen=True):
    """onegpu.machine.model:GpuFacts (via machine.py:hardware)."""

    nvml_loaded: bool | None = None
    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    devices: list[GpuDevice] | None = None
    links: list[GpuLink] | None = None  # every pair of devices; none with fewer than two


class CgroupFacts(Section, frozen=True):
    """onegpu.machine.model:CgroupFacts (via machine.py:hardware)."""

    version: int | None = None  # 1, 2, or None when no cgroup filesystem is mounted
    path: str | None = None  # the kit process's own cgroup
    memory_limit_bytes: int | None = None  # the tightest limit on the path up to the root; None = unlimited
    memory_usage_bytes: int | None = None
    swap_limit_bytes: int | None = None  # memory+swap (v1) or swap.max (v2); None = unlimited
    cpu_quota_cpus: int | float | None = None  # cpu quota / period; None = unlimited


class DiskFacts(Section, frozen=True):
    """onegpu.machine.model:DiskFacts (via machine.py:hardware)."""

    label: str | None = None  # "run folder", "checkpoint"
    path: str | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None


class IommuFacts(Section, frozen=True):
    """onegpu.machine.model:IommuFacts (via machine.py:hardware)."""

    active: bool | None = None  # an IOMMU is registered under /sys/class/iommu; None: not readable
    groups: int | None = None  # entries of /sys/kernel/iommu_groups; None: the folder is absent
    domain_types: list[str] | None = None  # distinct default-domain types: DMA, DMA-FQ, identity (passthrough)
    cmdline: list[str] | None = None  # the kernel command line's IOMMU words; None: /proc/cmdline not readable


class HostFacts(Section, frozen=True):
    """onegpu.machine.model:HostFacts (via machine.py:hardware)."""

    hostname: str | None = None
    kernel: str | None = None
    ram_total_bytes: int | None = None
    ram_available_bytes: int | None = None
    ram_stated_by_operator: bool | None = None
    swap_total_bytes: int | None = None
    swap_free_bytes: int | None = None
    cgroup: CgroupFacts | None = None
    memlock_limit_bytes: int | None = None  # None = unlimited
    transparent_hugepages: str | None = None  # the selected mode: always / madvise / never
    cpus_online: int | None = None
    cpus_usable: int | float | None = None  # affinity and cgroup quota applied
    numa_nodes: int | None = None
    wsl2: bool | None = None
    disks: list[DiskFacts] | None = None
    iommu: IommuFacts | None = None  # None: not read (profiles and run folders written before it was)


class DockerFacts(Section, frozen=True):
    """onegpu.machine.model:DockerFacts (via machine.py:hardware)."""

    reachable: bool | None = None
    error: str | None = None
    endpoint: str | None = None  # where the SDK connects, e.g. unix:///var/run/docker.sock
    remote: bool | None = None  # tcp:// or ssh:// endpoint: another machine's RAM
    rootless: bool | None = None
    server_version: str | None = None
    api_version: str | None = None
    swap_limit: bool | None = None
    memory_limit: bool | None = None
    cgroup_version: str | None = None
    runtimes: list[str] | None = None
    nvidia_runtime: bool | None = None  # an "nvidia" runtime is registered
    nvidia_hook: bool | None = None  # nvidia-container-runtime-hook found beside a local daemon (the --gpus path)
    cdi_gpu_devices: list[str] | None = None  # CDI device names such as nvidia.com/gpu=0
    daemon_mem_total_bytes: int | None = None
    daemon_name: str | None = None


class Hardware(Section, frozen=True):
    """onegpu.phases.machine:hardware (facts_to_json of onegpu.machine.model.HardwareFacts)."""

    schema: str | None = None  # "onegpu/hardware@1"
    source: str | None = None  # "live", "replayed", or "composed" (a shipped profile assembled from public outputs)
    recorded_at: str | None = None
    gpu: GpuFacts | None = None
    host: HostFacts | None = None
    docker: DockerFacts | None = None
    profile: str | None = None  # the replayed profile's name
    description: str | None = None
    notes: list[str] | None = None


class Replay(Section, frozen=True):
    """onegpu.phases.machine:hardware (with --hardware)."""

    profile: str | None = None  # the profile file's absolute path
    name: str | None = None  # the profile's own name (HardwareFacts.profile)


# ---- selection


class GpuSetMember(Section, frozen=True):
    """onegpu.phases.machine:gpu_set: one GPU of the multi-GPU protocol's set."""

    rank: int | None = None
    index: int | None = None
    uuid: str | None = None
    name: str | None = None


class Selection(Section, frozen=True):
    """onegpu.phases.machine:selected_gpu, gpu_set and onegpu.phases.plan:settings (multi-GPU keys)."""

    gpu_index: int | None = None
    gpu_uuid: str | None = None
    gpu_name: str | None = None
    protocol: str | None = None  # "N-GPU protocol (TP t x PP p)"; written only for the multi-GPU protocol
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_set: list[GpuSetMember] | None = None  # in rank order


# ---- probe phase: leftovers and the GPU lock


class LeftoverContainer(Section, frozen=True):
    """onegpu.engine.leftovers:_row (and remove_dead_owner_containers): one kit-labelled container."""

    id: str | None = None  # the container id's first 12 characters
    name: str | None = None
    status: str | None = None  # Docker's container status: running, exited, ...
    run_id: str | None = None
    role: str | None = None
    owner_pid: str | None = None  # the owner-pid label, as text
    owner_dead: bool | None = None  # None: cannot be judged from here (another PID namespace)
    why: str | None = None
    removed: bool | None = None  # only in an acting session's rows (remove_dead_owner_containers)
    error: str | None = None  # the Docker API error a removal met


class Leftovers(Section, frozen=True):
    """onegpu.phases.probe:kit_leftovers and leftovers_removed."""

    removed_any: bool | None = None
    containers: list[LeftoverContainer] | None = None


class GpuLock(Section, frozen=True):
    """onegpu.phases.probe:gpu_lock."""

    gpu_uuid: str | None = None  # the selected GPU
    pid: int | None = None
    since: int | float | None = None  # time.time() when the lock was taken
    gpu_uuids: list[str] | None = None  # every GPU of a multi-GPU set, in rank order
