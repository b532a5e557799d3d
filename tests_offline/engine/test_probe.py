"""The runtime probe: help-text reading (real `vllm serve --help` excerpts) and the probe container on the
real Docker engine with the stub image (no GPU here: the stub's torch answers the device count)."""
from __future__ import annotations

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.engine.launch import LABEL_ROLE
from onegpu.engine.probe import probe_create_kwargs, run_probe
from onegpu.engine.probe_parse import PROBE_MARKER, describe, flags_in_help, judge_probe, parse_probe_output
from tests_offline.engine_helpers import make_spec

# vLLM 0.22's `vllm serve --help=all` (argparse layout, long descriptions wrapped by the terminal width).
HELP_ALL_0_22 = """\
usage: vllm serve [model_tag] [options]

Launch a local OpenAI-compatible API server to serve LLM
completions via HTTP. Defaults to Qwen/Qwen3-0.6B if no model is specified.

Search by using: `--help=<ConfigGroup>` to explore options by section (e.g.,
--help=ModelConfig, --help=Frontend)
  Use `--help=all` to show all available flags at once.

positional arguments:
  model_tag             The model tag to serve (optional if specified in config) (default: None)

options:
  --api-server-count API_SERVER_COUNT, -asc API_SERVER_COUNT
                        How many API server processes to run. Defaults to data_parallel_size if not specified. (default: None)
  --config CONFIG       Read CLI options from a config file. Must be a YAML with the following options: https://docs.vllm.ai/en/latest/configuration/serve_args.html (default:
                        None)
  --disable-log-stats   Disable logging statistics. (default: False)
  --enable-log-requests, --no-enable-log-requests
                        Enable logging request information, dependent on log level:
                        - INFO: Request ID, parameters and LoRA request.
  -h, --help            show this help message and exit

Frontend:
  Arguments for the OpenAI-compatible frontend server.

  --uds UDS             Unix domain socket path. If set, host and port arguments are ignored. (default: None)
  --api-key API_KEY [API_KEY ...]
                        If provided, the server will require one of these keys to be presented in the header. (default: None)

ModelConfig:
  --max-model-len MAX_MODEL_LEN
                        Model context length (prompt and output). If unspecified, will be automatically derived from the model config.
  --enforce-eager, --no-enforce-eager
                        Whether to always use eager-mode PyTorch. If True, we will disable CUDA graph and always execute the model in eager mode. If False, we will use CUDA
                        graph and eager execution in hybrid for maximal performance and flexibility. (default: False)
  --served-model-name SERVED_MODEL_NAME [SERVED_MODEL_NAME ...]
                        The model name(s) used in the API.

ParallelConfig:
  --pipeline-parallel-size PIPELINE_PARALLEL_SIZE, -pp PIPELINE_PARALLEL_SIZE
                        Number of pipeline parallel groups. (default: 1)
  --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE
                        Number of tensor parallel groups. (default: 1)

CacheConfig:
  --gpu-memory-utilization GPU_MEMORY_UTILIZATION
                        The fraction of GPU memory to be used for the model executor, which can range from 0 to 1. (default: 0.9)
  --kv-cache-dtype {auto,bfloat16,fp8,fp8_e4m3,fp8_e5m2,fp8_inc}
                        Data type for kv cache storage. If "auto", will use model data type. (default: auto)

OffloadConfig:
  --cpu-offload-gb CPU_OFFLOAD_GB
                        The space in GiB to offload to CPU, per GPU. Default is 0, which means no offloading. (default: 0)

SchedulerConfig:
  --max-num-batched-tokens MAX_NUM_BATCHED_TOKENS
                        Maximum number of tokens to be processed in a single iteration. (default: None)
  --max-num-seqs MAX_NUM_SEQS
                        Maximum number of sequences to be processed in a single iteration. (default: None)
  --enable-chunked-prefill, --no-enable-chunked-prefill
                        If True, prefill requests can be chunked based on the remaining `max_num_batched_tokens`. (default: None)
"""

