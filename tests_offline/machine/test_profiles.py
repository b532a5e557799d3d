"""Recorded hardware profiles and --hardware replay: the research target, an H200 host, a 24 GB desktop, and two
multi-card towers of the research target's card (peer access off by default; forced on)."""
from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from onegpu.core.jsonable import FactsFormatError, from_json
from onegpu.core.outcomes import Blocked
from onegpu.machine import checks, gpu_set
from onegpu.machine.hardware import replay
from onegpu.machine.model import SCHEMA, GpuFacts, facts_from_json, facts_to_json, load_profile
from tests_offline.paths import DATA, PROFILES, REPO_ROOT

MiB, GiB = 2**20, 2**30
RESEARCH = PROFILES / "research-target-rtx-pro-6000-96gb.json"
H200 = PROFILES / "h200-141gb-host.json"
CONSUMER = PROFILES / "consumer-24gb-desktop.json"
TWO_CARDS = PROFILES / "two-card-tower-rtx-pro-6000-96gb.json"
THREE_CARDS = PROFILES / "three-card-tower-rtx-pro-6000-96gb.json"
ALL = [RESEARCH, H200, CONSUMER, TWO_CARDS, THREE_CARDS]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_profile_is_exactly_what_the_kit_writes(path):
    facts = load_profile(path)
    assert facts.schema == SCHEMA and facts.profile == path.stem
    assert path.read_text() == json.dumps(facts_to_json(facts), indent=2) + "\n"


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_profile_says_where_its_numbers_come_from(path):
    facts = load_profile(path)
    assert "nvidia-smi" in facts.description and "measured by the kit" in facts.description
    assert facts.notes and all(isinstance(n, str) and n for n in facts.notes)
    assert facts.source == "composed" and facts.gpu.nvml_loaded and facts.docker.reachable


def test_research_target_lists_both_cards_and_counts_only_the_selected_one():
    facts = load_profile(RESEARCH)
    first, second = facts.gpu.devices
    assert first.name == second.name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert first.total_bytes == 102_641_958_912 == 97_887 * MiB
    assert first.free_bytes == first.total_bytes - first.reserved_bytes - first.used_bytes
    assert first.uuid != second.uuid
    assert checks.select_gpu(facts.gpu, 0) is first
    assert checks.select_gpu(facts.gpu, second.uuid) is second
    assert facts.gpu.driver_version.split(".")[0] in ("575", "580")
    assert facts.gpu.cuda_driver_version in ("12.9", "13.0")


def test_research_target_demands_the_operator_state_host_ram():
    facts = load_profile(RESEARCH)
    assert facts.host.ram_total_bytes is None and facts.host.ram_available_bytes is None
    with pytest.raises(Blocked) as blocked:
        checks.require_host_ram(facts.host)
    assert blocked.value.code == "HOST_RAM_UNSTATED" and "--host-ram-gib" in blocked.value.message
    stated = replay(RESEARCH, 512)
    assert stated.replayed and stated.host.ram_total_bytes == 512 * GiB and stated.host.ram_stated_by_operator
    assert "(stated by the operator)" in checks.require_host_ram(stated.host)


def test_h200_and_consumer_profiles():
    h200, desk = load_profile(H200), load_profile(CONSUMER)
    (card,) = h200.gpu.devices
    assert card.name == "NVIDIA H200" and card.total_bytes == 143_771 * MiB and card.reserved_bytes == 700 * MiB
    assert h200.host.ram_total_bytes == 2 * 2**40
    (card,) = desk.gpu.devices
    assert card.name == "NVIDIA GeForce RTX 4090" and card.total_bytes == 24_564 * MiB and card.mig_enabled is None
    assert desk.host.ram_total_bytes == 64 * GiB
    for facts in (h200, desk):
        assert checks.require_host_ram(facts.host).endswith("swap {0} total, {1} free".format(
            *(f"{b / GiB:,.2f} GiB" for b in (facts.host.swap_total_bytes, facts.host.swap_free_bytes))))
        assert checks.describe_cpus(facts.host).startswith(f"CPUs online {facts.host.cpus_online}")


