"""Pure: the link ceiling in report.html: the upper bounds with their inputs and rules, then the rates a run
measured set against them, in a table and as bars. A rate above its bound is shown as the contradiction it is."""
from __future__ import annotations

from onegpu.plan.ceiling_record import percent
from onegpu.record.receipt import ReceiptRecord
from onegpu.report.parts import absent, e, section, table
from onegpu.report.rates_svg import rates_plot

TITLE = "Link ceiling: how fast it could possibly answer (UPPER BOUNDS, never predictions)"
WHY = ("With vLLM's weight offload the GPU reads every offloaded weight over PCIe in the forward steps that use it, "
       "so the bytes a step reads divided by the link's bandwidth bound the rate from above. Compute, activations "
       "and the weights on the card are left out: a real engine is slower, never faster.")


def ceiling_section(receipt: ReceiptRecord) -> str:
    record = receipt.ceiling
    if record is None:
        return section("ceiling", TITLE, absent(receipt, "plan", "no link ceiling"))
    if record.label == "not computed":
        return section("ceiling", TITLE, f'<p class="og-notrun-text">not computed: {e(record.why)}</p>')
    lines = "".join(f"<li>{e(line)}</li>" for line in record.lines or [])
    rules = table(["rule", "what the bound takes", "where vLLM does it"],
                  [[r.rule, r.text, ", ".join(r.sources or []) or "the kit's assumption"] for r in record.rules or []])
    return section("ceiling", TITLE, f'<p class="og-note">{e(WHY)}</p><ul>{lines}</ul>'
                   f"<h4>The rules the bytes are counted by</h4>{rules}{measured(receipt)}")


def measured(receipt: ReceiptRecord) -> str:
    rows = receipt.rates_vs_ceiling or []
    if not rows:
        return ('<h4>Measured against the ceiling</h4><p class="og-notrun-text">no rate measured in this session '
                "(the canary and the batch measure them)</p>")
    shown = table(["run", "rate", "measured, tokens/s (a lower bound)", "upper bound, tokens/s", "share", "link",
                   "status", "how it is measured"],
                  [[r.run, r.rate, f"{r.measured_tps:,.2f}", f"{r.ceiling_tps:,.2f}",
                    "unknown" if r.fraction is None else percent(r.fraction), r.link_basis, r.status, r.why]
                   for r in rows])
    above = [r for r in rows if (r.fraction or 0) > 1]
    alarm = (f'<p class="og-alarm">{len(above)} measured rate(s) ABOVE the link ceiling: the model of the link (its '
             "bandwidth, or the bytes a step reads) is contradicted by this run</p>" if above else "")
    return f"<h4>Measured against the ceiling</h4>{alarm}{shown}{rates_plot(rows) or ''}"
