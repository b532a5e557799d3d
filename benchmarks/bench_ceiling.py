"""The link ceiling of the two demo checkpoints (MiMo-V2.6 Pro and Flash, header-only), next to the public figures
it must agree with. Not a timing benchmark: a record of what the plan computes, and of what it costs to compute.

For each demo: its own settings (the offload budget the demo ships) and two alternatives the operator would weigh
(every decoder layer offloaded, and only the routed experts offloaded with the same budget, the selective offload),
each on a PCIe 4.0 x16 link at the public 25 GB/s and a PCIe 5.0 x16 link at the public 56 GB/s (pinned
host-to-device copies, nvbandwidth). Printed beside them: the routed-expert bytes one token touches in all layers
(the public figures: about 11 GB for Pro, 5 GB for Flash) and what the public offload run measured (decode at about
96 % of the gen-4 x16 practical peak, i.e. below a bound like these, as a bound must be).

The planning of each case is timed next to `python -c pass` in the same run (the anchor).

    python benchmarks/bench_ceiling.py [--results FILE]  (a markdown section for benchmarks/RESULTS.md)
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from onegpu.checkpoint.scan import read_checkpoint  # noqa: E402
from onegpu.plan.capacity import kit_plan, plan_for  # noqa: E402
from onegpu.plan.ceiling import Link, ceilings, is_routed_expert, link_bytes  # noqa: E402
from onegpu.plan.settings import load_settings  # noqa: E402

GIB = 2**30
LINKS = {"PCIe 4.0 x16": 25.0, "PCIe 5.0 x16": 56.0}  # GB/s, the public pinned host-to-device figures
PUBLIC_TOKEN_GB = {"pro": 11.0, "flash": 5.0}  # routed experts one token touches in all layers, public figures
RUNS = 5


def demo(model: str, where: Path) -> tuple[Path, Path]:
    folder = where / model
    subprocess.run([sys.executable, str(ROOT / "examples" / "make_mimo_checkpoint.py"), "--model", model, "--out",
                    str(folder)], check=True, capture_output=True)
    return folder, folder.with_name(folder.name + ".settings.json")


def cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.machine())


def anchor_s() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


def cases(ckpt, settings) -> dict:
    """name -> offload plan: the demo's settings, every layer offloaded, the experts only with the same budget."""
    budget = round(settings.cpu_offload_gib * GIB)
    everything = kit_plan(ckpt, 2**62)
    experts = sorted({p.local.rsplit(".", 1)[-1] for p in everything.offloaded if is_routed_expert(p.local)})
    return {f"demo settings ({settings.cpu_offload_gib:g} GiB)": plan_for(settings, ckpt),
            "every decoder layer": everything,
            f"experts only ({settings.cpu_offload_gib:g} GiB, --cpu-offload-params)":
                kit_plan(ckpt, budget, selected=tuple(experts))}


def measure(model: str, where: Path) -> tuple[list[str], float, float]:
    folder, settings_path = demo(model, where)
    ckpt, settings = read_checkpoint(folder), load_settings(settings_path)
    rows, timed = [], []
    for _ in range(RUNS):
        started = time.perf_counter()
        planned = {name: link_bytes(plan, ckpt.config) for name, plan in cases(ckpt, settings).items()}
        timed.append(time.perf_counter() - started)
    touched = None
    for name, traffic in planned.items():
        one = traffic.per_step(1)
        bounds = {link: ceilings(traffic, Link(gbps, "ASSUMED", link), settings.prefill_chunk_tokens, (1, 4),
                                 (settings.context_tokens,)) for link, gbps in LINKS.items()}
        decode = " / ".join(f"{b.decode_tps[1]:.2f}" for b in bounds.values())
        decode4 = " / ".join(f"{b.decode_tps[4]:.2f}" for b in bounds.values())
        prefill = " / ".join(f"{b.prefill_tps:,.0f}" for b in bounds.values())
        ttft = " / ".join(f"{b.ttft_s[settings.context_tokens]:,.0f}" for b in bounds.values())
        rows.append(f"| {model} | {name} | {traffic.dense_bytes / GIB:,.2f} | {traffic.expert_bytes / GIB:,.2f} | "
                    f"{one / GIB:,.2f} | {decode} | {decode4} | {prefill} | {ttft} |")
        if name == "every decoder layer" and traffic.top_k and traffic.experts:
            touched = traffic.expert_bytes * traffic.top_k / traffic.experts
    return rows, touched or 0.0, statistics.median(timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, help="write the markdown section to this file too")
    args = parser.parse_args()
    anchors = [anchor_s() for _ in range(RUNS)]
    out = [f"### Link ceilings of the demo checkpoints ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
           f"* Machine: {cpu_name()}, {os.cpu_count()} CPUs visible, Python {platform.python_version()}, "
           f"{platform.platform()}",
           "* Command: `python benchmarks/bench_ceiling.py`",
           f"* Links: {', '.join(f'{k} at {v:g} GB/s' for k, v in LINKS.items())} (public pinned host-to-device "
           "figures); bounds are given as 4.0 / 5.0", "",
           "| demo | offload | dense offloaded GiB | routed experts offloaded GiB | one-token step reads GiB | "
           "decode, 1 seq, tok/s at most | decode, 4 seqs, tok/s at most | prefill tok/s at most | time to first "
           "token for the context, s at least |", "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    with tempfile.TemporaryDirectory(prefix="onegpu-bench-ceiling-") as tmp:
        for model in ("pro", "flash"):
            rows, touched, plan_s = measure(model, Path(tmp))
            out += rows
            notes.append(f"* {model}: routed experts one token touches in all layers {touched / 1e9:.2f} GB (public "
                         f"figure about {PUBLIC_TOKEN_GB[model]:g} GB); planning the three cases {plan_s:.3f} s "
                         f"median of {RUNS} = {plan_s / statistics.median(anchors):.1f} x `python -c pass` "
                         f"({statistics.median(anchors):.3f} s in the same run)")
    out += ["", *notes]
    text = "\n".join(out) + "\n"
    print(text)
    if args.results:
        args.results.write_text(text)


if __name__ == "__main__":
    main()
