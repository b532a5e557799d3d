"""The plan (plan.json, digest, PLAN_CHANGED) and the plan phase end to end: real pytest sessions over a
synthetic checkpoint, a replayed hardware profile and a tiny image imported into the real Docker engine."""
from __future__ import annotations

import hashlib
import json
import shutil
import stat

import pytest

from devkit.synth import SYNTHETIC_METADATA, write_checkpoint
from onegpu.core.outcomes import Blocked
from onegpu.engine.image import ImageFacts
from onegpu.plan.approved import (
    PLAN_SCHEMA,
    PlanFileError,
    describe_settings,
    load_plan,
    plan_bytes,
    plan_changes,
    plan_digest,
    plan_document,
    require_same_plan,
)
from onegpu.plan.capacity import CHECKS, table_title
from onegpu.plan.vllm_versions import assumed_newest
from tests_offline.capacity_facts import checkpoint_facts, layers_table, settings_with
from tests_offline.paths import PROFILES, REPO_ROOT

GIB = 2**30
RESEARCH_PROFILE = PROFILES / "research-target-rtx-pro-6000-96gb.json"
IMAGE_ID = "sha256:" + "ab" * 32


def hardware_facts(profile=RESEARCH_PROFILE):
    from onegpu.machine.hardware import replay

    return replay(profile, 512)


def fresh_document(**changes) -> dict:
    settings = settings_with(**changes.pop("settings", {}))
    ckpt = checkpoint_facts(layers_table(2, 1))
    image = ImageFacts(reference="vllm/vllm-openai:v0.11.0", id=changes.pop("image_id", IMAGE_ID))
    launch = changes.pop("launch", {"entrypoint": ["vllm"], "command": ["serve", "/model", "--max-model-len", "8192"]})
    return plan_document(settings, hardware_facts(), ckpt.summary(), image, [], launch)


def test_plan_binds_image_gpu_settings_files_and_argv():
    doc = fresh_document()
    assert doc["schema"] == PLAN_SCHEMA
    assert doc["identity"] == {"image_id": IMAGE_ID, "gpu_uuid": "GPU-00000000-0000-4000-8000-00000000a600",
                               "settings_sha256": "0" * 64,
                               "checkpoint_files": ["config.json", "model-00001-of-00001.safetensors",
                                                    "model.safetensors.index.json", "tokenizer.json"],
                               "launch_argv": ["vllm", "serve", "/model", "--max-model-len", "8192"]}
    assert doc["settings"]["assumed"]["gpu_reserve_gib"].startswith("8.0")


def test_digest_is_the_sha256_of_the_file_bytes_and_stable():
    doc = fresh_document()
    assert plan_digest(doc) == hashlib.sha256(plan_bytes(doc)).hexdigest()
    assert plan_digest(fresh_document()) == plan_digest(doc)
    assert plan_digest(fresh_document(image_id="sha256:" + "cd" * 32)) != plan_digest(doc)


def test_each_bound_difference_is_named():
    approved = fresh_document()
    assert plan_changes(approved, fresh_document()) == []
    moved = fresh_document(image_id="sha256:" + "cd" * 32)
    assert plan_changes(approved, moved) == [f"image ID: approved {IMAGE_ID}, now sha256:{'cd' * 32} (the image "
                                             "reference now points elsewhere)"]
    other = {**moved, "identity": {**moved["identity"], "gpu_uuid": "GPU-other", "settings_sha256": "1" * 64,
                                   "checkpoint_files": ["config.json", "extra.safetensors"],
                                   "launch_argv": ["vllm", "serve", "/model"]}}
    changes = plan_changes(approved, other)
    assert [c.split(":")[0] for c in changes] == ["image ID", "GPU UUID", "settings digest", "checkpoint file list",
                                                  "launch argv"]
    assert "1 added (extra.safetensors); 3 removed" in changes[3]