# --- facts written before the multi-GPU reads ---------------------------------------------------------------

def without_multi_gpu_fields(data: dict) -> dict:
    """A profile as written before BAR1, the pairs of cards and the IOMMU were read."""
    data = json.loads(json.dumps(data))
    for device in data["gpu"]["devices"]:
        del device["bar1_total_bytes"]
    del data["gpu"]["links"], data["host"]["iommu"]
    return data


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_a_profile_without_the_multi_gpu_fields_still_loads(path):
    old = without_multi_gpu_fields(json.loads(path.read_text()))
    facts = facts_from_json(old)
    assert facts.gpu.links == [] and facts.host.iommu is None
    assert all(d.bar1_total_bytes is None for d in facts.gpu.devices)
    assert facts.gpu.devices[0].total_bytes == load_profile(path).gpu.devices[0].total_bytes


@pytest.mark.parametrize("run", ["stub-load-oom", "stub-ready-8k"])
def test_an_old_run_folders_gpu_facts_still_load(run):
    receipt = json.loads((DATA / "runs" / run / "receipt.json").read_text())
    gpu = from_json(GpuFacts, receipt["hardware"]["gpu"])
    assert gpu.devices[0].name == "NVIDIA H200" and gpu.links == [] and gpu.devices[0].bar1_total_bytes is None


# --- the multi-card towers ---------------------------------------------------------------------------------------

def test_multi_card_profiles_say_what_they_are_composed_from():
    for path in (TWO_CARDS, THREE_CARDS):
        description = load_profile(path).description
        assert "TP3 MiMo-V2.5" in description and "three 96 GB RTX PRO 6000" in description
        assert "driver disables PCIe peer access by default" in description
        assert "left null, not guessed" in description
    three = load_profile(THREE_CARDS).description
    assert "ForceP2P" in three and "IOMMU off" in three and "resizable BAR on" in three


def test_two_card_tower_blocks_on_peer_access_the_driver_leaves_off():
    facts = load_profile(TWO_CARDS)
    devices = gpu_set.select_gpu_set(facts.gpu, [0, 1])
    assert [d.name for d in devices] == ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"] * 2
    assert len({d.uuid for d in devices}) == 2
    assert len(gpu_set.require_whole_cards(devices)) == len(gpu_set.require_idle_set(devices)) == 2
    with pytest.raises(Blocked) as blocked:
        gpu_set.require_peer_access(facts.gpu, devices)
    assert blocked.value.code == "P2P_DISABLED"
    assert blocked.value.numbers == {"pairs": 1, "pairs_without_peer_access": 1}
    assert "GPU 0 <-> GPU 1: DISABLED_BY_REGKEY" in blocked.value.message
    (line,) = gpu_set.describe_links(facts.gpu, devices)
    assert line == ("GPU 0 <-> GPU 1: across PCIe host bridges (root complexes) within one NUMA node (NVML topology "
                    "NODE); peer access read disabled by the driver's registry key, write disabled by the driver's "
                    "registry key; direct NVLink links 0")
    assert gpu_set.describe_p2p_preconditions(facts.host, devices) == [
        "IOMMU: unknown (not reported)", "GPU 0: BAR1 not reported", "GPU 1: BAR1 not reported"]


def test_three_card_tower_with_peer_access_forced_on_passes():
    facts = load_profile(THREE_CARDS)
    third = facts.gpu.devices[2]
    devices = gpu_set.select_gpu_set(facts.gpu, [0, 1, third.uuid])
    assert [d.index for d in devices] == [0, 1, 2]
    assert gpu_set.require_peer_access(facts.gpu, devices) == [
        "GPU 0 <-> GPU 1: peer access read OK", "GPU 0 <-> GPU 2: peer access read OK",
        "GPU 1 <-> GPU 2: peer access read OK"]
    assert all("topology unknown (not reported); peer access read OK, write OK; direct NVLink links 0" in line
               for line in gpu_set.describe_links(facts.gpu, devices))
    iommu, *bars = gpu_set.describe_p2p_preconditions(facts.host, devices)
    assert iommu.startswith("IOMMU: not active; groups unknown (not reported)")
    assert bars == [f"GPU {i}: large BAR: BAR1 128.00 GiB >= memory 95.59 GiB" for i in range(3)]


