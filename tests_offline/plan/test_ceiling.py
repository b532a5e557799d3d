"""The link ceiling (onegpu.plan.ceiling, ceiling_record, onegpu.record.rates): the bytes an offloaded forward step reads over PCIe, the
link's bandwidth and how it is known, the upper bounds, and measured rates set against them. Every expected figure
is worked out here from the rule, not read back from the code."""
from __future__ import annotations

import math

import msgspec
import pytest
from msgspec import structs

from onegpu.plan.capacity import kit_plan
from onegpu.plan.ceiling import (
    Link,
    LinkBytes,
    ceilings,
    link_bytes,
    link_from_gpu,
    nominal_gbps,
    prefill_seconds,
    routing_of,
)
from onegpu.plan.ceiling_record import ceiling_lines, ceiling_record
from onegpu.record.rates import measured_against, measured_lines
from onegpu.record.sections_insight import Ceiling
from onegpu.record.sections_requests import RequestSummary
from tests_offline.capacity_facts import LLAMA_CONFIG, checkpoint_facts, gpu_device

GIB = 2**30


def pcie(gen, width, max_gen=None, max_width=None):
    return structs.replace(gpu_device(), pcie_link_gen=gen, pcie_link_width=width,
                           pcie_max_link_gen=max_gen or gen, pcie_max_link_width=max_width or width)


@pytest.mark.parametrize("gen, width, expected", [
    (3, 16, 8 * 128 / 130 / 8 * 16),  # 15.75 GB/s
    (4, 16, 16 * 128 / 130 / 8 * 16),  # 31.5 GB/s
    (5, 16, 32 * 128 / 130 / 8 * 16),  # 63.0 GB/s
    (4, 8, 16 * 128 / 130 / 8 * 8),
    (1, 16, 2.5 * 0.8 / 8 * 16),  # 8b/10b
    (6, 16, 64 * 242 / 256 / 8 * 16),  # FLIT mode
])
def test_the_nominal_rate_follows_the_generation_and_width(gen, width, expected):
    assert nominal_gbps(gen, width) == pytest.approx(expected)


def test_no_generation_or_width_is_no_nominal_rate():
    assert nominal_gbps(None, 16) is None and nominal_gbps(4, None) is None and nominal_gbps(9, 16) is None


def test_an_unmeasured_link_takes_the_public_practical_share_and_says_assumed():
    gen4, gen5 = link_from_gpu(pcie(4, 16)), link_from_gpu(pcie(5, 16))
    assert (gen4.basis, gen5.basis) == ("ASSUMED", "ASSUMED")
    # the public figures themselves: 25 GB/s on gen 4 x16, 56 GB/s on gen 5 x16 (nominal 31.5 and 63.0, rounded)
    assert gen4.gbps == pytest.approx(25.0 * nominal_gbps(4, 16) / 31.5)
    assert gen5.gbps == pytest.approx(56.0 * nominal_gbps(5, 16) / 63.0)
    assert "NOT MEASURED" in gen4.measured_note and "ASSUMED practical share" in gen4.how


def test_the_maximum_link_is_used_and_an_idle_downtrained_one_is_named():
    idle = link_from_gpu(pcie(1, 16, max_gen=5))  # cards drop to gen 1 when idle; the maximum is what loads see
    assert (idle.gen, idle.current_gen) == (5, 1) and idle.gbps == pytest.approx(56.0 * nominal_gbps(5, 16) / 63)
    bound = ceilings(LinkBytes(0, GIB, None, None, 0, 1), idle, 2048)
    assert "NVML reads PCIe 1.0 x16 now" in ceiling_lines(LinkBytes(0, GIB, None, None, 0, 1), idle, bound)[0]


def test_a_measurement_replaces_the_assumption():
    link = link_from_gpu(pcie(4, 16), {"gbps": 24.6, "bytes": 256 * 2**20, "repeats": 5, "seconds": [0.011]})
    assert (link.basis, link.gbps, link.measured_note) == ("MEASURED", 24.6, "")
    assert "the best of 5 copies of 256 MiB" in link.how


def test_no_link_facts_is_unknown_and_every_bound_unknown():
    link = link_from_gpu(gpu_device())  # NVML read no PCIe facts
    assert (link.basis, link.gbps) == ("UNKNOWN", None)
    c = ceilings(LinkBytes(GIB, GIB, 8, 2, 1, 1), link, 2048, (1, 4), (8192,))
    assert c.decode_tps == {1: None, 4: None} and c.prefill_tps is None and c.ttft_s == {8192: None}
    assert all("unknown (no link bandwidth)" in line for line in ceiling_lines(LinkBytes(GIB, GIB, 8, 2, 1, 1), link,
                                                                               c)[2:])


def test_a_step_touches_k_of_e_experts_for_one_token_and_all_for_a_long_chunk():
    traffic = LinkBytes(expert_bytes=384 * GIB, dense_bytes=10 * GIB, experts=384, top_k=8, moe_layers=64,
                        dense_layers=64)
    assert traffic.per_step(1) == 10 * GIB + 8 * GIB  # k/E of the experts
    four = 1 - (1 - 8 / 384) ** 4  # distinct experts for 4 tokens under uniform routing
    assert traffic.per_step(4) == 10 * GIB + math.ceil(384 * GIB * four)
    assert 4 * 8 / 384 > four > 8 / 384  # fewer than 4k distinct: some overlap
    assert traffic.per_step(4096) == pytest.approx(394 * GIB, rel=1e-9)  # every expert
    unknown = LinkBytes(expert_bytes=GIB, dense_bytes=0, experts=None, top_k=None, moe_layers=1, dense_layers=0)
    assert unknown.per_step(1) == GIB  # routing unknown: the most that can be read


