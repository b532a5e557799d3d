"""Pure: machine facts -> Blocked or a line a person can read. One function per fact of KIT.md 3.1."""
from __future__ import annotations

from onegpu.core.outcomes import Blocked
from onegpu.core.units import GIB, gib, size_text
from onegpu.machine.model import DockerFacts, GpuDevice, GpuFacts, HostFacts


def require_driver(gpu: GpuFacts) -> str:
    if not gpu.nvml_loaded:
        raise Blocked("NO_NVIDIA_DRIVER", f"NVML could not be loaded: {gpu.error}")
    return f"NVIDIA driver {gpu.driver_version}, CUDA driver API {gpu.cuda_driver_version}"


def require_gpus(gpu: GpuFacts) -> list[str]:
    require_driver(gpu)
    if not gpu.devices:
        raise Blocked("NO_GPU", "the NVIDIA driver answers but lists 0 GPUs")
    return [describe_gpu(d) for d in gpu.devices]


def describe_gpu(d: GpuDevice) -> str:
    reserved = f", reserved {gib(d.reserved_bytes)}" if d.reserved_bytes is not None else ""
    link = (f", PCIe gen {d.pcie_link_gen} x{d.pcie_link_width} (max gen {d.pcie_max_link_gen} "
            f"x{d.pcie_max_link_width})" if d.pcie_link_gen else "")
    mig = {None: "MIG not supported", True: "MIG ENABLED", False: "MIG off"}[d.mig_enabled]
    return (f"GPU {d.index} {d.name} {d.uuid} at {d.pci_bus_id}: total {gib(d.total_bytes)}, driver-reported "
            f"free {gib(d.free_bytes)}, used {gib(d.used_bytes)}{reserved}; {mig}; "
            f"{len(d.compute_processes)} compute process(es){link}"
            + (f", NUMA node {d.numa_node}" if d.numa_node is not None else "")
            + (f", BAR1 {size_text(d.bar1_total_bytes)}" if d.bar1_total_bytes is not None else ""))


def find_gpu(gpu: GpuFacts, selector: int | str) -> GpuDevice | None:
    """The card a settings selector names: its index (an int) or its UUID."""
    for d in gpu.devices:
        if (isinstance(selector, int) and d.index == selector) or d.uuid == selector:
            return d
    return None


def known_gpus(gpu: GpuFacts) -> str:
    return ", ".join(f"{d.index}={d.uuid}" for d in gpu.devices)


def select_gpu(gpu: GpuFacts, selector: int | str) -> GpuDevice:
    """The one GPU the settings name (index or UUID). Only this card is ever counted."""
    require_gpus(gpu)
    device = find_gpu(gpu, selector)
    if device is None:
        raise Blocked("GPU_NOT_FOUND", f"settings name GPU {selector!r}; this machine has {len(gpu.devices)}: "
                                       f"{known_gpus(gpu)}", {"gpus": len(gpu.devices)})
    return device


def require_whole_card(d: GpuDevice) -> str:
    if d.mig_enabled:
        raise Blocked("MIG_ENABLED", f"GPU {d.index} ({d.uuid}) is in MIG mode; the plan needs the whole "
                                     f"{gib(d.total_bytes)} card")
    return f"GPU {d.index} is a whole card ({'MIG off' if d.mig_enabled is False else 'MIG not supported'})"


def require_idle(d: GpuDevice) -> str:
    if d.compute_processes:
        held = sum(p.used_bytes or 0 for p in d.compute_processes)
        pids = ", ".join(str(p.pid) for p in d.compute_processes)
        raise Blocked("GPU_BUSY", f"GPU {d.index} already runs {len(d.compute_processes)} compute process(es) "
                                  f"(pids {pids}) holding {gib(held)}; driver-reported free is {gib(d.free_bytes)} "
                                  f"of {gib(d.total_bytes)}. The kit stops no service it did not start",
                      {"processes": len(d.compute_processes), "held_bytes": held, "free_bytes": d.free_bytes})
    return f"GPU {d.index} has no compute processes; driver-reported free {gib(d.free_bytes)}"


def require_host_ram(host: HostFacts, replayed: bool = False) -> str:
    if host.ram_total_bytes is None:
        raise Blocked("HOST_RAM_UNSTATED", "this profile leaves host RAM unset (it was never established "
                                           "publicly); state it with --host-ram-gib N")
    who = ("stated by the operator" if host.ram_stated_by_operator
           else "from the replayed profile, not read here" if replayed else "read from /proc/meminfo")
    return (f"host RAM total {gib(host.ram_total_bytes)}, available {gib(host.ram_available_bytes)} ({who}); "
            f"swap {gib(host.swap_total_bytes)} total, {gib(host.swap_free_bytes)} free")


