"""The boot-log reader against logs people posted of vLLM on NVIDIA GPUs (tests_offline/data/gpu_logs/, its
README): every failure gets its named code with the engine's own line quoted, every successful boot yields the
facts it prints, and where a log states the KV memory and the model's config is public, the kit's per-token
accounting reproduces the logged KV capacity.

Each log's sidecar says what a person reads in it (outcome, kit_code, key_line, facts): the test data, never the
code under test. The KV cases (KV_CASES) name the config each one uses.
"""
from __future__ import annotations

import json

import pytest

from onegpu.core.outcomes import ADVICE, CODES
from onegpu.engine.bootlog import _message, clean, explain_failure, parse_boot_log
from onegpu.plan.kvcache import kv_cache_estimate
from onegpu.plan.vllm_versions import DECLARED, accounting_for
from tests_offline.paths import REPO_ROOT

CORPUS = REPO_ROOT / "tests_offline" / "data" / "gpu_logs"
GIB = 2**30
SIDECAR_KEYS = {"source", "where", "vllm_version", "version_from", "engine", "gpu", "gpu_count",
                "tensor_parallel_size", "pipeline_parallel_size", "cpu_offload_gb", "command", "model", "outcome",
                "what_happened", "key_line", "partial", "trimmed", "kit_code"}
# BootFacts field for each fact a sidecar may state
FACTS = {"load_gib": "load_gib", "load_s": "load_s", "kv_cache_gib": "kv_cache_gib",
         "kv_cache_tokens": "kv_cache_tokens", "max_concurrency": "max_concurrency",
         "concurrency_tokens": "concurrency_tokens", "cpu_offload_gib": "cpu_offload_gib",
         "server_started": "server_started", "gpu_blocks": "kv_gpu_blocks"}


def sidecars() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(CORPUS.glob("*.json"))}


ALL = sidecars()
FAILED = sorted(n for n, d in ALL.items() if d["outcome"] != "ok")
BOOTED = sorted(n for n, d in ALL.items() if d["outcome"] == "ok")


def log_of(name: str) -> str:
    return (CORPUS / f"{name}.log").read_text(encoding="utf-8")


def test_the_corpus_covers_what_operators_meet():
    """At least 40 logs, from V0 and V1 engines, one and several GPUs, with and without --cpu-offload-gb, OK boots
    and every failure kind, over the releases people posted."""
    assert len(ALL) >= 40
    assert {d["engine"] for d in ALL.values()} >= {"V0", "V1"}
    assert any((d["gpu_count"] or 1) > 1 for d in ALL.values()) and any(d["gpu_count"] == 1 for d in ALL.values())
    offloaded = [n for n, d in ALL.items() if d["cpu_offload_gb"] or "Total CPU offloaded parameters" in log_of(n)]
    assert len(offloaded) >= 4
    codes = {d["kit_code"] for d in ALL.values()}
    assert codes >= {"LOAD_OOM", "PROFILE_OOM", "NO_KV_MEMORY", "CONTEXT_EXCEEDS_KV", "CONTEXT_TOO_LONG", "GPU_BUSY",
                     "UNSUPPORTED_QUANT", "UNSUPPORTED_ARCH", "WEIGHTS_NOT_FOUND", "RUNTIME_INCOMPATIBLE",
                     "INVALID_ENGINE_ARGUMENT", "DISTRIBUTED_INIT_FAILED", "HOST_OOM_KILLED", "CUDA_ERROR",
                     "NO_ATTENTION_BACKEND"}
    assert {d["outcome"] for d in ALL.values()} == {"ok", "failed", "died_after_serving", "host_oom_killed"}
    series = {tuple(int(p) for p in d["vllm_version"].split(".")[:2]) for d in ALL.values() if d["vllm_version"]}
    assert min(series) <= (0, 8) and max(series) >= (0, 31)


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_log_is_kept_as_its_source_printed_it(name):
    sidecar = ALL[name]
    assert set(sidecar) >= SIDECAR_KEYS, SIDECAR_KEYS - set(sidecar)
    assert sidecar["source"].startswith("https://github.com/")
    raw = (CORPUS / f"{name}.log").read_bytes()
    assert raw.endswith(b"\n") and b"\r\n" not in raw
    raw.decode("utf-8")
    if sidecar["outcome"] != "ok":
        assert sidecar["key_line"] and sidecar["key_line"] in log_of(name)


