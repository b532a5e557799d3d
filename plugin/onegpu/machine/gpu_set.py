"""Pure: the declared set of GPUs a tensor- or pipeline-parallel engine would span -> Blocked or lines a person
can read.

The one-card checks (onegpu.machine.checks) over every card of the set, then what lies between the cards: NVML's
topology level, whether the driver grants peer access, NVLink, and the host's preconditions of fast peer-to-peer
traffic (IOMMU, resizable BAR).
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from onegpu.core.outcomes import Blocked
from onegpu.core.units import gib, size_text
from onegpu.machine.checks import find_gpu, known_gpus, require_gpus, require_idle, require_whole_card
from onegpu.machine.model import GpuDevice, GpuFacts, GpuLink, HostFacts, IommuFacts, pci_address

UNKNOWN = "unknown (not reported)"

# Where NVML's common ancestor of two cards lies, from nearest to farthest (nvmlGpuTopologyLevel_t).
TOPOLOGY_PLACES = {
    "INTERNAL": "on one board",
    "SINGLE": "behind one PCIe switch",
    "MULTIPLE": "behind several PCIe switches, below one host bridge",
    "HOSTBRIDGE": "below one PCIe host bridge",
    "NODE": "across PCIe host bridges (root complexes) within one NUMA node",
    "SYSTEM": "across NUMA nodes (through the CPUs' SMP interconnect)",
}

# NVML's peer-access statuses (nvmlGpuP2PStatus_t), as a sentence's end.
P2P_MEANINGS = {
    "OK": "OK",
    "CHIPSET_NOT_SUPPORTED": "not supported by the chipset",
    "GPU_NOT_SUPPORTED": "not supported by the GPU",
    "IOH_TOPOLOGY_NOT_SUPPORTED": "not supported across this I/O hub topology",
    "DISABLED_BY_REGKEY": "disabled by the driver's registry key",
    "NOT_SUPPORTED": "not supported",
}
# NVML's own UNKNOWN status says it could not tell: shown as unknown, like a status not reported at all.
UNDETERMINED = (None, "UNKNOWN")


def select_gpu_set(gpu: GpuFacts, selectors: Sequence[int | str]) -> list[GpuDevice]:
    """The cards the settings name (index or UUID), in the settings' order: rank r runs on the r-th."""
    require_gpus(gpu)
    found = [(selector, find_gpu(gpu, selector)) for selector in selectors]
    missing = [selector for selector, device in found if device is None]
    if missing:
        raise Blocked("GPU_NOT_FOUND", f"settings name GPU {', '.join(repr(s) for s in missing)}, not on this "
                                       f"machine; it has {len(gpu.devices)}: {known_gpus(gpu)}",
                      {"gpus": len(gpu.devices), "missing": len(missing)})
    devices = [device for _, device in found if device is not None]
    _require_distinct(selectors, devices)
    _require_pci_order(devices)
    return devices


def _require_pci_order(devices: list[GpuDevice]) -> None:
    """Rank r runs on CUDA device r, and the launch makes CUDA number the set by PCI bus: listed in another order,
    every rank would be judged against, and named by, another card than the one it runs on."""
    addresses = [pci_address(d.pci_bus_id) for d in devices if d.pci_bus_id]
    if (len(addresses) != len(devices) or len(set(addresses)) != len(addresses)
            or not all(isinstance(a, tuple) for a in addresses) or addresses == sorted(addresses)):
        return  # unknown, shared or unreadable bus IDs (a replayed stand-in): nothing to order by
    ordered = sorted(devices, key=lambda d: pci_address(d.pci_bus_id))
    buses = ", ".join(d.pci_bus_id for d in devices)
    raise Blocked("SETTINGS_INVALID", f"multi_gpu.gpus lists {_cards(devices)} out of PCI bus order ({buses}); CUDA "
                                      "numbers the container's GPUs by PCI bus (the launch sets "
                                      "CUDA_DEVICE_ORDER=PCI_BUS_ID) and vLLM gives rank r the r-th, so list them as "
                                      f"{[d.index for d in ordered]} (and set gpu to {ordered[0].index})",
                  {"gpus": len(devices)})