def test_changed_plan_is_blocked_plan_changed_and_an_unchanged_one_holds():
    approved = fresh_document()
    line = require_same_plan(approved, "f" * 64, "runs/x/plan.json", fresh_document())
    assert "still holds" in line and "image ID, GPU UUID, settings digest" in line
    changed = fresh_document()
    changed["identity"]["settings_sha256"] = "2" * 64
    with pytest.raises(Blocked) as blocked:
        require_same_plan(approved, "f" * 64, "runs/x/plan.json", changed)
    assert blocked.value.code == "PLAN_CHANGED" and blocked.value.numbers == {"changes": 1}
    assert "settings digest: approved " + "0" * 64 + ", now " + "2" * 64 in blocked.value.message


def test_an_unreadable_approved_plan_names_the_rule(tmp_path):
    cases = {"missing.json": None, "bad.json": b"{not json", "other.json": b'{"schema": "onegpu/receipt@1"}',
             "noid.json": json.dumps({"schema": PLAN_SCHEMA, "identity": {"image_id": "x"}}).encode(),
             # read as strictly as every other file of the kit: a second "identity" is not silently the one used
             "twice.json": b'{"schema": "onegpu/plan@1", "identity": {}, "identity": {}}'}
    expected = {"missing.json": "no such file", "bad.json": "not JSON", "other.json": "field 'schema'",
                "noid.json": "identity.gpu_uuid", "twice.json": "not JSON (duplicate key 'identity')"}
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(PlanFileError) as err:
            load_plan(tmp_path / name)
        assert expected[name] in str(err.value)


def test_settings_lines_show_every_assumed_knob():
    lines = describe_settings(settings_with())
    assert any(line.strip().startswith("ASSUMED gpu_reserve_gib = 8.0") for line in lines)
    assert sum("ASSUMED" in line for line in lines) == len(settings_with().assumed)


# ---- real sessions -------------------------------------------------------------------------------------------

# Two decoder layers of 1 GiB BF16 weights plus a 1 GiB embedding: small on paper, sparse on disk.
TINY_TABLE = layers_table(2, 1)
TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
               "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 1024, "torch_dtype": "bfloat16"}


def plan_project(kit_project, image_ref, table=TINY_TABLE, profile=RESEARCH_PROFILE, **settings):
    """A kit project with the real plan-phase tests, a synthetic checkpoint and settings naming them."""
    shutil.copy(REPO_ROOT / "tests_hw" / "test_2_plan.py", kit_project.path / "tests_hw" / "test_2_plan.py")
    ckpt = write_checkpoint(kit_project.path / "ckpt", TINY_CONFIG, table, shards=2, metadata=SYNTHETIC_METADATA)
    shutil.copy(profile, kit_project.path / "profile.json")
    data = {"schema": "onegpu/settings@1", "model_id": "org/tiny", "model_revision": "a" * 40,
            "model_path": str(ckpt), "image": image_ref, "gpu": 0, "context_tokens": 8192,
            "prefill_chunk_tokens": 2048, "cpu_offload_gib": 1, "container_ram_gib": 64, "host_headroom_gib": 16,
            "deadline_s": 3600, **settings}
    (kit_project.path / "s.json").write_text(json.dumps(data))
    return kit_project


def scan(project, *extra, out="runs/scan"):
    result = project.runpytest("-m", "scan", "--settings", "s.json", "--hardware", "profile.json",
                               "--host-ram-gib", "512", "--out", out, *extra)
    folder = project.path / out
    return result, json.loads((folder / "receipt.json").read_text()), folder


def outcomes(receipt) -> dict:
    return {nodeid.split("::")[-1]: entry for nodeid, entry in receipt["tests"].items()}


