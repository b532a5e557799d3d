"""The launch spec (pure): every element of KIT.md 6, the docker run line, Hugging Face cache mounts. One
test checks on the real Docker engine that the printed `docker run` line creates the same container as the
SDK keyword arguments."""
from __future__ import annotations

import json
import shlex
import subprocess

from msgspec import structs

from onegpu.checkpoint.files import hf_cache_layout
from onegpu.engine import launch
from onegpu.engine.launch import GPU_UTILIZATION, build_launch_spec, container_name
from onegpu.engine.launch_check import missing_elements
from onegpu.plan.settings import load_settings
from tests_offline.engine_helpers import make_spec
from tests_offline.launch_helpers import IMAGE, OWNER, UUID, docker_cli, settings, spec_for
from tests_offline.paths import REPO_ROOT


def test_command_is_vllm_serve_with_every_flag_of_the_plan():
    spec = spec_for()
    assert spec.entrypoint == ["vllm"]
    assert spec.command == [
        "serve", "/model", "--served-model-name", "XiaomiMiMo/MiMo-V2.5-Pro", "--uds", "/run/onegpu/engine.sock",
        "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1", "--max-num-seqs", "1",
        "--gpu-memory-utilization", "0.85", "--max-model-len", "131072", "--max-num-batched-tokens", "8192",
        "--enable-chunked-prefill", "--enforce-eager", "--cpu-offload-gb", "600", "--generation-config", "vllm"]
    assert spec.flags_used() == [a for a in spec.command if a.startswith("--")]
    assert missing_elements(spec, settings(), UUID) == []


def test_generation_config_vllm_is_in_the_plan_with_its_reason():
    spec = spec_for()
    assert "--generation-config" in spec.flags_used()  # what the runtime probe checks the image's vLLM for
    rows = spec.plan_lines()
    (note,) = [r for r in rows if r.startswith("note       --generation-config vllm:")]
    assert "generation_config.json" in note and "max_new_tokens" in note and "byte for byte" in note
    assert note.removeprefix("note       ") in spec.to_json()["notes"]
    wrong = structs.replace(spec, command=[*spec.command[:-1], "auto"])
    assert missing_elements(wrong, settings(), UUID) == ["--generation-config must be 'vllm', is 'auto'"]


def test_a_checkpoint_with_towers_is_launched_language_model_only():
    plain = spec_for()
    assert "--language-model-only" not in plain.command and plain.towers == []
    spec = spec_for(towers=["vision_config", "audio_config"])
    assert spec.command[-1] == "--language-model-only" and spec.towers == ["vision_config", "audio_config"]
    assert "--language-model-only" in spec.flags_used()
    assert any(r.startswith("note       --language-model-only: config.json declares vision_config, audio_config")
               for r in spec.plan_lines())
    assert missing_elements(spec, settings(), UUID) == []
    without = structs.replace(spec, command=spec.command[:-1])
    assert missing_elements(without, settings(), UUID) == [
        "--language-model-only must appear exactly when config.json declares towers (vision_config, audio_config)"]
    assert missing_elements(structs.replace(plain, command=[*plain.command, "--language-model-only"]),
                            settings(), UUID) == [
        "--language-model-only must appear exactly when config.json declares towers (none)"]


def test_the_engine_has_a_user_name_for_a_uid_without_a_passwd_entry():
    spec = spec_for()
    env = spec.create_kwargs()["environment"]
    assert (env["USER"], env["LOGNAME"], env["HOME"]) == ("engine", "engine", "/home/engine")
    rows = spec.plan_lines()
    assert "user       1000:1000 (USER and LOGNAME engine: the uid may have no passwd entry; tmpfs HOME " \
           "/home/engine)" in rows
    (env_row,) = [r for r in rows if r.startswith("env        ")]
    assert "HOME=/home/engine USER=engine LOGNAME=engine" in env_row and "HF_HUB_OFFLINE=1" in env_row
    argv = spec.docker_run_argv()
    assert {"USER=engine", "LOGNAME=engine"} <= {argv[i + 1] for i, a in enumerate(argv) if a == "--env"}
    assert spec.to_json()["environment"]["LOGNAME"] == "engine"
    unnamed = structs.replace(spec, environment={k: v for k, v in env.items() if k != "LOGNAME"})
    assert missing_elements(unnamed, settings(), UUID) == ["environment LOGNAME must be 'engine'"]


