"""Proposed settings (--propose): the smallest whole-GiB budgets that pass the capacity checks, each number worked
out in the test from the facts; then real `pytest -m scan --propose` sessions over sparse synthetic checkpoints
and a replayed profile of the research target."""
from __future__ import annotations

import json
import math
import shutil
import stat

import pytest

from devkit.synth import SYNTHETIC_METADATA, write_checkpoint
from onegpu.core.outcomes import Blocked
from onegpu.plan.calibrate import Calibration
from onegpu.plan.capacity import capacity_verdicts
from onegpu.plan.kvcache import kv_cache_estimate
from onegpu.plan.propose import NOT_SETTINGS, PROPOSAL_SCHEMA, REQUEST_SCHEMA, parse_request, propose
from onegpu.plan.propose_text import outcome_lines, proposal_document, proposal_table
from onegpu.plan.settings import SettingsError, load_settings, parse_settings
from tests_offline.capacity_facts import LLAMA_CONFIG, checkpoint_facts, gpu_device, host, layers_table
from tests_offline.paths import PROFILES, REPO_ROOT

GIB = 2**30
RESEARCH_PROFILE = PROFILES / "research-target-rtx-pro-6000-96gb.json"
REQUEST = {"schema": REQUEST_SCHEMA, "model_id": "org/demo", "model_revision": "a" * 40, "model_path": "/models/demo",
           "image": "vllm/vllm-openai:v0.11.0", "gpu": 0, "context_tokens": 8192}


def request_with(**changes):
    return parse_request({**REQUEST, **changes}, "/tmp/req.json", "0" * 64)


def proposal_for(table, gpu=None, host_facts=None, reason=None, config=None, calibration=None, **req):
    r = request_with(**req)
    ckpt = checkpoint_facts(table, config=config)
    kv = kv_cache_estimate(ckpt.config, r.context_tokens, r.kv_cache_dtype, r.prefill_chunk_tokens)
    return propose(r, gpu if reason is None else None, reason, host_facts or host(), ckpt, kv, calibration,
                   50 * GIB), ckpt, kv


def as_settings(proposed: dict):
    """The proposal's values as the operator's settings file: the proposal plus the deadline they choose."""
    return parse_settings({**proposed, "deadline_s": 3600}, "/tmp/s.json", "1" * 64)


def verdicts_of(settings, ckpt, kv, gpu=None, host_facts=None):
    return {v.check: v for v in capacity_verdicts(settings, gpu or gpu_device(), host_facts or host(), ckpt, kv,
                                                  50 * GIB)}


# ---- the request ---------------------------------------------------------------------------------------------

def test_a_request_needs_identity_and_context_and_assumes_the_rest_visibly():
    r = request_with()
    assert (r.context_tokens, r.prefill_chunk_tokens, r.gpu_reserve_gib) == (8192, 2048, None)
    assert set(r.assumed) == {"prefill_chunk_tokens", "gpu_reserve_gib", "free_floor_gib"}


@pytest.mark.parametrize("changes, named", [
    ({"cpu_offload_gib": 4}, "field 'cpu_offload_gib': value 4: a proposal request carries no budgets"),
    ({"container_ram_gib": 64}, "field 'container_ram_gib': value 64: a proposal request carries no budgets"),
    ({"deadline_s": 60}, "field 'deadline_s': value 60: unknown field"),
    ({"model_revision": "main"}, "field 'model_revision': value \"main\": must be the 40-character"),
    ({"context_tokens": True}, "field 'context_tokens': value true: must be an integer (a boolean is not)"),
    ({"model_path": "models/x"}, "field 'model_path': value \"models/x\": must be an absolute path"),
    ({"schema": "onegpu/settings@1"}, f"field 'schema': value \"onegpu/settings@1\": must be '{REQUEST_SCHEMA}'"),
])
def test_a_bad_request_names_the_field_the_value_and_the_rule(changes, named):
    with pytest.raises(SettingsError) as err:
        request_with(**changes)
    assert named in str(err.value)


def test_a_request_without_its_identity_lists_every_missing_field():
    with pytest.raises(SettingsError) as err:
        parse_request({"schema": REQUEST_SCHEMA, "gpu": 0}, "/tmp/r.json", "0" * 64)
    assert [e for e in err.value.errors if e.endswith("required")] == [
        f"field {k!r}: required" for k in ("model_id", "model_revision", "model_path", "image", "context_tokens")]


