"""The link ceiling where people read it: report.html's section and bars, summary-share.md's lines, compare's rows.
The receipts are built with the kit's own record functions from a worked example (every figure derived here)."""
from __future__ import annotations

import re

from onegpu.plan.ceiling import Link, LinkBytes, ceilings
from onegpu.plan.ceiling_record import ceiling_lines, ceiling_record
from onegpu.record.rates import measured_against
from onegpu.record.receipt import ReceiptRecord, record_of
from onegpu.record.sections_requests import RequestSummary
from onegpu.report.ceiling_view import ceiling_section
from onegpu.report.compare import ceiling_lines as compare_lines
from onegpu.report.rates_svg import rates_plot
from onegpu.report.share_ceiling import ceiling_share_lines

GIB = 2**30
PRIVATE_FOLDER = "/home/operator/runs/20261206T101010Z-secret"
# 2 GiB dense + 64 experts top-4 of 48 GiB: a one-token step reads 2 + 3 = 5 GiB
TRAFFIC = LinkBytes(expert_bytes=48 * GIB, dense_bytes=2 * GIB, experts=64, top_k=4, moe_layers=8, dense_layers=8)
LINK = Link(25.0, "MEASURED", f"measured by the runtime probe of run folder {PRIVATE_FOLDER}", gen=4, width=16)
DECODE_BOUND = 25e9 / (5 * GIB)  # 4.66 tokens/s


def receipt_with(decode_tps: float | None, prompt_tps: float | None = None) -> ReceiptRecord:
    bounds = ceilings(TRAFFIC, LINK, 2048, (1, 4), (8192,))
    record = {**ceiling_record(TRAFFIC, LINK, bounds), "lines": ceiling_lines(TRAFFIC, LINK, bounds)}
    ceiling = record_of({"ceiling": record}).ceiling
    rows = measured_against(ceiling, RequestSummary(output_tokens_per_s=decode_tps, prompt_tokens_per_s=prompt_tps),
                            "batch")
    return ReceiptRecord(ceiling=ceiling, rates_vs_ceiling=rows, phases={}, tests={})


def bar_widths(svg: str) -> list[float]:
    return [float(w) for w in re.findall(r'class="og-rate" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)"', svg)]


def test_the_section_shows_the_bounds_their_rules_and_the_measured_share():
    html = ceiling_section(receipt_with(DECODE_BOUND / 4))
    assert "UPPER BOUNDS, never predictions" in html and "at most 4.66 tokens/s" in html
    assert "vllm/model_executor/layers/fused_moe/fused_moe.py:_prepare_expert_assignment" in html
    assert "<td>25.0%</td>" in html and "<td>MEASURED</td>" in html and "og-alarm" not in html
    svg = rates_plot(receipt_with(DECODE_BOUND / 4).rates_vs_ceiling or [])
    assert svg is not None and svg.startswith("<svg") and "http" not in svg.replace('role="img"', "")
    # one row, scaled to its own bound: the bar is a quarter of the track (plot width 900 - 150 - 250 = 500)
    assert bar_widths(svg) == [125.0]


def test_a_rate_above_the_bound_is_an_alarm_and_a_red_bar_past_the_line():
    receipt = receipt_with(DECODE_BOUND * 1.5)
    html = ceiling_section(receipt)
    assert "og-alarm" in html and "ABOVE the link ceiling" in html and "ABOVE THE CEILING" in html
    svg = rates_plot(receipt.rates_vs_ceiling or [])
    assert svg is not None and 'fill="#c0392b"' in svg and "150.0%" in svg
    # the axis stretches to 150 %: the bound sits at 2/3 of the track, the bar fills it
    assert bar_widths(svg) == [500.0] and 'x1="483.3"' in svg


def test_a_scan_shows_the_bounds_and_says_no_rate_was_measured():
    html = ceiling_section(receipt_with(None))
    assert "no rate measured in this session" in html and rates_plot([]) is None


def test_the_multi_gpu_protocol_says_not_computed():
    html = ceiling_section(record_of({"ceiling": {"label": "not computed",
                                                  "why": "the 2-GPU protocol (TP 2 x PP 1): ..."}}))
    assert "not computed: the 2-GPU protocol" in html


def test_the_share_lines_hold_numbers_and_kit_words_only():
    lines = ceiling_share_lines(receipt_with(DECODE_BOUND / 4, 100.0))
    text = "\n".join(lines)
    assert lines[0] == ("- link MEASURED 25.0 GB/s (PCIe 4.0 x16); a one-token decode step reads at least 5.00 GiB "
                        "over it, a 2,048-token prefill chunk 50.00 GiB")
    assert "- UPPER BOUND decode at 1 sequence(s) a step: at most 4.66 tokens/s" in lines
    assert "- measured batch decode: at least 1.16 tokens/s = 25.0% of its upper bound 4.66 tokens/s" in lines
    assert PRIVATE_FOLDER not in text and "runtime probe" not in text  # the link's own words stay private
    assert "ABOVE THE CEILING" in "\n".join(ceiling_share_lines(receipt_with(DECODE_BOUND * 2)))


def test_compare_puts_the_bounds_and_shares_side_by_side():
    lines = compare_lines(receipt_with(DECODE_BOUND / 4), receipt_with(DECODE_BOUND / 2))
    assert lines[0] == "link ceiling (UPPER BOUNDS) and measured shares"
    assert ("  measured batch decode: 1.16 tokens/s = 25.0% of its bound -> 2.33 tokens/s = 50.0% of its bound"
            in lines)
    assert compare_lines(receipt_with(1.0), receipt_with(1.0))[1] == "  the same"
