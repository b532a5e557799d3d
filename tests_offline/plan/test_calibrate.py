"""Calibration (--calibrate-from): the measured non-weight GPU cost of an earlier run replaces the assumed reserve,
and a run of another checkpoint, image, context or prefill chunk is refused.

The earlier runs are recorded run folders (tests_offline/data/runs/, made by record_runs.py from real approvals
against the stub engine). WHAT IS MOCKED: NVML only, where a test needs GPU readings at READY (this machine has
no NVIDIA driver); the readings then pass through the kit's real Sampler.
"""
from __future__ import annotations

import json
import math
import shutil

import pytest

from devkit.e2e.harness import LLAMA, llama_tensors
from devkit.synth import SYNTHETIC_METADATA, write_checkpoint
from onegpu.options import calibration_run as load_run
from onegpu.plan import calibrate
from onegpu.plan.settings import parse_settings
from onegpu.record.receipt import record_of
from onegpu.record.run_basis import run_basis
from tests_offline.nvml_double import nvml_sample
from tests_offline.paths import DATA, PROFILES, REPO_ROOT

GIB, MIB = 2**30, 2**20
RUNS = DATA / "runs"
READY = RUNS / "stub-ready-8k"
H200_PROFILE = PROFILES / "h200-141gb-host.json"


def recorded_receipt(name="stub-ready-8k") -> dict:
    return json.loads((RUNS / name / "receipt.json").read_text())


def recorded_settings(name="stub-ready-8k"):
    return parse_settings(json.loads((RUNS / name / "settings.json").read_text()), "s.json", "0" * 64)


def basis(receipt=None, samples=()) -> calibrate.RunBasis:
    manifest = json.loads((READY / "manifest.json").read_text())
    return run_basis("stub-ready-8k", str(READY), record_of(receipt or recorded_receipt()), recorded_settings(),
                     manifest, list(samples))


def current(**changes) -> calibrate.CurrentBasis:
    run = load_run(READY)
    values = dict(checkpoint_root="/ckpt", checkpoint_files=dict(run.checkpoint_files),
                  config_sha256=run.config_sha256, image_reference="img:1", image_id=run.image_id, context_tokens=8192,
                  prefill_chunk_tokens=2048, model_id="stub-org/e2e-model", model_revision="e" * 40)
    return calibrate.CurrentBasis(**{**values, **changes})


# ---- reading a run and measuring --------------------------------------------------------------------------------

def test_a_recorded_run_is_read_into_its_identity_and_measurements():
    receipt = recorded_receipt()
    run = load_run(READY)
    device = receipt["hardware"]["gpu"]["devices"][0]
    assert (run.run_id, run.image_id, run.context_tokens, run.prefill_chunk_tokens) == (
        "stub-ready-8k", receipt["launch"]["image_id"], 8192, 2048)
    assert run.load_bytes == 4 * GIB and run.kv_pool_bytes == round(3.12 * GIB) and run.kv_pool_tokens == 25600
    assert (run.gpu_total_bytes, run.gpu_name, run.gpu_utilization) == (device["total_bytes"], "NVIDIA H200", 0.85)
    assert run.config_sha256 and "config.json" in run.checkpoint_files and run.vllm_version == "0.11.0"
    assert run.ready_gpu_used_bytes is None and run.ready_note.startswith("no NVML reading at READY")


def test_without_nvml_the_reserve_is_vllms_own_accounting_from_the_boot_log():
    run = load_run(READY)
    cal = calibrate.measure(run)
    raw = math.ceil(run.gpu_total_bytes * 0.85) - 4 * GIB - round(3.12 * GIB)
    assert cal.reserve_bytes == math.ceil(raw / MIB) * MIB and cal.estimates["nvml_bytes"] is None
    assert "boot log" in cal.how and "NVML at READY: not measured" in cal.rows[1]
    assert any("GPU SIMULATED" in w for w in cal.warnings)  # the run's own banners travel with its numbers


