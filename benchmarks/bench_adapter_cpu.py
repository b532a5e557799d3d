"""CPU the serve adapter's own process spends per relayed call (one client, against the stub engine).

Latency on a shared 2-vCPU machine moves with the neighbours; the adapter's CPU seconds per call (user +
system, os.times of its process, transport-log helper thread included) move much less and say where the
added latency comes from. One stub engine container (network none), one adapter process, one client
process with a keep-alive connection (bench_clients' lean client): 100 warm-up calls, then N timed calls,
non-streamed and streamed.
As an anchor, the round trip of 300 bytes through a bare loopback TCP echo in another process: what the
extra hop costs before any HTTP or relaying.

    python benchmarks/bench_adapter_cpu.py [--requests 1500] [--repeat 2]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docker  # noqa: E402

from benchmarks import bench_adapter as bench  # noqa: E402
from devkit.stub_serving import stub_serving  # noqa: E402

WARMUP = 100


def adapter_process(socket_path: str, conn) -> None:
    """Child: the adapter; answers each message with its process CPU seconds so far, until "stop"."""
    from onegpu.serve.thread import AdapterThread

    adapter = AdapterThread(socket_path, bench.KEY, Path(tempfile.mkdtemp()) / "transport.jsonl")
    conn.send(adapter.port)
    while True:
        message = conn.recv()
        times = os.times()
        conn.send((times.user, times.system))
        if message == "stop":
            break
    adapter.close(grace_s=0)


def echo_server(listener: socket.socket) -> None:
    """Child: send back whatever arrives on one connection, until it closes."""
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(65536):
        conn.sendall(data)


def echo_round_trips(n: int = 3000, size: int = 300) -> list[float]:
    """Seconds per round trip of `size` bytes through a loopback TCP echo in another process."""
    listener = socket.create_server(("127.0.0.1", 0))
    proc = mp.get_context("fork").Process(target=echo_server, args=(listener,))
    proc.start()
    client = socket.create_connection(listener.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    message, times = b"x" * size, []
    for _ in range(n):
        began = time.perf_counter()
        client.sendall(message)
        got = 0
        while got < size:
            got += len(client.recv(65536))
        times.append(time.perf_counter() - began)
    client.close()
    proc.join(10)
    listener.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    echo = bench.stats(echo_round_trips())
    print(f"anchor: loopback TCP echo of 300 bytes, p50 {echo['p50_ms']:.3f} ms, p99 {echo['p99_ms']:.3f} ms",
          flush=True)
    with stub_serving(docker.from_env(), {}) as stub:
        for _ in range(args.repeat):
            parent, child = mp.get_context("spawn").Pipe()
            proc = mp.get_context("spawn").Process(target=adapter_process, args=(stub.socket_path, child))
            proc.start()
            port = parent.recv()
            cells = []
            for stream in (False, True):
                payload = bench.body(stub.model_id, stream)
                bench.measure("lean", port, payload, stream, WARMUP, 1, {})
                parent.send("cpu")
                before = parent.recv()
                # measure() makes 50 warm-up calls of its own before the timed ones: all of them are counted.
                times = bench.measure("lean", port, payload, stream, args.requests, 1, {})
                parent.send("cpu")
                after = parent.recv()
                calls = args.requests + 50
                user_us, system_us = ((a - b) / calls * 1e6 for a, b in zip(after, before))
                cells.append(f"{'stream (16 tokens)' if stream else 'whole answer'}: {user_us + system_us:,.0f} us CPU "
                             f"per call ({user_us:,.0f} user + {system_us:,.0f} system), "
                             f"p50 {bench.stats(times)['p50_ms']:.3f} ms")
            parent.send("stop")
            parent.recv()
            proc.join(30)
            print(" | ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