def describe_cgroup(host: HostFacts) -> str:
    cg = host.cgroup
    if cg.version is None:
        return "no cgroup filesystem found: no cgroup memory limit known"
    limit = "none" if cg.memory_limit_bytes is None else gib(cg.memory_limit_bytes)
    swap = "none" if cg.swap_limit_bytes is None else gib(cg.swap_limit_bytes)
    cpus = "none" if cg.cpu_quota_cpus is None else f"{cg.cpu_quota_cpus:g} CPUs"
    return (f"cgroup v{cg.version} {cg.path}: memory limit {limit} (tightest up to the root), "
            f"{'memory+swap' if cg.version == 1 else 'swap'} limit {swap}, usage {gib(cg.memory_usage_bytes)}, "
            f"CPU quota {cpus}")


def describe_limits(host: HostFacts) -> str:
    memlock = "unlimited" if host.memlock_limit_bytes is None else size_text(host.memlock_limit_bytes)
    return (f"locked-memory limit {memlock} (pinned host buffers count against it); transparent hugepages "
            f"{host.transparent_hugepages or 'unknown'}")


def describe_cpus(host: HostFacts) -> str:
    # A profile may leave CPU facts unknown (None): say so rather than fail formatting them.
    usable = "unknown" if host.cpus_usable is None else f"{host.cpus_usable:g}"
    return (f"CPUs online {host.cpus_online or 'unknown'}, usable by this process {usable} (affinity and cgroup "
            f"quota applied); NUMA nodes {host.numa_nodes or 'unknown'}; kernel {host.kernel or 'unknown'}"
            + ("; WSL2: host RAM and GPU memory are shared with Windows" if host.wsl2 else ""))


def require_disk(host: HostFacts, label: str, need_bytes: int = 1 * GIB) -> str:
    for disk in host.disks:
        if disk.label == label:
            if disk.free_bytes < need_bytes:
                raise Blocked("DISK_FULL", f"{label} {disk.path}: {gib(disk.free_bytes)} free, the kit needs at "
                                           f"least {gib(need_bytes)}",
                              {"free_bytes": disk.free_bytes, "need_bytes": need_bytes})
            return f"free disk at the {label} ({disk.path}): {gib(disk.free_bytes)} of {gib(disk.total_bytes)}"
    return f"free disk at the {label}: not recorded"


def require_docker(docker: DockerFacts) -> str:
    if not docker.reachable:
        raise Blocked("NO_DOCKER", f"no Docker daemon answers at {docker.endpoint}: {docker.error}")
    return (f"Docker daemon {docker.server_version} (API {docker.api_version}) at {docker.endpoint}, cgroup "
            f"v{docker.cgroup_version}, runtimes {', '.join(docker.runtimes)}")


def require_local_docker(docker: DockerFacts) -> str:
    require_docker(docker)
    if docker.remote or docker.rootless:
        what = "remote" if docker.remote else "rootless"
        raise Blocked("REMOTE_DOCKER", f"the Docker daemon at {docker.endpoint} is {what}: its memory "
                                       f"({gib(docker.daemon_mem_total_bytes)} reported) is not this host's, so "
                                       "the host RAM facts here say nothing about where the engine would run")
    return f"the Docker daemon is local and rootful (it reports {gib(docker.daemon_mem_total_bytes)} RAM)"


def require_swap_limits(docker: DockerFacts) -> str:
    require_docker(docker)
    if not docker.swap_limit:
        raise Blocked("SWAP_LIMIT_UNENFORCED", "the daemon reports SwapLimit false: a container RAM cap would "
                                               "spill into swap instead of ending in an OOM kill")
    return "the daemon enforces memory and swap limits (a RAM cap cannot spill into swap)"


def require_gpu_handoff(docker: DockerFacts) -> str:
    require_docker(docker)
    if not docker.can_hand_gpus:
        raise Blocked("NO_GPU_IN_CONTAINERS", "no nvidia runtime, no nvidia-container-runtime-hook beside the "
                                              f"daemon and no CDI nvidia.com/gpu device (runtimes: "
                                              f"{', '.join(docker.runtimes) or 'none'})")
    ways = [w for w, ok in (("nvidia runtime", docker.nvidia_runtime), ("--gpus hook", docker.nvidia_hook),
                            (f"CDI {', '.join(docker.cdi_gpu_devices)}", bool(docker.cdi_gpu_devices))) if ok]
    return f"the daemon can hand NVIDIA GPUs to containers via {'; '.join(ways)}"