def test_the_bytes_split_by_how_the_kernels_read_them():
    """Two layers offloaded of a four-layer MoE: each has a 0.5 GiB o_proj (dense) and 2 experts x 3 projections
    of 0.25 GiB (w13 1 GiB, w2 0.5 GiB, routed)."""
    table = {}
    for i in range(4):
        table[f"model.layers.{i}.self_attn.o_proj.weight"] = ("BF16", [GIB // 4096, 1024])
        for e in range(2):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                table[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] = ("BF16", [GIB // 8192, 1024])
    config = {**LLAMA_CONFIG, "num_hidden_layers": 4, "num_experts": 2, "num_experts_per_tok": 1}
    plan = kit_plan(checkpoint_facts(table, config=config), 4 * GIB)
    traffic = link_bytes(plan, config)
    assert (traffic.dense_bytes, traffic.expert_bytes) == (2 * GIB // 2, 3 * GIB)
    assert (traffic.experts, traffic.top_k, traffic.moe_layers, traffic.dense_layers) == (2, 1, 2, 2)
    assert traffic.per_step(1) == GIB + 3 * GIB // 2


def test_routing_is_read_from_the_config_or_its_text_config():
    assert routing_of({"n_routed_experts": 256, "num_experts_per_tok": 8}) == (256, 8)
    assert routing_of({"text_config": {"num_local_experts": 128, "num_experts_per_tok": 4}}) == (128, 4)
    assert routing_of({"num_experts": True}) == (None, None)  # a flag is no count


def test_the_bounds_divide_the_bytes_by_the_link():
    traffic = LinkBytes(expert_bytes=48 * GIB, dense_bytes=2 * GIB, experts=64, top_k=4, moe_layers=8,
                        dense_layers=8)
    link = Link(25.0, "MEASURED", "a test's figure")
    c = ceilings(traffic, link, 1000, (1, 4), (2500,))
    one = 2 * GIB + 48 * GIB * 4 // 64
    assert c.step_bytes[1] == one and c.decode_tps[1] == pytest.approx(25e9 / one)
    assert c.decode_tps[4] == pytest.approx(4 * 25e9 / traffic.per_step(4))
    assert c.prefill_tps == pytest.approx(1000 * 25e9 / traffic.per_step(1000))
    # 2,500 tokens: two full chunks and one of 500
    assert c.ttft_s[2500] == pytest.approx((2 * traffic.per_step(1000) + traffic.per_step(500)) / 25e9)
    assert prefill_seconds(link, traffic, 2000, 1000) == pytest.approx(2 * traffic.per_step(1000) / 25e9)


def test_nothing_offloaded_bounds_nothing():
    c = ceilings(LinkBytes(0, 0, 8, 2, 0, 0), Link(25.0, "ASSUMED", "x"), 2048)
    assert not c.offloaded and math.isinf(c.decode_tps[1])
    lines = ceiling_lines(LinkBytes(0, 0, 8, 2, 0, 0), Link(25.0, "ASSUMED", "x"), c)
    assert "nothing is offloaded" in lines[1]
    record = msgspec.convert(ceiling_record(LinkBytes(0, 0, 8, 2, 0, 0), Link(25.0, "ASSUMED", "x"), c), Ceiling)
    assert measured_against(record, RequestSummary(output_tokens_per_s=100.0), "batch") == []


def record_of(decode: float, prefill: float) -> Ceiling:
    traffic = LinkBytes(GIB, GIB, 8, 2, 1, 1)
    record = ceiling_record(traffic, Link(25.0, "ASSUMED", "x"), ceilings(traffic, Link(25.0, "ASSUMED", "x"), 512))
    return msgspec.convert({**record, "decode_tps": {"1": decode}, "prefill_tps": prefill}, Ceiling)


def test_measured_rates_are_fractions_of_the_bounds():
    rows = measured_against(record_of(10.0, 400.0), RequestSummary(output_tokens_per_s=2.5, prompt_tokens_per_s=100.0),
                            "batch")
    assert [(r.rate, r.fraction, r.status) for r in rows] == [("decode", 0.25, "below the ceiling"),
                                                             ("prefill", 0.25, "below the ceiling")]
    assert measured_lines(rows)[0].startswith("batch decode: measured at least 2.50 tokens/s = 25.0% of the link's "
                                              "upper bound 10.00 tokens/s (link ASSUMED)")


def test_a_rate_above_its_bound_is_called_a_contradiction():
    rows = measured_against(record_of(10.0, 400.0), RequestSummary(output_tokens_per_s=12.0), "canary")
    assert len(rows) == 1 and rows[0].fraction == 1.2
    assert (rows[0].status or "").startswith("ABOVE THE CEILING") and "ABOVE THE CEILING" in measured_lines(rows)[0]


def test_no_rate_or_no_bound_is_no_row():
    assert measured_against(record_of(10.0, 400.0), RequestSummary(output_tokens_per_s=None), "batch") == []
    assert measured_against(None, RequestSummary(output_tokens_per_s=1.0), "batch") == []
    assert measured_against(Ceiling(label="not computed"), RequestSummary(output_tokens_per_s=1.0), "batch") == []


def test_a_tiny_share_keeps_its_digits():
    """A CPU double's rate against a GPU link's bound is millionths: shown and kept as such, never 0.0 %."""
    from onegpu.plan.ceiling_record import percent

    rows = measured_against(record_of(48_486_193.65, 400.0), RequestSummary(output_tokens_per_s=166.844), "canary")
    fraction = rows[0].fraction
    assert fraction == 3.441e-06 and percent(fraction) == "0.00034%"
    assert (percent(0.25), percent(1.5), percent(0.0)) == ("25.0%", "150.0%", "0.0%")