def _require_distinct(selectors: Sequence[int | str], devices: list[GpuDevice]) -> None:
    """An index and a UUID can name one card twice; counted twice, its memory would be counted twice."""
    seen: dict[int, int | str] = {}
    for selector, device in zip(selectors, devices):
        if device.index in seen:
            raise Blocked("SETTINGS_INVALID", f"settings name GPU {device.index} ({device.uuid}) twice, as "
                                              f"{seen[device.index]!r} and {selector!r}: each rank needs a card "
                                              "of its own", {"gpus": len(devices), "distinct": len(seen)})
        seen[device.index] = selector


def _cards(devices: Sequence[GpuDevice]) -> str:
    return ", ".join(f"GPU {d.index} ({d.uuid})" for d in devices)


def require_whole_cards(devices: Sequence[GpuDevice]) -> list[str]:
    in_mig = [d for d in devices if d.mig_enabled]
    if in_mig:
        raise Blocked("MIG_ENABLED", f"{_cards(in_mig)} in MIG mode; the plan needs every card of the set whole "
                                     f"({', '.join(f'GPU {d.index} {gib(d.total_bytes)}' for d in in_mig)})",
                      {"cards": len(devices), "mig_cards": len(in_mig),
                       "mig_card_bytes": sum(d.total_bytes for d in in_mig)})
    return [require_whole_card(d) for d in devices]


def _held(d: GpuDevice) -> int:
    return sum(p.used_bytes or 0 for p in d.compute_processes)


def _busy_card(d: GpuDevice) -> str:
    pids = ", ".join(str(p.pid) for p in d.compute_processes)
    return (f"GPU {d.index} runs {len(d.compute_processes)} compute process(es) (pids {pids}) holding "
            f"{gib(_held(d))}, driver-reported free {gib(d.free_bytes)} of {gib(d.total_bytes)}")


def require_idle_set(devices: Sequence[GpuDevice]) -> list[str]:
    busy = [d for d in devices if d.compute_processes]
    if busy:
        raise Blocked("GPU_BUSY", "; ".join(_busy_card(d) for d in busy)
                      + ". The kit stops no service it did not start",
                      {"cards": len(devices), "busy_cards": len(busy),
                       "processes": sum(len(d.compute_processes) for d in busy),
                       "held_bytes": sum(_held(d) for d in busy), "free_bytes": sum(d.free_bytes for d in busy)})
    return [require_idle(d) for d in devices]


def _pairs(devices: Sequence[GpuDevice]) -> list[tuple[GpuDevice, GpuDevice]]:
    return list(combinations(devices, 2))


def _pair_name(first: GpuDevice, second: GpuDevice) -> str:
    return f"GPU {first.index} <-> GPU {second.index}"


def _place(topology: str | None) -> str:
    if topology is None:
        return f"topology {UNKNOWN}"
    return f"{TOPOLOGY_PLACES.get(topology, 'at a level the kit does not know')} (NVML topology {topology})"


def _newer_than_the_kit(status: str | None) -> bool:
    """A status number the kit's NVML table does not name (nvml.NVML_VALUE_n: a newer driver's)."""
    return str(status).startswith("NVML_VALUE_")


def _peer_access_off(status: str | None) -> bool:
    return status not in UNDETERMINED and status != "OK" and not _newer_than_the_kit(status)


def _peer_access(status: str | None) -> str:
    if status in UNDETERMINED:
        return UNKNOWN
    if _newer_than_the_kit(status):
        return f"a status the kit does not know ({status}), not judged"
    return P2P_MEANINGS.get(status or "", f"not OK ({status})")