# ---- the arithmetic --------------------------------------------------------------------------------------------

def test_the_offload_is_the_smallest_whole_gib_that_passes_the_capacity_checks():
    # 40 decoder layers x 3 GiB + a 1 GiB embedding = 121 GiB of headers on a 96 GiB card
    p, ckpt, kv = proposal_for(layers_table(40, 3), gpu_device())
    budget = math.ceil(96 * GIB * 0.85) - 8 * GIB  # the 0.85 target minus the ASSUMED 8 GiB reserve
    need = 121 * GIB + kv.bytes - budget  # about 47.5 GiB: 16 whole 3 GiB layers (48 GiB) must leave the GPU
    assert math.ceil(need / (3 * GIB)) == 16
    # the engine moves a whole parameter while its total is below the budget: any budget above the 45 GiB of the
    # first 15 layers moves the 16th too, so 46 GiB is the smallest whole GiB that moves 48 GiB
    offload = 46
    assert p.proposed and p.settings["cpu_offload_gib"] == offload
    # 16 layers each pinned in a 4 GiB buffer: 64 GiB, and 67 GiB at the peak (the last layer's 3 GiB pageable
    # copy beside them); + the ASSUMED 8 GiB own needs
    assert p.settings["container_ram_gib"] == 64 + 3 + 8 == 75
    assert p.settings["host_headroom_gib"] == 13  # the larger of 8 GiB and 5% of 256 GiB (12.8, rounded up)
    passing = verdicts_of(as_settings(p.settings), ckpt, kv)
    assert {v.status for v in passing.values()} == {"OK"}  # the pinned cap passes every check
    one_less = verdicts_of(as_settings({**p.settings, "cpu_offload_gib": offload - 1}), ckpt, kv)
    assert one_less["kv_cache"].code == "KV_DOES_NOT_FIT"  # minimal: one GiB less no longer passes
    short = verdicts_of(as_settings({**p.settings, "container_ram_gib": 56}), ckpt, kv)
    assert short["host_offload"].code == "INSUFFICIENT_HOST_RAM"  # the budget plus own needs is not enough


def test_exact_pinning_is_an_alternative_to_measure_never_the_proposal():
    p, ckpt, kv = proposal_for(layers_table(40, 3), gpu_device())
    exact = {a["name"]: a for a in p.alternatives}["exact pinning"]
    # the same 16 layers at their own size: 48 GiB pinned, 51 GiB at the peak, + 8 GiB
    assert (exact["pinned_bytes"], exact["peak_bytes"], exact["container_ram_gib"]) == (48 * GIB, 51 * GIB, 59)
    assert exact["settings"] == {"offload_pinning": "exact", "container_ram_gib": 59} and exact["confirmed"] is False
    assert "UNCONFIRMED" in exact["why"] and "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1" in exact["why"]
    assert p.settings["container_ram_gib"] == 75 and "offload_pinning" not in p.settings
    # no experts: no selective offload to show; more offload moves all 40 layers (120 GiB) off the card
    assert [a["name"] for a in p.alternatives] == ["exact pinning", "more offload"]
    more = p.alternatives[1]
    assert more["settings"]["cpu_offload_gib"] == 120 and more["offloaded_bytes"] == 120 * GIB


