"""GPU facts: NVML answers recorded from real cards, through the conversion the live path uses.

No NVIDIA driver exists on the machines these tests run on, so NVML itself is replaced by a stand-in module
that answers with pynvml's own ctypes structures and raises pynvml's own NVMLError classes. What cannot be
exercised without a driver: the ctypes calls into libnvidia-ml, the driver's own accounting of free, used
and reserved memory, the grow-and-retry loop pynvml runs for the process list, MIG instance enumeration,
and whatever a future driver answers differently. The real pynvml is used where it can be: on this machine
it fails to find the library, which is exactly the no-driver path. Only NVML is replaced.

Between cards (topology, peer access, NVLink) the stand-in answers what a test hands it; the recorded cards predate
those reads, so for them it answers NotSupported, which the kit records as unknown.
"""
from __future__ import annotations

import ctypes
import json

import pynvml
import pytest

from onegpu.core.jsonable import from_json, to_json
from onegpu.core.outcomes import Blocked
from onegpu.machine import checks, gpu_set
from onegpu.machine.model import GpuFacts, GpuLink
from onegpu.machine.nvml import (
    P2P_STATUSES,
    TOPOLOGY_LEVELS,
    cuda_version_text,
    gpu_facts_from_raw,
    read_gpu_facts,
    read_raw,
)
from tests_offline.paths import DATA

DATA = DATA / "nvml"
MiB, GiB = 2**20, 2**30


def recorded(name: str) -> dict:
    doc = json.loads((DATA / name).read_text())
    assert doc["sources"], f"{name} must say where its numbers come from"
    return doc["raw"]


# --- recorded cards through the live conversion --------------------------------------------------------

def test_h200_as_nvidia_smi_shows_it():
    gpu = gpu_facts_from_raw(recorded("h200-nvidia-smi-q.json"))
    (d,) = gpu.devices
    assert (gpu.driver_version, gpu.cuda_driver_version) == ("550.90.12", "12.4")
    assert d.name == "NVIDIA H200" and d.uuid == "GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732"
    assert d.total_bytes == 150_754_820_096 == 143_771 * MiB
    assert (d.reserved_bytes, d.used_bytes, d.free_bytes) == (700 * MiB, 1 * MiB, 143_072 * MiB)
    assert abs(d.reserved_bytes + d.used_bytes + d.free_bytes - d.total_bytes) <= 3 * MiB  # whole-MiB rounding
    assert d.mig_enabled is False and d.compute_processes == []
    assert (d.pcie_link_gen, d.pcie_link_width, d.pcie_max_link_gen, d.pcie_max_link_width) == (5, 16, 5, 16)
    assert checks.require_whole_card(d) == "GPU 0 is a whole card (MIG off)"
    assert "driver-reported free 139.72 GiB" in checks.require_idle(d)
    line = checks.describe_gpu(d)
    assert "total 140.40 GiB" in line and "reserved 0.68 GiB" in line and "PCIe gen 5 x16 (max gen 5 x16)" in line


def test_memory_v1_record_has_no_reserved_figure():
    gpu = gpu_facts_from_raw(recorded("h200-nvml-v1-record.json"))
    (d,) = gpu.devices
    assert d.reserved_bytes is None
    assert d.used_bytes + d.free_bytes == d.total_bytes  # v1: used is total minus free, reserve included
    assert gpu.cuda_driver_version is None
    assert "reserved" not in checks.describe_gpu(d)


def test_rtx_pro_6000_in_mig_mode_blocks_and_the_other_card_is_not_counted():
    gpu = gpu_facts_from_raw(recorded("rtx-pro-6000-blackwell-server-mig.json"))
    mig_card, whole = gpu.devices
    assert gpu.driver_version == "580.105.06" and gpu.cuda_driver_version is None
    assert mig_card.total_bytes == whole.total_bytes == 97_887 * MiB
    assert mig_card.reserved_bytes == 2288 * MiB
    assert (mig_card.mig_enabled, whole.mig_enabled) == (True, None)
    assert len(checks.require_gpus(gpu)) == 2
    with pytest.raises(Blocked) as blocked:
        checks.require_whole_card(checks.select_gpu(gpu, 0))
    assert blocked.value.code == "MIG_ENABLED" and "95.59 GiB card" in blocked.value.message
    assert checks.select_gpu(gpu, "GPU-0a5ba9ad-a575-72c7-d51d-3e726232cfd1") is whole
    with pytest.raises(Blocked) as missing:
        checks.select_gpu(gpu, 2)
    assert missing.value.code == "GPU_NOT_FOUND" and missing.value.numbers == {"gpus": 2}


