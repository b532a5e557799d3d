"""The real engine in one run: the latency the serve adapter adds to it, its boot, its memory, its canary.

The engine is vLLM's CPU build in the locally built image (devkit/real_engine/build.py) serving the tiny
random-weight Qwen3-MoE (devkit/real_engine/tiny_models.py). It is launched as the kit launches it: the
kit's own launch plan (plugin/onegpu/engine/launch.py: --max-num-seqs 1, chunked prefill, --enforce-eager, a RAM cap without
swap, network none, a non-root user) with the CPU-engine seam of the e2e tests (devkit/e2e/
conftest_cpu_engine.py: no GPU device request, VLLM_CPU_KVCACHE_SPACE), and started, watched and removed by the
kit's own Engine (plugin/onegpu/engine/container.py). In order:

  * anchors, before the engine starts: `python -c pass` on the host, and throwaway containers of the same image
    running `python3 -c pass` and `python3 -c "import vllm"` (start to exit, the boot's clock);
  * boot: container start to GET /health 200 on the engine's Unix socket (the kit's own figure);
  * the canary: the kit's shipped canary request (plugin/onegpu/requests/canary.py, the model id filled in) sent as the kit
    sends it (its body's bytes, one connection per request, on the socket): the first call, then the rest;
  * added latency: bench_adapter.py's alternating direct/adapter blocks and lean clients, on completions of a
    few tokens (greedy, ignore_eos: every call generates exactly --max-tokens), whole answer and first stream
    chunk, 1 and 4 clients. The kit launches with --max-num-seqs 1, so the engine runs one sequence at a time:
    four clients' calls queue inside the engine, and each call's time holds the others' turns;
  * memory: the container's memory cgroup sampled every 0.2 s from its start, in two phases (boot; the calls,
    canary and latency): all memory charged to it (page cache of the checkpoint and the venv included), anon +
    shmem (what reclaim cannot free: what the RAM cap must hold), and what `docker stats` shows (charged less
    inactive file pages); with the cgroup's own high-water mark at ready and at the end;
  * CPU: how busy the machine was and how much of one vCPU the engine container used (its cpuacct cgroup), for
    5 s with the engine up and no calls, and over the latency calls: the added latency is paid in CPU time
    that the engine, the adapter and the clients share.

It refuses to start while another container of the real-engine image runs (--wait-s to wait for it), so only
one engine runs at a time. Every container it makes is labelled onegpu.test=1, has no network, and is removed
at the end, on Ctrl-C and SIGTERM too (and by the kit's watcher process if this one is killed).

    python benchmarks/bench_real_engine.py [--requests 200] [--blocks 4] [--warmup 3] [--max-tokens 4]
                                           [--canary-calls 5] [--wait-s 0] [--json out.json]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from msgspec import structs

from benchmarks.bench_adapter import (  # noqa: E402
    adapter_process,
    added_ms,
    command_line,
    interleaved,
    machine_cpu_ticks,
    machine_line,
    stats,
)
from benchmarks.bench_adapter import markdown as latency_table
from onegpu.core.jsonable import to_json  # noqa: E402
from onegpu.engine.cgroup import CGROUP_ROOT, CgroupDir, find_container_cgroup, memory_bytes  # noqa: E402
from onegpu.requests.canary import canary_file  # noqa: E402
from onegpu.requests.requests_file import body_bytes  # noqa: E402

MODEL = "qwen3-moe"
MODEL_ID = "tiny/qwen3-moe"
RUN_ID = "bench-real-engine"
CLIENT_COUNTS = (1, 4)
KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE, as the e2e sessions run it
SHM_GIB = 1.0  # the engine's queues need 160 MiB of /dev/shm; Docker's default 64 MiB stops it
# The kit's settings for this engine (devkit/e2e/harness.py CPU_SETTINGS) and the rest of a settings file.
SETTINGS = {"context_tokens": 2048, "prefill_chunk_tokens": 2048, "container_ram_gib": 8, "boot_deadline_s": 600,
            "cpu_offload_gib": 0, "host_headroom_gib": 1, "deadline_s": 900, "shm_gib": SHM_GIB, "pids_limit": 512}
MEMORY_INTERVAL_S = 0.2
IDLE_WINDOW_S = 5.0  # the engine up, no calls: what it and the machine spend on their own
PROGRESS_EVERY_S = 15.0
PROMPT = "benchmark"
# memory.stat keys per cgroup version: (anonymous memory, shared memory, inactive file pages)
MEMORY_STAT_KEYS = {1: ("total_rss", "total_shmem", "total_inactive_file"), 2: ("anon", "shmem", "inactive_file")}
HIGH_WATER_FILE = {1: "memory.max_usage_in_bytes", 2: "memory.peak"}
HOST_ANCHOR = "host python -c pass"
PASS_ANCHOR, IMPORT_ANCHOR = "python3 -c pass", 'python3 -c "import vllm"'
CONTAINER_ANCHORS = {PASS_ANCHOR: ["python3", "-c", "pass"], IMPORT_ANCHOR: ["python3", "-c", "import vllm"]}


# -- arguments ---------------------------------------------------------------------------------------------------
def _whole(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"value {text!r}: must be a whole number from {low} up")
        return value
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"value {text!r}: must be a number of seconds from 0 up")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=_whole(1), default=200,
                        help="timed calls per configuration and path (split over blocks and clients)")
    parser.add_argument("--blocks", type=_whole(1), default=4, help="alternating blocks per direct/adapter pair")
    parser.add_argument("--warmup", type=_whole(0), default=3, help="untimed calls per client before each block")
    parser.add_argument("--max-tokens", type=_whole(1), default=4, help="tokens each timed call generates")
    parser.add_argument("--canary-calls", type=_whole(1), default=5, help="times the canary request is sent")
    parser.add_argument("--wait-s", type=_seconds, default=0.0,
                        help="wait this long for other real-engine containers to end before refusing")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    least = args.blocks * max(CLIENT_COUNTS)
    if args.requests < least:
        parser.error(f"argument --requests: value {args.requests}: must be at least --blocks x {max(CLIENT_COUNTS)} "
                     f"clients = {least}, so that every client makes a timed call in every block")
    return args


# -- what is sent ----------------------------------------------------------------------------------------------
def completion_body(model_id: str, stream: bool, max_tokens: int) -> bytes:
    """A completions request that generates exactly max_tokens tokens (greedy; end-of-sequence ignored)."""
    return json.dumps({"model": model_id, "prompt": PROMPT, "max_tokens": max_tokens, "stream": stream,
                       "temperature": 0, "ignore_eos": True}).encode()


def canary_call(model_id: str) -> tuple[str, bytes]:
    """(URL, body bytes) of the first request of the kit's canary file for model_id, the body's bytes as the file
    holds them (the kit sends them unchanged)."""
    line = canary_file(model_id).splitlines()[0]
    return json.loads(line)["url"], body_bytes(line, line.decode())


# -- memory ----------------------------------------------------------------------------------------------------
def memory_figures(charged: int, stat_text: str, version: int) -> dict:
    """Pure: one sample's figures in bytes from the cgroup's charged memory and its memory.stat text: `charged`
    (page cache included), `anon_shmem` (what reclaim cannot free) and `docker_stats` (charged less inactive file
    pages, as `docker stats` shows it)."""
    stat = {}
    for line in stat_text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            stat[key] = int(value)
    anon, shmem, inactive = MEMORY_STAT_KEYS[version]
    return {"charged": charged, "anon_shmem": stat.get(anon, 0) + stat.get(shmem, 0),
            "docker_stats": charged - min(stat.get(inactive, 0), charged)}


def phase_peaks(samples: list[tuple[str, dict]]) -> dict:
    """Pure: per phase, the number of samples and the largest value of each figure."""
    peaks: dict[str, dict] = {}
    for phase, figures in samples:
        peak = peaks.setdefault(phase, {"samples": 0})
        peak["samples"] += 1
        for key, value in figures.items():
            peak[key] = max(peak.get(key, value), value)
    return peaks


class MemoryWatch:
    """Samples a container's memory cgroup on a thread, each sample tagged with `phase` at that moment; the
    container is found by the id `container_id()` returns (None until the container exists)."""

    def __init__(self, container_id: Callable[[], str | None], interval_s: float = MEMORY_INTERVAL_S):
        self.container_id, self.interval_s = container_id, interval_s
        self.phase = "boot"
        self.samples: list[tuple[str, dict]] = []
        self.cgroup: CgroupDir | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def start(self) -> "MemoryWatch":
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=10)
        return phase_peaks(self.samples)

    def high_water(self) -> int | None:
        """The cgroup's own high-water mark of charged memory since the container started (None if unread)."""
        if self.cgroup is None:
            return None
        try:
            return int((self.cgroup.path / HIGH_WATER_FILE[self.cgroup.version]).read_text())
        except (OSError, ValueError):
            return None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.cgroup is None:
                found = self.container_id()
                self.cgroup = find_container_cgroup(found, None) if found else None
                if self.cgroup is None:
                    continue
            charged = memory_bytes(self.cgroup)
            try:
                stat_text = (self.cgroup.path / "memory.stat").read_text()
            except OSError:
                continue  # the container is gone
            if charged is not None:
                self.samples.append((self.phase, memory_figures(charged, stat_text, self.cgroup.version)))


