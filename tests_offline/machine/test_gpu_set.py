"""The multi-GPU set's machine checks (onegpu.machine.gpu_set) over hand-made facts: selection, whole and idle
cards, the pairs between them, and the host's peer-to-peer preconditions. Pure functions: nothing is mocked; the
NVML reads that produce these facts are tested in test_nvml_facts.py."""
from __future__ import annotations

import pytest
from msgspec import structs

from onegpu.core.outcomes import Blocked
from onegpu.machine.gpu_set import (
    describe_links,
    describe_p2p_preconditions,
    require_idle_set,
    require_peer_access,
    require_whole_cards,
    select_gpu_set,
)
from onegpu.machine.model import CgroupFacts, GpuDevice, GpuFacts, GpuLink, GpuProcess, HostFacts, IommuFacts

MiB, GiB = 2**20, 2**30
TOTAL = 97_887 * MiB  # an RTX PRO 6000 Blackwell, as NVML reports it


def card(index: int, **changes) -> GpuDevice:
    return structs.replace(GpuDevice(
        index=index, name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        uuid=f"GPU-00000000-0000-4000-8000-00000000000{index}", total_bytes=TOTAL, free_bytes=TOTAL - 3 * GiB,
        used_bytes=MiB, reserved_bytes=3 * GiB - MiB, mig_enabled=False, compute_processes=[],
        pci_bus_id=f"00000000:{0x01 + 0x40 * index:02x}:00.0"), **changes)


def facts(devices: list[GpuDevice], links: list[GpuLink] | None = None) -> GpuFacts:
    return GpuFacts(nvml_loaded=True, error=None, driver_version="580.95.05", cuda_driver_version="13.0",
                    devices=devices, links=links or [])


def link(a, b, topology="NODE", read="OK", write="OK", nvlinks=0) -> GpuLink:
    return GpuLink(a=a, b=b, topology=topology, p2p_read=read, p2p_write=write, nvlinks=nvlinks)


def host(iommu: IommuFacts | None) -> HostFacts:
    return HostFacts(hostname=None, kernel=None, ram_total_bytes=None, ram_available_bytes=None,
                     ram_stated_by_operator=False, swap_total_bytes=None, swap_free_bytes=None,
                     cgroup=CgroupFacts(None, None, None, None, None, None), memlock_limit_bytes=None,
                     transparent_hugepages=None, cpus_online=None, cpus_usable=None, numa_nodes=None, wsl2=False,
                     iommu=iommu)


THREE = facts([card(0), card(1), card(2)])


def blocked_by(call, *args) -> Blocked:
    with pytest.raises(Blocked) as raised:
        call(*args)
    return raised.value


# --- selection -------------------------------------------------------------------------------------------

def test_the_set_comes_in_the_settings_order_by_index_or_uuid():
    chosen = select_gpu_set(THREE, [0, "GPU-00000000-0000-4000-8000-000000000001", 2])
    assert [d.index for d in chosen] == [0, 1, 2]
    assert chosen[1] is THREE.devices[1]
    two = select_gpu_set(THREE, [1, 2])
    assert [d.index for d in two] == [1, 2]


def test_a_set_listed_out_of_pci_bus_order_is_refused_with_the_order_to_list():
    # CUDA numbers the container's GPUs by PCI bus (CUDA_DEVICE_ORDER=PCI_BUS_ID) and vLLM gives rank r device r:
    # listed [2, 0, 1], rank 0 would run on GPU 0 while the plan judged it against GPU 2
    blocked = blocked_by(select_gpu_set, THREE, [2, "GPU-00000000-0000-4000-8000-000000000000", 1])
    assert blocked.code == "SETTINGS_INVALID"
    assert "out of PCI bus order (00000000:81:00.0, 00000000:01:00.0, 00000000:41:00.0)" in blocked.message
    assert "so list them as [0, 1, 2] (and set gpu to 0)" in blocked.message
    # bus IDs that are unknown or shared (a stand-in) give nothing to order by
    same_bus = facts([card(i, pci_bus_id="00000000:01:00.0") for i in range(2)])
    assert [d.index for d in select_gpu_set(same_bus, [1, 0])] == [1, 0]