def test_geforce_without_mig_support():
    gpu = gpu_facts_from_raw(recorded("rtx-4090-nvidia-smi-q.json"))
    (d,) = gpu.devices
    assert d.total_bytes == 24_564 * MiB and d.reserved_bytes == 354 * MiB and d.free_bytes == 24_210 * MiB
    assert d.mig_enabled is None
    assert checks.require_whole_card(d) == "GPU 0 is a whole card (MIG not supported)"
    assert "PCIe gen 1 x16 (max gen 4 x16)" in checks.describe_gpu(d)


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")))
def test_recorded_facts_survive_the_json_round_trip(name):
    gpu = gpu_facts_from_raw(recorded(name))
    assert from_json(GpuFacts, to_json(gpu)) == gpu


@pytest.mark.parametrize("value, text", [(12040, "12.4"), (12090, "12.9"), (13000, "13.0"), (11080, "11.8"),
                                         (None, None)])
def test_cuda_driver_version_encoding(value, text):
    assert cuda_version_text(value) == text


# --- read_raw against a stand-in for NVML --------------------------------------------------------------

def nvml_error(code: int) -> pynvml.NVMLError:
    """The exception pynvml raises for an NVML return code (a dynamically made NVMLError_* subclass)."""
    return pynvml.NVMLError(code)


class StandInNVML:
    """Answers the pynvml calls read_raw makes, from a recorded raw dict, with pynvml's own structures.

    `fail` maps a pynvml function name to the exception it raises instead of answering. `nvlinks` maps a device
    index to its links (the remote PCI bus id of each, None for a link that is down) or to the NVML error code its
    link-state query answers; a device not in it answers NotSupported, as a card without NVLink does.
    """

    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    # pynvml's own constants, as they are (NVML_P2P_CAPS_INDEX_READ is the tuple (0,) in nvidia-ml-py 13.615)
    NVML_P2P_CAPS_INDEX_READ = pynvml.NVML_P2P_CAPS_INDEX_READ
    NVML_P2P_CAPS_INDEX_WRITE = pynvml.NVML_P2P_CAPS_INDEX_WRITE
    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    calls: list[str]  # the nvml function names called, in order

    def __init__(self, raw: dict, fail: dict | None = None, nvlinks: dict | None = None):
        self.raw, self.fail, self.calls = raw, fail or {}, []
        self.nvlinks = nvlinks or {}

    def __getattr__(self, name):
        if not name.startswith("nvml"):
            raise AttributeError(name)
        answer = getattr(self, "_" + name)

        def call(*args):
            self.calls.append(name)
            if name in self.fail:
                raise self.fail[name]
            return answer(*args)
        return call

    def _dev(self, handle):
        return self.raw["devices"][handle]

    def _nvmlInit(self):
        return None

    def _nvmlShutdown(self):
        return None

    def _nvmlSystemGetDriverVersion(self):
        return self.raw["driver_version"]

    def _nvmlSystemGetCudaDriverVersion_v2(self):
        value = self.raw["cuda_driver_version"]
        if value is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _nvmlDeviceGetCount(self):
        return len(self.raw["devices"])

    def _nvmlDeviceGetHandleByIndex(self, index):
        return index

    def _nvmlDeviceGetName(self, h):
        return self._dev(h)["name"]

    def _nvmlDeviceGetUUID(self, h):
        return self._dev(h)["uuid"]

    def _nvmlDeviceGetMemoryInfo(self, h, version=None):
        mem = self._dev(h)["memory"]
        if version is None:
            return pynvml.c_nvmlMemory_t(total=mem["total"], free=mem["free"], used=mem["total"] - mem["free"])
        if mem["version"] != 2:
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # an older driver has no _v2 entry point
        return pynvml.c_nvmlMemory_v2_t(version=version, total=mem["total"], reserved=mem["reserved"],
                                        free=mem["free"], used=mem["used"])

    def _nvmlDeviceGetMigMode(self, h):
        mode = self._dev(h)["mig_mode"]
        if mode is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(mode)

    def _nvmlDeviceGetComputeRunningProcesses(self, h):
        procs = []
        for p in self._dev(h)["processes"]:
            obj = pynvml.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_v3_t(
                pid=p["pid"], usedGpuMemory=p["used_gpu_memory"] or 0))
            if p["used_gpu_memory"] is None:
                obj.usedGpuMemory = None  # what pynvml does for NVML_VALUE_NOT_AVAILABLE
            procs.append(obj)
        return procs

    def _nvmlDeviceGetPciInfo(self, h):
        return pynvml.nvmlPciInfo_t(busId=self._dev(h)["pci_bus_id"].encode())

    def _optional(self, h, key):
        value = self._dev(h)[key]
        if value is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def _nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._optional(h, "pcie_link_gen")

    def _nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._optional(h, "pcie_link_width")

    def _nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._optional(h, "pcie_max_link_gen")

    def _nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._optional(h, "pcie_max_link_width")

    def _nvmlDeviceGetNumaNodeId(self, h):
        return self._optional(h, "numa_node")

    def _nvmlDeviceGetBAR1MemoryInfo(self, h):
        total = self._dev(h).get("bar1_total")
        if total is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.c_nvmlBAR1Memory_t(bar1Total=total, bar1Free=total - MiB, bar1Used=MiB)

    def _pair(self, h1, h2, key):
        """A recorded pair's answer; NVML answers the same for either order of the two cards."""
        for link in self.raw.get("links", []):
            if {link["a"], link["b"]} == {h1, h2} and link[key] is not None:
                return link[key]
        raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        return self._pair(h1, h2, "topology")

    def _nvmlDeviceGetP2PStatus(self, h1, h2, index):
        if not isinstance(index, int):
            # what ctypes does with an argument it cannot convert (no NVMLError: a bug in the caller)
            raise ctypes.ArgumentError(f"argument 3: TypeError: Don't know how to convert parameter 3 ({index!r})")
        # nvml.h: NVML_P2P_CAPS_INDEX_READ = 0 (pynvml's constant is the tuple (0,))
        key = {0: "p2p_read", pynvml.NVML_P2P_CAPS_INDEX_WRITE: "p2p_write"}.get(index)
        if key is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._pair(h1, h2, key)

    def _links(self, h):
        links = self.nvlinks.get(h, pynvml.NVML_ERROR_NOT_SUPPORTED)
        if isinstance(links, int):
            raise nvml_error(links)
        return links

    def _nvmlDeviceGetNvLinkState(self, h, link):
        links = self._links(h)
        if link >= len(links):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # past the card's last link
        return pynvml.NVML_FEATURE_DISABLED if links[link] is None else pynvml.NVML_FEATURE_ENABLED

    def _nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        return pynvml.nvmlPciInfo_t(busId=self._links(h)[link].encode())


