"""Capacity per rank of a TP x PP protocol, on synthetic checkpoints: each expected byte count is worked out here
from the tensors the test puts in the checkpoint and the vLLM rule it names, never from the code under test."""
import math

import pytest
from msgspec.structs import replace

from devkit.synth import moe_tensors, nbytes
from onegpu.checkpoint.model import TensorInfo
from onegpu.plan.capacity import CHECKS, GPU_CHECKS, capacity_verdicts, kit_plan
from onegpu.plan.kvcache import kv_cache_estimate
from onegpu.plan.parallel import parallel_capacity_verdicts, rank_plans, rank_rows
from onegpu.plan.parallel_rules import PARALLEL_RULES, parallel_rules_json
from onegpu.plan.rank_kv import rank_kv
from onegpu.plan.rank_share import SplitModel, pp_layer_range, rank_layout, tensor_share
from tests_offline.capacity_facts import checkpoint_facts, gpu_device, host, settings_with
from tests_offline.model_configs import MIMO_V2_FLASH

GIB, MIB, KIB = 2**30, 2**20, 2**10
EXPERTS = "mlp.experts.routed_experts"

# moe_tensors' defaults: hidden 256, 4 heads of 64 with 2 KV heads, 8 experts of intermediate 128, layer 0 dense
# (intermediate 512), vocab 1024 (a multiple of 64: no padding rows)
MOE_CONFIG = {"model_type": "qwen2_moe", "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
              "hidden_size": 256, "head_dim": 64, "torch_dtype": "bfloat16", "vocab_size": 1024,
              "moe_intermediate_size": 128, "intermediate_size": 512}


def moe(layers: int = 5, **config):
    table = moe_tensors(layers=layers)
    return table, checkpoint_facts(table, config={**MOE_CONFIG, "num_hidden_layers": layers, **config})


def size(table: dict, name: str) -> int:
    return nbytes(*table[name])


def gpus(*totals_gib: float) -> list:
    return [replace(gpu_device(total), index=i, uuid=f"GPU-{i}") for i, total in enumerate(totals_gib)]


def by_check(verdicts):
    return {v.check: v for v in verdicts}


def params(rank_layout_):
    return {p.name: p.nbytes for p in rank_layout_.layout.layers}


def test_tp1_pp1_is_the_one_gpu_plan_number_for_number():
    table, ckpt = moe()
    settings = settings_with(cpu_offload_gib=1 / 1024, context_tokens=4096)  # 1 MiB: cuts a layer in part
    kv = kv_cache_estimate(ckpt.config, 4096, None, 2048)
    one = kit_plan(ckpt, MIB)
    assert rank_plans(ckpt, 1, 1, MIB) == [one] and one.partial_layer is not None
    rl = rank_layout(ckpt, 1, 1, 0)
    assert rl.ckpt.weight_bytes == ckpt.weight_bytes
    assert (rl.embeddings_head_bytes, rl.other_stays_bytes) == (
        size(table, "model.embed_tokens.weight") + size(table, "lm_head.weight"), size(table, "model.norm.weight"))
    assert rl.embeddings_head_bytes + rl.other_stays_bytes == one.stays_bytes
    assert rank_kv(kv, ckpt.config, 1, 1, 0).bytes == kv.bytes
    single = by_check(capacity_verdicts(settings, gpu_device(), host(), ckpt, kv, 50 * GIB))
    parallel = by_check(parallel_capacity_verdicts(settings, [gpu_device()], host(), ckpt, kv, 50 * GIB, 1, 1))
    assert list(parallel) == list(CHECKS)
    for check in CHECKS:
        # every number of the one-GPU verdict is there, the same (the parallel verdict adds ranks and context)
        assert parallel[check].status == single[check].status, check
        if check != "offload_plan":  # the parallel plan's numbers are per rank and in total
            assert {k: parallel[check].numbers[k] for k in single[check].numbers} == single[check].numbers, check
    assert parallel["offload_plan"].numbers["offloaded_bytes"] == single["offload_plan"].numbers["offloaded_bytes"]