def moe_layers_table(layers: int = 40) -> dict:
    """Per layer: a 0.5 GiB o_proj and 2 experts x (gate, up, down) of 0.25 GiB each (w13 1 GiB, w2 0.5 GiB)."""
    table = {"model.embed_tokens.weight": ("BF16", [GIB // 2048, 1024])}
    for i in range(layers):
        table[f"model.layers.{i}.self_attn.o_proj.weight"] = ("BF16", [GIB // 4096, 1024])
        for e in range(2):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                table[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] = ("BF16", [GIB // 8192, 1024])
    return table


def test_selective_expert_offload_is_shown_as_a_choice_to_measure_not_a_faster_result():
    config = {**LLAMA_CONFIG, "num_hidden_layers": 40}
    p, _, kv = proposal_for(moe_layers_table(), gpu_device(), config=config)
    need = 81 * GIB + kv.bytes - (math.ceil(96 * GIB * 0.85) - 8 * GIB)  # about 7.7 GiB
    # engine order per layer: o_proj 0.5, w13 1, w2 0.5 GiB; layer 3's w2 reaches the need after 7.5 GiB
    assert 7.5 * GIB < need <= 8 * GIB and p.proposed and p.settings["cpu_offload_gib"] == 8
    sel = {a["name"]: a for a in p.alternatives}["selective expert offload"]
    assert sel["engine_args"] == ["--cpu-offload-params", "w13_weight", "w2_weight"]
    # only experts: layers 0-4 (1.5 GiB each) and layer 5's w13 cross the 8 GiB budget: 8.5 GiB, pinned as is
    # (1 GiB and 0.5 GiB are powers of two), 9.5 GiB at the peak
    assert (sel["offloaded_bytes"], sel["pinned_bytes"], sel["peak_bytes"]) == (8.5 * GIB, 8.5 * GIB, 9.5 * GIB)
    assert sel["container_ram_gib"] == 18 and sel["confirmed"] is False
    assert sel["why"].startswith("A CHOICE TO MEASURE, NOT A FASTER RESULT")
    assert "decoder layers 0-5" in sel["why"] and "faster" not in sel["why"].split("RESULT", 1)[1]
    assert any(q == "container_ram_gib (selective expert offload)" for q, _, _ in p.rows)


def test_each_alternative_shows_how_it_moves_the_link_ceiling():
    """Hand-derived: with 2 experts, top-1, a one-token step reads each offloaded o_proj (0.5 GiB) whole and half of
    each offloaded layer's experts (1.5 GiB x 1/2), over a link MEASURED at 25 GB/s."""
    from onegpu.plan.ceiling import Link

    config = {**LLAMA_CONFIG, "num_hidden_layers": 40, "num_experts": 2, "num_experts_per_tok": 1}
    link = Link(25.0, "MEASURED", "a test's figure")
    r = request_with()
    ckpt = checkpoint_facts(moe_layers_table(), config=config)
    kv = kv_cache_estimate(ckpt.config, r.context_tokens, r.kv_cache_dtype, r.prefill_chunk_tokens)
    p = propose(r, gpu_device(), None, host(), ckpt, kv, None, 50 * GIB, link=link)
    assert p.settings["cpu_offload_gib"] == 8
    rows = {q: (v, d) for q, v, d in p.rows}
    per_step = {  # bytes a one-token step reads
        "proposal": 4 * (0.5 + 1.5 / 2) * GIB,  # layers 0-3 whole
        "exact pinning": 4 * (0.5 + 1.5 / 2) * GIB,  # the same parameters
        "selective expert offload": 8.5 * GIB / 2,  # experts only: 8.5 GiB of them, half touched
        "more offload": 40 * (0.5 + 1.5 / 2) * GIB}  # every layer
    decode = {name: 25e9 / nbytes for name, nbytes in per_step.items()}
    assert rows["link ceiling"][0] == f"<= {decode['proposal']:,.2f} tok/s"
    assert "UPPER BOUNDS" in rows["link ceiling"][1] and "MEASURED 25.0 GB/s" in rows["link ceiling"][1]
    for alt in p.alternatives:
        bound = alt["ceiling"]
        assert bound["step_bytes"] == per_step[alt["name"]], alt["name"]
        assert bound["decode_tps"] == pytest.approx(decode[alt["name"]])
        assert f"x{decode[alt['name']] / decode['proposal']:.2f} the proposal's" in bound["text"]
        assert rows[f"link ceiling ({alt['name']})"][0] == f"<= {decode[alt['name']]:,.2f} tok/s"
    assert "not measured" in {a["name"]: a for a in p.alternatives}["exact pinning"]["ceiling"]["text"]
    json.dumps(proposal_document(p, r, "t", {}, {}, {}, []))  # numbers only: the plans are not in the document
    # the prefill chunk (2,048 tokens) routes to both experts: every offloaded byte once
    assert {a["name"]: a for a in p.alternatives}["more offload"]["ceiling"]["chunk_bytes"] == 80 * GIB


def test_weights_that_fit_get_no_offload_and_the_containers_own_needs():
    p, ckpt, kv = proposal_for(layers_table(10, 4), gpu_device())
    assert (p.settings["cpu_offload_gib"], p.settings["container_ram_gib"], p.alternatives) == (0, 8, [])
    assert not [v for v in verdicts_of(as_settings(p.settings), ckpt, kv).values() if v.status == "BLOCKED"]


def test_embeddings_beyond_the_card_say_no_offload_can_help_and_by_how_much():
    table = {**layers_table(4, 2), "lm_head.weight": ("BF16", [80 * GIB // 2048, 1024])}
    p, _, kv = proposal_for(table, gpu_device())
    stays, budget = 81 * GIB, math.ceil(96 * GIB * 0.85) - 8 * GIB  # embedding 1 GiB + head 80 GiB stay on the GPU
    first = p.blockers[0]
    assert not p.proposed and p.settings is None
    assert (first["check"], first["code"]) == ("offload", "INSUFFICIENT_VRAM")
    assert first["numbers"]["short_bytes"] == stays + kv.bytes - budget
    assert "embeddings/head" in first["message"] and "no CPU-offload budget can work" in first["message"]
    with pytest.raises(Blocked) as blocked:
        outcome_lines(p, "runs/x/settings-proposed.json")
    assert blocked.value.code == "INSUFFICIENT_VRAM" and "runs/x/settings-proposed.json" in blocked.value.message


def test_a_host_without_the_ram_is_named_with_the_shortfall():
    p, _, _ = proposal_for(layers_table(40, 3), gpu_device(), host(available_gib=40))
    blocked = {b["check"]: b for b in p.blockers}
    # cap 75 GiB (the pinned peak + own needs) + headroom 8 GiB (5% of 40 GiB is below the minimum) = 83 GiB
    # against 40 GiB available
    assert blocked["host_ram"]["code"] == "INSUFFICIENT_HOST_RAM"
    assert "short by 43.00 GiB" in blocked["host_ram"]["message"]
    assert any(q == "host need" and "short by 43.00 GiB" in d for q, _, d in p.rows)


def test_unknown_host_ram_of_a_replayed_profile_still_proposes_and_says_it_was_not_checked():
    p, _, _ = proposal_for(layers_table(40, 3), gpu_device(), host(available_gib=None))
    assert p.proposed and p.unknown[0].startswith("host_ram: host RAM unknown")
    assert p.settings["host_headroom_gib"] == 8  # the minimum of the rule: no host RAM total to take 5% of
    assert any(q == "host need" and "not checked" in d for q, _, d in p.rows)


def test_a_card_with_too_little_free_beside_the_target_warns_against_the_floor():
    busy = gpu_device(96, free_gib=96 * 0.85 + 1.5)  # 1.5 GiB left beside the target, under the ASSUMED 2 GiB
    p, _, _ = proposal_for(layers_table(10, 4), busy)
    assert p.proposed and p.warnings[0].startswith("the projected GPU free memory after boot 1.50 GiB is under the "
                                                   "free-memory floor 2 GiB ASSUMED")
    stated, _, _ = proposal_for(layers_table(10, 4), busy, free_floor_gib=1)
    assert stated.warnings == [] and stated.settings["free_floor_gib"] == 1


def test_a_kit_cgroup_below_the_need_blocks_the_proposal():
    p, _, _ = proposal_for(layers_table(40, 3), gpu_device(), host(cgroup_limit_gib=32))
    assert {b["code"] for b in p.blockers} == {"CGROUP_LIMIT"}


def test_an_unknown_kv_cache_makes_no_proposal_and_says_why():
    p, _, _ = proposal_for(layers_table(4, 1), gpu_device(), config={"model_type": "llama", "torch_dtype": "bfloat16"})
    assert not p.proposed and not p.blockers and "num_hidden_layers" in p.unknown[0]
    assert outcome_lines(p, "x.json")[0].startswith("no budget proposed: the KV cache for 8,192 tokens")


def test_without_a_gpu_the_blocking_fact_is_the_drivers():
    p, _, _ = proposal_for(layers_table(4, 1), reason="BLOCKED NO_NVIDIA_DRIVER: NVML Shared Library Not Found")
    assert p.blockers[0]["code"] == "NO_NVIDIA_DRIVER" and "NVML Shared Library Not Found" in p.blockers[0]["message"]


def test_a_calibrated_reserve_is_carried_into_the_proposed_settings():
    cal = Calibration("run-a", "/runs/run-a", int(5.123 * GIB), "the boot log", {}, [], [], "sha256:" + "a" * 64,
                      "0.11.0", "NVIDIA RTX PRO 6000")
    p, ckpt, kv = proposal_for(layers_table(40, 3), gpu_device(), calibration=cal)
    assert p.settings["gpu_reserve_gib"] == 5.13 and p.reserve["calibrated_from"] == "run-a"  # rounded up, not down
    budget = math.ceil(96 * GIB * 0.85) - round(5.13 * GIB)
    layers = math.ceil((121 * GIB + kv.bytes - budget) / (3 * GIB))  # whole 3 GiB layers that must leave the GPU
    assert p.settings["cpu_offload_gib"] == (layers - 1) * 3 + 1  # the smallest whole GiB that moves them all
    assert any("CALIBRATED FROM run-a" in d for _, _, d in p.rows)
    assert not [v for v in verdicts_of(as_settings(p.settings), ckpt, kv).values() if v.status == "BLOCKED"]


def test_every_number_has_its_derivation_and_the_document_is_not_settings():
    p, _, _ = proposal_for(layers_table(40, 3), gpu_device())
    quantities = [q for q, _, _ in p.rows]
    for q in ("GPU target", "non-weight reserve", "GPU budget (weights + KV)", "weights the engine loads",
              "cpu_offload_gib", "engine offload", "container_ram_gib", "container_ram_gib (exact pinning)",
              "host_headroom_gib", "host need", "host need (exact pinning)", "GPU free after boot"):
        assert q in quantities
    assert any("ASSUMED" in d for q, _, d in p.rows if q == "non-weight reserve")
    table = proposal_table(p)
    assert table[0].split() == ["quantity", "value", "derivation"] and table[-1].startswith("PROPOSED")
    doc = proposal_document(p, request_with(), "2026-01-01T00:00:00+00:00", {}, {}, {}, [])
    assert doc["schema"] == PROPOSAL_SCHEMA and doc["not_settings"] == NOT_SETTINGS
    with pytest.raises(SettingsError) as err:
        parse_settings(doc, "/tmp/settings-proposed.json", "2" * 64)
    assert "field 'schema'" in str(err.value)
    with pytest.raises(SettingsError) as err:  # the values alone still lack the deadline the operator chooses
        parse_settings(doc["settings"], "/tmp/s.json", "2" * 64)
    assert err.value.errors == ["field 'deadline_s': required"]


# ---- real sessions -------------------------------------------------------------------------------------------

def proposal_project(kit_project, image_ref, table, **request):
    shutil.copy(REPO_ROOT / "tests_hw" / "test_2_plan_insight.py", kit_project.path / "tests_hw")
    layers = len([n for n in table if ".layers." in n])
    config = {**LLAMA_CONFIG, "architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers}
    ckpt = write_checkpoint(kit_project.path / "ckpt", config, table, shards=2, metadata=SYNTHETIC_METADATA)
    shutil.copy(RESEARCH_PROFILE, kit_project.path / "profile.json")
    (kit_project.path / "req.json").write_text(json.dumps({**REQUEST, "model_path": str(ckpt), "image": image_ref,
                                                           **request}))
    return kit_project


def run_proposal(project, ram_gib=512, out="runs/p", *extra):
    result = project.runpytest("-m", "scan", "--propose", "req.json", "--hardware", "profile.json",
                               "--host-ram-gib", str(ram_gib), "--out", out, *extra)
    folder = project.path / out
    return result, json.loads((folder / "receipt.json").read_text()), folder


def outcome(receipt, name):
    return next(e for n, e in receipt["tests"].items() if n.endswith(name))


def test_a_scan_with_a_request_writes_a_private_proposal_and_shows_the_table(kit_project, engine_images):
    project = proposal_project(kit_project, engine_images[0], layers_table(40, 3))
    result, receipt, folder = run_proposal(project)
    assert outcome(receipt, "test_budgets_are_proposed_from_the_facts")["outcome"] == "passed"
    path = folder / "settings-proposed.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    doc = json.loads(path.read_text())
    total = 102641958912  # the research target's RTX PRO 6000 in the profile
    budget = math.ceil(total * 0.85) - 8 * GIB
    need = 121 * GIB + 8192 * 40 * 1024 - budget  # KV: 40 layers x 2 KV heads x (128 K + 128 V) x 2 B per token
    # whole 3 GiB layers until the need is met; any whole GiB above the layers before the last moves it too
    layers = math.ceil(need / (3 * GIB))
    assert doc["settings"]["cpu_offload_gib"] == (layers - 1) * 3 + 1
    assert doc["image"]["id"] == engine_images[1][0] and doc["hardware"]["source"] == "replayed"
    assert receipt["proposal"]["settings"] == doc["settings"] and receipt["proposal"]["path"] == str(path)
    result.stdout.fnmatch_lines(["onegpu proposed settings (a proposal: nothing runs from it*",
                                 "*cpu_offload_gib*GiB*must leave the GPU*", "*PROPOSED (copy into your settings)*"])
    # The settings tests have no settings: the proposal is not settings
    assert outcome(receipt, "test_checkpoint_holds_what_its_config_promises")["code"] == "NO_SETTINGS"


def test_a_proposal_that_cannot_work_is_blocked_with_the_fact_and_still_written(kit_project, engine_images):
    project = proposal_project(kit_project, engine_images[0], layers_table(40, 3))
    _, receipt, folder = run_proposal(project, ram_gib=32)
    entry = outcome(receipt, "test_budgets_are_proposed_from_the_facts")
    assert entry["outcome"] == "blocked" and entry["code"] == "INSUFFICIENT_HOST_RAM"
    doc = json.loads((folder / "settings-proposed.json").read_text())
    assert doc["proposed"] is False and doc["settings"] is None and "short by" in doc["blockers"][0]["message"]


def test_the_proposal_file_given_as_settings_is_refused_for_approval(kit_project, engine_images):
    project = proposal_project(kit_project, engine_images[0], layers_table(10, 1))
    _, _, folder = run_proposal(project)
    shutil.copy(folder / "settings-proposed.json", project.path / "proposed.json")
    with pytest.raises(SettingsError) as err:
        load_settings(project.path / "proposed.json")
    assert "must be 'onegpu/settings@1'" in str(err.value)
    project.makepyfile(**{"tests_hw/test_9_approve": (
        "import pytest\npytestmark = [pytest.mark.approve_load, pytest.mark.phase('load')]\n"
        "def test_approval_needs_settings(settings):\n    pass\n")})
    project.runpytest("-m", "approve_load", "--settings", "proposed.json", "--out", "runs/a")
    receipt = json.loads((project.path / "runs/a/receipt.json").read_text())
    assert outcome(receipt, "test_approval_needs_settings")["code"] == "SETTINGS_INVALID"
    # Settings that lack only their budgets stay invalid for an approval too: budgets are always explicit
    values = json.loads((folder / "settings-proposed.json").read_text())["settings"]
    no_budgets = {k: v for k, v in values.items() if not k.endswith("_gib")}
    (project.path / "s.json").write_text(json.dumps({**no_budgets, "deadline_s": 600}))
    project.runpytest("-m", "approve_load", "--settings", "s.json", "--out", "runs/b")
    entry = outcome(json.loads((project.path / "runs/b/receipt.json").read_text()), "test_approval_needs_settings")
    assert entry["code"] == "SETTINGS_INVALID" and "field 'cpu_offload_gib': required" in entry["message"]


def test_a_bad_request_is_a_usage_error_naming_the_field(kit_project, engine_images):
    project = proposal_project(kit_project, engine_images[0], layers_table(2, 1), cpu_offload_gib=4)
    result = project.runpytest("-m", "scan", "--propose", "req.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--propose *req.json: field 'cpu_offload_gib': value 4: a proposal request "
                                 "carries no budgets*"])


def test_without_a_request_the_proposal_test_is_deselected(kit_project, engine_images):
    project = proposal_project(kit_project, engine_images[0], layers_table(2, 1))
    result = project.runpytest("-m", "scan", "--hardware", "profile.json", "--host-ram-gib", "64", "--out", "runs/n")
    receipt = json.loads((project.path / "runs/n/receipt.json").read_text())
    assert [t["outcome"] for n, t in receipt["tests"].items()
            if n.endswith("test_budgets_are_proposed_from_the_facts")] == ["deselected"]
    assert not (project.path / "runs/n/settings-proposed.json").exists()
    result.stdout.fnmatch_lines(["*deselected*"])