def with_unrecorded_reads(raw: dict) -> dict:
    """A recorded card as read_raw reads it now: the reads the record predates (BAR1; topology and peer access of
    each pair) answer NotSupported, and a card without recorded NVLink has none."""
    devices = [{**d, "bar1_total": d.get("bar1_total")} for d in raw["devices"]]
    n = len(devices)
    links = [{"a": a, "b": b, "topology": None, "p2p_read": None, "p2p_write": None, "nvlinks": 0}
             for a in range(n) for b in range(a + 1, n)]
    return {**raw, "devices": devices, "links": links}


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.json")))
def test_read_raw_records_what_nvml_answers(name):
    raw = recorded(name)
    nvml = StandInNVML(raw)
    assert read_raw(nvml) == with_unrecorded_reads(raw)
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-1] == "nvmlShutdown"


def test_no_nvml_library_on_this_machine_is_no_driver_not_an_error():
    # The real pynvml: no libnvidia-ml.so here, so nvmlInit raises NVMLError_LibraryNotFound.
    raw = read_raw(pynvml)
    assert raw == {"nvml_loaded": False, "error": "NVMLError_LibraryNotFound: NVML Shared Library Not Found"}
    gpu = read_gpu_facts()
    assert gpu == gpu_facts_from_raw(raw) and gpu.devices == []
    with pytest.raises(Blocked) as blocked:
        checks.require_driver(gpu)
    assert blocked.value.code == "NO_NVIDIA_DRIVER" and "NVML Shared Library Not Found" in blocked.value.message


def test_driver_not_loaded_is_no_driver():
    nvml = StandInNVML(recorded("h200-nvidia-smi-q.json"),
                       fail={"nvmlInit": nvml_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)})
    raw = read_raw(nvml)
    assert raw["nvml_loaded"] is False and raw["error"].startswith("NVMLError_DriverNotLoaded")
    assert nvml.calls == ["nvmlInit"]


def test_driver_that_lists_no_gpu_is_no_gpu():
    raw = read_raw(StandInNVML({**recorded("h200-nvidia-smi-q.json"), "devices": []}))
    with pytest.raises(Blocked) as blocked:
        checks.require_gpus(gpu_facts_from_raw(raw))
    assert blocked.value.code == "NO_GPU"


