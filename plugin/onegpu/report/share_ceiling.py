"""Pure: the summary-share.md lines of the link ceiling and the measured rates against it. Numbers and kit words
only (onegpu.report.share_shapes): the link's basis is one of three words, the rows' names one of a few."""
from __future__ import annotations

from onegpu.plan.ceiling_record import percent
from onegpu.record.receipt import ReceiptRecord
from onegpu.record.sections_insight import CeilingLink
from onegpu.report.share_shapes import WITHHELD, finite, gib, number

BASES = ("MEASURED", "ASSUMED", "UNKNOWN")
RUNS, RATES = ("canary", "batch"), ("decode", "prefill")


def _word(value: str | None, allowed: tuple[str, ...]) -> str:
    return value if value is not None and value in allowed else WITHHELD


def ceiling_share_lines(receipt: ReceiptRecord) -> list[str]:
    """The link, the bytes a step reads, the upper bounds; then each measured rate as a share of its bound."""
    c = receipt.ceiling
    if c is None:
        return ["- not computed"]
    if c.label == "not computed":
        return ["- not computed: the link ceiling is computed for the one-GPU protocol only"]
    link, steps = c.link if c.link is not None else CeilingLink(), c.step_bytes or {}
    if c.offloaded is False:
        return ["- nothing is offloaded: no weight crosses the link in a forward step, so the link bounds no rate"]
    lines = [f"- link {_word(link.basis, BASES)} {number(link.gbps, ' GB/s', 1)} (PCIe "
             f"{number(finite(link.gen))}.0 x{number(finite(link.width))}); a one-token decode step "
             f"reads at least {gib(steps.get('1'))} over it, a {number(finite(c.chunk_tokens))}-token prefill "
             f"chunk {gib(c.chunk_bytes)}"]
    decode = c.decode_tps or {}
    lines += [f"- UPPER BOUND decode at {number(int(b)) if b.isdigit() else WITHHELD} sequence(s) a step: at most "
              f"{number(tps, ' tokens/s')}" for b, tps in decode.items()]
    lines.append(f"- UPPER BOUND prefill: at most {number(c.prefill_tps, ' tokens/s')}")
    lines += [f"- UPPER BOUND time to first token for a {number(int(p)) if p.isdigit() else WITHHELD}-token prompt: "
              f"at least {number(s, ' s')}" for p, s in (c.ttft_s or {}).items()]
    for r in receipt.rates_vs_ceiling or []:
        share = finite(r.fraction)
        if share is None:
            continue
        lines.append(f"- measured {_word(r.run, RUNS)} {_word(r.rate, RATES)}: at least "
                     f"{number(r.measured_tps, ' tokens/s')} = {percent(share)} of its upper bound "
                     f"{number(r.ceiling_tps, ' tokens/s')}"
                     + (" (ABOVE THE CEILING: the model of the link is contradicted)" if share > 1 else ""))
    return lines