def test_offload_pinning_exact_turns_off_torchs_pinned_allocator_in_the_engine():
    rounded = spec_for()
    assert "VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY" not in rounded.environment
    assert any(r.startswith("note       offload_pinning rounded (vLLM's default)") for r in rounded.plan_lines())
    s = settings(offload_pinning="exact")
    exact = spec_for(s)
    assert exact.create_kwargs()["environment"]["VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY"] == "1"
    assert "--env VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1" in exact.docker_run_line()
    assert any(r.startswith("note       offload_pinning exact: VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1")
               for r in exact.plan_lines())
    assert missing_elements(exact, s, UUID) == []
    assert missing_elements(rounded, s, UUID) == [
        "offload_pinning exact: environment must hold VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1"]
    assert missing_elements(exact, settings(), UUID) == [
        "offload_pinning rounded: environment must hold no VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY"]


def test_kv_dtype_and_remote_code_flags_only_when_settings_name_them():
    plain = spec_for()
    assert "--kv-cache-dtype" not in plain.command and "--trust-remote-code" not in plain.command
    assert any("model's own dtype" in n for n in plain.notes)
    s = settings(kv_cache_dtype="fp8", trust_remote_code=True, cpu_offload_gib=12.5)
    spec = spec_for(s)
    assert spec.command[spec.command.index("--kv-cache-dtype") + 1] == "fp8"
    assert spec.command[-1] == "--trust-remote-code"
    assert spec.command[spec.command.index("--cpu-offload-gb") + 1] == "12.5"
    assert missing_elements(spec, s, UUID) == []


def test_container_isolation_and_limits():
    s = settings(container_cpus=6, shm_gib=8, pids_limit=2048)
    spec = spec_for(s)
    kw = spec.create_kwargs()
    assert kw["image"] == IMAGE and kw["network_mode"] == "none"
    assert kw["mem_limit"] == kw["memswap_limit"] == 900 * 2**30
    assert kw["pids_limit"] == 2048 and kw["shm_size"] == 8 * 2**30 and kw["nano_cpus"] == 6_000_000_000
    assert kw["security_opt"] == ["no-new-privileges"] and kw["cap_drop"] == ["ALL"]
    assert kw["user"] == "1000:1000" and kw["entrypoint"] == ["vllm"]
    assert set(kw["tmpfs"]) == {"/home/engine", "/tmp"} and kw["environment"]["HOME"] == "/home/engine"
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK"):
        assert kw["environment"][key] == "1"
    (request,) = kw["device_requests"]
    assert request == {"driver": "nvidia", "device_ids": [UUID], "capabilities": [["gpu"]]}
    mounts = {m["Target"]: m for m in kw["mounts"]}
    assert mounts["/model"]["Source"] == "/srv/models/mimo" and mounts["/model"]["ReadOnly"] is True
    assert mounts["/run/onegpu"]["Source"] == "/runs/r1/sock" and mounts["/run/onegpu"]["ReadOnly"] is False
    assert spec.socket_path == "/runs/r1/sock/engine.sock"


def test_the_docker_sdk_makes_the_host_config_the_sdk_types_made():
    """create_kwargs is plain data; the SDK turns it into the same GPU request and mounts its own types gave."""
    from docker.types import DeviceRequest, HostConfig, Mount

    kw = spec_for(settings()).create_kwargs()
    host = HostConfig(version="1.41", device_requests=kw["device_requests"], mounts=kw["mounts"])
    assert host["DeviceRequests"] == [DeviceRequest(driver="nvidia", device_ids=[UUID], capabilities=[["gpu"]])]
    assert host["Mounts"] == [Mount(target="/model", source="/srv/models/mimo", type="bind", read_only=True),
                              Mount(target="/run/onegpu", source="/runs/r1/sock", type="bind", read_only=False)]


def test_labels_identify_the_owner_precisely():
    labels = spec_for().labels
    assert labels == {"onegpu.kit": "1", "onegpu.run_id": "20261202T111658Z-approve", "onegpu.owner_pid": "4242",
                      "onegpu.owner_start": "123456", "onegpu.owner_host": "b00t-1d",
                      "onegpu.owner_pidns": "pid:[4026531836]", "onegpu.role": "engine"}


def test_no_cpu_quota_and_no_gpu_request_when_not_given():
    spec = build_launch_spec(settings(), None, IMAGE, "r", "/s", OWNER)
    kw = spec.create_kwargs()
    assert "nano_cpus" not in kw and kw["device_requests"] == []
    assert "--gpus" not in spec.docker_run_argv() and "--cpus" not in spec.docker_run_argv()
    assert any("GPU must be handed over" in p for p in missing_elements(spec, settings(), UUID))