# vLLM 0.5/0.6's plain `--help`: every flag in one list, no --uds, boolean options without --no- forms.
HELP_PLAIN_0_6 = """\
usage: vllm serve <model_tag> [options]

positional arguments:
  model_tag             The model tag to serve

options:
  -h, --help            show this help message and exit
  --kv-cache-dtype {auto,fp8,fp8_e5m2,fp8_e4m3}
                        Data type for kv cache storage. If "auto", will use model data type. CUDA 11.8+ supports fp8
                        (=fp8_e4m3) and fp8_e5m2. ROCm (AMD GPU) supports fp8 (=fp8_e4m3)
  --max-model-len MAX_MODEL_LEN
                        Model context length. If unspecified, will be automatically derived from the model config.
  --pipeline-parallel-size PIPELINE_PARALLEL_SIZE, -pp PIPELINE_PARALLEL_SIZE
                        Number of pipeline stages.
  --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE
                        Number of tensor parallel replicas.
  --seed SEED           Random seed for operations.
  --cpu-offload-gb CPU_OFFLOAD_GB
                        The space in GiB to offload to CPU, per GPU. Default is 0, which means no offloading.
                        Intuitively, this argument can be seen as a virtual way to increase the GPU memory size. For
  --gpu-memory-utilization GPU_MEMORY_UTILIZATION
                        The fraction of GPU memory to be used for the model executor, which can range from 0 to 1.
  --max-num-batched-tokens MAX_NUM_BATCHED_TOKENS
                        Maximum number of batched tokens per iteration.
  --max-num-seqs MAX_NUM_SEQS
                        Maximum number of sequences per iteration.
  --quantization {aqlm,awq,deepspeedfp,tpu_int8,fp8,fbgemm_fp8,None}, -q {aqlm,awq,deepspeedfp,tpu_int8,fp8,fbgemm_fp8,None}
                        Method used to quantize the weights. If None, we first check the `quantization_config`
  --enforce-eager       Always use eager-mode PyTorch. If False, will use eager mode and CUDA graph in hybrid for
                        maximal performance and flexibility.
  --enable-chunked-prefill [ENABLE_CHUNKED_PREFILL]
                        If set, the prefill requests can be chunked based on the max_num_batched_tokens.
  --served-model-name SERVED_MODEL_NAME [SERVED_MODEL_NAME ...]
                        The model name(s) used in the API. If multiple names are provided, the server will respond to
                        any of the provided names. The model name in the model field of a response will be the first
                        name in this list. If not specified, the model name will be the same as the `--model`
"""

# How argparse refuses `--help=all` on releases before paged help.
REFUSED = "usage: vllm serve <model_tag> [options]\nvllm serve: error: argument -h/--help: ignored explicit argument 'all'\n"

FLAGS = ["--served-model-name", "--uds", "--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs",
         "--gpu-memory-utilization", "--max-model-len", "--max-num-batched-tokens", "--enable-chunked-prefill",
         "--enforce-eager", "--cpu-offload-gb"]


def result(version="0.11.0", devices=1, helps=None, errors=(), platform="cuda"):
    return {"vllm_version": version, "torch_version": "2.8.0", "cuda_device_count": devices, "platform": platform,
            "help": helps if helps is not None else {"--help=all": {"exit_code": 0, "text": HELP_ALL_0_22}},
            "errors": list(errors)}


def test_option_lines_declare_every_alias_and_descriptions_declare_nothing():
    flags = flags_in_help(HELP_ALL_0_22)
    assert {"--enforce-eager", "--no-enforce-eager", "--enable-chunked-prefill", "--no-enable-chunked-prefill",
            "-tp", "--tensor-parallel-size", "-asc", "--uds", "--kv-cache-dtype", "-h", "--help"} <= flags
    # "--help=<ConfigGroup>", "--help=all" and "--help=ModelConfig" appear in prose only
    assert not any(f.startswith("--help=") for f in flags)
    assert "--model" not in flags