# --- malformed profiles ----------------------------------------------------------------------------------

def broken(tmp_path, change) -> Path:
    data = json.loads(RESEARCH.read_text())
    change(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["gpu"]["devices"][0].update(total_bytes="96GB"),
     "$.gpu.devices[0].total_bytes: expected int, got '96GB'"),
    (lambda d: d["host"].update(ram_total_gb=512), "$.host: unknown field(s) ram_total_gb"),
    (lambda d: d["docker"].pop("swap_limit"), "$.docker.swap_limit: missing"),
    (lambda d: d["gpu"].update(devices={}), "$.gpu.devices: expected a list, got dict"),
    (lambda d: d["host"].update(wsl2="no"), "$.host.wsl2: expected bool, got 'no'"),
    (lambda d: d.update(schema="onegpu/hardware@2"),
     "$: schema must be 'onegpu/hardware@1', found 'onegpu/hardware@2'"),
], ids=["wrong-type", "unknown-field", "missing-field", "list-expected", "bool-expected", "schema"])
def test_malformed_profile_names_the_field(tmp_path, change, expected):
    path = broken(tmp_path, change)
    with pytest.raises(FactsFormatError) as failed:
        load_profile(path)
    assert str(failed.value) == f"--hardware {path}: {expected}"


def test_unreadable_profile(tmp_path):
    with pytest.raises(FactsFormatError, match="no such file"):
        load_profile(tmp_path / "absent.json")
    (tmp_path / "text.json").write_text("GPU: RTX PRO 6000\n")
    with pytest.raises(FactsFormatError, match="not readable JSON"):
        load_profile(tmp_path / "text.json")


# --- replay through pytest -------------------------------------------------------------------------------------

LOAD_TEST = ("import pytest\n"
             "pytestmark = [pytest.mark.approve_load, pytest.mark.phase('load')]\n"
             "def test_engine_starts(live_hardware):\n    pass\n")


@pytest.fixture
def replay_project(kit_project):
    """The real machine phase tests, the shipped profiles, and an acting test that needs live hardware."""
    shutil.copy(REPO_ROOT / "tests_hw" / "test_1_machine.py", kit_project.path / "tests_hw")
    shutil.copytree(PROFILES, kit_project.path / "profiles")
    kit_project.makepyfile(**{"tests_hw/test_5_load": LOAD_TEST})
    return kit_project


def only_receipt(pytester) -> dict:
    (folder,) = (pytester.path / "runs").iterdir()
    return json.loads((folder / "receipt.json").read_text())


def outcome(receipt, name) -> dict:
    (entry,) = [e for nodeid, e in receipt["tests"].items() if nodeid.endswith("::" + name)]
    return entry


def test_replayed_scan_says_so_everywhere_and_asks_for_host_ram(replay_project):
    result = replay_project.runpytest("-m", "scan", f"--hardware=profiles/{RESEARCH.name}")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*** HARDWARE FACTS REPLAYED from profile research-target-rtx-pro-6000-96gb*"])
    receipt = only_receipt(replay_project)
    assert receipt["hardware_source"] == "replayed" and receipt["hardware"]["source"] == "replayed"
    assert receipt["replay"]["name"] == "research-target-rtx-pro-6000-96gb"
    assert "REPLAYED" in receipt["banners"][0]
    ram = outcome(receipt, "test_host_ram_is_known")
    assert (ram["outcome"], ram["code"]) == ("blocked", "HOST_RAM_UNSTATED")
    assert "--host-ram-gib" in ram["message"]
    assert outcome(receipt, "test_gpus_are_listed_with_driver_reported_memory")["outcome"] == "passed"
    assert len([line for line in receipt["shown"]["machine"] if "RTX PRO 6000" in line]) == 2
    (folder,) = (replay_project.path / "runs").iterdir()
    report = (folder / "report.html").read_text()
    env = json.loads(html.unescape(re.search(r'data-jsonblob="([^"]*)"', report).group(1)))["environment"]
    assert env["Hardware facts"] == "REPLAYED from a profile, not read from this machine"