# -- CPU -------------------------------------------------------------------------------------------------------
def cpu_seconds(text: str, version: int) -> float:
    """Pure: a CPU cgroup's CPU seconds so far from v1 cpuacct.usage (ns) or v2 cpu.stat (usage_usec)."""
    if version == 1:
        return int(text.strip()) / 1e9
    usage = next(line.split()[1] for line in text.splitlines() if line.startswith("usage_usec "))
    return int(usage) / 1e6


def container_cpu_s(container_id: str, memory_cgroup: CgroupDir | None) -> float | None:
    """The container's CPU seconds so far (cgroup v1 cpuacct of the cgroupfs driver, or v2's unified folder)."""
    places = [(CGROUP_ROOT / name / "docker" / container_id / "cpuacct.usage", 1)
              for name in ("cpuacct", "cpu,cpuacct")]
    if memory_cgroup is not None and memory_cgroup.version == 2:
        places.append((memory_cgroup.path / "cpu.stat", 2))
    for path, version in places:
        try:
            return cpu_seconds(path.read_text(), version)
        except (OSError, ValueError, StopIteration):
            continue
    return None


def cpu_snapshot(container_id: str, memory_cgroup: CgroupDir | None) -> tuple:
    return machine_cpu_ticks(), container_cpu_s(container_id, memory_cgroup), time.monotonic()


