"""Capacity verdicts over plain facts (KIT.md 5), each number worked out in the test."""
import math

import pytest

from devkit.synth import write_checkpoint
from onegpu.checkpoint.model import QuantFacts
from onegpu.checkpoint.scan import read_checkpoint
from onegpu.plan.capacity import CHECKS, GPU_CHECKS, capacity_table, capacity_verdicts, table_title
from onegpu.plan.kvcache import kv_cache_estimate
from onegpu.plan.offload import engine_layout, offload_plan
from onegpu.plan.offload_rules import RULES, rules_json
from onegpu.plan.vllm_versions import DECLARED, accounting_for, assumed_newest
from tests_offline.capacity_facts import (
    LLAMA_CONFIG,
    checkpoint_facts,
    gpu_device,
    host,
    layers_table,
    settings_with,
    with_pinning,
)

GIB, MIB, KIB = 2**30, 2**20, 2**10


def by_check(verdicts):
    return {v.check: v for v in verdicts}


def judge(settings, table=None, gpu=None, host_facts=None, disk=50 * GIB, kv=None, config=None, **kw):
    ckpt = checkpoint_facts(table if table is not None else layers_table(10, 4), config=config)
    kv = kv or kv_cache_estimate(ckpt.config, settings.context_tokens, settings.kv_cache_dtype,
                                 settings.prefill_chunk_tokens)
    return by_check(capacity_verdicts(settings, gpu or gpu_device(), host_facts or host(), ckpt, kv, disk, **kw))


def test_every_check_is_judged_in_order_and_a_pass_never_says_fits():
    verdicts = capacity_verdicts(settings_with(), gpu_device(), host(), checkpoint_facts(layers_table(10, 4)),
                                 kv_cache_estimate(LLAMA_CONFIG, 8192, None, 2048), 50 * GIB)
    assert [v.check for v in verdicts] == list(CHECKS)
    assert all(v.status == "OK" for v in verdicts), [v for v in verdicts if v.status != "OK"]
    assert not any("fits" in v.message or "fit " in v.message for v in verdicts)
    assert all(v.message.startswith("no definite failure") for v in verdicts
               if v.check in ("gpu_weights", "kv_cache", "host_offload", "host_ram", "disk"))
    table = capacity_table(verdicts)
    assert table[0].split() == ["check", "status", "numbers"] and len(table) == len(CHECKS) + 1
    assert "never 'fits'" in table_title(assumed_newest())


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0", "0.34.0"])
def test_gpu_budget_is_085_of_the_card_minus_the_assumed_reserve(version):
    v = judge(settings_with(), accounting=accounting_for(version, DECLARED, "test"))["gpu_budget"]
    # ceil(96 GiB x 0.85) = 81.6 GiB (vLLM's request_memory rounds up); minus the ASSUMED 8 GiB reserve = 73.6 GiB
    assert v.numbers["target_bytes"] == math.ceil(96 * GIB * 0.85)
    assert v.numbers["budget_bytes"] == math.ceil(96 * GIB * 0.85) - 8 * GIB
    assert v.numbers["reserve_assumed"] is True and "ASSUMED" in v.message
    stated = judge(settings_with(gpu_reserve_gib=4))["gpu_budget"]
    assert stated.numbers["budget_bytes"] == math.ceil(96 * GIB * 0.85) - 4 * GIB and "ASSUMED" not in stated.message
    assert v.numbers["kv_sizing"] == ("extensible" if version == "0.34.0" else "estimate")