def test_an_nvml_reading_at_ready_is_used_when_it_measures_more(tmp_path):
    receipt = recorded_receipt()
    total = receipt["hardware"]["gpu"]["devices"][0]["total_bytes"]
    before = receipt["hardware"]["gpu"]["devices"][0]["used_bytes"]
    used = math.ceil(total * 0.85) + 3 * GIB  # the card holds 3 GiB beyond what vLLM accounted for
    receipt["landing"]["at_ready"] = nvml_sample(tmp_path, total, used)
    cal = calibrate.measure(basis(receipt))
    from_nvml = used - before - round(3.12 * GIB) - 4 * GIB
    assert cal.estimates["nvml_bytes"] == from_nvml and from_nvml > cal.estimates["boot_log_bytes"]
    assert cal.reserve_bytes == math.ceil(from_nvml / MIB) * MIB and "larger" in cal.how


def test_an_older_run_without_a_landing_record_uses_its_last_sample_up_to_ready(tmp_path):
    receipt = recorded_receipt()
    del receipt["landing"]
    total = receipt["hardware"]["gpu"]["devices"][0]["total_bytes"]
    sample = nvml_sample(tmp_path, total, 100 * GIB)
    import datetime as dt

    sample["t"] = dt.datetime.fromisoformat(receipt["engine"]["ready_at"]).timestamp() - 1
    run = basis(receipt, [sample, {**sample, "t": sample["t"] + 3600, "gpu_used_bytes": 1}])
    assert run.ready_gpu_used_bytes == 100 * GIB and "samples.jsonl" in run.ready_note


def test_a_run_that_never_reached_ready_measured_nothing():
    with pytest.raises(calibrate.CalibrationError) as err:
        load_run(RUNS / "stub-load-oom")
    assert str(err.value) == ("run stub-load-oom: the engine never reached READY: nothing was measured to calibrate "
                              "from")


def test_a_run_of_the_multi_gpu_protocol_calibrates_nothing():
    """A multi-GPU run's boot log has a line per worker; its reserve is not one GPU's, and never pooled with it."""
    data = json.loads((RUNS / "stub-ready-8k" / "settings.json").read_text())
    multi = parse_settings({**data, "gpu": 0, "multi_gpu": {"gpus": [0, 1], "tensor_parallel_size": 2,
                                                           "pipeline_parallel_size": 1}}, "s.json", "0" * 64)
    manifest = json.loads((READY / "manifest.json").read_text())
    with pytest.raises(calibrate.CalibrationError) as err:
        run_basis("tp2", str(READY), record_of(recorded_receipt()), multi, manifest, [])
    assert str(err.value).startswith("run tp2 ran the 2-GPU protocol (TP 2 x PP 1): a calibration measures the "
                                     "one-GPU protocol's non-weight reserve")


def test_a_folder_that_is_not_a_run_or_lacks_its_manifest_is_named(tmp_path):
    with pytest.raises(calibrate.CalibrationError, match=r"not a run folder \(no receipt.json in it\)"):
        load_run(tmp_path)  # worded as compare words it: one reader of run folders
    shutil.copytree(READY, tmp_path / "copy")
    (tmp_path / "copy" / "manifest.json").unlink()
    with pytest.raises(calibrate.CalibrationError, match="no manifest.json: nothing ties the run to a checkpoint"):
        load_run(tmp_path / "copy")


def test_numbers_that_contradict_each_other_calibrate_nothing():
    receipt = recorded_receipt()
    receipt["boot"]["facts"]["load_gib"] = 400.0
    with pytest.raises(calibrate.CalibrationError, match="negative non-weight cost"):
        calibrate.measure(basis(receipt))


# ---- identity -------------------------------------------------------------------------------------------------

def test_the_same_checkpoint_image_context_and_chunk_pass():
    assert calibrate.identity_problems(load_run(READY), current()) == []