def cpu_between(before: tuple, after: tuple) -> dict:
    """Pure: how busy the machine's CPUs were (%) and how much of one vCPU the engine container used (%)."""
    ((all0, idle0), engine0, wall0), ((all1, idle1), engine1, wall1) = before, after
    ticks = all1 - all0
    return {"s": round(wall1 - wall0, 1),
            "machine_busy_pct": round(100 * (1 - (idle1 - idle0) / ticks), 1) if ticks else None,
            "engine_pct_of_one_vcpu": (round(100 * (engine1 - engine0) / (wall1 - wall0), 1)
                                       if engine0 is not None and engine1 is not None and wall1 > wall0 else None)}


# -- containers ------------------------------------------------------------------------------------------------
def other_engines(client, image_id: str) -> list[str]:
    """Running containers of the real-engine image, as "name (id)"."""
    return [f"{c.name} ({c.short_id})" for c in client.containers.list(filters={"ancestor": image_id})]


def wait_until_alone(client, image_id: str, wait_s: float) -> None:
    """Return once no container of the image runs; raise SystemExit naming them after wait_s seconds."""
    end = time.monotonic() + wait_s
    while running := other_engines(client, image_id):
        if time.monotonic() >= end:
            raise SystemExit(f"another real-engine container runs ({', '.join(running)}): one engine at a time; "
                             f"try again when it has ended, or pass --wait-s")
        time.sleep(5)


def container_seconds(client, image_id: str, argv: list[str]) -> float:
    """A throwaway container of the image running argv (network none): seconds from its start to its exit."""
    container = client.containers.create(image_id, entrypoint=argv[:1], command=argv[1:], network_mode="none",
                                         labels={"onegpu.test": "1"})
    try:
        began = time.perf_counter()
        container.start()
        code = container.wait(timeout=600)["StatusCode"]
        took = time.perf_counter() - began
        if code != 0:
            raise RuntimeError(f"{argv} exited {code}: {container.logs().decode(errors='replace')[-2000:]}")
        return took
    finally:
        container.remove(force=True)