def test_every_missing_card_is_named_with_what_the_machine_has():
    blocked = blocked_by(select_gpu_set, THREE, [0, 5, "GPU-ffffffff-0000-4000-8000-000000000009"])
    assert blocked.code == "GPU_NOT_FOUND"
    assert blocked.numbers == {"gpus": 3, "missing": 2}
    assert "settings name GPU 5, 'GPU-ffffffff-0000-4000-8000-000000000009', not on this machine" in blocked.message
    assert "it has 3: 0=GPU-00000000-0000-4000-8000-000000000000, 1=" in blocked.message


def test_no_driver_and_no_gpu_block_before_selection():
    no_driver = GpuFacts(nvml_loaded=False, error="NVMLError_LibraryNotFound: NVML Shared Library Not Found",
                         driver_version=None, cuda_driver_version=None, devices=[])
    assert blocked_by(select_gpu_set, no_driver, [0, 1]).code == "NO_NVIDIA_DRIVER"
    assert blocked_by(select_gpu_set, facts([]), [0, 1]).code == "NO_GPU"


def test_one_card_named_twice_by_index_and_uuid_is_refused():
    blocked = blocked_by(select_gpu_set, THREE, [1, "GPU-00000000-0000-4000-8000-000000000001"])
    assert blocked.code == "SETTINGS_INVALID"
    assert blocked.numbers == {"gpus": 2, "distinct": 1}
    assert "GPU 1 (GPU-00000000-0000-4000-8000-000000000001) twice, as 1 and 'GPU-" in blocked.message


# --- whole and idle cards ----------------------------------------------------------------------------------

def test_every_card_in_mig_mode_is_named():
    devices = [card(0, mig_enabled=True), card(1, mig_enabled=None), card(2, mig_enabled=True)]
    blocked = blocked_by(require_whole_cards, devices)
    assert blocked.code == "MIG_ENABLED"
    assert blocked.numbers == {"cards": 3, "mig_cards": 2, "mig_card_bytes": 2 * TOTAL}
    assert blocked.message.startswith("GPU 0 (GPU-00000000-0000-4000-8000-000000000000), GPU 2 (GPU-")
    assert "(GPU 0 95.59 GiB, GPU 2 95.59 GiB)" in blocked.message


def test_whole_cards_give_one_line_each():
    assert require_whole_cards([card(0), card(1, mig_enabled=None)]) == [
        "GPU 0 is a whole card (MIG off)", "GPU 1 is a whole card (MIG not supported)"]


def test_every_busy_card_is_named_with_its_processes_and_bytes():
    devices = [card(0, compute_processes=[GpuProcess(pid=4242, used_bytes=20 * GiB),
                                          GpuProcess(pid=4343, used_bytes=None)]),
               card(1),
               card(2, compute_processes=[GpuProcess(pid=77, used_bytes=2 * GiB)])]
    blocked = blocked_by(require_idle_set, devices)
    assert blocked.code == "GPU_BUSY"
    free = TOTAL - 3 * GiB
    assert blocked.numbers == {"cards": 3, "busy_cards": 2, "processes": 3, "held_bytes": 22 * GiB,
                               "free_bytes": 2 * free}
    assert "GPU 0 runs 2 compute process(es) (pids 4242, 4343) holding 20.00 GiB" in blocked.message
    assert "; GPU 2 runs 1 compute process(es) (pids 77) holding 2.00 GiB" in blocked.message
    assert blocked.message.endswith("The kit stops no service it did not start")


def test_idle_cards_give_one_line_each():
    lines = require_idle_set([card(0), card(1)])
    assert lines == [f"GPU {i} has no compute processes; driver-reported free 92.59 GiB" for i in (0, 1)]


# --- the pairs -----------------------------------------------------------------------------------------------

MIXED = facts([card(0), card(1), card(2)], [
    link(0, 1, "SINGLE", nvlinks=2),
    link(0, 2, "SYSTEM", read="DISABLED_BY_REGKEY", write="DISABLED_BY_REGKEY"),
    link(1, 2, None, read=None, write="UNKNOWN", nvlinks=None),
])


def test_each_pair_is_described_and_unknowns_say_so():
    assert describe_links(MIXED, MIXED.devices) == [
        "GPU 0 <-> GPU 1: behind one PCIe switch (NVML topology SINGLE); peer access read OK, write OK; "
        "direct NVLink links 2",
        "GPU 0 <-> GPU 2: across NUMA nodes (through the CPUs' SMP interconnect) (NVML topology SYSTEM); peer "
        "access read disabled by the driver's registry key, write disabled by the driver's registry key; direct "
        "NVLink links 0",
        "GPU 1 <-> GPU 2: topology unknown (not reported); peer access read unknown (not reported), write unknown "
        "(not reported); direct NVLink links unknown (not reported)",
    ]


