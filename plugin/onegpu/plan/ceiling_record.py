"""Pure: the link ceiling as the receipt keeps it and the terminal shows it.

The receipt's "ceiling" section holds the inputs (the bytes a step reads, the routing, the link and how it is known)
beside the upper bounds, so a reader can redo every division. After a run, the rates the canary and the batch
measured are set against the ceilings as fractions of them (onegpu.record.rates).
"""
from __future__ import annotations

import math

from onegpu.core.units import gib, size_text
from onegpu.plan.ceiling import Ceilings, Link, LinkBytes, ceiling_rules_json, ceilings, link_bytes

UPPER = "UPPER BOUND"
SERVE_WINDOW_CALLS = 4  # the serve window's outstanding calls (KIT.md 7)


def _tps(value: float | None) -> str:
    if value is None:
        return "unknown (no link bandwidth)"
    if math.isinf(value):
        return "not bound by the link (nothing is offloaded)"
    return f"{value:,.2f} tokens/s"


def _seconds(value: float | None) -> str:
    if value is None:
        return "unknown (no link bandwidth)"
    return f"{value:,.2f} s" if value >= 0.01 else f"{value * 1000:.3g} ms"


def _size(nbytes: int | None) -> str:
    """Below a GiB in MiB (a tiny model's step is a few MiB, not '0.00 GiB')."""
    return "unknown" if nbytes is None else size_text(nbytes)


def link_line(link: Link) -> str:
    now = (f"; NVML reads PCIe {link.current_gen}.0 x{link.current_width} now (an idle card may run its link slower)"
           if link.current_gen and (link.current_gen, link.current_width) != (link.gen, link.width) else "")
    measured = "" if link.basis == "MEASURED" else f"; {link.measured_note}"
    bandwidth = f"{link.gbps:.1f} GB/s" if link.gbps is not None else "unknown"
    return f"link {link.basis} {bandwidth}: {link.how}{now}{measured}"


def traffic_line(traffic: LinkBytes, steps: dict[int, int], chunk: int, chunk_bytes: int) -> str:
    routing = (f"routed experts {_size(traffic.expert_bytes)} in {traffic.moe_layers} offloaded MoE layers x "
               f"{traffic.top_k}/{traffic.experts} a token" if traffic.experts else
               f"routed experts {_size(traffic.expert_bytes)} (routing unknown: counted whole)")
    one = steps.get(1)
    return (f"bytes over the link, at least: a decode step of one token {_size(one)} (offloaded dense parameters "
            f"{_size(traffic.dense_bytes)} whole + {routing}); a prefill chunk of {chunk:,} tokens {_size(chunk_bytes)}")


def ceiling_lines(traffic: LinkBytes, link: Link, c: Ceilings, max_num_seqs: int = 1) -> list[str]:
    """Fact lines: the link, the bytes, then every ceiling, each labelled an upper bound."""
    if not c.offloaded:
        return [link_line(link), "nothing is offloaded: no weight crosses the link in a forward step, so the link "
                                 "bounds no rate (the GPU's own speed does)"]
    lines = [link_line(link), traffic_line(traffic, c.step_bytes, c.chunk_tokens, c.chunk_bytes)]
    for batch, tps in c.decode_tps.items():
        what = (f"one sequence (the launch's --max-num-seqs {max_num_seqs}: the canary and the batch send one request "
                "at a time)" if batch == 1 else
                f"{batch} sequences a step (the serve window's {batch} outstanding calls, were the engine launched "
                f"with --max-num-seqs {batch})")
        lines.append(f"{UPPER} decode, {what}: at most {_tps(tps)}")
    lines.append(f"{UPPER} prefill at the {c.chunk_tokens:,}-token chunk: at most {_tps(c.prefill_tps)}")
    for prompt, seconds in c.ttft_s.items():
        lines.append(f"{UPPER} time to first token for a {prompt:,}-token prompt (the context: the longest prompt the "
                     f"launch admits; the kit counts no prompt's tokens before the run): at least {_seconds(seconds)}")
    return lines


def ceiling_record(traffic: LinkBytes, link: Link, c: Ceilings) -> dict:
    """The receipt's "ceiling" section."""
    return {"label": f"{UPPER}S, never predictions", "link": {
                "gbps": link.gbps, "basis": link.basis, "how": link.how, "gen": link.gen, "width": link.width,
                "current_gen": link.current_gen, "current_width": link.current_width,
                "nominal_gbps": link.nominal_gbps, "measurement": link.measurement,
                "not_measured": link.measured_note or None},
            "traffic": {"expert_bytes": traffic.expert_bytes, "dense_bytes": traffic.dense_bytes,
                        "experts": traffic.experts, "top_k": traffic.top_k, "moe_layers": traffic.moe_layers,
                        "dense_layers": traffic.dense_layers},
            "decode_tps": {str(b): v for b, v in c.decode_tps.items()},
            "step_bytes": {str(b): v for b, v in c.step_bytes.items()},
            "prefill_tps": c.prefill_tps, "chunk_tokens": c.chunk_tokens, "chunk_bytes": c.chunk_bytes,
            "ttft_s": {str(p): v for p, v in c.ttft_s.items()}, "offloaded": c.offloaded,
            "rules": ceiling_rules_json()}


def percent(fraction: float) -> str:
    """A share as a percentage: one decimal from 1 %, two significant digits below (a CPU double's rate is a few
    millionths of a GPU link's bound, not 0.0 %)."""
    value = 100 * fraction
    return f"{value:.1f}%" if value >= 1 or value == 0 else f"{value:.2g}%"


def plan_ceiling(plan, config: dict, link: Link, chunk: int) -> dict:
    """The decode (one sequence) and prefill upper bounds of one offload plan on `link`: how a choice moves them."""
    traffic = link_bytes(plan, config or {})
    c = ceilings(traffic, link, chunk)
    return {"decode_tps": c.decode_tps[1], "prefill_tps": c.prefill_tps, "chunk_tokens": chunk,
            "step_bytes": c.step_bytes[1], "chunk_bytes": c.chunk_bytes, "offloaded": c.offloaded,
            "link_gbps": link.gbps, "link_basis": link.basis}


def plan_ceiling_text(bound: dict, base: dict | None = None) -> str:
    """'decode at most X tokens/s, prefill at most Y (a step reads Z over the link ...)', and how it moved from
    `base` (the proposal's own)."""
    if not bound["offloaded"]:
        return "nothing offloaded: the link bounds no rate"
    moved = ""
    if base and base.get("offloaded") and bound["decode_tps"] and base.get("decode_tps"):
        moved = f"; decode bound x{bound['decode_tps'] / base['decode_tps']:.2f} the proposal's"
    link = "unknown" if bound["link_gbps"] is None else f"{bound['link_gbps']:.1f} GB/s"
    return (f"{UPPER}S: decode at most {_tps(bound['decode_tps'])}, prefill at most {_tps(bound['prefill_tps'])} at "
            f"the {bound['chunk_tokens']:,}-token chunk (a one-token step reads {gib(bound['step_bytes'])} over the "
            f"link, {bound['link_basis']} {link}){moved}")