def test_tp2_halves_the_sharded_weights_and_keeps_norms_and_the_router_whole():
    table, ckpt = moe(layers=2)
    p = "model.layers.1."
    q, k, v = (size(table, f"{p}self_attn.{x}_proj.weight") for x in "qkv")
    gate_up = sum(size(table, f"{p}mlp.experts.{e}.{x}_proj.weight") for e in range(8) for x in ("gate", "up"))
    down = sum(size(table, f"{p}mlp.experts.{e}.down_proj.weight") for e in range(8))
    expected = {  # linear.py: column- and row-parallel halves; QKV with 2 KV heads over TP 2: one head each
        f"{p}self_attn.qkv_proj.weight": (q + k + v) // 2,
        f"{p}self_attn.o_proj.weight": size(table, f"{p}self_attn.o_proj.weight") // 2,
        f"{p}mlp.gate.weight": size(table, f"{p}mlp.gate.weight"),  # the router: whole on every rank
        f"{p}{EXPERTS}.w13_weight": gate_up // 2,  # FusedMoE: every expert, intermediate / TP
        f"{p}{EXPERTS}.w2_weight": down // 2,
        f"{p}mlp.shared_experts.gate_up_proj.weight": (size(table, f"{p}mlp.shared_experts.gate_proj.weight")
                                                       + size(table, f"{p}mlp.shared_experts.up_proj.weight")) // 2,
        f"{p}mlp.shared_experts.down_proj.weight": size(table, f"{p}mlp.shared_experts.down_proj.weight") // 2,
        f"{p}input_layernorm.weight": size(table, f"{p}input_layernorm.weight"),  # norms: whole
        f"{p}post_attention_layernorm.weight": size(table, f"{p}post_attention_layernorm.weight"),
    }
    for rank in (0, 1):
        rl = rank_layout(ckpt, 2, 1, rank)
        got = {name: n for name, n in params(rl).items() if name.startswith(p)}
        assert got == expected, rank
        # the vocabulary (1024 rows, already a multiple of 64) splits in half; the final norm stays whole
        assert rl.embeddings_head_bytes == (size(table, "model.embed_tokens.weight")
                                            + size(table, "lm_head.weight")) // 2
        assert rl.other_stays_bytes == size(table, "model.norm.weight")
        assert rl.counted_whole == () and rl.rounded_up == ()
    assert expected[f"{p}mlp.gate.weight"] == 8 * 256 * 2 and expected[f"{p}{EXPERTS}.w13_weight"] == 8 * 2 * 64 * 256 * 2


def test_the_vocabulary_is_padded_to_a_multiple_of_64_before_it_is_split():
    table = moe_tensors(layers=1, vocab=1000)
    ckpt = checkpoint_facts(table, config={**MOE_CONFIG, "num_hidden_layers": 1, "vocab_size": 1000})
    # vocab_parallel_embedding.py: pad_vocab_size(1000, 64) = 1024 rows, 512 per rank of TP 2, 256 hidden x 2 B each
    rl = rank_layout(ckpt, 2, 1, 1)
    assert rl.embeddings_head_bytes == 2 * 512 * 256 * 2
    # At TP 1 too (vLLM pads whatever the TP size): here the rank's plan and the one-GPU plan part by the 24 padding
    # rows of each matrix, which the one-GPU plan does not count.
    one_rank = rank_layout(ckpt, 1, 1, 0)
    assert one_rank.embeddings_head_bytes == 2 * 1024 * 256 * 2
    assert one_rank.layout.stays_bytes - kit_plan(ckpt, 0).stays_bytes == 2 * 24 * 256 * 2


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    table, ckpt = moe(layers=2)
    p = "model.layers.0.self_attn."
    q, k, v = (size(table, f"{p}{x}_proj.weight") for x in "qkv")
    # TP 4 over 2 KV heads: q in quarters, but each rank holds one whole KV head of k and v (half of each)
    assert params(rank_layout(ckpt, 4, 1, 3))[f"{p}qkv_proj.weight"] == q // 4 + k // 2 + v // 2
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    one_head = kv_cache_estimate({**ckpt.config, "num_key_value_heads": 1}, 8192, None, 2048)
    # each rank's cache is that of one KV head, at TP 2 and at TP 4 alike (max(1, 2 // 4) = 1)
    assert rank_kv(kv, ckpt.config, 2, 1, 1).bytes == one_head.bytes
    assert rank_kv(kv, ckpt.config, 4, 1, 3).bytes == one_head.bytes < kv.bytes


