"""The real-engine image (needs it: built here on first use, minutes; see devkit/real_engine/build.py).

Each check runs a throwaway container like `docker run --network none --rm`: the real vLLM CPU build answers
its command line, imports with the pinned torch, finds the tools it shells out to (lscpu through /bin/sh,
g++ with Python's headers for run-time kernels), and sees no network but loopback. No model is loaded here.
A failed build fails these tests, in CI or not; a missing Docker daemon fails them under CI=true.
"""
from __future__ import annotations

import json

import pytest
from msgspec import structs

from devkit.real_engine.build import CONSTRAINTS, LABEL, RECORD_DIR, ensure_real_engine_image, real_engine_tag
from devkit.real_engine.python_env import VLLM_ALIAS_VERSION, VLLM_VERSION, normalise, read_pins
from tests_offline.image_runs import CONTAINER_TIMEOUT_S, run_ok


@pytest.fixture(scope="session")
def real_engine_image(docker_client) -> str:
    """The real-engine image's ID, built when its tag is missing; a failed build fails the test."""
    try:
        return ensure_real_engine_image(docker_client)
    except Exception as exc:  # noqa: BLE001  (any build failure is reported whole, never skipped)
        pytest.fail(f"the real-engine image could not be built: {type(exc).__name__}: {exc}", pytrace=False)


def test_image_carries_its_tag_label_and_entrypoint(docker_client, real_engine_image):
    image = docker_client.images.get(real_engine_image)
    assert real_engine_tag() in image.tags
    config = image.attrs["Config"]
    assert config["Labels"][LABEL] == "1"
    assert config["Labels"][f"{LABEL}.vllm"] == VLLM_ALIAS_VERSION
    assert config["Entrypoint"] == ["vllm"]


def test_vllm_version_is_the_cpu_build(docker_client, real_engine_image):
    out = run_ok(docker_client, real_engine_image, ["--version"])
    assert out.strip().splitlines()[-1] == VLLM_ALIAS_VERSION  # 0.32.0+cpu


PROBE = """
import importlib.metadata as md, json
import torch, vllm
from vllm.platforms import current_platform
print(json.dumps({
    "vllm": vllm.__version__, "torch": torch.__version__, "vllm_dist": md.version("vllm"),
    "platform": current_platform.device_type,
    "dists": {d.metadata["Name"]: d.version for d in md.distributions()},
}))
"""


def test_python_imports_vllm_and_torch_on_the_cpu_platform_with_exactly_the_pins(docker_client,
                                                                                 real_engine_image):
    out = run_ok(docker_client, real_engine_image, ["-c", PROBE], entrypoint=["python"])
    facts = json.loads(out.strip().splitlines()[-1])
    pins = read_pins(CONSTRAINTS)
    assert facts["vllm"] == VLLM_VERSION
    assert facts["vllm_dist"] == VLLM_ALIAS_VERSION
    assert facts["platform"] == "cpu"
    assert facts["torch"].split("+")[0] == pins["torch"]
    installed = {normalise(name): version for name, version in facts["dists"].items()}
    # Besides the pins: the installer that came with Debian's venv, and the `vllm` name vLLM reads itself by.
    extra = {name: installed.pop(name) for name in ("pip", "vllm")}
    assert extra["vllm"] == VLLM_ALIAS_VERSION
    assert installed == pins


def test_image_records_the_pins_it_was_built_from(docker_client, real_engine_image):
    out = run_ok(docker_client, real_engine_image, [f"/{RECORD_DIR}/constraints.txt"], entrypoint=["cat"])
    assert out == CONSTRAINTS.read_text()


def test_lscpu_answers_through_the_shell_as_vllm_calls_it(docker_client, real_engine_image):
    # vLLM's CPU worker runs exactly this through /bin/sh to lay out its threads.
    out = run_ok(docker_client, real_engine_image, ["lscpu --json --extended=CPU,CORE,NODE --online"],
                 entrypoint=["/bin/sh", "-c"])
    cpus = json.loads(out)["cpus"]
    assert cpus and all("cpu" in row for row in cpus)
    assert "Architecture:" in run_ok(docker_client, real_engine_image, [], entrypoint=["lscpu"])


