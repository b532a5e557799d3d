"""Latency the serve adapter adds, against calling the engine's Unix socket directly, in the same run.

Against one stub engine container (no delays) on the local Docker engine:
  * direct   - a client on the engine's Unix socket (keep-alive), the floor;
  * adapter  - the same client to the loopback adapter (keep-alive), the adapter in its own process;
  * anchor   - the earlier kit's way: one `docker exec` of a Python client inside the container per request
               (through the Docker SDK's exec API, which is what the CLI calls).
Non-streamed: time to the whole answer. Streamed: time to the first SSE chunk. 1 and 4 concurrent
clients (4 client processes, so clients do not share one interpreter lock with each other). Direct and
adapter calls alternate in blocks, so the shared machine's changing load falls on both. For 4 clients,
each row also gives how busy the machine's CPUs were during its timed calls (/proc/stat) and how much of
one vCPU the adapter process used meanwhile. The stub has no delays; a last pair of rows paces its streams
(STUB_TOKEN_DELAY_S) so that other clients' streams do not keep the adapter busy back to back, as a model's
token rate would not.

The clients are lean by default (bench_clients.py): on two vCPUs the load generator shares the CPUs with the
engine and the adapter, and whatever it spends lands on both paths' latency. `--client http.client` runs the
same rows with the standard library's client. Every row gives the clients' CPU per timed call.

    python benchmarks/bench_adapter.py [--requests 2000] [--anchor-requests 40] [--paced-requests 400]
                                       [--blocks 4] [--client lean|http.client] [--json out.json]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import os
import platform
import resource
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker  # noqa: E402
import psutil  # noqa: E402

from benchmarks.bench_clients import CLIENTS  # noqa: E402
from devkit.stub_serving import SOCKET_IN_CONTAINER, stub_serving  # noqa: E402
from onegpu.serve.transport_log import percentile  # noqa: E402

KEY = "bench-" + "k" * 37
ENGINE_UNPACED: dict[str, float] = {}  # the stub answers at once and streams its 16 tokens back to back
PACE_S = 0.01
ENGINE_PACED = {"STUB_TOKEN_DELAY_S": PACE_S}  # streams paced like a (fast) model: the adapter is not saturated
ANCHOR_CLIENT = """
import http.client, socket, sys, time
class C(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.connect(sys.argv[1])
c = C("localhost"); c.request("POST", "/v1/completions", body=sys.argv[2].encode(),
                              headers={"Content-Type": "application/json"})
r = c.getresponse()
for line in r:
    sys.stdout.write(line.decode()); sys.stdout.flush()
"""


def body(model: str, stream: bool, max_tokens: int = 16) -> bytes:
    return json.dumps({"model": model, "prompt": "benchmark", "max_tokens": max_tokens, "stream": stream}).encode()


def client_loop(kind: str, target, payload: bytes, stream: bool, n: int, warmup: int,
                start_at: float) -> tuple[list[float], float]:
    """One client: its own keep-alive connection, warm-up calls, then n timed calls; returns their times
    and the client's CPU seconds per timed call."""
    client = CLIENTS[kind](target, payload, KEY)
    for _ in range(warmup):
        client.call(stream)
    while time.time() < start_at:
        time.sleep(0.001)
    began = resource.getrusage(resource.RUSAGE_SELF)
    times = [client.call(stream) for _ in range(n)]
    ended = resource.getrusage(resource.RUSAGE_SELF)
    client.close()
    return times, (ended.ru_utime + ended.ru_stime - began.ru_utime - began.ru_stime) / n


def machine_cpu_ticks() -> tuple[int, int]:
    """(all, idle + iowait) CPU ticks of the machine so far, from /proc/stat."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]


def cpu_snapshot(pid: int) -> tuple[tuple[int, int], float, float]:
    """The machine's CPU ticks, a process's CPU seconds (user + system) and the wall clock, now."""
    return machine_cpu_ticks(), sum(psutil.Process(pid).cpu_times()[:2]), time.time()


WARMUP_CALLS = 50  # untimed calls per client before each block's timed ones


def measure(kind: str, target, payload: bytes, stream: bool, total: int, clients: int,
            usage: dict, warmup: int = WARMUP_CALLS) -> list[float]:
    """Timed calls. Adds to `usage` the clients' CPU seconds and calls and, for several clients, the
    machine's busy and idle ticks and the adapter process's CPU seconds (usage["pid"]) from the moment the
    clients start their timed calls to the last one's end."""
    if clients == 1:
        times, cpu_per_call = client_loop(kind, target, payload, stream, total, warmup, 0)
        parts = [(times, cpu_per_call)]
    else:
        with mp.get_context("fork").Pool(clients) as pool:
            start_at = time.time() + 0.5
            pending = pool.starmap_async(
                client_loop, [(kind, target, payload, stream, total // clients, warmup, start_at)] * clients)
            time.sleep(max(0.0, start_at - time.time()))
            before = cpu_snapshot(usage["pid"])
            parts = pending.get()
            ((all0, idle0), cpu0, wall0), ((all1, idle1), cpu1, wall1) = before, cpu_snapshot(usage["pid"])
        usage["ticks"] = usage.get("ticks", 0) + all1 - all0
        usage["idle"] = usage.get("idle", 0) + idle1 - idle0
        usage["adapter_s"] = usage.get("adapter_s", 0) + cpu1 - cpu0
        usage["wall_s"] = usage.get("wall_s", 0) + wall1 - wall0
    for times, cpu_per_call in parts:
        usage["client_s"] = usage.get("client_s", 0) + cpu_per_call * len(times)
        usage["calls"] = usage.get("calls", 0) + len(times)
    return [t for times, _ in parts for t in times]


def usage_fields(usage: dict) -> dict:
    """The clients' CPU per call (us); for several clients also the row's share of the machine that was
    busy, and of one vCPU the adapter process used (in %)."""
    fields = {"client_cpu_us_per_call": round(1e6 * usage["client_s"] / usage["calls"])}
    if usage.get("ticks"):
        fields.update(machine_busy_pct=round(100 * (1 - usage["idle"] / usage["ticks"]), 1),
                      adapter_process_pct=round(100 * usage["adapter_s"] / usage["wall_s"], 1))
    return fields


def interleaved(kind: str, paths: dict, payload: bytes, stream: bool, total: int, clients: int, blocks: int,
                adapter_pid: int, warmup: int = WARMUP_CALLS) -> tuple[dict, dict]:
    """Calls per path, measured in alternating blocks (the order flips every block), so that a change in
    the shared machine's load between two moments falls on both paths alike; and each path's CPU use."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    usage: dict[str, dict] = {name: {"pid": adapter_pid} for name in paths}
    for block in range(blocks):
        order = list(paths) if block % 2 == 0 else list(reversed(paths))
        for name in order:
            times[name] += measure(kind, paths[name], payload, stream, total // blocks, clients, usage[name],
                                   warmup)
    return times, {name: usage_fields(u) for name, u in usage.items()}


def run_adapter(socket_path: str, log_dir: str, conn) -> None:
    """Child process: the adapter, until the parent says stop."""
    from onegpu.serve.thread import AdapterThread

    adapter = AdapterThread(socket_path, KEY, Path(log_dir) / "transport.jsonl")
    conn.send(adapter.port)
    conn.recv()
    adapter.close(grace_s=0)


@contextmanager
def adapter_process(socket_path: str) -> Iterator[tuple[int, int]]:
    """The adapter in its own process (its own interpreter lock) in front of `socket_path`, with a transport
    log in a temporary folder; yields (its pid, its loopback port) and stops it on exit."""
    with tempfile.TemporaryDirectory() as log_dir:
        parent, child = mp.get_context("spawn").Pipe()
        proc = mp.get_context("spawn").Process(target=run_adapter, args=(socket_path, log_dir, child))
        proc.start()
        port = parent.recv()
        assert proc.pid is not None  # started above
        try:
            yield proc.pid, port
        finally:
            parent.send("stop")
            proc.join(30)


def anchor(container, socket_in_container: str, payload: bytes, stream: bool, n: int) -> list[float]:
    """The earlier kit's transport: a fresh `docker exec python3 client.py` per request."""
    times = []
    for _ in range(n):
        began = time.perf_counter()
        exec_id = container.client.api.exec_create(container.id, ["python3", "-c", ANCHOR_CLIENT,
                                                                  socket_in_container, payload.decode()])
        output = container.client.api.exec_start(exec_id, stream=True)
        first = None
        for piece in output:
            if first is None and (not stream or b"data:" in piece):
                first = time.perf_counter() - began
        if not stream:
            times.append(time.perf_counter() - began)
        elif first is None:
            raise RuntimeError("the anchor client's stream ended without a data: line")
        else:
            times.append(first)
    return times


def machine_line(client) -> str:
    """Host, CPUs, OS, Python and Docker versions, one line."""
    return (f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}, "
            f"Python {platform.python_version()}, Docker {client.version()['Version']}")


def command_line() -> str:
    """How this script was started, as it would be typed."""
    return " ".join([Path(sys.executable).name, *sys.argv])


def stats(times: list[float]) -> dict:
    ms = [t * 1000 for t in times]
    p50, p99 = percentile(ms, 50), percentile(ms, 99)
    if p50 is None or p99 is None:
        raise ValueError("no times to summarise")
    return {"n": len(ms), "p50_ms": round(p50, 3), "p99_ms": round(p99, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="timed calls per configuration")
    parser.add_argument("--anchor-requests", type=int, default=40, help="timed docker exec calls per mode")
    parser.add_argument("--paced-requests", type=int, default=400, help="timed calls per paced-stream configuration")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks per direct/adapter pair")
    parser.add_argument("--client", choices=sorted(CLIENTS), default="lean",
                        help="the load generator's client (see bench_clients.py)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    client = docker.from_env()
    results: dict = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                     "machine": machine_line(client), "command": command_line(), "rows": []}
    for stub_env, label in ((ENGINE_UNPACED, ""), (ENGINE_PACED, f", engine paced {PACE_S * 1000:g} ms/token")):
        with stub_serving(client, stub_env) as stub, adapter_process(stub.socket_path) as (adapter_pid, port):
            for stream in ((False, True) if not label else (True,)):
                mode = ("stream first chunk" if stream else "whole answer") + label
                payload = body(stub.model_id, stream, max_tokens=16 if not label else 4)
                n = args.requests if not label else args.paced_requests
                for clients in (1, 4):
                    paths = {"direct": stub.socket_path, "adapter": port}
                    times, usage = interleaved(args.client, paths, payload, stream, n, clients, args.blocks,
                                               adapter_pid)
                    for name in paths:
                        row = {"mode": mode, "clients": clients, "path": name, **stats(times[name]),
                               **usage[name]}
                        results["rows"].append(row)
                        print(json.dumps(row), flush=True)
                if label:
                    continue
                row = {"mode": mode, "clients": 1, "path": "docker exec (earlier kit)",
                       **stats(anchor(stub.container, SOCKET_IN_CONTAINER, payload, stream, args.anchor_requests))}
                results["rows"].append(row)
                print(json.dumps(row), flush=True)
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def added_ms(rows: list[dict], row: dict) -> tuple[float, float] | None:
    """(p50, p99) of `row` less those of the direct row of its mode and client count; None for a direct row
    or one without a direct row beside it."""
    base = next((d for d in rows if d["path"] == "direct" and d["mode"] == row["mode"]
                 and d["clients"] == row["clients"]), None)
    if base is None or row is base:
        return None
    return row["p50_ms"] - base["p50_ms"], row["p99_ms"] - base["p99_ms"]


def markdown(results: dict) -> str:
    rows = results["rows"]
    out = ["| mode | clients | path | n | p50 ms | p99 ms | added p50 ms | added p99 ms | client CPU us/call "
           "| machine busy % | adapter process % of one vCPU |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        extra = added_ms(rows, r)
        added = f"{extra[0]:.3f} | {extra[1]:.3f}" if extra else "- | -"
        out.append(f"| {r['mode']} | {r['clients']} | {r['path']} | {r['n']} | {r['p50_ms']:.3f} | "
                   f"{r['p99_ms']:.3f} | {added} | {r.get('client_cpu_us_per_call', '-')} | "
                   f"{r.get('machine_busy_pct', '-')} | {r.get('adapter_process_pct', '-')} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
