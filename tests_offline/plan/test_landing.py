"""The measured landing at READY: boot lines and one NVML/host sample against the plan's projection and the
free-memory floor.

WHAT IS MOCKED: NVML only (this machine has no NVIDIA driver), as a stand-in module handed to the kit's real
Sampler. Without it, as in the stub engine runs, GPU figures must read "not measured". The recorded run folder
tests_offline/data/runs/stub-ready-8k comes from a real approval against the stub engine.
"""
from __future__ import annotations

import json
import math
import shutil

import msgspec
import pytest

from devkit.e2e.harness import finish, make_project, receipt_of, session
from devkit.synth import SYNTHETIC_METADATA, write_checkpoint
from onegpu.plan.capacity import capacity_verdicts
from onegpu.plan.kvcache import kv_cache_estimate
from onegpu.plan.landing import landing_lines, landing_record, projection_from_plan
from onegpu.plan.verdict import Verdict
from tests_offline.capacity_facts import (
    LLAMA_CONFIG,
    checkpoint_facts,
    gpu_device,
    host,
    layers_table,
    settings_with,
    with_pinning,
)
from tests_offline.nvml_double import ENGINE_CONFTEST, nvml_sample
from tests_offline.paths import DATA, PROFILES, REPO_ROOT

GIB = 2**30
RECORDED = DATA / "runs" / "stub-ready-8k"
RESEARCH_PROFILE = PROFILES / "research-target-rtx-pro-6000-96gb.json"


def plan_rows(offload=0, table=None, gpu=None):
    s = settings_with(cpu_offload_gib=offload, container_ram_gib=offload + 16)
    ckpt = checkpoint_facts(table or layers_table(10, 4))
    kv = kv_cache_estimate(LLAMA_CONFIG, s.context_tokens, None, s.prefill_chunk_tokens)
    return capacity_verdicts(s, gpu or gpu_device(96, 95.5), host(), ckpt, kv, 50 * GIB), kv


def test_the_projection_is_worked_out_from_the_plans_numbers():
    rows, kv = plan_rows()
    p = projection_from_plan(rows)
    target = math.ceil(96 * GIB * 0.85)
    budget = target - 8 * GIB  # the ASSUMED reserve
    assert p.weights_gpu_bytes == 41 * GIB  # 10 layers x 4 GiB + the 1 GiB embedding, nothing offloaded
    assert p.kv_pool_bytes == budget - 41 * GIB and p.kv_bytes_per_token == kv.bytes / 8192  # onegpu.plan.kvcache's figure
    # the engine's boot line: whole blocks of the pool over a request's blocks, times the context
    blocks = (budget - 41 * GIB) // kv.pool.bytes_per_block
    assert p.kv_pool_tokens == int(blocks / kv.pool.blocks_per_request * 8192)
    assert p.gpu_free_after_bytes == int(95.5 * GIB) - target and p.reserve_source == "ASSUMED"
    assert p.host_available_min_bytes == 256 * GIB - 16 * GIB  # available at scan minus the RAM cap


def test_without_nvml_gpu_figures_are_not_measured_never_invented():
    receipt = json.loads((RECORDED / "receipt.json").read_text())
    verdicts = msgspec.convert(receipt["capacity"], list[Verdict])  # the recorded plan's verdicts
    record = landing_record(projection_from_plan(verdicts), receipt["boot"]["facts"],
                            receipt["landing"]["at_ready"], 2 * GIB, True, GIB)
    assert "gpu_free_bytes" not in record["measured"] and "gpu_used_bytes" not in record["measured"]
    free = next(r for r in record["errors"] if r["quantity"] == "GPU free after boot")
    assert (free["measured"], free["error"], free["status"]) == (None, None, "not measured")
    assert free["why"].startswith("no NVML reading")
    assert record["floor"]["status"] == "not checked" and record["warnings"] == []
    weights = record["errors"][0]
    resident = {v["check"]: v for v in receipt["capacity"]}["gpu_weights"]["numbers"]["gpu_resident_bytes"]
    assert weights["measured"] == 4 * GIB and weights["error"] == 4 * GIB - resident  # the stub's "4.0000 GiB"
    tokens = record["errors"][1]
    assert tokens["measured"] == 25600 and tokens["error"] == 25600 - tokens["projected"]
    lines = landing_lines(record)
    assert lines[2].startswith("landing GPU free after boot: not measured (no NVML reading")
    assert lines[-1].startswith("landing free-memory floor 2.00 GiB ASSUMED: not checked")


@pytest.mark.parametrize("free_gib, floor_gib, status", [(1.0, 2.0, "UNDER"), (10.0, 2.0, "above"),
                                                          (1.0, 0.5, "above")])