def test_old_plain_help_lists_its_flags_and_lacks_uds():
    flags = flags_in_help(HELP_PLAIN_0_6)
    assert {"--enable-chunked-prefill", "--enforce-eager", "--quantization", "-q", "--cpu-offload-gb"} <= flags
    assert "--uds" not in flags


def test_every_launch_flag_known_passes():
    facts = judge_probe(result(), FLAGS)
    assert facts.missing_flags == [] and facts.cuda_device_count == 1 and facts.vllm_version == "0.11.0"


def test_old_release_refusing_help_all_is_read_from_plain_help_and_misses_uds():
    helps = {"--help=all": {"exit_code": 2, "text": REFUSED}, "--help": {"exit_code": 0, "text": HELP_PLAIN_0_6}}
    with pytest.raises(Blocked) as exc:
        judge_probe(result(version="0.6.3", helps=helps), FLAGS)
    assert exc.value.code == "RUNTIME_INCOMPATIBLE"
    assert exc.value.numbers["missing_flags"] == ["--uds"]
    assert "--uds" in exc.value.message and "0.10.1" in exc.value.message


def test_keyword_filtered_help_all_is_completed_by_plain_help():
    # Some releases read `--help=all` as a keyword search: exit 0 with only the flags containing "all".
    filtered = "Arguments matching 'all':\n  --allowed-origins ALLOWED_ORIGINS\n                        Allowed origins.\n"
    helps = {"--help=all": {"exit_code": 0, "text": filtered}, "--help": {"exit_code": 0, "text": HELP_ALL_0_22}}
    assert judge_probe(result(helps=helps), FLAGS).missing_flags == []


def test_device_count_other_than_one_is_incompatible():
    for count in (0, 2):
        with pytest.raises(Blocked, match=f"sees {count} CUDA devices") as exc:
            judge_probe(result(devices=count), FLAGS)
        assert exc.value.code == "RUNTIME_INCOMPATIBLE"


def test_the_multi_gpu_protocol_needs_exactly_its_set_of_devices():
    facts = judge_probe(result(devices=3), FLAGS, "cuda", expected_devices=3)
    assert facts.cuda_device_count == 3 and describe(facts).startswith("vLLM 0.11.0, torch 2.8.0, 3 CUDA devices;")
    for count in (1, 2, 4):
        with pytest.raises(Blocked) as exc:
            judge_probe(result(devices=count), FLAGS, "cuda", expected_devices=3)
        assert exc.value.code == "RUNTIME_INCOMPATIBLE"
        assert f"sees {count} CUDA devices; exactly 3 (the GPUs of the multi-GPU protocol, one per rank)" in exc.value.message


def test_the_cpu_build_double_passes_only_on_vllms_cpu_platform_without_cuda_devices():
    facts = judge_probe(result(devices=0, platform="cpu"), FLAGS, "cpu")
    assert facts.platform == "cpu" and "vLLM's CPU platform, 0 CUDA devices" in describe(facts)
    for devices, platform in ((0, "cuda"), (1, "cpu"), (0, None)):
        with pytest.raises(Blocked, match="asks for vLLM's CPU build") as exc:
            judge_probe(result(devices=devices, platform=platform), FLAGS, "cpu")
        assert exc.value.code == "RUNTIME_INCOMPATIBLE"
    with pytest.raises(Blocked, match="sees 0 CUDA devices"):  # the product path never takes the CPU build
        judge_probe(result(devices=0, platform="cpu"), FLAGS)


def test_no_vllm_package_or_no_help_is_incompatible():
    with pytest.raises(Blocked, match="no importable vllm"):
        judge_probe(result(version=None, errors=["import vllm: ModuleNotFoundError: No module named 'vllm'"]), FLAGS)
    with pytest.raises(Blocked, match="answered no flag list"):
        judge_probe(result(helps={"--help=all": {"exit_code": 1, "text": ""}}), FLAGS)


def test_result_line_is_found_after_other_output():
    out = f"INFO 12-02 noise\n{PROBE_MARKER}{{\"vllm_version\": \"0.11.0\"}}\n"
    assert parse_probe_output(out) == {"vllm_version": "0.11.0"}
    with pytest.raises(ValueError):
        parse_probe_output("Traceback ...\n")