def test_memory_v2_unsupported_falls_back_to_v1_with_reserved_unknown():
    raw = recorded("h200-nvidia-smi-q.json")
    raw["devices"][0]["memory"]["version"] = 1
    d = read_raw(StandInNVML(raw))["devices"][0]
    total = 150_754_820_096
    assert d["memory"] == {"version": 1, "total": total, "free": 143_072 * MiB, "used": total - 143_072 * MiB,
                           "reserved": None}
    assert gpu_facts_from_raw({"nvml_loaded": True, "driver_version": "x", "devices": [d]}).devices[0] \
        .reserved_bytes is None


def test_getters_a_card_does_not_support_read_as_unknown():
    raw = recorded("h200-nvidia-smi-q.json")
    unsupported = pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert type(unsupported).__name__ == "NVMLError_NotSupported"
    nvml = StandInNVML(raw, fail={name: unsupported for name in (
        "nvmlSystemGetCudaDriverVersion_v2", "nvmlDeviceGetMigMode", "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetNumaNodeId")})
    got = read_raw(nvml)
    d = got["devices"][0]
    assert got["cuda_driver_version"] is None
    assert d["mig_mode"] is None and d["processes"] == [] and d["numa_node"] is None
    assert d["pcie_link_gen"] is None and d["pcie_max_link_width"] is None
    assert d["pcie_link_width"] == 16  # the getters that answered still count


def test_a_bug_is_not_swallowed_as_unsupported():
    nvml = StandInNVML(recorded("h200-nvidia-smi-q.json"),
                       fail={"nvmlDeviceGetNumaNodeId": TypeError("argument 1 must be a handle")})
    with pytest.raises(TypeError):
        read_raw(nvml)
    assert nvml.calls[-1] == "nvmlShutdown"  # NVML is shut down on the way out


def test_compute_processes_make_the_card_busy():
    raw = recorded("rtx-4090-nvidia-smi-q.json")
    raw["devices"][0]["processes"] = [{"pid": 4242, "used_gpu_memory": 20 * 2**30},
                                      {"pid": 4343, "used_gpu_memory": None}]  # WDDM: usage not available
    gpu = gpu_facts_from_raw(read_raw(StandInNVML(raw)))
    d = gpu.devices[0]
    assert [(p.pid, p.used_bytes) for p in d.compute_processes] == [(4242, 20 * 2**30), (4343, None)]
    with pytest.raises(Blocked) as blocked:
        checks.require_idle(d)
    assert blocked.value.code == "GPU_BUSY"
    assert blocked.value.numbers == {"processes": 2, "held_bytes": 20 * 2**30, "free_bytes": 24_210 * MiB}
    assert "pids 4242, 4343" in blocked.value.message and "stops no service it did not start" in blocked.value.message


def test_mig_pending_only_is_not_enabled_yet():
    raw = recorded("h200-nvidia-smi-q.json")
    raw["devices"][0]["mig_mode"] = [0, 1]  # enabled at the next reset; the card is still whole now
    assert gpu_facts_from_raw(read_raw(StandInNVML(raw))).devices[0].mig_enabled is False


# --- several cards: BAR1, and topology, peer access and NVLink of every pair ---------------------------------

BUS = ["00000000:01:00.0", "00000000:41:00.0", "00000000:81:00.0"]


def three_cards() -> dict:
    """The recorded RTX PRO 6000 card three times, with the pair answers a test wants NVML to give."""
    raw = recorded("rtx-pro-6000-blackwell-server-mig.json")
    card = {**raw["devices"][1], "processes": []}
    raw["devices"] = [{**card, "index": i, "uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}",
                       "pci_bus_id": BUS[i], "bar1_total": bar1}
                      for i, bar1 in enumerate([128 * GiB, 256 * MiB, None])]
    raw["links"] = [
        {"a": 0, "b": 1, "topology": pynvml.NVML_TOPOLOGY_NODE, "p2p_read": pynvml.NVML_P2P_STATUS_OK,
         "p2p_write": pynvml.NVML_P2P_STATUS_OK, "nvlinks": 2},
        {"a": 0, "b": 2, "topology": pynvml.NVML_TOPOLOGY_SYSTEM,
         "p2p_read": pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY,
         "p2p_write": pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED, "nvlinks": 1},
        {"a": 1, "b": 2, "topology": None, "p2p_read": None, "p2p_write": None, "nvlinks": None},
    ]
    return raw


# Card 0: links 0 and 1 end at card 1 (one named in NVML's legacy bus-id form), link 2 is down, link 3 ends at
# card 2, and there is no link 4. Card 1's link-state query fails with an unknown error; card 2 has no NVLink.
NVLINKS = {0: ["00000000:41:00.0", "0000:41:00.0", None, "00000000:81:00.0"], 1: pynvml.NVML_ERROR_UNKNOWN}