def test_mimo_hybrid_kv_at_tp8_keeps_one_head_of_each_kind_and_mla_latent_is_whole_on_every_rank():
    kv = kv_cache_estimate(MIMO_V2_FLASH, 32768, None, 2048)
    # full layers: 4 KV heads over TP 8 -> 1 (replicated); sliding: 8 over 8 -> 1
    one_each = kv_cache_estimate({**MIMO_V2_FLASH, "num_key_value_heads": 1, "swa_num_key_value_heads": 1},
                                 32768, None, 2048)
    assert rank_kv(kv, MIMO_V2_FLASH, 8, 1, 5).bytes == one_each.bytes
    mla = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "num_attention_heads": 8, "hidden_size": 512,
           "kv_lora_rank": 64, "qk_rope_head_dim": 16, "torch_dtype": "bfloat16"}
    latent = kv_cache_estimate(mla, 4096, None, 2048)
    assert rank_kv(latent, mla, 4, 1, 2).bytes == latent.bytes  # one latent per token, on every rank


def test_pp_splits_layers_by_vllms_remainder_rule():
    # distributed/utils.py:get_pp_indices: n // pp each, then partitions[-i] += 1 for i in 2 .. remainder + 1
    assert [pp_layer_range(5, s, 2) for s in range(2)] == [(0, 3), (3, 5)]  # [2, 2] -> [3, 2]
    assert [pp_layer_range(7, s, 4) for s in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 7)]  # [2, 2, 2, 1]
    assert [pp_layer_range(6, s, 4) for s in range(4)] == [(0, 1), (1, 3), (3, 5), (5, 6)]  # [1, 2, 2, 1]
    assert [pp_layer_range(5, s, 2, (1, 4)) for s in range(2)] == [(0, 1), (1, 5)]  # VLLM_PP_LAYER_PARTITION
    with pytest.raises(ValueError):
        pp_layer_range(5, 0, 2, (1, 3))


def test_pp2_puts_the_embedding_on_stage_0_and_the_head_and_final_norm_on_stage_1():
    table, ckpt = moe(layers=5)
    first, last = rank_layout(ckpt, 1, 2, 0), rank_layout(ckpt, 1, 2, 1)
    assert {p.layer for p in first.layout.layers} == {0, 1, 2} and {p.layer for p in last.layout.layers} == {3, 4}
    assert (first.embeddings_head_bytes, first.other_stays_bytes) == (size(table, "model.embed_tokens.weight"), 0)
    assert (last.embeddings_head_bytes, last.other_stays_bytes) == (size(table, "lm_head.weight"),
                                                                    size(table, "model.norm.weight"))
    # TP 1: every tensor on exactly one stage
    assert first.ckpt.weight_bytes + last.ckpt.weight_bytes == ckpt.weight_bytes
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    # one KV cache group of every layer: each stage's pool is its layers' share of the same blocks
    assert rank_kv(kv, ckpt.config, 1, 2, 0).bytes * 5 == kv.bytes * 3
    assert rank_kv(kv, ckpt.config, 1, 2, 1).bytes * 5 == kv.bytes * 2


def test_an_architecture_that_builds_its_ends_on_every_stage_is_counted_so():
    # qwen3_moe.py builds embed_tokens, norm and lm_head unconditionally: every PP stage holds all three.
    table, llama = moe(layers=5)
    qwen = replace(llama, architectures=["Qwen3MoeForCausalLM"])
    ends = size(table, "model.embed_tokens.weight") + size(table, "lm_head.weight")
    for rank in (0, 1):
        layout = rank_layout(qwen, 1, 2, rank)
        assert (layout.embeddings_head_bytes, layout.other_stays_bytes) == (ends, size(table, "model.norm.weight"))
        assert layout.ends_on_every_stage == "Qwen3MoeForCausalLM"
    assert rank_layout(llama, 1, 2, 0).ends_on_every_stage is None
    assert rank_layout(qwen, 1, 1, 0).ends_on_every_stage is None  # one stage holds them anyway


def test_tied_embeddings_are_built_on_the_last_stage_too():
    table = moe_tensors(layers=4, tied=True)
    ckpt = checkpoint_facts(table, config={**MOE_CONFIG, "num_hidden_layers": 4, "tie_word_embeddings": True})
    embed = size(table, "model.embed_tokens.weight")
    assert rank_layout(ckpt, 1, 2, 0).embeddings_head_bytes == embed
    assert rank_layout(ckpt, 1, 2, 1).embeddings_head_bytes == embed  # llama.py: the head shares it