def test_scan_writes_capacity_table_receipt_and_private_plan(kit_project, engine_images):
    project = plan_project(kit_project, engine_images[0])
    result, receipt, folder = scan(project)
    tests = outcomes(receipt)
    assert {e["outcome"] for e in tests.values()} == {"passed"}, tests
    assert [v["check"] for v in receipt["capacity"]] == list(CHECKS)
    rows = {v["check"]: v for v in receipt["capacity"]}
    # 3 GiB of headers - 1 GiB offload = 2 GiB on the GPU; KV 2 layers x 2 x 256 x 2 B x 64-token blocks (vLLM 0.34,
    # the newest rules, ASSUMED: the scan knows no version of the image) x (8,192 / 64 blocks + the null block)
    assert rows["gpu_weights"]["numbers"]["gpu_resident_bytes"] == 2 * GIB
    assert rows["kv_cache"]["numbers"]["kv_bytes"] == 2 * 2 * 256 * 2 * 64 * (8192 // 64 + 1)
    assert receipt["capacity_accounting"]["version"]["basis"] == "ASSUMED"
    assert rows["disk"]["status"] == "UNKNOWN"  # the profile records no run-folder disk: shown, not hidden
    assert any(w.startswith("capacity disk UNKNOWN") for w in receipt["warnings"])
    result.stdout.fnmatch_lines([table_title(assumed_newest()), "*GPU part of weights*OK*no definite failure*", "*KV cache*OK*"])
    plan_file = folder / "plan.json"
    assert stat.S_IMODE(plan_file.stat().st_mode) == 0o600
    assert receipt["plan"]["sha256"] == hashlib.sha256(plan_file.read_bytes()).hexdigest()
    plan = json.loads(plan_file.read_text())
    assert plan["identity"]["image_id"] == engine_images[1][0]
    assert plan["identity"]["checkpoint_files"] == receipt["checkpoint"]["files"]
    assert plan["identity"]["launch_argv"][:2] == ["vllm", "serve"]  # the launch spec travels with the plan
    assert receipt["image"]["id"] == engine_images[1][0]


def test_synthetic_checkpoint_is_said_plainly_beside_the_replay_banner(kit_project, engine_images):
    result, receipt, _ = scan(plan_project(kit_project, engine_images[0]))
    assert receipt["checkpoint"]["synthetic"] is True
    assert [b.split(":")[0] for b in receipt["banners"]] == ["HARDWARE FACTS REPLAYED from profile "
                                                             "research-target-rtx-pro-6000-96gb",
                                                             "CHECKPOINT IS SYNTHETIC"]
    result.stdout.fnmatch_lines(["*** CHECKPOINT IS SYNTHETIC*no weights*"])


def test_approved_plan_that_still_holds_and_one_that_changed(kit_project, engine_images, docker_client):
    project = plan_project(kit_project, engine_images[0])
    _, first, folder = scan(project, out="runs/first")
    approved = str(folder / "plan.json")
    _, again, _ = scan(project, "--plan", approved, out="runs/again")
    assert outcomes(again)["test_plan_is_written_with_its_digest"]["outcome"] == "passed"
    assert any("still holds" in line for line in again["shown"]["plan"])
    assert again["plan"]["approved"]["sha256"] == first["plan"]["sha256"]
    # the tag now points at the other image, and the settings file changed
    repo, tag = engine_images[0].split(":")
    docker_client.images.get(engine_images[1][1]).tag(repo, tag)
    settings = json.loads((project.path / "s.json").read_text())
    (project.path / "s.json").write_text(json.dumps({**settings, "context_tokens": 4096}))
    _, changed, _ = scan(project, "--plan", approved, out="runs/changed")
    entry = outcomes(changed)["test_plan_is_written_with_its_digest"]
    assert entry["outcome"] == "blocked" and entry["code"] == "PLAN_CHANGED"
    assert f"image ID: approved {engine_images[1][0]}, now {engine_images[1][1]}" in entry["message"]
    assert "settings digest: approved" in entry["message"]


def test_a_wrong_plan_file_is_a_usage_error(kit_project, engine_images):
    project = plan_project(kit_project, engine_images[0])
    (project.path / "notaplan.json").write_text("{}")
    result = project.runpytest("-m", "scan", "--settings", "s.json", "--plan", "notaplan.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--plan notaplan.json: field 'schema' must be 'onegpu/plan@1'*"])


