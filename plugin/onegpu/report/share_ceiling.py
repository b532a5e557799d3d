"""Pure: the summary-share.md lines of the link ceiling and the measured rates against it. Numbers and kit words
only (onegpu.report.share_shapes): the link's basis is one of three words, the rows' names one of a few."""
from __future__ import annotations

from onegpu.evidence.receipt_schema import ReceiptData
from onegpu.plan.ceiling_record import percent
from onegpu.report.share_shapes import WITHHELD, as_dict, finite, gib, number

BASES = ("MEASURED", "ASSUMED", "UNKNOWN")
RUNS, RATES = ("canary", "batch"), ("decode", "prefill")


def _word(value, allowed: tuple[str, ...]) -> str:
    return value if value in allowed else WITHHELD


def ceiling_share_lines(receipt: ReceiptData) -> list[str]:
    """The link, the bytes a step reads, the upper bounds; then each measured rate as a share of its bound."""
    c = as_dict(receipt.get("ceiling"))
    if not c:
        return ["- not computed"]
    if c.get("label") == "not computed":
        return ["- not computed: the link ceiling is computed for the one-GPU protocol only"]
    link, steps = as_dict(c.get("link")), as_dict(c.get("step_bytes"))
    if c.get("offloaded") is False:
        return ["- nothing is offloaded: no weight crosses the link in a forward step, so the link bounds no rate"]
    lines = [f"- link {_word(link.get('basis'), BASES)} {number(link.get('gbps'), ' GB/s', 1)} (PCIe "
             f"{number(finite(link.get('gen')))}.0 x{number(finite(link.get('width')))}); a one-token decode step "
             f"reads at least {gib(steps.get('1'))} over it, a {number(finite(c.get('chunk_tokens')))}-token prefill "
             f"chunk {gib(c.get('chunk_bytes'))}"]
    decode = as_dict(c.get("decode_tps"))
    lines += [f"- UPPER BOUND decode at {number(int(b)) if b.isdigit() else WITHHELD} sequence(s) a step: at most "
              f"{number(decode.get(b), ' tokens/s')}" for b in decode if isinstance(b, str)]
    lines.append(f"- UPPER BOUND prefill: at most {number(c.get('prefill_tps'), ' tokens/s')}")
    lines += [f"- UPPER BOUND time to first token for a {number(int(p)) if p.isdigit() else WITHHELD}-token prompt: "
              f"at least {number(s, ' s')}" for p, s in as_dict(c.get("ttft_s")).items() if isinstance(p, str)]
    for row in receipt.get("rates_vs_ceiling") or []:
        r = as_dict(row)
        share = finite(r.get("fraction"))
        if share is None:
            continue
        lines.append(f"- measured {_word(r.get('run'), RUNS)} {_word(r.get('rate'), RATES)}: at least "
                     f"{number(r.get('measured_tps'), ' tokens/s')} = {percent(share)} of its upper bound "
                     f"{number(r.get('ceiling_tps'), ' tokens/s')}"
                     + (" (ABOVE THE CEILING: the model of the link is contradicted)" if share > 1 else ""))
    return lines