def test_every_pair_of_cards_is_read():
    raw = three_cards()
    nvml = StandInNVML(raw, nvlinks=NVLINKS)
    got = read_raw(nvml)
    assert got == raw
    assert [d["bar1_total"] for d in got["devices"]] == [128 * GiB, 256 * MiB, None]
    assert nvml.calls.count("nvmlDeviceGetTopologyCommonAncestor") == 3
    assert nvml.calls.count("nvmlDeviceGetP2PStatus") == 6  # read and write for each pair
    # card 0: five link-state queries (the fifth finds no link 4), three remote ends; card 1 stops at its error
    assert nvml.calls.count("nvmlDeviceGetNvLinkState") == 5 + 1 + 1
    assert nvml.calls.count("nvmlDeviceGetNvLinkRemotePciInfo") == 3
    # every NVML name the kit calls exists in the installed nvidia-ml-py
    assert [name for name in set(nvml.calls) if not hasattr(pynvml, name)] == []


def test_pairs_become_named_facts_and_survive_the_json_round_trip():
    gpu = gpu_facts_from_raw(read_raw(StandInNVML(three_cards(), nvlinks=NVLINKS)))
    assert gpu.links == [
        GpuLink(a=0, b=1, topology="NODE", p2p_read="OK", p2p_write="OK", nvlinks=2),
        GpuLink(a=0, b=2, topology="SYSTEM", p2p_read="DISABLED_BY_REGKEY", p2p_write="CHIPSET_NOT_SUPPORTED",
                nvlinks=1),
        GpuLink(a=1, b=2, topology=None, p2p_read=None, p2p_write=None, nvlinks=None),
    ]
    assert gpu.link_between(2, 0) is gpu.links[1]
    assert [d.bar1_total_bytes for d in gpu.devices] == [128 * GiB, 256 * MiB, None]
    assert from_json(GpuFacts, to_json(gpu)) == gpu
    assert checks.describe_gpu(gpu.devices[0]).endswith(", BAR1 128.00 GiB")
    assert checks.describe_gpu(gpu.devices[1]).endswith(", BAR1 256 MiB")
    assert "BAR1" not in checks.describe_gpu(gpu.devices[2])


def test_the_pairs_read_here_decide_peer_access():
    gpu = gpu_facts_from_raw(read_raw(StandInNVML(three_cards(), nvlinks=NVLINKS)))
    devices = gpu_set.select_gpu_set(gpu, [0, 1])
    assert gpu_set.require_peer_access(gpu, devices) == ["GPU 0 <-> GPU 1: peer access read OK"]
    with pytest.raises(Blocked) as blocked:
        gpu_set.require_peer_access(gpu, gpu_set.select_gpu_set(gpu, [0, 1, 2]))
    assert blocked.value.code == "P2P_DISABLED"
    assert blocked.value.numbers == {"pairs": 3, "pairs_without_peer_access": 1}
    assert "GPU 0 <-> GPU 2: DISABLED_BY_REGKEY" in blocked.value.message


def test_nvml_enum_names_are_pynvml_numbers():
    for value, name in TOPOLOGY_LEVELS.items():
        assert getattr(pynvml, f"NVML_TOPOLOGY_{name}") == value
    for value, name in P2P_STATUSES.items():
        assert getattr(pynvml, f"NVML_P2P_STATUS_{name}") == value


def test_a_level_a_newer_driver_adds_is_named_by_its_number_not_guessed():
    raw = three_cards()
    raw["links"][0]["topology"] = 60
    gpu = gpu_facts_from_raw(raw)
    assert gpu.links[0].topology == "NVML_VALUE_60"
    assert "at a level the kit does not know (NVML topology NVML_VALUE_60)" in gpu_set.describe_links(
        gpu, gpu.devices[:2])[0]


def test_one_card_has_no_pairs_and_no_pair_is_asked_for():
    nvml = StandInNVML(recorded("h200-nvidia-smi-q.json"))
    assert read_raw(nvml)["links"] == []
    assert not {"nvmlDeviceGetP2PStatus", "nvmlDeviceGetTopologyCommonAncestor",
                "nvmlDeviceGetNvLinkState"} & set(nvml.calls)


def test_a_bug_in_a_pair_read_is_not_swallowed_as_unsupported():
    nvml = StandInNVML(three_cards(), fail={"nvmlDeviceGetTopologyCommonAncestor": TypeError("bad handle")})
    with pytest.raises(TypeError):
        read_raw(nvml)
    assert nvml.calls[-1] == "nvmlShutdown"