def test_weights_beyond_the_gpu_budget_block_with_numbers_and_stop_the_approval(kit_project, engine_images):
    # 80 layers x 1 GiB + 1 GiB embedding = 81 GiB; offload 1 GiB -> layer 0 moves whole, 80 GiB stay on a 73.25 GiB
    # budget (the engine moves whole parameters: one 40 GiB layer would have moved whole for a 1 GiB budget)
    project = plan_project(kit_project, engine_images[0], table=layers_table(80, 1))
    project.makepyfile(**{"tests_hw/test_9_approve": (
        "import pytest\n"
        "pytestmark = [pytest.mark.approve_load, pytest.mark.phase('load')]\n"
        "def test_approval_runs_only_a_plan_without_blocked_rows(approved_plan):\n    pass\n")})
    result = project.runpytest("-m", "approve_load", "--settings", "s.json", "--hardware", "profile.json",
                               "--host-ram-gib", "512", "--out", "runs/approve")
    tests = outcomes(json.loads((project.path / "runs/approve/receipt.json").read_text()))
    vram = tests["test_weights_left_on_the_gpu_stay_within_the_budget"]
    assert vram["outcome"] == "blocked" and vram["code"] == "INSUFFICIENT_VRAM"
    assert vram["numbers"]["gpu_resident_bytes"] == 80 * GIB and "exceeds the GPU budget" in vram["message"]
    kv = tests["test_kv_cache_stays_within_what_the_weights_leave"]
    assert kv["code"] == "KV_DOES_NOT_FIT"
    approval = tests["test_approval_runs_only_a_plan_without_blocked_rows"]
    assert approval["outcome"] == "blocked" and approval["code"] == "INSUFFICIENT_VRAM"
    result.stdout.fnmatch_lines(["*BLOCKED INSUFFICIENT_VRAM: *80.00 GiB on the GPU exceeds the GPU budget*"])


def test_without_a_driver_the_gpu_rows_are_unknown_and_the_host_is_still_judged(kit_project, engine_images):
    # A replayed profile of a machine whose NVIDIA driver did not load (not a mock: recorded facts).
    profile = json.loads(RESEARCH_PROFILE.read_text())
    profile["gpu"] = {"nvml_loaded": False, "error": "NVML Shared Library Not Found", "driver_version": None,
                      "cuda_driver_version": None, "devices": []}
    (kit_project.path / "nodriver.json").write_text(json.dumps(profile))
    project = plan_project(kit_project, engine_images[0], profile=kit_project.path / "nodriver.json",
                           container_ram_gib=600)
    _, receipt, _ = scan(project)
    rows = {v["check"]: v for v in receipt["capacity"]}
    for check in ("gpu_free", "gpu_budget", "gpu_weights", "kv_cache"):
        assert rows[check]["status"] == "UNKNOWN" and "NO_NVIDIA_DRIVER" in rows[check]["message"]
        assert set(rows[check]["numbers"]) == {"accounting"}  # no number is invented
    assert rows["host_ram"]["code"] == "INSUFFICIENT_HOST_RAM"  # 600 + 16 GiB > 512 GiB stated
    tests = outcomes(receipt)
    assert tests["test_weights_left_on_the_gpu_stay_within_the_budget"]["code"] == "NO_NVIDIA_DRIVER"
    assert tests["test_ram_cap_and_headroom_stay_within_host_ram"]["code"] == "INSUFFICIENT_HOST_RAM"


def test_a_cache_snapshot_of_another_revision_is_refused_in_the_scan():
    from types import SimpleNamespace

    from onegpu.core.outcomes import Blocked
    from onegpu.plan.approved import require_revision

    settings = SimpleNamespace(model_revision="a" * 40)
    assert "is revision " + "a" * 40 in require_revision(SimpleNamespace(hf_revision="a" * 40), settings)
    assert "operator's assertion" in require_revision(SimpleNamespace(hf_revision=None), settings)
    with pytest.raises(Blocked) as caught:
        require_revision(SimpleNamespace(hf_revision="b" * 40), settings)
    assert caught.value.code == "REVISION_MISMATCH" and caught.value.numbers == {"snapshot": "b" * 40,
                                                                                 "settings": "a" * 40}