@pytest.mark.parametrize("name", FAILED)
def test_every_failure_is_named_with_the_engines_own_line(name):
    """The code a person reading the log assigned (sidecar kit_code); ENGINE_DIED only where the log names no
    cause. The quote is the engine's line that says so (or, for ENGINE_DIED, its last words)."""
    expected = ALL[name]["kit_code"]
    log = log_of(name)
    failure = explain_failure(log, 1, False, False, False)
    assert failure.code == expected, failure.quote
    head = (failure.quote or "")[:40]  # a long line is quoted cut in its middle
    assert head and any(_message(line).strip().startswith(head) for line in clean(log).splitlines())
    assert expected in CODES and expected in ADVICE


def test_engine_died_stands_only_where_the_log_names_no_cause():
    died = sorted(n for n in FAILED if ALL[n]["kit_code"] == "ENGINE_DIED")
    # each of these shows only wrappers that point at a root cause the posted excerpt does not hold
    for name in died:
        quote = explain_failure(log_of(name), 1, False, False, False).quote
        assert any(w in quote for w in ("EngineDeadError", "Engine loop has died", "encountered a fatal error",
                                        "Error in chat completion stream generator")), (name, quote)
    assert len(died) <= len(FAILED) // 5


@pytest.mark.parametrize("name", BOOTED)
def test_every_successful_boot_yields_the_facts_it_prints(name):
    facts = parse_boot_log(log_of(name))
    stated = ALL[name]["facts"]
    assert stated, "an OK log states at least one fact"
    assert {key: getattr(facts, FACTS[key]) for key in stated} == stated


# (log, config file in configs/, tensor parallel size): the KV memory a worker logged, the model's public config
# (or one of the same attention shape, named in its .source.txt), vLLM's 16-token blocks of those releases.
KV_CASES = [
    ("ok-v0_10_1-llama31-8b-1gpu", "meta-llama--Llama-3.1-8B.config.json", 1),
    ("ok-v0_10_1_1-qwen2-7b-a100-0p25", "Qwen--Qwen2.5-7B.config.json", 1),
    ("ok-v0_10_1_1-qwen2-7b-a100-0p5", "Qwen--Qwen2.5-7B.config.json", 1),
    ("ok-v0_10_1_1-qwen2-7b-tp2-a100", "Qwen--Qwen2.5-7B.config.json", 2),
    ("ok-v0_11_0-llama31-8b-l4", "meta-llama--Llama-3.1-8B.config.json", 1),
    ("ok-v0_13_0-qwen25-14b-awq-1gpu", "Qwen--Qwen2.5-14B.config.json", 1),
    ("ok-v0eng-llama31-8b-rtx3090-20k", "meta-llama--Llama-3.1-8B.config.json", 1),
    ("ok-v1-qwen3-14b-lmcache", "Qwen--Qwen3-14B.config.json", 1),
    ("ok-v0_30_0-xinference-qwen3-4b-5060ti", "typhoon2.5-qwen3-4b.config.json", 1),
]


@pytest.mark.parametrize("name, config, tp", KV_CASES, ids=[c[0] for c in KV_CASES])
def test_the_kits_kv_accounting_reproduces_the_logged_capacity(name, config, tp):
    """The logged "Available KV cache memory" (two decimals of GiB: +-0.005 GiB) through the kit's pool arithmetic
    gives the logged "GPU KV cache size" tokens (V1) or "# GPU blocks" (V0), within one block per KV group."""
    assert ALL[name]["config"] == config
    cfg = json.loads((CORPUS / "configs" / config).read_text(encoding="utf-8"))
    cfg = {**cfg, "num_key_value_heads": max(1, cfg["num_key_value_heads"] // tp)}  # each worker's heads
    facts = parse_boot_log(log_of(name))
    context = facts.concurrency_tokens or ALL[name]["max_model_len"]
    kv = kv_cache_estimate(cfg, context, None, 2048, block_size=16,
                           accounting=accounting_for("0.33.0", DECLARED, "releases before 0.34"))
    pool = kv.pool
    low, high = int((facts.kv_cache_gib - 0.005) * GIB), int((facts.kv_cache_gib + 0.005) * GIB)
    slack = len(pool.groups)  # one block per KV group
    if facts.kv_cache_tokens is not None:
        per_block_tokens = pool.block_size
        assert pool.capacity(low)[0] - slack * per_block_tokens <= facts.kv_cache_tokens \
            <= pool.capacity(high)[0] + slack * per_block_tokens
    else:
        assert low // pool.bytes_per_block - slack <= facts.kv_gpu_blocks <= high // pool.bytes_per_block + slack