def test_pairs_follow_the_settings_order_and_a_pair_never_recorded_is_unknown():
    old = facts([card(0), card(1)])  # facts written before pairs were read
    assert describe_links(old, [old.devices[1], old.devices[0]]) == [
        "GPU 1 <-> GPU 0: unknown (not reported) (the facts record no pair of these cards)"]
    assert describe_links(old, [old.devices[0]]) == ["GPU 0 alone: no pair of cards"]


def test_peer_access_off_for_a_pair_blocks_naming_it():
    blocked = blocked_by(require_peer_access, MIXED, MIXED.devices)
    assert blocked.code == "P2P_DISABLED"
    assert blocked.numbers == {"pairs": 3, "pairs_without_peer_access": 1}
    assert ("GPU 0 <-> GPU 2: DISABLED_BY_REGKEY (disabled by the driver's registry key)" in blocked.message)
    assert "GPU 1 <-> GPU 2" not in blocked.message  # unknown does not block


def test_every_refusing_pair_is_counted():
    refused = facts([card(0), card(1), card(2)], [
        link(0, 1, read="CHIPSET_NOT_SUPPORTED"), link(0, 2, read="IOH_TOPOLOGY_NOT_SUPPORTED"), link(1, 2)])
    blocked = blocked_by(require_peer_access, refused, refused.devices)
    assert blocked.numbers == {"pairs": 3, "pairs_without_peer_access": 2}
    assert "GPU 0 <-> GPU 1: CHIPSET_NOT_SUPPORTED (not supported by the chipset); GPU 0 <-> GPU 2: " \
           "IOH_TOPOLOGY_NOT_SUPPORTED" in blocked.message


def test_peer_access_ok_or_unknown_passes_with_a_line_per_pair():
    assert require_peer_access(MIXED, [MIXED.devices[0], MIXED.devices[1]]) == [
        "GPU 0 <-> GPU 1: peer access read OK"]
    nvml_unknown = facts([card(0), card(1), card(2)], [link(0, 1), link(0, 2, read="UNKNOWN"),
                                                       link(1, 2, read=None)])
    assert require_peer_access(nvml_unknown, nvml_unknown.devices) == [
        "GPU 0 <-> GPU 1: peer access read OK", "GPU 0 <-> GPU 2: peer access read unknown (not reported)",
        "GPU 1 <-> GPU 2: peer access read unknown (not reported)"]
    # a status newer than the kit's NVML bindings is not read as "off"
    newer = facts([card(0), card(1)], [link(0, 1, read="NVML_VALUE_9")])
    assert require_peer_access(newer, newer.devices) == [
        "GPU 0 <-> GPU 1: peer access read a status the kit does not know (NVML_VALUE_9), not judged"]


# --- IOMMU and BAR: shown, never blocking ----------------------------------------------------------------------

def test_iommu_and_bar_sizes_are_shown():
    devices = [card(0, bar1_total_bytes=128 * GiB), card(1, bar1_total_bytes=256 * MiB), card(2)]
    iommu = IommuFacts(active=True, groups=41, domain_types=["DMA-FQ"], cmdline=["intel_iommu=on"])
    assert describe_p2p_preconditions(host(iommu), devices) == [
        "IOMMU: active; groups 41; default domain DMA-FQ; kernel command line: intel_iommu=on",
        "GPU 0: large BAR: BAR1 128.00 GiB >= memory 95.59 GiB",
        "GPU 1: small BAR: BAR1 256 MiB < memory 95.59 GiB",
        "GPU 2: BAR1 not reported",
    ]


@pytest.mark.parametrize("iommu, line", [
    (None, "IOMMU: unknown (not reported)"),
    (IommuFacts(active=False, groups=0, domain_types=[], cmdline=[]),
     "IOMMU: not active; groups 0; default domain unknown (not reported); kernel command line: no IOMMU words"),
    (IommuFacts(active=None, groups=None, domain_types=["identity"], cmdline=None),
     "IOMMU: unknown (not reported); groups unknown (not reported); default domain identity (identity: DMA "
     "passed through); kernel command line: unknown (not reported)"),
], ids=["not-read", "off", "unreadable"])
def test_iommu_states(iommu, line):
    assert describe_p2p_preconditions(host(iommu), []) == [line]
