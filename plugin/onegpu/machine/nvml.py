"""GPU facts through NVML (nvidia-ml-py, imported as pynvml).

Two steps so the conversion can be tested without a driver: `read_raw` calls NVML and keeps its answers
as plain values (what a recorded card looks like); `gpu_facts_from_raw` turns those into GpuFacts. The
live path and the tests run the same conversion.

With two or more cards, every pair is read too (topology, peer access, NVLink): what a tensor- or
pipeline-parallel engine spanning them would depend on.
"""
from __future__ import annotations

from itertools import combinations

from onegpu.machine.model import GpuDevice, GpuFacts, GpuLink, GpuProcess, pci_address

# NVML's enums by the numbers nvml.h gives them. The raw record keeps NVML's numbers; the facts carry the names.
TOPOLOGY_LEVELS = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}
P2P_STATUSES = {0: "OK", 1: "CHIPSET_NOT_SUPPORTED", 2: "GPU_NOT_SUPPORTED", 3: "IOH_TOPOLOGY_NOT_SUPPORTED",
                4: "DISABLED_BY_REGKEY", 5: "NOT_SUPPORTED", 6: "UNKNOWN"}
# What nvmlDeviceGetNvLinkState answers for a link index past the card's last link (or on a card without
# NVLink): the end of the card's links, not an unknown.
_NO_MORE_NVLINKS = ("NVMLError_NotSupported", "NVMLError_InvalidArgument")


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_error(exc: BaseException) -> str | None:
    """The NVMLError_* class name of an NVML answer, None for any other exception (a bug, not an answer)."""
    name = type(exc).__name__  # pynvml raises dynamically created NVMLError_* subclasses
    return name if name.startswith("NVMLError") else None


def _optional(call, *args):
    """NVML getters a card may not support answer NVMLError; that is 'unknown', not a failure."""
    try:
        return call(*args)
    except Exception as exc:
        if _nvml_error(exc):
            return None
        raise


def _enum_int(value) -> int:
    """An NVML constant as the int the C call needs. nvidia-ml-py 13.615 defines NVML_P2P_CAPS_INDEX_READ with a
    stray trailing comma, as the tuple (0,), which ctypes refuses to pass."""
    return int(value[0]) if isinstance(value, tuple) else int(value)