def test_hugging_face_cache_snapshot_mounts_the_repo_folder():
    snap = "/home/op/.cache/huggingface/hub/models--XiaomiMiMo--MiMo-V2.5-Pro/snapshots/" + "c" * 40
    assert hf_cache_layout(snap) == ("/home/op/.cache/huggingface/hub/models--XiaomiMiMo--MiMo-V2.5-Pro",
                                     "snapshots/" + "c" * 40)
    assert hf_cache_layout("/srv/models/mimo") is None
    assert hf_cache_layout("/srv/snapshots/x") is None  # a folder named snapshots outside a cache repo
    s = settings(model_path=snap)
    spec = spec_for(s)
    (model_mount,) = [m for m in spec.mounts if m.target == "/model-repo"]
    assert model_mount.read_only and model_mount.source.endswith("models--XiaomiMiMo--MiMo-V2.5-Pro")
    assert spec.command[1] == "/model-repo/snapshots/" + "c" * 40
    assert missing_elements(spec, s, UUID) == []


def test_docker_run_line_is_shell_quoted_and_complete():
    spec = spec_for(settings(container_cpus=2.5))
    line = spec.docker_run_line()
    argv = shlex.split(line)
    assert argv == spec.docker_run_argv()
    assert argv[:3] == ["docker", "run", "--pull=never"]
    assert "'onegpu.owner_pidns=pid:[4026531836]'" in line  # brackets quoted for the shell
    for pair in (["--network", "none"], ["--gpus", f"device={UUID}"], ["--memory", f"{900 * 2**30}b"],
                 ["--memory-swap", f"{900 * 2**30}b"], ["--cpus", "2.5"], ["--cap-drop", "ALL"],
                 ["--security-opt", "no-new-privileges"], ["--user", "1000:1000"], ["--entrypoint", "vllm"]):
        i = argv.index(pair[0])
        assert argv[i:i + 2] == pair
    assert argv[argv.index(IMAGE) + 1:] == spec.command
    assert "--mount" in argv and "type=bind,source=/srv/models/mimo,target=/model,readonly" in argv
    assert spec.to_json()["docker_run_line"] == line and json.dumps(spec.to_json())


def test_missing_elements_names_what_is_wrong():
    s = settings()
    bad = structs.replace(spec_for(), network_mode="bridge", memswap_limit_bytes=0,
                              command=[a for a in spec_for().command if a != "--enforce-eager"])
    problems = missing_elements(bad, s, UUID)
    assert any("network must be none" in p for p in problems)
    assert any("no swap" in p for p in problems)
    assert any("--enforce-eager missing" in p for p in problems)


def test_names_and_numbers():
    assert container_name("2026-12-02T11:16:58Z approve", 7) == "onegpu-2026-12-02T11-16-58Z-approve-7"
    assert launch.flag_number(600.0) == "600" and launch.flag_number(0.85) == "0.85" and launch.flag_number(65535.25) == "65535.25"


def test_utilization_is_the_capacity_target():
    from onegpu.plan import capacity

    assert GPU_UTILIZATION is capacity.GPU_UTILIZATION


def test_the_earlier_kits_settings_filled_in_give_a_complete_plan(tmp_path):
    data = {"schema": "axm/one-gpu-settings@1", "model_id": "XiaomiMiMo/MiMo-V2.5-Pro", "model_revision": "b" * 40,
            "model_path": "/srv/models/mimo", "image": "vllm/vllm-openai:v0.11.0", "gpu_index": 0,
            "context": 65536, "prefill_chunk": 4096, "offload_gib": 700, "ram_limit_gib": 950, "reserve_gib": 40,
            "cpus": 32, "timeout_s": 14400, "max_requests": 100}
    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    s = load_settings(path)
    spec = spec_for(s)
    assert missing_elements(spec, s, UUID) == []
    assert spec.nano_cpus == 32_000_000_000 and spec.mem_limit_bytes == 950 * 2**30


HOST_CONFIG_KEYS = ("NetworkMode", "Memory", "MemorySwap", "PidsLimit", "ShmSize", "SecurityOpt", "CapDrop",
                    "Tmpfs", "Init", "Mounts", "NanoCpus")
CONFIG_KEYS = ("User", "Entrypoint", "Cmd", "Image", "Labels")