def test_kv_of_several_groups_across_stages_is_unknown_not_a_guess():
    config = {"model_type": "gpt_oss", "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "hidden_size": 256, "sliding_window": 128, "torch_dtype": "bfloat16",
              "layer_types": ["sliding_attention", "full_attention"] * 2}
    kv = kv_cache_estimate(config, 8192, None, 2048)
    share = rank_kv(kv, config, 1, 2, 0)
    assert share.bytes is None and "get_kv_cache_configs" in share.unknown_reason
    assert rank_kv(kv, config, 2, 1, 0).bytes is not None  # one stage: the groups are the whole model's
    assert rank_kv(replace(kv, bytes=None, unknown_reason="x"), config, 2, 1, 0).unknown_reason == "x"


def test_the_host_counts_every_worker_pinned_bytes_and_own_needs():
    table, ckpt = moe(layers=5)
    settings = settings_with(cpu_offload_gib=1 / 1024, container_ram_gib=64)
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    plans = rank_plans(ckpt, 2, 2, MIB)
    assert all(p.offloaded for p in plans)
    v = by_check(parallel_capacity_verdicts(settings, gpus(96, 96, 96, 96), host(), ckpt, kv, 50 * GIB, 2, 2))
    offload = v["host_offload"]
    assert offload.numbers["pinned_bytes"] == sum(p.pinned_rounded_bytes for p in plans)
    assert offload.numbers["offloaded_bytes"] == sum(p.offloaded_bytes for p in plans)
    assert offload.numbers["own_needs_bytes"] == 4 * 8 * GIB
    assert offload.numbers["need_bytes"] == sum(p.peak_bytes for p in plans) + 4 * 8 * GIB
    assert "4-GPU protocol (TP 2 x PP 2)" in offload.message and "ASSUMED" in offload.message
    assert [r["pinned_bytes"] for r in offload.numbers["ranks"]] == [p.pinned_rounded_bytes for p in plans]
    # the cap no longer holds four workers' own needs: 4 x 8 GiB > 30 GiB
    small = by_check(parallel_capacity_verdicts(settings_with(cpu_offload_gib=1 / 1024, container_ram_gib=30),
                                                gpus(96, 96, 96, 96), host(), ckpt, kv, 50 * GIB, 2, 2))
    assert (small["host_offload"].status, small["host_offload"].code) == ("BLOCKED", "INSUFFICIENT_HOST_RAM")