def host_python_s(runs: int = 5) -> float:
    """Median seconds of `python -c pass` on the host (the anchor of every section of RESULTS.md)."""
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def kit_launch_spec(image_id: str, model_dir: Path, socket_dir: str):
    """The kit's launch plan for the tiny model, with the CPU-engine seam of the e2e sessions."""
    from onegpu.engine.launch import build_launch_spec
    from onegpu.engine.leftovers import current_owner
    from onegpu.plan.settings import OWN_SCHEMA, parse_settings

    settings = parse_settings({"schema": OWN_SCHEMA, "model_id": MODEL_ID, "model_revision": "0" * 40,
                               "model_path": str(model_dir), "image": image_id, "gpu": 0, **SETTINGS},
                              "benchmarks/bench_real_engine.py", "")
    spec = build_launch_spec(settings, None, image_id, RUN_ID, socket_dir, current_owner())
    return structs.replace(spec, engine_platform="cpu",
                               environment={**spec.environment, "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB)},
                               labels={**spec.labels, "onegpu.test": "1"})


def progress_printer() -> Callable[[str, bool], None]:
    """The Engine's progress lines, one every PROGRESS_EVERY_S seconds (and the last), on stderr."""
    last = [0.0]

    def show(line: str, final: bool) -> None:
        if final or time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            print(line, file=sys.stderr, flush=True)
    return show


# -- the calls -------------------------------------------------------------------------------------------------
def canary_times(socket_path: str, model_id: str, calls: int) -> list[dict]:
    """The canary request sent `calls` times as the kit sends it; each call's seconds and completion tokens."""
    from onegpu.core.uds_http import uds_request

    url, body = canary_call(model_id)
    out = []
    for _ in range(calls):
        began = time.perf_counter()
        resp = uds_request(socket_path, "POST", url, body=body, headers={"Content-Type": "application/json"},
                           timeout=600)
        took = time.perf_counter() - began
        if resp.status != 200:
            raise RuntimeError(f"canary answered {resp.status}: {resp.body[:300]!r}")
        out.append({"s": round(took, 4), "completion_tokens": json.loads(resp.body)["usage"]["completion_tokens"]})
    return out


def latency_rows(socket_path: str, model_id: str, args: argparse.Namespace) -> list[dict]:
    """bench_adapter.py's alternating direct/adapter blocks against the engine's socket."""
    rows = []
    with adapter_process(socket_path) as (adapter_pid, port):
        for stream in (False, True):
            mode = f"{'stream first chunk' if stream else 'whole answer'}, {args.max_tokens} tokens"
            payload = completion_body(model_id, stream, args.max_tokens)
            for clients in CLIENT_COUNTS:
                paths = {"direct": socket_path, "adapter": port}
                times, usage = interleaved("lean", paths, payload, stream, args.requests, clients, args.blocks,
                                           adapter_pid, args.warmup)
                for name in paths:
                    row = {"mode": mode, "clients": clients, "path": name, **stats(times[name]), **usage[name]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


# -- the report ------------------------------------------------------------------------------------------------
def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:,.1f} x" if a and b else "-"


def direct_p50(rows: list[dict], mode_start: str, clients: int) -> float | None:
    return next((r["p50_ms"] for r in rows if r["path"] == "direct" and r["mode"].startswith(mode_start)
                 and r["clients"] == clients), None)


def markdown(results: dict) -> str:
    """The section for RESULTS.md: what ran, boot and canary beside their anchors, memory, added latency."""
    rows, anchors, boot, canary = results["rows"], results["anchors"], results["boot"], results["canary"]
    facts = boot.get("facts") or {}
    first, rest = canary[0], canary[1:]
    rest_s = statistics.median(c["s"] for c in rest) if rest else None
    whole_1 = direct_p50(rows, "whole answer", 1)
    out = [f"### Real engine (vLLM {facts.get('vllm_version') or '?'} CPU build, tiny Qwen3-MoE): run of "
           f"{results['date']}", "",
           f"* Command: `{results['command']}`",
           f"* Machine: {results['cpu']}; {results['machine']}; load average {results['load_start']} at the start, "
           f"{results['load_end']} at the end",
           f"* Engine: image {results['image']}, the kit's launch plan with the CPU-engine seam (no GPU device "
           f"request, VLLM_CPU_KVCACHE_SPACE={KV_CACHE_GIB}); RAM cap {gib(results['ram_cap_bytes'])}: "
           f"`{results['engine_argv']}`",
           f"* Timed calls: completions of exactly {results['max_tokens']} tokens, greedy; {results['requests']} per "
           f"configuration and path in {results['blocks']} alternating blocks, {results['warmup']} untimed calls "
           "per client before each block; lean clients (bench_clients.py)", "",
           "| figure | measured | anchor, same run | ratio |", "|---|---:|---|---:|",
           f"| boot: container start to /health 200 | {boot['s']:.1f} s | container `{PASS_ANCHOR}`, start to "
           f"exit: {anchors[PASS_ANCHOR]:.2f} s | {ratio(boot['s'], anchors[PASS_ANCHOR])} |",
           f"| boot | {boot['s']:.1f} s | container `{IMPORT_ANCHOR}`, start to exit: {anchors[IMPORT_ANCHOR]:.1f} s "
           f"| {ratio(boot['s'], anchors[IMPORT_ANCHOR])} |",
           f"| canary (the shipped request), first call, {first['completion_tokens']} tokens | "
           f"{first['s'] * 1000:,.0f} ms | direct whole answer ({results['max_tokens']} tokens), 1 client, p50: "
           f"{whole_1 if whole_1 is not None else '-'} ms | {ratio(first['s'] * 1000, whole_1)} |"]
    if rest:
        assert rest_s is not None  # the median of `rest`, set above when there is one
        tokens = sorted({c["completion_tokens"] for c in rest})
        out.append(f"| canary, median of the next {len(rest)} calls ({'/'.join(map(str, tokens))} tokens) | "
                   f"{rest_s * 1000:,.0f} ms | the same | {ratio(rest_s * 1000, whole_1)} |")
    out.append(f"| (host `python -c pass`, median of 5) | {anchors[HOST_ANCHOR] * 1000:.0f} ms | | |")
    said = [f"{label} {facts[key]}{unit}" for key, label, unit in (
        ("weights_load_s", "weights loaded in", " s"), ("load_s", "model loaded in", " s"),
        ("kv_cache_tokens", "KV cache of", " tokens"), ("kv_cache_device", "on", "")) if facts.get(key) is not None]
    if said:
        out += ["", f"The engine's own boot log: {', '.join(said)}."]
    cpu = results.get("cpu_use") or {}
    if cpu:
        out += ["", "CPU: " + "; ".join(
            f"{label} ({cpu[key]['s']} s) the machine was {cpu[key]['machine_busy_pct']}% busy and the engine "
            f"container used {cpu[key]['engine_pct_of_one_vcpu']}% of one vCPU"
            for key, label in (("idle", "the engine up with no calls"), ("calls", "during the latency calls"))
            if key in cpu) + " (the machine's figure holds every process on it, the load generator's too)."]
    memory = results["memory"]
    out += ["", "| phase | samples | peak charged (page cache included) | peak anon + shmem | peak as docker stats "
                "shows it | cgroup high-water mark since start, at the phase's end |", "|---|---:|---:|---:|---:|---:|"]
    for phase, label in (("boot", "boot (start to /health 200)"), ("calls", "calls (canary and latency)")):
        peak = memory["peaks"].get(phase, {})
        out.append(f"| {label} | {peak.get('samples', 0)} | {gib(peak.get('charged'))} | "
                   f"{gib(peak.get('anon_shmem'))} | {gib(peak.get('docker_stats'))} | "
                   f"{gib(memory['high_water'].get(phase))} |")
    out += ["", "| mode | clients | direct p50 / p99 ms | added p50 / p99 ms |", "|---|---:|---:|---:|"]
    for r in rows:
        extra = added_ms(rows, r)
        if extra is None:
            continue
        base = next(d for d in rows if d["path"] == "direct" and d["mode"] == r["mode"]
                    and d["clients"] == r["clients"])
        out.append(f"| {r['mode']} | {r['clients']} | {base['p50_ms']:.2f} / {base['p99_ms']:.2f} | "
                   f"{extra[0]:+.2f} / {extra[1]:+.2f} |")
    queued = [f"{mode} {ratio(direct_p50(rows, mode, 4), direct_p50(rows, mode, 1))}"
              for mode in ("whole answer", "stream first chunk") if direct_p50(rows, mode, 1)]
    if queued:
        out += ["", f"Four clients' direct p50 against one client's: {', '.join(queued)} (--max-num-seqs 1: the "
                    "engine runs one sequence at a time, the other calls wait in its queue)."]
    out += ["", "All rows:", "", latency_table(results)]
    return "\n".join(out)


def lscpu_line() -> str:
    """CPU model, its count (nproc) and the hypervisor, from lscpu."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return f"{os.cpu_count()} CPUs"
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    get = lambda key: fields.get(key, "?").strip()  # noqa: E731
    return (f"{get('Model name')}, {get('CPU(s)')} CPUs (nproc {len(os.sched_getaffinity(0))}), hypervisor "
            f"{get('Hypervisor vendor')}")


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


# -- the run ---------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import docker

    from devkit.real_engine.build import ensure_real_engine_image, real_engine_tag
    from devkit.real_engine.tiny_models import build
    from onegpu.engine.container import Engine
    from onegpu.engine.interrupts import GUARD

    GUARD.install()  # SIGTERM ends the run like Ctrl-C: every container is removed on the way out
    # ...in this process only. The client pools fork it and are ended by SIGTERM: a worker that raised there
    # could die holding its pool's queue lock and leave the pool's end waiting for ever.
    os.register_at_fork(after_in_child=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    client = docker.from_env()
    image_id = ensure_real_engine_image(client)
    wait_until_alone(client, image_id, args.wait_s)
    results: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "machine": machine_line(client), "cpu": lscpu_line(), "command": command_line(),
                     "image": f"{real_engine_tag()} ({image_id[:19]}...)", "load_start": load_average(),
                     **{k: getattr(args, k) for k in ("requests", "blocks", "warmup", "max_tokens")}}
    work = Path(tempfile.mkdtemp(prefix="ogb-", dir="/tmp"))  # short: socket paths are limited to 107 bytes
    try:
        os.chmod(work, 0o700)
        model_dir = build(work / "models", (MODEL,))[MODEL]
        anchors = {HOST_ANCHOR: host_python_s()}
        for name, anchor_argv in CONTAINER_ANCHORS.items():
            anchors[name] = container_seconds(client, image_id, anchor_argv)
            print(f"anchor {name}: {anchors[name]:.2f} s", file=sys.stderr, flush=True)
        results["anchors"] = anchors
        (work / "sock").mkdir(mode=0o700)
        (work / "run").mkdir(mode=0o700)
        spec = kit_launch_spec(image_id, model_dir, str(work / "sock"))
        results["engine_argv"] = " ".join([*spec.entrypoint, *spec.command])
        results["ram_cap_bytes"] = spec.mem_limit_bytes
        engine = Engine(client, spec, work / "run", SETTINGS["boot_deadline_s"], progress=progress_printer())
        watch = MemoryWatch(lambda: engine.handle.container_id).start()
        high_water = {}
        try:
            handle = engine.launch()
            # launch() returns once the engine is ready: its container exists and the boot was timed
            assert handle.container_id is not None and engine.boot_elapsed_s is not None
            high_water["boot"] = watch.high_water()
            watch.phase = "calls"
            results["boot"] = {"s": round(engine.boot_elapsed_s, 2),
                               "facts": to_json(handle.boot) if handle.boot else None}
            results["canary"] = canary_times(spec.socket_path, MODEL_ID, args.canary_calls)
            print(f"canary: {results['canary']}", file=sys.stderr, flush=True)
            before = cpu_snapshot(handle.container_id, watch.cgroup)
            time.sleep(IDLE_WINDOW_S)
            results["cpu_use"] = {"idle": cpu_between(before, cpu_snapshot(handle.container_id, watch.cgroup))}
            before = cpu_snapshot(handle.container_id, watch.cgroup)
            results["rows"] = latency_rows(spec.socket_path, MODEL_ID, args)
            results["cpu_use"]["calls"] = cpu_between(before, cpu_snapshot(handle.container_id, watch.cgroup))
            print(f"cpu: {results['cpu_use']}", file=sys.stderr, flush=True)
            high_water["calls"] = watch.high_water()
        finally:
            peaks = watch.stop()
            engine.close()
        results["memory"] = {"peaks": peaks, "high_water": high_water}
        assert engine.final is not None  # close() above recorded the end state
        results["engine_end"] = {k: engine.final.get(k) for k in ("exit_code", "oom_killed", "removed")}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load_end"] = load_average()
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