def _nvlinks(count: int | None) -> str:
    return UNKNOWN if count is None else str(count)


def _describe_pair(link: GpuLink | None, first: GpuDevice, second: GpuDevice) -> str:
    name = _pair_name(first, second)
    if link is None:
        return f"{name}: {UNKNOWN} (the facts record no pair of these cards)"
    return (f"{name}: {_place(link.topology)}; peer access read {_peer_access(link.p2p_read)}, write "
            f"{_peer_access(link.p2p_write)}; direct NVLink links {_nvlinks(link.nvlinks)}")


def describe_links(gpu: GpuFacts, devices: Sequence[GpuDevice]) -> list[str]:
    """One line per pair of the set: where the cards meet, peer access, NVLink."""
    if len(devices) < 2:
        return [f"GPU {d.index} alone: no pair of cards" for d in devices]
    return [_describe_pair(gpu.link_between(a.index, b.index), a, b) for a, b in _pairs(devices)]


def _read_status(gpu: GpuFacts, first: GpuDevice, second: GpuDevice) -> str | None:
    link = gpu.link_between(first.index, second.index)
    return None if link is None else link.p2p_read


def require_peer_access(gpu: GpuFacts, devices: Sequence[GpuDevice]) -> list[str]:
    """Blocks when the driver reports peer access off for a pair of the set; a status not reported does not."""
    pairs = _pairs(devices)
    statuses = [(a, b, _read_status(gpu, a, b)) for a, b in pairs]
    refused = [(a, b, status) for a, b, status in statuses if _peer_access_off(status)]
    if refused:
        each = "; ".join(f"{_pair_name(a, b)}: {status} ({_peer_access(status)})" for a, b, status in refused)
        raise Blocked("P2P_DISABLED", f"the driver reports peer access off between cards of the set: {each}. "
                                      "Tensor-parallel traffic between them would go through host memory; the "
                                      "public TP3 field report on three RTX PRO 6000 cards turned it on with the "
                                      "driver's ForceP2P registry key",
                      {"pairs": len(pairs), "pairs_without_peer_access": len(refused)})
    return [f"{_pair_name(a, b)}: peer access read {_peer_access(status)}" for a, b, status in statuses]


def _iommu_line(iommu: IommuFacts | None) -> str:
    if iommu is None:
        return f"IOMMU: {UNKNOWN}"
    state = {True: "active", False: "not active", None: UNKNOWN}[iommu.active]
    groups = UNKNOWN if iommu.groups is None else str(iommu.groups)
    types = ", ".join(iommu.domain_types) or UNKNOWN
    words = UNKNOWN if iommu.cmdline is None else " ".join(iommu.cmdline) or "no IOMMU words"
    identity = " (identity: DMA passed through)" if "identity" in (t.lower() for t in iommu.domain_types) else ""
    return f"IOMMU: {state}; groups {groups}; default domain {types}{identity}; kernel command line: {words}"


def _bar_line(d: GpuDevice) -> str:
    bar1 = d.bar1_total_bytes
    if bar1 is None:
        return f"GPU {d.index}: BAR1 not reported"
    if bar1 >= d.total_bytes:
        return f"GPU {d.index}: large BAR: BAR1 {size_text(bar1)} >= memory {gib(d.total_bytes)}"
    return f"GPU {d.index}: small BAR: BAR1 {size_text(bar1)} < memory {gib(d.total_bytes)}"


def describe_p2p_preconditions(host: HostFacts, devices: Sequence[GpuDevice]) -> list[str]:
    """The IOMMU and each card's BAR1, shown and never blocking: the field report names them as preconditions of
    fast peer-to-peer traffic (an active IOMMU degrades or breaks PCIe P2P; a small BAR limits what a peer can
    map), but whether peer access works at all is what the driver reports, and that is what blocks."""
    return [_iommu_line(host.iommu), *(_bar_line(d) for d in devices)]