def test_on_034_a_small_card_is_bound_by_its_headroom_less_the_margin_floor():
    """0.34's extensible cache gets min(requested, headroom - max(1 GiB, 0.75 x peak)) - the peak
    (extensible_kv_cache.py:measure_kv_cache_bytes): on a 6 GiB card 0.15 x total is under the 1 GiB floor."""
    small = gpu_device(total_gib=6, free_gib=6)
    v34 = judge(settings_with(gpu_reserve_gib=1), gpu=small, accounting=accounting_for("0.34.0", DECLARED, "t"))
    v33 = judge(settings_with(gpu_reserve_gib=1), gpu=small, accounting=accounting_for("0.33.0", DECLARED, "t"))
    assert v34["gpu_budget"].numbers["budget_bytes"] == 6 * GIB - GIB - GIB  # headroom 5 GiB - reserve 1 GiB
    assert v34["gpu_budget"].numbers["budget_binding"] == "device headroom"
    assert v33["gpu_budget"].numbers["budget_bytes"] == math.ceil(6 * GIB * 0.85) - GIB
    assert "device headroom" in v34["gpu_budget"].message and "margin floor" in v34["gpu_budget"].message


def test_a_busy_card_is_refused_at_start_before_034_and_shrinks_the_budget_from_034_on():
    busy = gpu_device(total_gib=96, free_gib=60)  # another process holds 36 GiB
    v33 = judge(settings_with(), gpu=busy, accounting=accounting_for("0.33.0", DECLARED, "t"))
    v34 = judge(settings_with(), gpu=busy, accounting=accounting_for("0.34.0", DECLARED, "t"))
    assert (v33["gpu_free"].status, v33["gpu_free"].code) == ("BLOCKED", "INSUFFICIENT_VRAM")
    assert v34["gpu_free"].status == "OK" and "does not refuse" in v34["gpu_free"].message
    # 0.34: free 60 GiB - the 1 GiB margin floor = 59 GiB < 81.6 GiB requested; minus the 8 GiB reserve
    assert v34["gpu_budget"].numbers["budget_bytes"] == 59 * GIB - 8 * GIB


