"""The real-engine benchmark's pure parts: its arguments, what it sends, its memory figures and its report.

The run itself needs the real engine (minutes of CPU) and is not timed here; these checks keep the figures it
prints honest: a wrong peak, a swapped column or a percentile off by one would not fail the run itself.
"""
from __future__ import annotations

import json

import pytest

from benchmarks.bench_adapter import stats
from benchmarks.bench_real_engine import (
    HOST_ANCHOR,
    IMPORT_ANCHOR,
    PASS_ANCHOR,
    canary_call,
    completion_body,
    cpu_between,
    cpu_seconds,
    markdown,
    memory_figures,
    parse_args,
    phase_peaks,
)
from onegpu.requests.canary import default_template

V1_STAT = """cache 100
rss 7
total_cache 3000
total_rss 1000
total_shmem 200
total_inactive_file 2500
total_active_file 500
"""
V2_STAT = "anon 1000\nfile 3000\nshmem 200\ninactive_file 2500\nactive_file 500\n"


def test_the_defaults_are_a_short_run_of_every_configuration():
    args = parse_args([])
    assert (args.requests, args.blocks, args.warmup, args.max_tokens, args.canary_calls, args.wait_s, args.json) == \
        (200, 4, 3, 4, 5, 0.0, None)


@pytest.mark.parametrize("argv, words", [
    (["--requests", "15"], "argument --requests: value 15: must be at least --blocks x 4 clients = 16"),
    (["--requests", "0"], "argument --requests: value '0': must be a whole number from 1 up"),
    (["--blocks", "2.5"], "argument --blocks: value '2.5': must be a whole number from 1 up"),
    (["--warmup", "-1"], "argument --warmup: value '-1': must be a whole number from 0 up"),
    (["--max-tokens", "x"], "argument --max-tokens: value 'x': must be a whole number from 1 up"),
    (["--wait-s", "-3"], "argument --wait-s: value '-3': must be a number of seconds from 0 up"),
    (["--wait-s", "inf"], "argument --wait-s: value 'inf': must be a number of seconds from 0 up"),
])
def test_bad_arguments_are_refused_naming_the_argument_and_the_rule(argv, words, capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert words in capsys.readouterr().err


def test_fewer_blocks_allow_fewer_requests():
    assert parse_args(["--requests", "8", "--blocks", "2", "--warmup", "0"]).requests == 8


def test_timed_calls_generate_exactly_their_tokens_greedily():
    body = json.loads(completion_body("tiny/m", True, 7))
    assert body == {"model": "tiny/m", "prompt": "benchmark", "max_tokens": 7, "stream": True, "temperature": 0,
                    "ignore_eos": True}


def test_the_canary_is_the_shipped_request_with_the_model_filled_in_byte_for_byte():
    url, body = canary_call("tiny/qwen3-moe")
    template = json.loads(default_template().splitlines()[0])
    assert url == template["url"] == "/v1/chat/completions"
    assert json.loads(body) == {**template["body"], "model": "tiny/qwen3-moe"}
    assert body in default_template().replace(b'"@@SERVED_MODEL_ID@@"', b'"tiny/qwen3-moe"')


@pytest.mark.parametrize("text, version", [(V1_STAT, 1), (V2_STAT, 2)])
def test_memory_figures_split_what_reclaim_cannot_free_from_page_cache(text, version):
    assert memory_figures(4200, text, version) == {"charged": 4200, "anon_shmem": 1200, "docker_stats": 1700}


def test_memory_figures_never_go_below_zero_nor_need_every_key():
    assert memory_figures(1000, "total_inactive_file 5000\n", 1) == {"charged": 1000, "anon_shmem": 0,
                                                                      "docker_stats": 0}


def test_phase_peaks_keep_each_figures_own_maximum_per_phase():
    samples = [("boot", {"charged": 5, "anon_shmem": 1}), ("boot", {"charged": 3, "anon_shmem": 4}),
               ("calls", {"charged": 2, "anon_shmem": 2})]
    assert phase_peaks(samples) == {"boot": {"samples": 2, "charged": 5, "anon_shmem": 4},
                                    "calls": {"samples": 1, "charged": 2, "anon_shmem": 2}}


def test_stats_are_nearest_rank_percentiles_in_milliseconds():
    figures = stats([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert figures == {"n": 100, "p50_ms": 50.0, "p99_ms": 99.0}
    assert stats([0.002, 0.001, 0.003]) == {"n": 3, "p50_ms": 2.0, "p99_ms": 3.0}


def results(rows=None) -> dict:
    row = lambda mode, clients, path, p50, p99: {"mode": mode, "clients": clients, "path": path, "n": 200,  # noqa: E731
                                                 "p50_ms": p50, "p99_ms": p99, "client_cpu_us_per_call": 90}
    gib = 2**30
    return {
        "date": "2026-12-03T12:00:00+00:00", "command": "python benchmarks/bench_real_engine.py",
        "cpu": "AMD EPYC, 2 CPUs (nproc 2), hypervisor KVM", "machine": "host x86_64 2 CPUs",
        "load_start": "0.1 / 0.2 / 0.3", "load_end": "1.0 / 0.8 / 0.5", "image": "onegpu-real-engine:abc (sha256:1)",
        "engine_argv": "vllm serve /model --max-num-seqs 1", "ram_cap_bytes": 8 * gib,
        "requests": 200, "blocks": 4, "warmup": 3, "max_tokens": 4,
        "anchors": {HOST_ANCHOR: 0.03, PASS_ANCHOR: 0.5, IMPORT_ANCHOR: 16.0},
        "boot": {"s": 64.0, "facts": {"vllm_version": "0.32.0", "weights_load_s": 0.1, "load_s": None,
                                      "kv_cache_tokens": 1000, "kv_cache_device": "CPU"}},
        "canary": [{"s": 2.0, "completion_tokens": 64}, {"s": 0.5, "completion_tokens": 64},
                   {"s": 0.7, "completion_tokens": 64}, {"s": 0.6, "completion_tokens": 64}],
        "cpu_use": {"idle": {"s": 5.0, "machine_busy_pct": 51.0, "engine_pct_of_one_vcpu": 98.5},
                    "calls": {"s": 60.2, "machine_busy_pct": 99.9, "engine_pct_of_one_vcpu": 150.0}},
        "memory": {"peaks": {"boot": {"samples": 300, "charged": 3 * gib, "anon_shmem": 2 * gib,
                                      "docker_stats": int(2.5 * gib)},
                             "calls": {"samples": 600, "charged": 4 * gib, "anon_shmem": int(2.25 * gib),
                                       "docker_stats": 3 * gib}},
                   "high_water": {"boot": int(3.5 * gib), "calls": int(4.5 * gib)}},
        "rows": rows if rows is not None else [
            row("whole answer, 4 tokens", 1, "direct", 20.0, 30.0),
            row("whole answer, 4 tokens", 1, "adapter", 20.5, 31.0),
            row("whole answer, 4 tokens", 4, "direct", 80.0, 90.0),
            row("whole answer, 4 tokens", 4, "adapter", 79.0, 95.0),
            row("stream first chunk, 4 tokens", 1, "direct", 10.0, 12.0),
            row("stream first chunk, 4 tokens", 1, "adapter", 10.25, 12.5),
            row("stream first chunk, 4 tokens", 4, "direct", 35.0, 60.0),
            row("stream first chunk, 4 tokens", 4, "adapter", 36.0, 61.0)],
    }


def test_the_report_gives_boot_and_canary_beside_their_anchors_as_ratios():
    text = markdown(results())
    assert text.startswith("### Real engine (vLLM 0.32.0 CPU build, tiny Qwen3-MoE): run of 2026-12-03T12:00:00")
    assert "* Command: `python benchmarks/bench_real_engine.py`" in text
    assert "load average 0.1 / 0.2 / 0.3 at the start, 1.0 / 0.8 / 0.5 at the end" in text
    assert ("| boot: container start to /health 200 | 64.0 s | container `python3 -c pass`, start to exit: 0.50 s "
            "| 128.0 x |") in text
    assert '| boot | 64.0 s | container `python3 -c "import vllm"`, start to exit: 16.0 s | 4.0 x |' in text
    # The first canary call on its own (the engine's first request), the rest as their median (0.6 s).
    assert ("| canary (the shipped request), first call, 64 tokens | 2,000 ms | direct whole answer (4 tokens), "
            "1 client, p50: 20.0 ms | 100.0 x |") in text
    assert "| canary, median of the next 3 calls (64 tokens) | 600 ms | the same | 30.0 x |" in text
    assert "| (host `python -c pass`, median of 5) | 30 ms | | |" in text
    assert "RAM cap 8.00 GiB" in text


def test_the_report_gives_each_phases_memory_peaks_in_their_columns():
    text = markdown(results())
    assert "| boot (start to /health 200) | 300 | 3.00 GiB | 2.00 GiB | 2.50 GiB | 3.50 GiB |" in text
    assert "| calls (canary and latency) | 600 | 4.00 GiB | 2.25 GiB | 3.00 GiB | 4.50 GiB |" in text


def test_the_report_gives_added_latency_beside_the_direct_figures_signed():
    text = markdown(results())
    assert "| whole answer, 4 tokens | 1 | 20.00 / 30.00 | +0.50 / +1.00 |" in text
    assert "| whole answer, 4 tokens | 4 | 80.00 / 90.00 | -1.00 / +5.00 |" in text
    assert "| stream first chunk, 4 tokens | 1 | 10.00 / 12.00 | +0.25 / +0.50 |" in text
    assert ("Four clients' direct p50 against one client's: whole answer 4.0 x, stream first chunk 3.5 x "
            "(--max-num-seqs 1") in text
    # And every row in full, in bench_adapter.py's table.
    assert "| stream first chunk, 4 tokens | 4 | adapter | 200 | 36.000 | 61.000 | 1.000 | 1.000 | 90 |" in text


def test_a_run_of_one_canary_call_reports_no_median():
    doc = results()
    doc["canary"] = doc["canary"][:1]
    text = markdown(doc)
    assert "first call, 64 tokens" in text and "median of the next" not in text


def test_cpu_seconds_are_read_from_either_cgroup_version():
    assert cpu_seconds("2500000000\n", 1) == 2.5
    assert cpu_seconds("usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n", 2) == 1.5


def test_cpu_between_gives_the_machines_busy_share_and_the_engines_share_of_one_vcpu():
    before, after = ((1000, 600), 10.0, 100.0), ((1400, 700), 13.0, 102.0)
    assert cpu_between(before, after) == {"s": 2.0, "machine_busy_pct": 75.0, "engine_pct_of_one_vcpu": 150.0}
    assert cpu_between(((1, 1), None, 0.0), ((1, 1), None, 1.0)) == {"s": 1.0, "machine_busy_pct": None,
                                                                    "engine_pct_of_one_vcpu": None}


def test_the_report_says_what_the_engine_and_the_machine_spent_idle_and_during_the_calls():
    text = markdown(results())
    assert ("CPU: the engine up with no calls (5.0 s) the machine was 51.0% busy and the engine container used "
            "98.5% of one vCPU; during the latency calls (60.2 s) the machine was 99.9% busy and the engine "
            "container used 150.0% of one vCPU") in text


def test_the_report_quotes_only_what_the_boot_log_said():
    text = markdown(results())
    assert "The engine's own boot log: weights loaded in 0.1 s, KV cache of 1000 tokens, on CPU." in text
    assert "None" not in text
