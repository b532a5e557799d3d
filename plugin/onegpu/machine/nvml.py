"""GPU facts through NVML (nvidia-ml-py, imported as pynvml).

Two steps so the conversion can be tested without a driver: `read_raw` calls NVML and keeps its answers
as plain values (what a recorded card looks like); `gpu_facts_from_raw` turns those into GpuFacts. The
live path and the tests run the same conversion.
"""
from __future__ import annotations

from onegpu.machine.model import GpuDevice, GpuFacts, GpuProcess


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(call, *args):
    """NVML getters a card may not support answer NVMLError; that is 'unknown', not a failure."""
    try:
        return call(*args)
    except Exception as exc:  # pynvml raises dynamically created NVMLError_* subclasses
        if type(exc).__name__.startswith("NVMLError"):
            return None
        raise


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
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            raw["devices"].append(_read_device(nvml, index, handle))
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
    }


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
            numa_node=d.get("numa_node"),
        ))
    return GpuFacts(nvml_loaded=True, error=None, driver_version=raw.get("driver_version"),
                    cuda_driver_version=cuda_version_text(raw.get("cuda_driver_version")),
                    devices=devices)


def read_gpu_facts() -> GpuFacts:
    """The live path: import pynvml (a missing package is the same as a missing driver)."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a pinned dependency
        return GpuFacts(nvml_loaded=False, error=f"nvidia-ml-py not importable: {exc}",
                        driver_version=None, cuda_driver_version=None, devices=[])
    return gpu_facts_from_raw(read_raw(pynvml))