def test_probe_container_keeps_the_engine_isolation_without_mounts(tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    kwargs = probe_create_kwargs(spec)
    assert kwargs["image"] == spec.image_id and kwargs["network_mode"] == "none" and kwargs["mounts"] == []
    assert kwargs["entrypoint"] == ["python3"] and kwargs["labels"][LABEL_ROLE] == "probe"
    assert kwargs["mem_limit"] == kwargs["memswap_limit"] == spec.mem_limit_bytes and kwargs["cap_drop"] == ["ALL"]


def _kit_test_containers(client, spec):
    return client.containers.list(all=True, filters={"label": f"onegpu.test_case={spec.labels['onegpu.test_case']}"})


def test_probe_passes_on_the_stub_and_leaves_no_container(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    facts, elapsed = run_probe(docker_client, spec)
    assert facts.vllm_version == "0.34.0" and facts.cuda_device_count == 1
    # the stub carries no vLLM parser to build: its help texts judge the flags, and the facts say so
    assert not facts.parser_judged and "judged from its help" in facts.parser_note
    assert facts.missing_flags == [] and facts.flags_checked == spec.flags_used()
    assert 0 < elapsed < 60
    assert _kit_test_containers(docker_client, spec) == []


@pytest.mark.parametrize("knobs, expected", [
    ({"STUB_VLLM_VERSION": "0.10.0"}, "does not know the flag(s) --uds"),
    ({"STUB_CUDA_DEVICES": "2"}, "sees 2 CUDA devices"),
])
def test_probe_refuses_an_incompatible_runtime(docker_client, tmp_path, stub_image, knobs, expected):
    spec = make_spec(tmp_path, stub_image, knobs)
    with pytest.raises(Blocked) as exc:
        run_probe(docker_client, spec)
    assert exc.value.code == "RUNTIME_INCOMPATIBLE" and expected in exc.value.message
    assert _kit_test_containers(docker_client, spec) == []


OMNI_CONFIG = {"architectures": ["MiMoV2OmniForCausalLM"], "vision_config": {"depth": 28}, "audio_config": {}}


def test_probe_checks_the_flags_of_a_language_model_only_launch(docker_client, tmp_path, stub_image):
    """A checkpoint with towers adds --language-model-only; an image whose vLLM lacks it (here the stub as an
    older release) is RUNTIME_INCOMPATIBLE before anything loads, as for any flag the plan uses."""
    spec = make_spec(tmp_path / "new", stub_image, {"STUB_VLLM_VERSION": "0.32.0"}, config=OMNI_CONFIG)
    facts, _ = run_probe(docker_client, spec)
    assert {"--generation-config", "--language-model-only"} <= set(facts.flags_checked)
    assert facts.missing_flags == []
    older = make_spec(tmp_path / "old", stub_image, {"STUB_VLLM_VERSION": "0.11.0"}, config=OMNI_CONFIG)
    with pytest.raises(Blocked) as exc:
        run_probe(docker_client, older)
    assert exc.value.code == "RUNTIME_INCOMPATIBLE"
    assert "vLLM 0.11.0 does not know the flag(s) --language-model-only the launch uses" in exc.value.message
    assert exc.value.numbers["missing_flags"] == ["--language-model-only"]
    assert _kit_test_containers(docker_client, spec) == _kit_test_containers(docker_client, older) == []


def test_probe_of_an_image_without_vllm_says_so(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    kwargs = probe_create_kwargs(spec)
    kwargs["command"] = ["-S", *kwargs["command"]]  # -S: no site-packages, so no vllm or torch to import
    container = docker_client.containers.create(**kwargs)
    try:
        container.start()
        container.wait(timeout=60)
        out = container.logs(stdout=True, stderr=False).decode()
    finally:
        container.remove(force=True)
    with pytest.raises(Blocked, match="no importable vllm"):
        judge_probe(parse_probe_output(out), spec.flags_used())