def test_printed_docker_run_line_creates_the_same_container_as_the_sdk(docker_client, tmp_path, stub_image):
    cli = docker_cli()
    spec = make_spec(tmp_path, stub_image, container_cpus=1.5)
    argv = spec.docker_run_argv()
    assert argv[:4] == ["docker", "run", "--pull=never", "--detach"]
    # `docker create` takes the same flags as `docker run` and starts nothing.
    by_cli_name = spec.name + "-cli"
    cli_argv = [cli, "create", *argv[2:]]
    cli_argv[cli_argv.index(spec.name)] = by_cli_name
    cli_argv.remove("--detach")
    by_sdk = docker_client.containers.create(**spec.create_kwargs())
    try:
        out = subprocess.run(cli_argv, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        by_cli = docker_client.containers.get(by_cli_name)
        try:
            a, b = by_sdk.attrs, by_cli.attrs
            for key in HOST_CONFIG_KEYS:
                assert a["HostConfig"].get(key) == b["HostConfig"].get(key), key
            for key in CONFIG_KEYS:
                assert a["Config"].get(key) == b["Config"].get(key), key
            assert sorted(a["Config"]["Env"]) == sorted(b["Config"]["Env"])
        finally:
            by_cli.remove(force=True)
    finally:
        by_sdk.remove(force=True)


def test_a_model_path_linked_to_a_cache_snapshot_mounts_the_real_repo_folder(kit_project, tmp_path):
    """The snapshot's files link to ../../blobs: mounting the link itself would leave them dangling."""
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / ("c" * 40)
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "blobs" / ("d" * 64)).write_text("{}")
    (snapshot / "config.json").symlink_to(f"../../blobs/{'d' * 64}")
    alias = tmp_path / "my-model"
    alias.symlink_to(snapshot)
    (kit_project.path / "s.json").write_text(json.dumps({
        "schema": "onegpu/settings@1", "model_id": "org/tiny", "model_revision": "c" * 40, "model_path": str(alias),
        "image": "onegpu-absent:v0", "gpu": 0, "context_tokens": 4096, "prefill_chunk_tokens": 512,
        "cpu_offload_gib": 0, "container_ram_gib": 8, "host_headroom_gib": 1, "deadline_s": 60}))
    kit_project.makepyfile(**{"tests_hw/test_2_launch": (
        "import pytest\npytestmark = [pytest.mark.scan, pytest.mark.phase('plan')]\n"
        "def test_plan(launch_spec):\n    pass\n")})
    profile = REPO_ROOT / "profiles" / "h200-141gb-host.json"
    kit_project.runpytest("-m", "scan", "--settings=s.json", f"--hardware={profile}").assert_outcomes(passed=1)
    (folder,) = (kit_project.path / "runs").iterdir()
    launch = json.loads((folder / "receipt.json").read_text())["launch"]
    assert launch["mounts"][0]["source"] == str(repo) and launch["mounts"][0]["read_only"] is True
    assert launch["command"][1] == f"/model-repo/snapshots/{'c' * 40}"


def test_the_plan_reads_towers_from_the_checkpoints_config(kit_project, tmp_path):
    """The launch_spec fixture reads config.json itself: a vision and an audio tower give --language-model-only,
    named in the receipt's launch; a config the kit cannot read gives no plan at all."""
    ckpt = tmp_path / "omni"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"architectures": ["MiMoV2OmniForCausalLM"],
                                                  "vision_config": {"depth": 28}, "audio_config": {}}))
    (kit_project.path / "s.json").write_text(json.dumps({
        "schema": "onegpu/settings@1", "model_id": "org/omni", "model_revision": "c" * 40, "model_path": str(ckpt),
        "image": "onegpu-absent:v0", "gpu": 0, "context_tokens": 4096, "prefill_chunk_tokens": 512,
        "cpu_offload_gib": 0, "container_ram_gib": 8, "host_headroom_gib": 1, "deadline_s": 60,
        "offload_pinning": "exact"}))
    kit_project.makepyfile(**{"tests_hw/test_2_launch": (
        "import pytest\npytestmark = [pytest.mark.scan, pytest.mark.phase('plan')]\n"
        "def test_plan(launch_spec):\n    pass\n")})
    profile = REPO_ROOT / "profiles" / "h200-141gb-host.json"
    args = ("-m", "scan", "--settings=s.json", f"--hardware={profile}")
    kit_project.runpytest(*args).assert_outcomes(passed=1)
    (folder,) = (kit_project.path / "runs").iterdir()
    launch = json.loads((folder / "receipt.json").read_text())["launch"]
    assert launch["command"][-1] == "--language-model-only" and "--language-model-only" in launch["flags_used"]
    assert launch["towers"] == ["vision_config", "audio_config"]
    assert launch["environment"]["VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY"] == "1"
    assert launch["environment"]["USER"] == launch["environment"]["LOGNAME"] == "engine"
    (ckpt / "config.json").write_text('{"vision_config": {}, "vision_config": {}}')
    refused = kit_project.runpytest(*args)
    refused.assert_outcomes(xfailed=1)
    assert "CHECKPOINT_CORRUPT" in refused.stdout.str()