def read_raw(nvml) -> dict:
    """Ask NVML everything the kit needs, as plain JSON values. Never raises for a missing driver.

    `nvml` is the pynvml module (a stand-in only in tests that exercise this without a driver).
    """
    try:
        nvml.nvmlInit()
    except Exception as exc:
        if type(exc).__name__.startswith("NVMLError"):
            return {"nvml_loaded": False, "error": f"{type(exc).__name__}: {exc}"}
        raise
    try:
        raw: dict = {
            "nvml_loaded": True,
            "error": None,
            "driver_version": _text(nvml.nvmlSystemGetDriverVersion()),
            "cuda_driver_version": _optional(nvml.nvmlSystemGetCudaDriverVersion_v2),
            "devices": [],
        }
        handles = [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
        raw["devices"] = [_read_device(nvml, index, handle) for index, handle in enumerate(handles)]
        raw["links"] = _read_links(nvml, handles, [d["pci_bus_id"] for d in raw["devices"]])
        return raw
    finally:
        _optional(nvml.nvmlShutdown)


def _read_device(nvml, index: int, handle) -> dict:
    mem_v2 = _optional(nvml.nvmlDeviceGetMemoryInfo, handle, nvml.nvmlMemory_v2)
    mem = mem_v2 or nvml.nvmlDeviceGetMemoryInfo(handle)
    mig = _optional(nvml.nvmlDeviceGetMigMode, handle)
    procs = _optional(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    return {
        "index": index,
        "name": _text(nvml.nvmlDeviceGetName(handle)),
        "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
        "memory": {
            "version": 2 if mem_v2 is not None else 1,
            "total": int(mem.total),
            "free": int(mem.free),
            "used": int(mem.used),
            "reserved": int(mem.reserved) if mem_v2 is not None else None,
        },
        "mig_mode": list(mig) if mig is not None else None,
        "processes": [{"pid": int(p.pid), "used_gpu_memory": p.usedGpuMemory} for p in procs],
        "pci_bus_id": _text(pci.busId),
        "pcie_link_gen": _optional(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_link_width": _optional(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "pcie_max_link_gen": _optional(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "pcie_max_link_width": _optional(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "numa_node": _optional(nvml.nvmlDeviceGetNumaNodeId, handle),
        "bar1_total": _bar1_total(nvml, handle),
    }


def _bar1_total(nvml, handle) -> int | None:
    bar1 = _optional(nvml.nvmlDeviceGetBAR1MemoryInfo, handle)
    return None if bar1 is None else int(bar1.bar1Total)


def _read_links(nvml, handles: list, bus_ids: list[str]) -> list[dict]:
    """Every unordered pair of cards (a < b): NVML's topology level, peer access both ways, NVLink links."""
    if len(handles) < 2:
        return []
    read_caps, write_caps = _enum_int(nvml.NVML_P2P_CAPS_INDEX_READ), _enum_int(nvml.NVML_P2P_CAPS_INDEX_WRITE)
    remotes = [_nvlink_remote_bus_ids(nvml, handle) for handle in handles]
    links = []
    for a, b in combinations(range(len(handles)), 2):
        first, second = handles[a], handles[b]
        links.append({
            "a": a, "b": b,
            "topology": _optional(nvml.nvmlDeviceGetTopologyCommonAncestor, first, second),
            "p2p_read": _optional(nvml.nvmlDeviceGetP2PStatus, first, second, read_caps),
            "p2p_write": _optional(nvml.nvmlDeviceGetP2PStatus, first, second, write_caps),
            "nvlinks": _nvlinks_to(remotes[a], bus_ids[b]),
        })
    return links


def _nvlinks_to(remotes: list[str] | None, bus_id: str) -> int | None:
    return None if remotes is None else sum(_same_pci_device(remote, bus_id) for remote in remotes)


def _nvlink_remote_bus_ids(nvml, handle) -> list[str] | None:
    """The PCI bus ids at the far end of the card's active NVLink links: [] for a card without NVLink, None when
    NVML answers something other than a link's state (then the count is unknown, not zero). A link that ends at an
    NVSwitch names the switch, so only direct links to a peer card are counted."""
    remotes: list[str] = []
    for link in range(nvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as exc:
            error = _nvml_error(exc)
            if error in _NO_MORE_NVLINKS:
                return remotes
            if error:
                return None
            raise
        if state == nvml.NVML_FEATURE_ENABLED:
            remote = _optional(nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            if remote is None:
                return None
            remotes.append(_text(remote.busId))
    return remotes


def _same_pci_device(first: str, second: str) -> bool:
    return pci_address(first) == pci_address(second)


def cuda_version_text(value: int | None) -> str | None:
    """NVML encodes the CUDA driver version as 1000*major + 10*minor (12090 -> "12.9")."""
    if value is None:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def gpu_facts_from_raw(raw: dict) -> GpuFacts:
    """Convert `read_raw` output (live or recorded) into GpuFacts."""
    if not raw.get("nvml_loaded"):
        return GpuFacts(nvml_loaded=False, error=raw.get("error"), driver_version=None,
                        cuda_driver_version=None, devices=[])
    devices = []
    for d in raw["devices"]:
        mem = d["memory"]
        mig = d.get("mig_mode")
        devices.append(GpuDevice(
            index=d["index"], name=d["name"], uuid=d["uuid"],
            total_bytes=mem["total"], free_bytes=mem["free"], used_bytes=mem["used"],
            reserved_bytes=mem.get("reserved"),
            # NVML answers [current, pending]; 1 is NVML_DEVICE_MIG_ENABLE
            mig_enabled=None if mig is None else mig[0] == 1,
            compute_processes=[GpuProcess(pid=p["pid"], used_bytes=p.get("used_gpu_memory"))
                               for p in d.get("processes", [])],
            pci_bus_id=d["pci_bus_id"],
            pcie_link_gen=d.get("pcie_link_gen"), pcie_link_width=d.get("pcie_link_width"),
            pcie_max_link_gen=d.get("pcie_max_link_gen"), pcie_max_link_width=d.get("pcie_max_link_width"),
            numa_node=d.get("numa_node"), bar1_total_bytes=d.get("bar1_total"),
        ))
    return GpuFacts(nvml_loaded=True, error=None, driver_version=raw.get("driver_version"),
                    cuda_driver_version=cuda_version_text(raw.get("cuda_driver_version")),
                    devices=devices, links=[_link_from_raw(x) for x in raw.get("links", [])])


def _enum_name(names: dict[int, str], value: int | None) -> str | None:
    """NVML's number as its name; a number this table does not know (a newer driver's) says so rather than guess."""
    if value is None:
        return None
    return names.get(value, f"NVML_VALUE_{value}")


def _link_from_raw(x: dict) -> GpuLink:
    return GpuLink(a=x["a"], b=x["b"], topology=_enum_name(TOPOLOGY_LEVELS, x.get("topology")),
                   p2p_read=_enum_name(P2P_STATUSES, x.get("p2p_read")),
                   p2p_write=_enum_name(P2P_STATUSES, x.get("p2p_write")), nvlinks=x.get("nvlinks"))


def read_gpu_facts() -> GpuFacts:
    """The live path: import pynvml (a missing package is the same as a missing driver)."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a pinned dependency
        return GpuFacts(nvml_loaded=False, error=f"nvidia-ml-py not importable: {exc}",
                        driver_version=None, cuda_driver_version=None, devices=[])
    return gpu_facts_from_raw(read_raw(pynvml))