@pytest.mark.parametrize("changes, named", [
    (lambda c: {"context_tokens": 16384}, "the context differs: 8,192 tokens in the run, 16,384 now"),
    (lambda c: {"prefill_chunk_tokens": 4096}, "the prefill chunk differs: 2,048 tokens in the run, 4,096 now"),
    (lambda c: {"image_id": "sha256:" + "9" * 64}, "the image differs: the run ran sha256:"),
    (lambda c: {"config_sha256": "f" * 64}, "config.json differs: SHA-256"),
    (lambda c: {"model_revision": "f" * 40}, f"the model revision differs: {'e' * 40} in the run, {'f' * 40} now"),
    (lambda c: {"model_id": "other-org/other"}, "the model ID differs: stub-org/e2e-model in the run, other-org/other"),
    (lambda c: {"checkpoint_files": {**c.checkpoint_files, "extra.safetensors": 8}},
     "the checkpoint file list differs: 1 only now (extra.safetensors)"),
    (lambda c: {"checkpoint_files": {**c.checkpoint_files, "config.json": 1}},
     "1 checkpoint file(s) differ in size: config.json (run"),
])
def test_every_difference_is_named_and_refused(changes, named):
    now = current(**changes(current()))
    problems = calibrate.identity_problems(load_run(READY), now)
    assert len(problems) == 1 and problems[0].startswith(named), problems
    with pytest.raises(calibrate.CalibrationError, match="is not a run of the checkpoint, image, context and "
                                                         "prefill chunk the settings name"):
        calibrate.require_same_basis(load_run(READY), now)


def test_a_different_gpu_model_or_kv_dtype_is_a_warning_not_a_refusal():
    cal = calibrate.measure(load_run(READY), current(kv_cache_dtype="fp8"))
    assert any("the KV dtype differs" in w for w in cal.warnings)
    assert "measured a NVIDIA H200" in calibrate.gpu_warning(cal, "NVIDIA RTX PRO 6000")
    assert calibrate.gpu_warning(cal, "NVIDIA H200") is None


# ---- real sessions ---------------------------------------------------------------------------------------------

@pytest.fixture
def project(kit_project, engine_images):
    """A kit project with the plan tests, the recorded run's checkpoint rebuilt byte for byte, and a copy of the
    recorded run that names this test's image (the recording ran the stub image of its day)."""
    for name in ("test_2_plan.py", "test_2_plan_insight.py"):
        shutil.copy(REPO_ROOT / "tests_hw" / name, kit_project.path / "tests_hw")
    ckpt = write_checkpoint(kit_project.path / "ckpt", LLAMA, llama_tensors(), shards=2, metadata=SYNTHETIC_METADATA)
    shutil.copy(H200_PROFILE, kit_project.path / "profile.json")
    for name in ("stub-ready-8k", "stub-load-oom"):
        shutil.copytree(RUNS / name, kit_project.path / "earlier" / name)
        receipt = json.loads((kit_project.path / "earlier" / name / "receipt.json").read_text())
        receipt["launch"]["image_id"] = engine_images[1][0]
        (kit_project.path / "earlier" / name / "receipt.json").write_text(json.dumps(receipt))
    settings = json.loads((READY / "settings.json").read_text())
    settings.update(model_path=str(ckpt), image=engine_images[0])
    (kit_project.path / "s.json").write_text(json.dumps(settings))
    kit_project.ckpt, kit_project.settings, kit_project.images = ckpt, settings, engine_images
    return kit_project


def scan(project, run="earlier/stub-ready-8k", *extra, out="runs/cal"):
    result = project.runpytest("-m", "scan", "--settings", "s.json", "--hardware", "profile.json",
                               "--calibrate-from", run, "--out", out, *extra)
    folder = project.path / out
    receipt = json.loads((folder / "receipt.json").read_text()) if (folder / "receipt.json").exists() else None
    return result, receipt