def test_free_memory_at_ready_is_judged_against_the_floor(tmp_path, free_gib, floor_gib, status):
    rows, _ = plan_rows()
    total = 96 * GIB
    sample = nvml_sample(tmp_path, total, total - int(free_gib * GIB))
    boot = {"load_gib": 41.25, "kv_cache_gib": 30.0, "kv_cache_tokens": 15_000_000}
    record = landing_record(projection_from_plan(rows), boot, sample, int(floor_gib * GIB), floor_gib == 2.0)
    assert record["floor"]["status"] == status and record["measured"]["gpu_free_bytes"] == int(free_gib * GIB)
    assert record["floor"]["margin_bytes"] == int(free_gib * GIB) - int(floor_gib * GIB)
    free = next(r for r in record["errors"] if r["quantity"] == "GPU free after boot")
    assert free["error"] == int(free_gib * GIB) - (int(95.5 * GIB) - math.ceil(96 * GIB * 0.85))
    under = [w for w in record["warnings"] if w.startswith("LANDED UNDER THE FREE-MEMORY FLOOR")]
    assert bool(under) == (status == "UNDER")
    if under:
        assert "1.00 GiB of GPU memory free at READY < floor 2.00 GiB (ASSUMED), short by 1.00 GiB" in under[0]


def offload_rows(pinning="rounded", cap_gib=96):
    """Capacity rows for 10 x 5 GiB layers with a 10 GiB offload: 2 whole layers move (10 GiB logical), each pinned
    in an 8 GiB buffer when rounded (16 GiB)."""
    s = settings_with(cpu_offload_gib=10, container_ram_gib=cap_gib)
    if pinning != "rounded":
        s = with_pinning(s, pinning)
    ckpt = checkpoint_facts(layers_table(10, 5))
    kv = kv_cache_estimate(LLAMA_CONFIG, s.context_tokens, None, s.prefill_chunk_tokens)
    return capacity_verdicts(s, gpu_device(96, 95.5), host(), ckpt, kv, 50 * GIB)


def test_the_engines_offload_line_is_compared_with_the_logical_offload_never_the_pinned_one():
    p = projection_from_plan(offload_rows())
    assert (p.offloaded_logical_bytes, p.pinned_bytes, p.pinning) == (10 * GIB, 16 * GIB, "rounded")
    # the engine logs format_gib of the logical bytes: "Total CPU offloaded parameters: 10.0"
    record = landing_record(p, {"cpu_offload_gib": 10.0}, {"container_memory_bytes": 19 * GIB}, 2 * GIB, True)
    offload = next(r for r in record["errors"] if r["quantity"] == "CPU-offloaded parameters")
    assert (offload["projected"], offload["measured"], offload["error"]) == (10 * GIB, 10 * GIB, 0)
    container = next(r for r in record["errors"] if r["quantity"] == "container memory")
    assert (container["projected"], container["measured"], container["projected_is_lower_bound"]) == (
        16 * GIB, 19 * GIB, True)
    lines = landing_lines(record)
    assert any(line.startswith("landing CPU-offloaded parameters (logical bytes, as the engine's 'Total CPU "
                               "offloaded parameters' counts them): measured 10.00 GiB vs projected 10.00 GiB")
               for line in lines)
    assert record["pinning"]["status"] == "rounded (vLLM's default)"


@pytest.mark.parametrize("container_gib, status", [(13, "confirmed"), (17, "NOT CONFIRMED"), (None, "not measured")])
def test_exact_pinning_is_confirmed_only_by_the_containers_memory_at_ready(container_gib, status):
    p = projection_from_plan(offload_rows("exact"))
    assert (p.pinned_bytes, p.pinned_exact_bytes, p.pinned_rounded_bytes) == (10 * GIB, 10 * GIB, 16 * GIB)
    sample = {"container_memory_bytes": None if container_gib is None else container_gib * GIB}
    record = landing_record(p, {"cpu_offload_gib": 10.0}, sample, 2 * GIB, True)
    assert record["pinning"]["status"] == status
    assert any(w.startswith("exact pinning NOT CONFIRMED") for w in record["warnings"]) == (status == "NOT CONFIRMED")
    assert any(line.startswith(f"landing exact pinning: {status}") for line in landing_lines(record))


def test_a_plan_without_offload_projects_no_offload_rows():
    record = landing_record(projection_from_plan(plan_rows()[0]), {"cpu_offload_gib": None}, None, 2 * GIB, True)
    assert not [r for r in record["errors"] if r["quantity"] in ("CPU-offloaded parameters", "container memory")]
    assert record["pinning"]["status"] == "nothing pinned"


