"""Header scan benchmark: read_checkpoint over a 1,000-shard, ~1 TB (sparse) MoE checkpoint.

The checkpoint is built once and cached in a temp folder named after its shape (it costs ~20 MB of disk:
headers only, data regions are sparse). Each figure is timed several times in this one process run, next to
two anchors measured in the same run, so the result reads as a ratio on whatever machine runs it:
  * `python -c pass` (interpreter start-up, a CPU-speed anchor);
  * plain `json.loads` of the same index and 1,000 headers already in memory, collector paused (what the
    standard library pays before checking a single rule);
  * msgspec's untyped decode of the same bytes (the C decoder the scan uses, before checking a single rule).

The same scan is also timed cold: before each call every file of the checkpoint is dropped from this machine's
page cache (posix_fadvise DONTNEED on each file after one sync, which touches no other file's pages; mincore(2)
confirms what stayed resident). Its floor, cold in the same way, is the bare reads the scan cannot avoid: the
index, and each shard's 8-byte length and header. Directory entries and inodes stay cached (evicting them needs
root and disturbs the whole machine), and a virtual disk may still be served from its host's cache: the cold
figure is what this machine's disk gives, which is why its floor is measured next to it. The same cold reads
with the kernel's read-ahead off (an option for the scan, measured and not taken) alternate with the floor's.

    python benchmarks/bench_header_scan.py [--runs 7] [--experts 384] [--results FILE]  (a markdown section for benchmarks/RESULTS.md)
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devkit.page_cache import resident_bytes  # noqa: E402
from devkit.synth import moe_tensors, write_checkpoint  # noqa: E402
from onegpu.checkpoint.scan import read_checkpoint  # noqa: E402

TARGET_S = 1.0


def kimi_k2_like(layers: int, experts: int) -> tuple[dict, dict]:
    """A Kimi-K2/DeepSeek-V3-shaped FP8 checkpoint: block-FP8 experts with their F32 scale blocks."""
    config = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
              "num_hidden_layers": layers, "n_routed_experts": experts,
              "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128]}}
    tensors = moe_tensors(layers=layers, experts=experts, hidden=7168, moe_intermediate=2048, dense_layers=1,
                          intermediate=18432, vocab=163840, heads=64, kv_heads=64, head_dim=128,
                          expert_dtype="F8_E4M3", expert_scales=True)
    return config, tensors


def build(folder: Path, layers: int, experts: int, shards: int) -> Path:
    """Build the checkpoint once; a marker file says the cached copy is complete.

    Each shard's header starts with {"__metadata__":{"format":"pt"}}, as the safetensors package writes it.
    """
    root = folder / "ckpt"
    marker = folder / "complete"
    if marker.exists():
        return root
    config, tensors = kimi_k2_like(layers, experts)
    write_checkpoint(root, config, tensors, shards=shards, metadata={"format": "pt"})
    marker.write_text("built\n")
    return root


def timed(fn, runs: int, before=None) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds (this process and its children) of `runs` calls after one warm-up call.

    `before`, when given, runs untimed before each timed call (the cold figures drop the page cache there).
    """
    fn()  # warm-up: page cache, imports
    wall, cpu = [], []
    for _ in range(runs):
        if before is not None:
            before()
        w, c = _time_one(fn)
        wall.append(w)
        cpu.append(c)
    return wall, cpu


def timed_pair(fn_a, fn_b, runs: int, before) -> tuple[tuple[list[float], list[float]], ...]:
    """Two figures timed in alternation, `before` ahead of each call, the order swapped every run so that
    a drift of the machine lands on both; pair i of the two results was taken the same moment."""
    figures: tuple[tuple[list[float], list[float]], tuple[list[float], list[float]]] = (([], []), ([], []))
    for i in range(runs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):
            before()
            w, c = _time_one((fn_a, fn_b)[k])
            figures[k][0].append(w)
            figures[k][1].append(c)
    return figures