def test_gxx_compiles_against_pythons_headers(docker_client, real_engine_image):
    assert "g++" in run_ok(docker_client, real_engine_image, ["--version"], entrypoint=["g++"])
    program = ('printf "#include <Python.h>\\nint main() { return PY_MAJOR_VERSION == 3 ? 0 : 1; }\\n" > /tmp/t.cpp'
               " && g++ $(python3-config --includes) /tmp/t.cpp -o /tmp/t && /tmp/t && echo compiled")
    assert run_ok(docker_client, real_engine_image, [program], entrypoint=["/bin/sh", "-c"]).strip() == "compiled"


def test_torch_compiles_a_cpu_kernel_at_run_time(docker_client, real_engine_image):
    # The path a completions call with logprobs takes in the CPU engine: inductor writes C++ and builds it.
    program = ("import torch\n"
               "f = torch.compile(lambda x: (x * 2).sin() + 1)\n"
               "x = torch.arange(8, dtype=torch.float32)\n"
               "print(bool(torch.allclose(f(x), (x * 2).sin() + 1)))\n")
    out = run_ok(docker_client, real_engine_image, ["-c", program], entrypoint=["python"])
    assert out.strip().splitlines()[-1] == "True"


def test_container_sees_only_loopback_and_no_routes(docker_client, real_engine_image):
    # Read the kernel's tables; nothing connects anywhere.
    dev = run_ok(docker_client, real_engine_image, ["/proc/net/dev"], entrypoint=["cat"])
    interfaces = [line.split(":", 1)[0].strip() for line in dev.splitlines()[2:] if ":" in line]
    assert interfaces == ["lo"]
    routes = run_ok(docker_client, real_engine_image, ["/proc/net/route"], entrypoint=["cat"])
    assert [line for line in routes.splitlines()[1:] if line.strip()] == []


def test_vllm_serve_help_runs_to_completion(docker_client, real_engine_image):
    out = run_ok(docker_client, real_engine_image, ["serve", "--help"])
    assert "usage: vllm serve" in out


def test_the_kits_probe_finds_every_launch_flag_in_the_real_vllm(docker_client, real_engine_image, tmp_path):
    """The runtime probe against the real engine, for a launch with every conditional flag: a checkpoint with a
    vision and an audio tower (--language-model-only) and `--generation-config vllm`, both read from vLLM 0.32.0's
    own `vllm serve --help=all`."""
    from onegpu.engine.probe import run_probe
    from tests_offline.engine_helpers import make_spec

    config = {"architectures": ["MiMoV2OmniForCausalLM"], "vision_config": {"depth": 28}, "audio_config": {}}
    spec = structs.replace(make_spec(tmp_path, real_engine_image, config=config), engine_platform="cpu")
    assert {"--generation-config", "--language-model-only"} <= set(spec.flags_used())
    facts, _ = run_probe(docker_client, spec, timeout_s=CONTAINER_TIMEOUT_S)
    assert facts.vllm_version.startswith(VLLM_VERSION) and facts.platform == "cpu"
    assert facts.missing_flags == [] and facts.flags_checked == spec.flags_used()


def test_the_stub_declares_the_multi_gpu_launch_flags_as_the_real_vllm_does(docker_client, real_engine_image):
    """The flags a multi-GPU launch adds: the stub's parser (devkit/stub_engine) takes each under the same names
    and choices as vLLM 0.32.0's own `vllm serve --help=all`, so the stub accepts and refuses what vLLM would."""
    import re

    from devkit.stub_engine.payload.vllm_stub.args import build_parser
    from devkit.stub_engine.payload.vllm_stub.knobs import read_knobs

    help_all = run_ok(docker_client, real_engine_image, ["serve", "--help=all"])
    stub = {o: a for a in build_parser(read_knobs({"STUB_VLLM_VERSION": VLLM_VERSION}))._actions for o in a.option_strings}
    for flag in ("--tensor-parallel-size", "--pipeline-parallel-size", "--distributed-executor-backend",
                 "--disable-custom-all-reduce"):
        line = next(x.strip() for x in help_all.splitlines() if re.match(rf"\s+{flag}[\s,]|\s+{flag}$", x))
        names = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", line.split("[", 1)[0].split("{", 1)[0]))
        names = {n for n in names if n.lstrip("-").upper() != n.lstrip("-")}  # metavars are upper case
        real_choices = re.search(r"\{([^}]*)\}|\[([^\]]*)\]", line)
        action = stub[flag]
        assert set(action.option_strings) == names, (flag, line)
        if real_choices or action.choices:
            listed = (real_choices[1] or real_choices[2]) if real_choices else ""
            assert {c.strip(" '") for c in listed.split(",")} == {str(c) for c in action.choices or []}, line