def test_stated_host_ram_passes_and_is_said_to_be_stated(replay_project):
    result = replay_project.runpytest("-m", "scan", f"--hardware=profiles/{RESEARCH.name}", "--host-ram-gib", "512")
    result.stdout.fnmatch_lines(["*host RAM total 512.00 GiB, available 512.00 GiB (stated by the operator)*"])
    receipt = only_receipt(replay_project)
    assert outcome(receipt, "test_host_ram_is_known")["outcome"] == "passed"
    assert receipt["hardware"]["host"]["ram_stated_by_operator"] is True


def test_replayed_session_selects_one_card_and_counts_no_other(replay_project):
    settings = {"schema": "onegpu/settings@1", "model_id": "XiaomiMiMo/MiMo-V2.6-Pro-RL",
                "model_revision": "0123456789abcdef0123456789abcdef01234567", "model_path": "/srv/models/mimo",
                "image": "vllm/vllm-openai:v0.11.0", "gpu": 1, "context_tokens": 2048,
                "prefill_chunk_tokens": 512, "cpu_offload_gib": 512, "container_ram_gib": 576,
                "host_headroom_gib": 32, "deadline_s": 1800}
    (replay_project.path / "s.json").write_text(json.dumps(settings))
    result = replay_project.runpytest("-m", "scan", f"--hardware=profiles/{RESEARCH.name}", "--settings", "s.json")
    second = load_profile(RESEARCH).gpu.devices[1]
    result.stdout.fnmatch_lines([f"*selected GPU 1 ({second.uuid}); no other card is counted*"])
    receipt = only_receipt(replay_project)
    assert receipt["selection"] == {"gpu_index": 1, "gpu_uuid": second.uuid, "gpu_name": second.name}
    for name in ("test_selected_gpu_is_a_whole_card", "test_selected_gpu_runs_no_other_compute"):
        assert outcome(receipt, name)["outcome"] == "passed"


def test_acting_tests_are_blocked_when_the_hardware_is_replayed(replay_project):
    result = replay_project.runpytest("-m", "approve_load", f"--hardware=profiles/{H200.name}", "-rx")
    result.stdout.fnmatch_lines(["*BLOCKED HARDWARE_REPLAYED: facts come from profile 'h200-141gb-host'*"])
    receipt = only_receipt(replay_project)
    load = outcome(receipt, "test_engine_starts")
    assert (load["outcome"], load["code"], load["phase"]) == ("blocked", "HARDWARE_REPLAYED", "load")
    assert outcome(receipt, "test_host_ram_is_known")["outcome"] == "passed"  # the scan ran too, first


def test_a_run_folders_hardware_json_replays(replay_project):
    replay_project.runpytest("-m", "scan")
    (live_folder,) = (replay_project.path / "runs").iterdir()
    recorded = json.loads((live_folder / "hardware.json").read_text())
    assert recorded["source"] == "live"
    facts = load_profile(live_folder / "hardware.json")
    assert facts_to_json(facts) == recorded
    shutil.copy(live_folder / "hardware.json", replay_project.path / "recorded.json")
    shutil.rmtree(replay_project.path / "runs")
    replayed = replay_project.runpytest("-m", "scan", "--hardware=recorded.json")
    assert replayed.ret == pytest.ExitCode.OK
    assert only_receipt(replay_project)["hardware"]["host"] == recorded["host"]


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["gpu"]["devices"][1].update(uuid=None), "$.gpu.devices[1].uuid: expected str, got None"),
    (lambda d: d.pop("docker"), "$.docker: missing"),
], ids=["null-uuid", "no-docker-section"])
def test_malformed_profile_is_a_usage_error_before_anything_runs(replay_project, change, expected):
    data = json.loads(RESEARCH.read_text())
    change(data)
    (replay_project.path / "bad.json").write_text(json.dumps(data))
    result = replay_project.runpytest("-m", "scan", "--hardware=bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --hardware bad.json: {expected}"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (replay_project.path / "runs").exists()