def test_host_ram_under_the_headroom_is_a_warning(tmp_path):
    sample = {"host_available_bytes": 3 * GIB}
    record = landing_record(projection_from_plan(plan_rows()[0]), None, sample, 2 * GIB, True, 8 * GIB)
    assert any("under the host headroom 8.00 GiB" in w for w in record["warnings"])
    assert record["errors"][0]["why"] == "the boot log states no such line"


# ---- sessions ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("floor", [None, 0.5])
def test_a_landing_under_the_floor_is_a_visible_warning_that_never_blocks(kit_project, floor):
    total = json.loads(RESEARCH_PROFILE.read_text())["gpu"]["devices"][0]["total_bytes"]
    shutil.copy(REPO_ROOT / "tests_hw" / "test_5_load_landing.py", kit_project.path / "tests_hw")
    (kit_project.path / "tests_hw" / "conftest.py").write_text(ENGINE_CONFTEST.format(total=total, free=GIB))
    shutil.copy(RESEARCH_PROFILE, kit_project.path / "profile.json")
    ckpt = write_checkpoint(kit_project.path / "ckpt", {**LLAMA_CONFIG, "num_hidden_layers": 10}, layers_table(10, 4),
                            metadata=SYNTHETIC_METADATA)
    settings = {"schema": "onegpu/settings@1", "model_id": "org/m", "model_revision": "a" * 40,
                "model_path": str(ckpt), "image": "img:1", "gpu": 0, "context_tokens": 8192,
                "prefill_chunk_tokens": 2048, "cpu_offload_gib": 0, "container_ram_gib": 16, "host_headroom_gib": 8,
                "deadline_s": 600, **({"free_floor_gib": floor} if floor is not None else {})}
    (kit_project.path / "s.json").write_text(json.dumps(settings))
    result = kit_project.runpytest("-m", "approve_load", "--settings", "s.json", "--hardware", "profile.json",
                                   "--host-ram-gib", "512", "--out", "runs/l", "-k", "landing")
    receipt = json.loads((kit_project.path / "runs/l/receipt.json").read_text())
    test = next(e for n, e in receipt["tests"].items() if n.endswith("test_landing_is_measured_against_the_plan_"
                                                                     "and_the_floor"))
    assert test["outcome"] == "passed"  # a warning, never a block
    landing = receipt["landing"]
    assert landing["measured"]["gpu_free_bytes"] == GIB and landing["floor"]["assumed"] is (floor is None)
    sample = json.loads((kit_project.path / "runs/l/samples.jsonl").read_text().splitlines()[0])
    assert sample["gpu_free_bytes"] == GIB  # the reading at READY is in the samples too
    if floor is None:
        assert landing["floor"]["status"] == "UNDER"
        assert any(w.startswith("LANDED UNDER THE FREE-MEMORY FLOOR") for w in receipt["warnings"])
        assert any(s.startswith("WARNING: LANDED UNDER THE FREE-MEMORY FLOOR") for s in receipt["shown"]["load"])
        result.stdout.fnmatch_lines(["*landing free-memory floor 2.00 GiB ASSUMED: UNDER by 1.00 GiB*"])
    else:
        assert landing["floor"]["status"] == "above" and not any("FLOOR" in w for w in receipt["warnings"])
        result.stdout.fnmatch_lines(["*landing free-memory floor 0.50 GiB (settings): above by 0.50 GiB*"])


def test_an_approval_against_the_stub_engine_records_its_landing(docker_client, tmp_path, stub_tag):  # noqa: F811
    project = make_project(tmp_path / "p", stub_tag)
    out = finish(session(project, "runs/land", {"STUB_BOOT_DELAY_S": "0.5"}))
    receipt = receipt_of(project, "runs/land")
    tests = {n.split("::")[-1]: e["outcome"] for n, e in receipt["tests"].items()}
    assert tests["test_landing_is_measured_against_the_plan_and_the_floor"] == "passed", out
    assert tests["test_kv_cache_dtype_is_one_the_image_vllm_accepts"] == "passed"
    landing = receipt["landing"]
    assert landing["measured"]["weights_gpu_bytes"] == 4 * GIB and landing["measured"]["kv_pool_tokens"] == 25600
    assert landing["measured"]["gpu_not_measured"] and landing["floor"]["status"] == "not checked"
    assert landing["at_ready"]["host_available_bytes"] > 0  # psutil measures the host even without NVML
    assert receipt["consistency"]["probe_vllm_version"] == "0.34.0"
    assert any(line.startswith("landing GPU free after boot: not measured") for line in receipt["shown"]["load"])