def test_the_plan_says_calibrated_from_the_run_and_uses_its_reserve(project):
    result, receipt = scan(project)
    cal = calibrate.measure(load_run(READY))
    budget = {v["check"]: v for v in receipt["capacity"]}["gpu_budget"]
    assert "CALIBRATED FROM stub-ready-8k" in budget["message"] and budget["status"] == "OK"
    total = json.loads(H200_PROFILE.read_text())["gpu"]["devices"][0]["total_bytes"]
    assert budget["numbers"]["reserve_bytes"] == cal.reserve_bytes
    assert budget["numbers"]["budget_bytes"] == math.ceil(total * 0.85) - cal.reserve_bytes
    assert budget["numbers"]["reserve_calibrated_from"] == "stub-ready-8k" and not budget["numbers"]["reserve_assumed"]
    assert receipt["calibration"]["run_id"] == "stub-ready-8k" and receipt["calibration"]["rows"] == cal.rows
    assert any("GPU SIMULATED" in w for w in receipt["warnings"])
    assert receipt["consistency"]["vllm_version"] == "0.11.0"  # the run's probe read the same image ID
    result.stdout.fnmatch_lines(["*non-weight GPU reserve * CALIBRATED FROM stub-ready-8k (replaces 8.00 GiB ASSUMED)*",
                                 "*GPU budget*CALIBRATED FROM stub-ready-8k*"])


def test_without_calibration_the_reserve_is_shown_as_assumed(project):
    result = project.runpytest("-m", "scan", "--settings", "s.json", "--hardware", "profile.json", "--out", "runs/a")
    receipt = json.loads((project.path / "runs/a/receipt.json").read_text())
    assert "calibration" not in receipt
    result.stdout.fnmatch_lines(["*non-weight GPU reserve 8.00 GiB ASSUMED: not calibrated (give --calibrate-from*"])


def refused(project, run="earlier/stub-ready-8k", settings_changes=None):
    if settings_changes:
        (project.path / "s.json").write_text(json.dumps({**project.settings, **settings_changes}))
    result, receipt = scan(project, run)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and receipt is None  # nothing ran, no run folder
    return result.stderr.str()


def test_a_run_of_another_context_is_refused_before_anything_runs(project):
    assert "the context differs: 8,192 tokens in the run, 16,384 now" in refused(project, settings_changes={
        "context_tokens": 16384})


def test_a_run_of_another_image_is_refused(project):
    text = refused(project, settings_changes={"image": project.images[0].replace(":v0", ":v1")})
    assert f"the image differs: the run ran {project.images[1][0]}" in text and project.images[1][1] in text


def test_a_run_of_another_checkpoint_is_refused(project):
    config = json.loads((project.ckpt / "config.json").read_text())
    (project.ckpt / "config.json").write_text(json.dumps({**config, "rope_theta": 1e6}, indent=2))
    text = refused(project)
    assert "config.json differs: SHA-256" in text and "checkpoint file(s) differ in size: config.json" in text


def test_a_run_that_never_reached_ready_is_refused(project):
    assert "run stub-load-oom: the engine never reached READY" in refused(project, "earlier/stub-load-oom")


def test_calibration_needs_a_plan_to_calibrate(project):
    result = project.runpytest("-m", "scan", "--calibrate-from", "earlier/stub-ready-8k")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "give --settings (or --propose) too" in result.stderr.str()


def test_a_proposal_uses_the_calibrated_reserve(project):
    request = {"schema": "onegpu/proposal-request@1", **{k: project.settings[k] for k in (
        "model_id", "model_revision", "model_path", "image", "gpu", "context_tokens", "prefill_chunk_tokens")}}
    (project.path / "req.json").write_text(json.dumps(request))
    project.path.joinpath("s.json").unlink()
    result = project.runpytest("-m", "scan", "--propose", "req.json", "--hardware", "profile.json",
                               "--calibrate-from", "earlier/stub-ready-8k", "--out", "runs/p")
    doc = json.loads((project.path / "runs/p/settings-proposed.json").read_text())
    cal = calibrate.measure(load_run(READY))
    assert doc["reserve"]["calibrated_from"] == "stub-ready-8k"
    assert doc["settings"]["gpu_reserve_gib"] == math.ceil(cal.reserve_bytes / GIB * 100) / 100
    result.stdout.fnmatch_lines(["*non-weight reserve*CALIBRATED FROM stub-ready-8k*"])