def _time_one(fn) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    t0, c0 = time.perf_counter(), _cpu()
    result = fn()
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    del result  # freed after the clock stops: a session keeps the facts, freeing them is not part of the scan
    return wall, cpu


def _cpu() -> float:
    own, children = os.times(), os.times()
    return own.user + own.system + children.children_user + children.children_system


def read_headers(index_path: Path, shard_paths: list[Path], read_ahead: bool = True) -> list[bytes]:
    """The bytes a header scan must read: the index, and each shard's length prefix and header.

    `read_ahead=False` turns the kernel's read-ahead off for each shard (POSIX_FADV_RANDOM), which keeps it
    from fetching the tensor data behind the header: an option for the scan, measured here, not taken."""
    headers = [index_path.read_bytes()]
    for path in shard_paths:
        with open(path, "rb") as fh:
            if not read_ahead:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
            headers.append(fh.read(int.from_bytes(fh.read(8), "little")))
    return headers


def drop_from_page_cache(paths: list[Path]) -> None:
    """Evict these files' pages (clean ones: the caller synced once); other files' pages are left alone."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes_of(paths: list[Path]) -> int:
    """Bytes of these files in the page cache, as mincore(2) reports them."""
    return sum(map(resident_bytes, paths))


def parse_all(headers: list[bytes], loads) -> None:
    """A floor: `loads` of the index and every header, collector paused as read_checkpoint does."""
    gc.disable()
    try:
        for header in headers:
            loads(header)
    finally:
        gc.enable()


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")  # os.times() ticks at 10 ms: a short figure can read 0


def _verdict(figure: tuple[list[float], list[float]]) -> str:
    return "met" if statistics.median(figure[0]) < TARGET_S else "NOT met"


def _mb(value: int) -> str:
    return f"{value / 1e6:.1f} MB"


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    return (f"{model}, {os.cpu_count()} CPUs visible, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--layers", type=int, default=61)
    parser.add_argument("--experts", type=int, default=384)
    parser.add_argument("--shards", type=int, default=1000)
    parser.add_argument("--results", type=Path, help="write the markdown section to this file")
    args = parser.parse_args()

    folder = Path(tempfile.gettempdir()) / f"onegpu-bench-header-{args.layers}x{args.experts}-{args.shards}-pt"
    root = build(folder, args.layers, args.experts, args.shards)
    facts = read_checkpoint(root)
    shard_paths = [root / s.name for s in facts.shards]
    assert facts.index_file is not None  # build() writes a sharded checkpoint, which has an index
    index_path = root / facts.index_file
    headers = read_headers(index_path, shard_paths)
    index_bytes = len(headers[0])
    every_file = sorted(p for p in root.rglob("*") if p.is_file())

    evict = partial(drop_from_page_cache, every_file)
    os.sync()  # dirty pages cannot be dropped; the cached copy may have just been written
    evict()
    cold_resident = resident_bytes_of(every_file)

    scan = timed(lambda: read_checkpoint(root), args.runs)
    scan_cold = timed(lambda: read_checkpoint(root), args.runs, before=evict)
    reads_cold, reads_cold_random = timed_pair(lambda: read_headers(index_path, shard_paths),
                                               lambda: read_headers(index_path, shard_paths, read_ahead=False),
                                               args.runs, before=evict)
    evict()
    read_checkpoint(root)
    scanned_resident = resident_bytes_of(every_file)
    evict()
    read_headers(index_path, shard_paths, read_ahead=False)
    random_resident = resident_bytes_of(every_file)
    startup = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.runs)
    stats = timed(lambda: [os.stat(p) for p in shard_paths], args.runs)
    floor = timed(lambda: parse_all(headers, json.loads), args.runs)
    decode = timed(lambda: parse_all(headers, msgspec.json.decode), args.runs)

    med = statistics.median
    apparent = sum(s.size_bytes for s in facts.shards)

    def row(label: str, figure: tuple[list[float], list[float]], digits: int = 3) -> str:
        wall, cpu = figure
        return (f"| {label} | {min(wall):.{digits}f} | {med(wall):.{digits}f} | {min(cpu):.{digits}f} | "
                f"{med(cpu):.{digits}f} |")

    lines = [
        "## Header scan (read_checkpoint) of a 1,000-shard sparse checkpoint",
        "",
        f"* Date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"* Machine: {machine()}; load average at the end of the run: {os.getloadavg()[0]:.1f}",
        f"* Command: `python benchmarks/bench_header_scan.py --runs {args.runs} --layers {args.layers} "
        f"--experts {args.experts} --shards {args.shards}`",
        f"* Checkpoint: {len(facts.shards):,} shards, {apparent / 1e12:.3f} TB apparent "
        f"({apparent / 2**40:.3f} TiB), {len(facts.tensors):,} tensors "
        f"({args.layers} layers x {args.experts} experts, block-FP8 with F32 scales), "
        f"{sum(s.header_bytes for s in facts.shards) / 1e6:.1f} MB of headers and a "
        f"{index_bytes / 1e6:.1f} MB index; cached in {folder}",
        f"* Page cache: warm (one untimed warm-up call before the {args.runs} timed calls of each figure), "
        f"except the cold rows, before each of whose calls the checkpoint's {len(every_file):,} files are "
        f"dropped from it (the two cold floors alternate, pair by pair); resident bytes of those files "
        f"just after a drop {_mb(cold_resident)}, after one cold scan {_mb(scanned_resident)}, after "
        f"the cold reads with read-ahead off {_mb(random_resident)} (mincore)",
        "",
        "| figure | wall min s | wall median s | CPU min s | CPU median s |",
        "| --- | --- | --- | --- | --- |",
        row("read_checkpoint (listing, index, 1,000 headers, every rule, facts)", scan),
        row("read_checkpoint, cold: the checkpoint's files dropped from the page cache before each call",
            scan_cold),
        row("floor, cold: the same drop, then only reading the index and each shard's length and header",
            reads_cold),
        row("option not taken: the same cold reads with the kernel's read-ahead off", reads_cold_random),
        row("anchor: `python -c pass` start-up", startup),
        row("anchor: os.stat of every shard", stats, 4),
        row("floor: plain json.loads of the index and the 1,000 headers (in memory, collector paused)", floor),
        row("floor: msgspec untyped decode of the same bytes (in memory, collector paused)", decode),
        "",
        f"* Ratio scan / `python -c pass` (wall medians): {med(scan[0]) / med(startup[0]):.1f}",
        f"* Ratio scan / plain json.loads floor (wall medians): {med(scan[0]) / med(floor[0]):.2f}",
        f"* Ratio scan / msgspec decode floor (wall medians): {med(scan[0]) / med(decode[0]):.2f}",
        f"* Cold scan: {med(scan_cold[0]):.3f} s median, {med(scan_cold[0]) - med(scan[0]):+.3f} s against warm; "
        f"its cold reads alone {med(reads_cold[0]):.3f} s (ratio cold scan / cold reads "
        f"{med(scan_cold[0]) / med(reads_cold[0]):.2f})",
        f"* Cold reads with read-ahead off / on, median of {args.runs} paired ratios: wall "
        f"{med(map(_ratio, reads_cold_random[0], reads_cold[0])):.2f}, CPU "
        f"{med(map(_ratio, reads_cold_random[1], reads_cold[1])):.2f}",
        f"* Target: under {TARGET_S:.0f} s -> warm {_verdict(scan)} "
        f"(wall median {med(scan[0]):.3f} s, CPU median {med(scan[1]):.3f} s); cold {_verdict(scan_cold)} "
        f"(wall median {med(scan_cold[0]):.3f} s)",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results:
        args.results.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