def big_table(layers: int) -> dict:
    """A 1 GiB embedding (524,288 rows, a multiple of 64) and 4 GiB of down projection per layer."""
    table = {"model.embed_tokens.weight": ("BF16", [GIB // 2048, 1024])}
    table.update({f"model.layers.{i}.mlp.down_proj.weight": ("BF16", [1024, 2 * GIB // 1024]) for i in range(layers)})
    return table


def test_a_rank_over_its_gpu_budget_blocks_and_is_named():
    config = {"model_type": "llama", "num_hidden_layers": 10, "num_attention_heads": 8, "num_key_value_heads": 2,
              "hidden_size": 1024, "torch_dtype": "bfloat16"}
    ckpt = checkpoint_facts(big_table(10), config=config)
    settings = settings_with()
    kv = kv_cache_estimate(config, 8192, None, 2048)
    verdicts = parallel_capacity_verdicts(settings, gpus(96, 24), host(), ckpt, kv, 50 * GIB, 2, 1)
    assert [x.check for x in verdicts] == list(CHECKS)
    v = by_check(verdicts)["gpu_weights"]
    # row-parallel down_proj halves: 10 x 2 GiB + half the 1 GiB embedding on each rank
    resident = 20 * GIB + GIB // 2
    budget_24 = math.ceil(24 * GIB * 0.85) - 8 * GIB
    assert (v.status, v.code) == ("BLOCKED", "INSUFFICIENT_VRAM")
    assert v.numbers["worst_rank"] == 1 and v.numbers["over_bytes"] == resident - budget_24
    ranks = {r["rank"]: r for r in v.numbers["ranks"]}
    assert (ranks[0]["status"], ranks[1]["status"]) == ("OK", "BLOCKED")
    assert ranks[0]["gpu_resident_bytes"] == ranks[1]["gpu_resident_bytes"] == resident
    assert ranks[1]["gpu_index"] == 1 and ranks[1]["tp_rank"] == 1 and ranks[1]["pp_stage"] == 0
    assert "rank 1 (GPU index 1, TP rank 1, PP stage 0)" in v.message and "2-GPU protocol (TP 2 x PP 1)" in v.message
    both_big = by_check(parallel_capacity_verdicts(settings, gpus(96, 96), host(), ckpt, kv, 50 * GIB, 2, 1))
    assert all(both_big[c].status == "OK" for c in GPU_CHECKS)


def test_a_missing_gpu_makes_its_rank_unknown_and_a_split_vllm_refuses_blocks_the_plan():
    _, ckpt = moe(layers=2)
    settings = settings_with()
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    missing = by_check(parallel_capacity_verdicts(settings, [gpus(96)[0], None], host(), ckpt, kv, GIB, 2, 1))
    assert missing["gpu_free"].status == "UNKNOWN" and missing["gpu_free"].numbers["worst_rank"] == 1
    # 4 heads, 2 KV heads and a 1,024 vocabulary do not split over TP 3: vLLM's divide() refuses at load
    refused = by_check(parallel_capacity_verdicts(settings, gpus(96, 96, 96), host(), ckpt, kv, GIB, 3, 1))
    assert refused["offload_plan"].status == "BLOCKED" and refused["offload_plan"].code == "PARALLEL_SPLIT_REFUSED"
    for check in ("gpu_weights", "kv_cache"):  # no per-rank share exists to judge
        assert refused[check].status == "UNKNOWN" and "vLLM refuses this split" in refused[check].message, check
    assert "heads 4 are not divisible by TP 3 (linear.py:QKVParallelLinear.__init__)" in refused["offload_plan"].message
    assert "is not divisible by TP 3 (vocab_parallel_embedding.py:" in refused["offload_plan"].message


def test_stages_the_kit_cannot_place_are_unknown_not_a_refusal():
    # config.json without num_hidden_layers (a model may name it otherwise): vLLM may well load it, the kit
    # cannot say what each PP stage holds
    _, ckpt = moe(layers=2)
    config = {k: v for k, v in ckpt.config.items() if k != "num_hidden_layers"}
    unplaced = replace(ckpt, config=config)
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    verdicts = by_check(parallel_capacity_verdicts(settings_with(), gpus(96, 96), host(), unplaced, kv, GIB, 1, 2))
    assert verdicts["offload_plan"].status == "UNKNOWN" and verdicts["offload_plan"].code is None
    assert "cannot place the PP stages" in verdicts["offload_plan"].message
    assert all(verdicts[c].status == "UNKNOWN" for c in ("gpu_weights", "kv_cache", "host_offload", "host_ram"))


def test_expert_biases_follow_their_projection():
    def share(name, shape):
        t = TensorInfo(name, "BF16", shape, nbytes("BF16", shape), "s", "routed_experts", 0)
        return tensor_share(t, SplitModel.of(MOE_CONFIG, 4))

    # FusedMoE: w13's bias is split with its output, w2's bias (hidden) is whole
    assert (share("model.layers.0.mlp.experts.gate_up_proj_bias", [8, 256]).den,
            share("model.layers.0.mlp.experts.down_proj_bias", [8, 256]).den) == (4, 1)


def test_rank_rows_show_every_rank_and_the_host_total():
    _, ckpt = moe(layers=5)
    settings = settings_with(cpu_offload_gib=1 / 1024)
    kv = kv_cache_estimate(ckpt.config, 8192, None, 2048)
    rows = rank_rows(settings, gpus(96, 96, 48, 48), ckpt, kv, 2, 2)
    assert len(rows) == 1 + 4 + 1 and rows[0].split()[:5] == ["rank", "GPU", "TP", "PP", "layers"]
    assert rows[3].split()[:5] == ["2", "2", "0", "1", "3-4"]
    assert rows[-1].startswith("host total") and "ASSUMED" in rows[-1]


def test_parallel_rules_name_their_vllm_source():
    for rule in PARALLEL_RULES.values():
        assert rule.sources and all(":" in src or "(" in src for src in rule.sources), rule.key
    assert "distributed/utils.py:get_pp_indices" in PARALLEL_RULES["pp_layers"].cite()
    assert "QKVParallelLinear" in PARALLEL_RULES["tp_kv"].cite()
    assert "--enable-expert-parallel" in PARALLEL_RULES["tp_experts"].text
    assert len(parallel_rules_json()) == len(PARALLEL_RULES)