def test_weights_left_on_the_gpu_above_the_budget_are_insufficient_vram():
    # 30 layers x 4 GiB + 1 GiB embedding = 121 GiB; offload 40 GiB -> 81 GiB on the GPU > 73.6 GiB budget
    v = judge(settings_with(cpu_offload_gib=40, container_ram_gib=64), layers_table(30, 4))["gpu_weights"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_VRAM")
    assert v.numbers["weight_bytes"] == 121 * GIB
    assert v.numbers["gpu_resident_bytes"] == 81 * GIB
    budget = math.ceil(96 * GIB * 0.85) - 8 * GIB
    assert v.numbers["over_bytes"] == 81 * GIB - budget
    assert "exceeds the GPU budget" in v.message and "by 7.40 GiB" in v.message


def test_offload_moves_decoder_layers_only_never_the_embedding():
    # 2 layers x 4 GiB + 1 GiB embedding; an offload budget of 20 GiB can move only the 8 GiB of layers
    v = judge(settings_with(cpu_offload_gib=20, container_ram_gib=64), layers_table(2, 4))["gpu_weights"]
    assert v.numbers["offloaded_bytes"] == 8 * GIB and v.numbers["gpu_resident_bytes"] == 1 * GIB
    assert "the only ones vLLM's offloader moves" in v.message


def test_kv_that_does_not_fit_beside_the_weights_is_blocked():
    # 17 x 4 + 1 = 69 GiB on the GPU; KV for 1,048,576 tokens of the 2-layer Llama shape is about 2 GiB
    # (2 layers x 2 KV heads x (128 + 128) x 2 B = 2,048 B per token; onegpu.plan.kvcache adds vLLM's block rounding):
    # 69 + 2 = 71 <= 73.6: passes. The sum is what this test is about; the KV figure is onegpu.plan.kvcache's own.
    kv = kv_cache_estimate(LLAMA_CONFIG, 1048576, None, 2048)
    assert abs(kv.bytes - 2 * GIB) < 64 * MIB
    ok = judge(settings_with(context_tokens=1048576), layers_table(17, 4))["kv_cache"]
    assert ok.status == "OK" and ok.numbers["kv_bytes"] == kv.bytes and ok.numbers["need_bytes"] == 69 * GIB + kv.bytes
    # 18 x 4 + 1 = 73 GiB + 2 GiB = 75 GiB > 73.6 GiB
    v = judge(settings_with(context_tokens=1048576), layers_table(18, 4))["kv_cache"]
    assert (v.status, v.code) == ("BLOCKED", "KV_DOES_NOT_FIT")
    assert v.numbers["need_bytes"] == 73 * GIB + kv.bytes
    assert v.numbers["over_bytes"] == 73 * GIB + kv.bytes - (math.ceil(96 * GIB * 0.85) - 8 * GIB)


def test_unknown_kv_is_an_unknown_row_not_a_pass():
    settings = settings_with()
    ckpt = checkpoint_facts(layers_table(2, 1), config={"num_attention_heads": 8, "torch_dtype": "bfloat16"})
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    v = by_check(capacity_verdicts(settings, gpu_device(), host(), ckpt, kv, 50 * GIB))["kv_cache"]
    assert v.status == "UNKNOWN" and "num_hidden_layers" in v.message


def test_offload_must_fit_inside_the_ram_cap_minus_the_containers_own_needs():
    # cap 64 GiB - 8 GiB ASSUMED own needs = 56 GiB of room; offloading 60 GiB of layers does not go in
    v = judge(settings_with(cpu_offload_gib=60, container_ram_gib=64), layers_table(30, 4))["host_offload"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_HOST_RAM")
    assert v.numbers["room_bytes"] == 56 * GIB and v.numbers["offloaded_bytes"] == 60 * GIB
    assert "ASSUMED" in v.message and "CUDA host context" in v.message


def test_a_cap_below_the_containers_own_needs_blocks_even_without_offload():
    # nothing offloaded, but a 2 GiB cap cannot hold the 8 GiB ASSUMED for the engine process itself
    v = judge(settings_with(cpu_offload_gib=0, container_ram_gib=2))["host_offload"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_HOST_RAM")
    assert "RAM cap 2.00 GiB minus" in v.message and v.numbers["need_bytes"] - v.numbers["container_ram_cap_bytes"] \
        == 6 * GIB
    assert judge(settings_with(cpu_offload_gib=0, container_ram_gib=8))["host_offload"].status == "OK"


def test_cap_plus_headroom_must_fit_in_the_hosts_available_ram():
    # cap 200 + headroom 16 = 216 GiB > 200 GiB available
    v = judge(settings_with(container_ram_gib=200), host_facts=host(available_gib=200))["host_ram"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_HOST_RAM")
    assert v.numbers["need_bytes"] == 216 * GIB and "short by 16.00 GiB" in v.message
    stated = judge(settings_with(container_ram_gib=64), host_facts=host(available_gib=512, stated=True))["host_ram"]
    assert stated.status == "OK" and "stated by the operator" in stated.message


def test_unknown_host_ram_of_a_replayed_profile_is_unknown_with_the_way_out():
    v = judge(settings_with(), host_facts=host(available_gib=None))["host_ram"]
    assert v.status == "UNKNOWN" and "--host-ram-gib" in v.message


def test_cgroup_limit_below_cap_plus_headroom_is_blocked():
    v = judge(settings_with(container_ram_gib=64), host_facts=host(cgroup_limit_gib=48))["cgroup"]
    assert (v.status, v.code) == ("BLOCKED", "CGROUP_LIMIT")
    assert v.numbers["need_bytes"] == 80 * GIB and v.numbers["cgroup_limit_bytes"] == 48 * GIB
    assert judge(settings_with(), host_facts=host(cgroup_limit_gib=None))["cgroup"].status == "OK"


def test_run_folder_disk_under_the_stated_need_is_disk_full():
    v = judge(settings_with(), disk=512 * MIB)["disk"]
    assert (v.status, v.code) == ("BLOCKED", "DISK_FULL") and "at least 1.00 GiB" in v.message
    assert judge(settings_with(), disk=None)["disk"].status == "UNKNOWN"


def test_unrecognised_quantization_is_an_unknown_row():
    settings = settings_with()
    unknown = QuantFacts("awq-ish", None, False, "quantization method 'awq-ish' is not one the kit reads")
    ckpt = checkpoint_facts(layers_table(2, 1), quant=unknown)
    v = by_check(capacity_verdicts(settings, gpu_device(), host(), ckpt,
                                   kv_cache_estimate(LLAMA_CONFIG, 8192, None, 2048), GIB))["quantization"]
    assert v.status == "UNKNOWN" and "awq-ish" in v.message


def test_driver_free_memory_below_the_utilization_target_is_blocked():
    # vLLM (0.32, 0.33) refuses to start when free < 0.85 x total: 96 x 0.85 = 81.6 GiB > 80 GiB free
    v = judge(settings_with(), gpu=gpu_device(96, free_gib=80),
              accounting=accounting_for("0.33.0", DECLARED, "test"))["gpu_free"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_VRAM") and v.numbers["need_bytes"] == math.ceil(96 * GIB * 0.85)


def test_no_selected_gpu_makes_gpu_rows_unknown_and_still_judges_the_host():
    settings = settings_with(container_ram_gib=200)
    ckpt = checkpoint_facts(layers_table(2, 1))
    verdicts = by_check(capacity_verdicts(settings, None, host(available_gib=100), ckpt,
                                          kv_cache_estimate(LLAMA_CONFIG, 8192, None, 2048), GIB,
                                          gpu_missing_reason="BLOCKED NO_NVIDIA_DRIVER: NVML could not be loaded"))
    for check in GPU_CHECKS:
        assert verdicts[check].status == "UNKNOWN" and "NO_NVIDIA_DRIVER" in verdicts[check].message
        assert set(verdicts[check].numbers) == {"accounting"}  # no number is invented, only the rules named
    assert verdicts["host_ram"].code == "INSUFFICIENT_HOST_RAM"


def expert_table(layers: int = 2, experts: int = 8) -> dict:
    """Per layer: a 2 KiB norm, then 8 experts x (gate, up, down) of 768 x 1024 BF16 = 1.5 MiB each."""
    table = {}
    for i in range(layers):
        table[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", [1024])
        for e in range(experts):
            for proj, shape in (("gate_proj", [768, 1024]), ("up_proj", [768, 1024]), ("down_proj", [1024, 768])):
                table[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"] = ("BF16", shape)
    table["lm_head.weight"] = ("BF16", [4096, 1024])
    table["model.mtp.layers.0.eh_proj.weight"] = ("BF16", [1024, 2048])
    return table


EXPERTS = "mlp.experts.routed_experts"


def test_engine_parameters_stack_the_experts_and_follow_the_registration_order():
    layout = engine_layout(checkpoint_facts(expert_table()))
    # per layer: w13 = 8 experts x (gate + up) x 1.5 MiB = 24 MiB, w2 = 8 x 1.5 MiB = 12 MiB, then the norm (the
    # decoder layer registers attention, MLP, then its norms); lm_head stays, the MTP layer is not loaded
    assert [(p.name, p.nbytes) for p in layout.layers] == [
        (f"model.layers.0.{EXPERTS}.w13_weight", 24 * MIB), (f"model.layers.0.{EXPERTS}.w2_weight", 12 * MIB),
        ("model.layers.0.input_layernorm.weight", 2 * KIB),
        (f"model.layers.1.{EXPERTS}.w13_weight", 24 * MIB), (f"model.layers.1.{EXPERTS}.w2_weight", 12 * MIB),
        ("model.layers.1.input_layernorm.weight", 2 * KIB)]
    assert layout.stays_bytes == 8 * MIB and layout.draft_bytes == 4 * MIB
    assert layout.layers[0].local == f"{EXPERTS}.w13_weight"  # what --cpu-offload-params segments match


def test_whole_parameters_move_in_order_until_the_budget_is_crossed_and_each_is_pinned_rounded():
    plan = offload_plan(checkpoint_facts(expert_table()), 50 * MIB)
    # 24 MiB + 12 MiB + 2 KiB < 50 MiB -> layer 1's w13 (24 MiB) crosses it and moves whole; then nothing more
    assert [p.name for p in plan.offloaded][-1] == f"model.layers.1.{EXPERTS}.w13_weight"
    assert plan.offloaded_bytes == 60 * MIB + 2 * KIB and len(plan.offloaded) == 4
    # rounded: 24 -> 32 MiB, 12 -> 16 MiB, 2 KiB, 24 -> 32 MiB; exact: the logical bytes
    assert plan.pinned_rounded_bytes == 80 * MIB + 2 * KIB and plan.pinned_exact_bytes == 60 * MIB + 2 * KIB
    # the worst moment: layer 1's w13 pinned (80 MiB + 2 KiB in all) while its 24 MiB pageable copy is alive
    assert plan.peak_bytes == 104 * MIB + 2 * KIB
    assert (plan.layers_on_cpu, plan.partial_layer, plan.partial_on_cpu) == ([0], 1, [f"{EXPERTS}.w13_weight"])
    # loaded = 2 x (36 MiB + 2 KiB) + lm_head 8 MiB (the 4 MiB MTP layer is not loaded); minus the offload
    assert plan.loaded_bytes == 80 * MIB + 4 * KIB and plan.gpu_resident_bytes == 20 * MIB + 2 * KIB
    exact = offload_plan(checkpoint_facts(expert_table()), 50 * MIB, "exact")
    assert exact.pinned_bytes == 60 * MIB + 2 * KIB and exact.peak_bytes == 84 * MIB + 2 * KIB


def test_the_ram_cap_holds_the_pinned_bytes_not_the_budget():
    table = expert_table()
    # cap 8 GiB + 70 MiB: room for the 60 MiB the budget moves, not for the 104 MiB + 2 KiB peak of pinning it
    v = judge(settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=8 + 70 / 1024), table)["host_offload"]
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_HOST_RAM")
    assert (v.numbers["offloaded_bytes"], v.numbers["pinned_bytes"], v.numbers["peak_bytes"]) == (
        60 * MIB + 2 * KIB, 80 * MIB + 2 * KIB, 104 * MIB + 2 * KIB)
    assert v.numbers["need_bytes"] == 8 * GIB + 104 * MIB + 2 * KIB and v.numbers["pinning_confirmed"] is True
    for shown in ("0.06 GiB logical", "pinned 0.08 GiB", "power of two", "CachingHostAllocator", "ASSUMED"):
        assert shown in v.message
    ok = judge(settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=8 + 110 / 1024), table)["host_offload"]
    assert ok.status == "OK" and ok.message.startswith("no definite failure")


def test_exact_pinning_counts_the_parameters_own_size_and_says_it_is_unconfirmed():
    settings = with_pinning(settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=8 + 90 / 1024), "exact")
    verdicts = judge(settings, expert_table())
    v = verdicts["host_offload"]
    assert v.status == "OK" and v.numbers["pinned_bytes"] == 60 * MIB + 2 * KIB
    assert v.numbers["peak_bytes"] == 84 * MIB + 2 * KIB and v.numbers["pinning_confirmed"] is False
    assert "UNCONFIRMED" in v.message and "rounded it would be 0.08 GiB" in v.message
    assert "UNCONFIRMED" in verdicts["offload_plan"].message


def test_host_ram_and_the_cgroup_count_the_pinned_need_where_it_exceeds_the_cap():
    cap = 8 + 70 / 1024
    settings = settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=cap, host_headroom_gib=16)
    # cap + headroom = 24 GiB + 70 MiB fits in 24 GiB + 100 MiB; the pinned need 8 GiB + 104 MiB + 2 KiB does not
    verdicts = judge(settings, expert_table(), host_facts=host(available_gib=24 + 100 / 1024, cgroup_limit_gib=24.1))
    need = 8 * GIB + 104 * MIB + 2 * KIB + 16 * GIB
    assert (verdicts["host_ram"].code, verdicts["host_ram"].numbers["need_bytes"]) == ("INSUFFICIENT_HOST_RAM", need)
    assert "pinned need" in verdicts["host_ram"].message and "counts instead" in verdicts["host_ram"].message
    assert (verdicts["cgroup"].code, verdicts["cgroup"].numbers["need_bytes"]) == ("CGROUP_LIMIT", need)


def test_the_offload_plan_names_the_layers_on_the_cpu_and_what_stays_on_the_gpu():
    v = judge(settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=9), expert_table())["offload_plan"]
    assert v.status == "OK" and v.message.startswith(assumed_newest().label)
    assert "decoder layers 0 whole, layer 1 in part (1 of its 3 parameters, up to " \
           f"{EXPERTS}.w13_weight)" in v.message
    assert "0.02 GiB of weights stay on the GPU" in v.message and "draft (MTP) layers" in v.message
    assert "'Total CPU offloaded parameters: 0.06'" in v.message  # logical GiB, as format_gib prints them
    assert v.numbers["gpu_resident_bytes"] == 20 * MIB + 2 * KIB and v.numbers["layers_on_cpu"] == 1


def test_selective_offload_offers_only_the_named_segments():
    plan = offload_plan(checkpoint_facts(expert_table()), 50 * MIB, selected=("experts",))
    assert [p.local for p in plan.offloaded] == [f"{EXPERTS}.w13_weight", f"{EXPERTS}.w2_weight",
                                                 f"{EXPERTS}.w13_weight"]
    # "w2_weight" matches whole segments only: never a w2_weight_scale
    assert offload_plan(checkpoint_facts(expert_table()), GIB, selected=("w2",)).offloaded == []


MIMO_LAYER = {  # one MiMo-style sliding-window MoE layer, in the checkpoint's (alphabetical) order
    "model.layers.0.input_layernorm.weight": ("BF16", [256]),
    "model.layers.0.mlp.experts.0.down_proj.weight": ("U8", [256, 64]),
    "model.layers.0.mlp.experts.0.down_proj.weight_scale": ("U8", [256, 4]),
    "model.layers.0.mlp.experts.0.gate_proj.weight": ("U8", [128, 128]),
    "model.layers.0.mlp.experts.0.gate_proj.weight_scale": ("U8", [128, 8]),
    "model.layers.0.mlp.experts.0.up_proj.weight": ("U8", [128, 128]),
    "model.layers.0.mlp.experts.0.up_proj.weight_scale": ("U8", [128, 8]),
    "model.layers.0.mlp.gate.e_score_correction_bias": ("F32", [1]),
    "model.layers.0.mlp.gate.weight": ("BF16", [1, 256]),
    "model.layers.0.post_attention_layernorm.weight": ("BF16", [256]),
    "model.layers.0.self_attn.attention_sink_bias": ("BF16", [4]),
    "model.layers.0.self_attn.o_proj.weight": ("BF16", [256, 256]),
    "model.layers.0.self_attn.qkv_proj.weight": ("F8_E4M3", [384, 256]),
    "model.layers.0.self_attn.qkv_proj.weight_scale_inv": ("F32", [3, 2]),
    "model.embed_tokens.weight": ("BF16", [64, 256]),
}
FP8_MXFP4 = QuantFacts("fp8", "mxfp4", True, "fp8 (e4m3, 128x128 weight blocks); weights stored as mxfp4")


def test_a_mimo_layer_is_offloaded_in_the_order_the_engine_registers_its_parameters():
    ckpt = checkpoint_facts(MIMO_LAYER, config={**LLAMA_CONFIG, "num_hidden_layers": 1}, quant=FP8_MXFP4)
    order = [p.local for p in engine_layout(ckpt).layers]
    # MiMoV2Attention's own sink, qkv_proj, o_proj, the Attention's four fp8 KV scales; then the router gate and the
    # experts as Mxfp4MoEMethod.create_weights registers them; the two norms last
    assert order == ["self_attn.attention_sink_bias", "self_attn.qkv_proj.weight",
                     "self_attn.qkv_proj.weight_scale_inv", "self_attn.o_proj.weight", "self_attn.attn.q_scale",
                     "self_attn.attn.k_scale", "self_attn.attn.v_scale", "self_attn.attn.prob_scale",
                     "mlp.gate.weight", "mlp.gate.e_score_correction_bias", f"{EXPERTS}.w13_weight",
                     f"{EXPERTS}.w13_weight_scale", f"{EXPERTS}.w2_weight", f"{EXPERTS}.w2_weight_scale",
                     "input_layernorm.weight", "post_attention_layernorm.weight"]
    sizes = {p.local: p.nbytes for p in engine_layout(ckpt).layers}
    assert sizes[f"{EXPERTS}.w13_weight"] == 2 * 128 * 128 and sizes["self_attn.attn.k_scale"] == 4


@pytest.mark.parametrize("version, words", [
    ("0.32.0", "0.32: replace_parameter registers a new parameter object for every replace"),
    ("0.33.0", "0.33: replace_parameter keeps the object"),
    ("0.34.0", "0.34: replace_parameter keeps the object")])
def test_the_repack_is_unknown_for_mxfp4_experts_and_known_for_unquantized_weights(version, words):
    accounting = accounting_for(version, DECLARED, "test")
    verdicts = by_check(capacity_verdicts(settings_with(cpu_offload_gib=1), gpu_device(), host(),
                                          checkpoint_facts(MIMO_LAYER, config={**LLAMA_CONFIG, "num_hidden_layers": 1},
                                                           quant=FP8_MXFP4),
                                          kv_cache_estimate(LLAMA_CONFIG, 8192, None, 2048), GIB,
                                          accounting=accounting))
    mxfp4 = verdicts["repack"]
    assert mxfp4.status == "UNKNOWN" and mxfp4.code is None
    experts = 2 * 128 * 128 + 2 * 128 * 8 + 256 * 64 + 256 * 4
    assert mxfp4.numbers["offloaded_expert_bytes"] == experts
    for shown in ("Marlin", "DeepGEMM", "Humming", "replace_parameter", words, accounting.label):
        assert shown in mxfp4.message
    # the re-pin: the four expert parameters pinned again, each rounded up to a power of two, a POSSIBLE cost shown
    # beside the host verdicts and not counted in them
    repin = 2 * 128 * 128 + 2 * 128 * 8 + 256 * 64 + 256 * 4  # 32768, 2048, 16384, 1024: powers of two already
    assert (mxfp4.numbers["repin_bytes"], mxfp4.numbers["repin_certainty"]) == (repin, "possible")
    host_row = verdicts["host_offload"]
    assert host_row.numbers["repin_bytes"] == repin and "not counted: a possible repack re-pin" in host_row.message
    assert host_row.numbers["need_bytes"] == host_row.numbers["peak_bytes"] + host_row.numbers["own_needs_bytes"]
    plain = judge(settings_with(cpu_offload_gib=50 / 1024, container_ram_gib=9), expert_table())["repack"]
    assert plain.status == "OK" and "UnquantizedLinearMethod" in plain.message
    assert judge(settings_with(), expert_table())["repack"].message.startswith("nothing is offloaded")


TOWERS = {"vision_config": {"depth": 1}, "audio_config": {}}


def omni_table() -> dict:
    table = layers_table(2, 1)
    table.update({"model.visual.patch_embed.proj.weight": ("BF16", [512, 1024]),
                  "model.visual.blocks.0.attn.qkv.weight": ("BF16", [1536, 1024]),
                  "audio_encoder.layers.0.fc1.weight": ("BF16", [1024, 1024]),
                  "audio_tokenizer.encoder.layers.0.weight": ("BF16", [256, 1024])})
    return table


def test_towers_are_left_out_by_language_model_only_and_otherwise_offloaded_first():
    ckpt = checkpoint_facts(omni_table(), config={**LLAMA_CONFIG, **TOWERS})
    plan = offload_plan(ckpt, 2 * GIB, language_model_only=True)
    assert plan.towers == {"vision tower": 4 * MIB, "audio tower": 2 * MIB}
    assert plan.offloaded[0].layer == 0 and plan.tower_offloaded_bytes == 0
    # towers (6 MiB) and the audio tokenizer the loader maps to nothing (0.5 MiB) are not loaded at all
    assert plan.loaded_bytes == ckpt.weight_bytes - 6 * MIB - MIB // 2
    without = offload_plan(ckpt, 2 * GIB, language_model_only=False)
    assert [p.module for p in without.offloaded[:3]] == ["vision tower", "vision tower", "audio tower"]
    assert without.offloaded[0].local == "visual.patch_embed.proj.weight"
    assert without.offloaded[3].module == "layer 0" and without.tower_offloaded_bytes == 6 * MIB
    v = judge(settings_with(cpu_offload_gib=2, container_ram_gib=64), omni_table(),
              config={**LLAMA_CONFIG, **TOWERS})["offload_plan"]
    assert "--language-model-only" in v.message and "left out" in v.message and v.numbers["towers_left_out"]


def test_draft_layers_numbered_past_the_decoder_are_neither_built_nor_offloaded():
    table = {**layers_table(2, 1), "model.layers.2.eh_proj.weight": ("BF16", [1024, 2048]),
             "model.layers.2.mlp.down_proj.weight": ("BF16", [1024, 1024])}
    plan = offload_plan(checkpoint_facts(table), 64 * GIB)
    assert plan.draft_bytes == 6 * MIB and {p.layer for p in plan.offloaded} == {0, 1}


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0", "0.34.0"])
def test_offload_rules_name_their_vllm_source(version):
    accounting = accounting_for(version, DECLARED, "test")
    doc = rules_json(accounting)
    assert doc["accounting"] == accounting.label == f"vLLM {version[:4]} accounting"
    assert doc["version"]["series"] == version[:4] and doc["version"]["basis"] == DECLARED
    keys = [r["rule"] for r in doc["rules"]]
    assert {"repack_version", "kv_block_size", "kv_requested"} <= set(keys)
    assert ("kv_after_warmup" in keys) == (version == "0.34.0") and ("kv_estimate" in keys) == (version != "0.34.0")
    assert all(r["sources"] for r in doc["rules"])
    for rule in RULES.values():
        assert rule.sources and all(":" in src or "(" in src for src in rule.sources), rule.key
    assert "uva.py:UVAOffloader._maybe_offload_to_cpu" in RULES["budget"].cite()
    assert "format_gib" in RULES["logged"].cite() and "replace_parameter" in RULES["repack"].cite()


def test_offload_follows_real_safetensors_headers(tmp_path):
    """The same plan from a header-only checkpoint on disk, read by the kit's own reader."""
    root = write_checkpoint(tmp_path / "ckpt", {**LLAMA_CONFIG, "architectures": ["LlamaForCausalLM"]},
                            expert_table(), shards=2)
    plan = offload_plan(read_checkpoint(root), 50 * MIB)
    assert (plan.offloaded_bytes, plan.pinned_rounded_bytes, plan.peak_bytes) == (
        60 * MIB + 2 * KIB, 80 * MIB + 2 * KIB, 104 * MIB + 2 * KIB)
