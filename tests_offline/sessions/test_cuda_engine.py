"""vLLM's CUDA build in the kit's tests: PyPI's vllm 0.34.0 with its CUDA torch, in a locally built image
(devkit/cuda_engine, built on first use). Without a GPU it cannot serve, but the kit probes it as it probes an
operator's image: the probe reads 0.34.0, judges every launch flag with 0.34's own `vllm serve` parser (built with
VLLM_TARGET_DEVICE=cpu, vLLM's own setting, since without a device the CUDA build cannot infer one), and ends in
the outcome a machine without a CUDA device gets, worded from what the image said.
"""
from __future__ import annotations

import json

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.engine.probe import run_probe
from onegpu.engine.probe_script import PARSE
from onegpu.plan.vllm_versions import DECLARED, accounting_for, assumed_newest, probed_against_plan
from tests_offline.engine_helpers import make_spec, settings_for
from tests_offline.image_runs import run_in_image

TOWERS = {"architectures": ["MiMoV2OmniForCausalLM"], "vision_config": {"depth": 28}, "audio_config": {}}


def parse_in_image(client, image: str, argv: list[str]) -> tuple[int, str]:
    """(exit status, stderr) of 0.34's own `vllm serve` parser on argv, in the image, as the probe builds it."""
    status, _, stderr = run_in_image(client, image, ["-c", PARSE, json.dumps(argv)], ["python3"],
                                     environment={"VLLM_TARGET_DEVICE": "cpu"})
    return status, stderr


def test_the_image_holds_vllm_0_34_0_and_its_cuda_torch(docker_client, cuda_engine_image):
    status, out, err = run_in_image(docker_client, cuda_engine_image,
                                    ["-c", "import vllm, torch; print(vllm.__version__, torch.__version__, "
                                           "torch.cuda.device_count())"], ["python3"])
    assert status == 0, err
    version, torch_version, devices = out.split()
    assert (version, devices) == ("0.34.0", "0") and torch_version.startswith("2.14.0")
    labels = docker_client.images.get(cuda_engine_image).labels
    assert labels["onegpu.cuda-engine.vllm"] == "0.34.0"


def test_the_probe_reads_0_34_judges_the_flags_with_its_parser_and_finds_no_gpu(docker_client, tmp_path,
                                                                                cuda_engine_image):
    spec = make_spec(tmp_path, cuda_engine_image, config=TOWERS, container_ram_gib=8, kv_cache_dtype="fp8",
                     trust_remote_code=True)
    with pytest.raises(Blocked) as caught:
        run_probe(docker_client, spec)
    blocked = caught.value
    # no NVIDIA driver reaches a container here: torch says so, in its words, and vLLM finds no device to build for
    assert blocked.code == "NO_GPU_IN_CONTAINERS", blocked.message
    assert "sees 0 CUDA devices; exactly 1 (the selected GPU) is required" in blocked.message
    assert "Found no NVIDIA driver on your system" in blocked.message
    assert "Failed to infer device type" in blocked.message
    assert blocked.numbers["vllm_version"] == "0.34.0" and blocked.numbers["torch_version"].startswith("2.14.0")
    # every flag of this launch (--language-model-only, --kv-cache-dtype, --trust-remote-code among them) passed
    # 0.34's own parser before the device was judged
    assert blocked.numbers["flags_checked"] == len(spec.flags_used())
    assert "every flag parsed by vLLM's own `vllm serve` parser (built with VLLM_TARGET_DEVICE=cpu" in \
        blocked.numbers["flags_judged_by"]
    # the version it read is planned with 0.34's rules: an ASSUMED plan stands, a plan declared for 0.33 does not
    assert probed_against_plan(assumed_newest(), blocked.numbers["vllm_version"])[0].series == "0.34"
    with pytest.raises(Blocked, match="PLAN_CHANGED|KV block 16 -> 64 tokens"):
        probed_against_plan(accounting_for("0.33.0", DECLARED, "settings"), blocked.numbers["vllm_version"])


def test_the_link_measurement_runs_the_images_torch_and_says_why_it_measured_nothing(docker_client,
                                                                                   cuda_engine_image):
    """The probe's host-to-device copy, with 0.34's CUDA torch and no device: no figure, torch's own reason (the
    ceiling then says NOT MEASURED and why)."""
    from onegpu.engine.probe import PROBE_SCRIPT

    code = PROBE_SCRIPT.replace('if __name__ == "__main__":', 'if False:') + \
        "\nout = {}\nlink_bandwidth(out)\nprint(json.dumps(out))"
    status, out, err = run_in_image(docker_client, cuda_engine_image, ["-c", code], ["python3"])
    assert status == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert "h2d" not in result and "NVIDIA driver" in result["h2d_error"], result


def test_the_multi_gpu_launch_is_accepted_by_0_34s_parser(docker_client, tmp_path, cuda_engine_image):
    from onegpu.engine.launch import build_launch_spec
    from onegpu.engine.leftovers import current_owner

    settings = settings_for(tmp_path, gpu=0, multi_gpu={"gpus": [0, 1], "tensor_parallel_size": 2,
                                                        "pipeline_parallel_size": 1})
    spec = build_launch_spec(settings, None, cuda_engine_image, "tp2", str(tmp_path), current_owner(),
                             towers=(), gpu_uuids=["GPU-a", "GPU-b"])
    assert {"--distributed-executor-backend", "--disable-custom-all-reduce"} <= set(spec.flags_used())
    status, stderr = parse_in_image(docker_client, cuda_engine_image, ["serve", *spec.command[1:]])
    assert status == 0, stderr[-2000:]


def test_a_flag_0_34_does_not_know_is_refused_by_name(docker_client, tmp_path, cuda_engine_image):
    """--swap-space belonged to the V0 engine's cache config; 0.34's parser refuses it in argparse's words."""
    spec = make_spec(tmp_path, cuda_engine_image)
    status, stderr = parse_in_image(docker_client, cuda_engine_image, ["serve", *spec.command[1:], "--swap-space",
                                                                       "4"])
    assert status == 2 and "vllm: error: unrecognized arguments: --swap-space 4" in stderr
