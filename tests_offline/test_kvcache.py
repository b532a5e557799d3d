"""KV cache for one sequence, from config.json shapes of real models, with the arithmetic written out."""
from plugin.kvcache import describe_kv, kv_cache_estimate

GIB = 2**30

# Meta-Llama-3-8B config.json (attention fields): 32 layers, 32 heads, 8 KV heads, hidden 4096.
LLAMA3_8B = {"model_type": "llama", "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
             "hidden_size": 4096, "torch_dtype": "bfloat16", "max_position_embeddings": 8192}

# deepseek-ai/DeepSeek-V3 config.json (attention fields): MLA with a 512 latent + 64 rope dims, 61 layers.
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "num_attention_heads": 128,
               "num_key_value_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512, "q_lora_rank": 1536,
               "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "num_nextn_predict_layers": 1,
               "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}}

# XiaomiMiMo/MiMo-V2-Flash config.json (attention fields): 48 layers; layer 0 and every 6th layer after it
# are full attention (4 KV heads), the other 39 slide over 128 tokens (8 KV heads); K 192, V 128 dims.
MIMO_V2_FLASH = {"model_type": "mimo_v2_flash", "num_hidden_layers": 48, "hidden_size": 4096,
                 "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 192, "v_head_dim": 128,
                 "swa_num_attention_heads": 64, "swa_num_key_value_heads": 8, "swa_head_dim": 192,
                 "swa_v_head_dim": 128, "sliding_window": 128, "sliding_window_size": 128,
                 "hybrid_layer_pattern": [0 if (i == 0 or (i + 1) % 6 == 0) else 1 for i in range(48)],
                 "torch_dtype": "bfloat16",
                 "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}

# openai/gpt-oss-120b config.json (attention fields): 36 layers alternating sliding (128) and full, 8 KV heads of
# 64 dims, mxfp4 experts (which do not touch the KV cache).
GPT_OSS_120B = {"model_type": "gpt_oss", "num_hidden_layers": 36, "num_attention_heads": 64,
                "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880, "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"] * 18, "num_local_experts": 128,
                "torch_dtype": "bfloat16",
                "quantization_config": {"quant_method": "mxfp4",
                                        "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}}


def test_llama3_8b_gqa_at_8k_context_is_one_gib():
    kv = kv_cache_estimate(LLAMA3_8B, 8192, None, 2048)
    # head_dim = 4096 / 32 = 128; per token per layer = 8 KV heads x (128 K + 128 V) x 2 B = 4,096 B
    # per token, all layers = 32 x 4,096 = 131,072 B; x 8,192 tokens = 1,073,741,824 B = 1 GiB
    assert kv.layers[0].bytes_per_token == 8 * (128 + 128) * 2 == 4_096
    assert kv.bytes_per_token_full == 32 * 4_096 == 131_072
    assert kv.bytes == 131_072 * 8_192 == 1 * GIB
    assert kv.kv_dtype == "bfloat16" and kv.dtype_bytes == 2
    assert any("assumed" in n and "bfloat16" in n for n in kv.notes)


def test_llama3_8b_fp8_kv_halves_the_bytes():
    kv = kv_cache_estimate(LLAMA3_8B, 8192, "fp8", 2048)
    # 8 x (128 + 128) x 1 B = 2,048 B per token per layer; 32 x 2,048 x 8,192 = 536,870,912 B
    assert kv.bytes == 32 * 2_048 * 8_192 == 536_870_912
    assert not any("assumed" in n for n in kv.notes)


def test_llama_context_not_a_block_multiple_is_judged_on_whole_blocks():
    kv = kv_cache_estimate(LLAMA3_8B, 1000, None, 512)
    # vLLM reserves whole 16-token blocks: ceil(1,000 / 16) = 63 blocks = 1,008 tokens > 1,000
    assert kv.layers[0].bound_tokens == 1_000 and kv.layers[0].reserved_tokens == 63 * 16 == 1_008
    assert kv.bytes == 32 * 4_096 * 1_008


def test_deepseek_v3_mla_latent_at_128k():
    kv = kv_cache_estimate(DEEPSEEK_V3, 131072, None, 8192)
    # one latent per token per layer shared by K and V: (512 + 64) x 2 B = 1,152 B (the 128 heads do not count)
    # 61 layers x 1,152 = 70,272 B per token; x 131,072 tokens = 9,210,691,584 B (8.58 GiB)
    (row,) = kv.layers
    assert row.kind == "mla" and row.layers == 61 and row.bytes_per_token == (512 + 64) * 2 == 1_152
    assert kv.bytes_per_token_full == 61 * 1_152 == 70_272
    assert kv.bytes == 70_272 * 131_072 == 9_210_691_584
    assert any("MTP" in n for n in kv.notes)  # num_nextn_predict_layers is named, not counted


def test_deepseek_v3_fp8_latent():
    kv = kv_cache_estimate(DEEPSEEK_V3, 131072, "fp8_e4m3", 8192)
    # (512 + 64) x 1 B = 576 B; 61 x 576 x 131,072 = 4,605,345,792 B
    assert kv.bytes == 61 * 576 * 131_072 == 4_605_345_792


def test_mimo_v2_flash_hybrid_full_plus_sliding_with_asymmetric_heads():
    kv = kv_cache_estimate(MIMO_V2_FLASH, 262144, None, 8192)
    full, sliding = kv.layers
    # full layers: 0, 5, 11, 17, 23, 29, 35, 41, 47 = 9 layers
    # per token per layer = 4 KV heads x (192 K + 128 V) x 2 B = 2,560 B; 9 x 2,560 x 262,144 = 6,039,797,760 B
    assert (full.kind, full.layers, full.bytes_per_token) == ("full_attention", 9, 4 * (192 + 128) * 2)
    assert full.bytes == 9 * 2_560 * 262_144 == 6_039_797_760
    # sliding layers: 48 - 9 = 39; per token per layer = 8 x (192 + 128) x 2 B = 5,120 B
    # window bound: min(262,144, 128) = 128 tokens -> 39 x 5,120 x 128 = 25,559,040 B
    # vLLM: min(128 - 1 + 8,192, 262,144) = 8,319 tokens -> ceil(8,319 / 16) = 520 blocks, + 1 = 521 blocks
    #       = 8,336 tokens -> 39 x 5,120 x 8,336 = 1,664,532,480 B; the larger is judged
    assert (sliding.layers, sliding.bytes_per_token, sliding.window) == (39, 5_120, 128)
    assert sliding.bound_tokens == 128 and sliding.reserved_tokens == 521 * 16 == 8_336
    assert sliding.bytes == 39 * 5_120 * 8_336 == 1_664_532_480
    # total = 6,039,797,760 + 1,664,532,480 = 7,704,330,240 B (7.18 GiB); per token only the 9 full layers grow
    assert kv.bytes == 7_704_330_240
    assert kv.bytes_per_token_full == 9 * 2_560 == 23_040
    assert any("192 / 128" in n for n in kv.notes)


def test_mimo_sliding_window_bound_wins_when_the_context_is_tiny():
    kv = kv_cache_estimate(MIMO_V2_FLASH, 64, "fp8", 8192)
    sliding = kv.layers[1]
    # window bound min(64, 128) = 64; vLLM min(127 + 8,192, 64) = 64 -> 4 blocks + 1 = 5 blocks = 80 tokens
    assert sliding.bound_tokens == 64 and sliding.reserved_tokens == 80
    # fp8: 8 x 320 x 1 = 2,560 B; 39 x 2,560 x 80 = 7,987,200 B; full: 9 x 4 x 320 x 1 x 64 = 737,280 B
    assert sliding.bytes == 39 * 2_560 * 80 == 7_987_200
    assert kv.bytes == 7_987_200 + 9 * 1_280 * 64 == 8_724_480


def test_gpt_oss_120b_alternating_sliding_and_full():
    kv = kv_cache_estimate(GPT_OSS_120B, 131072, None, 8192)
    sliding, full = kv.layers  # layer 0 is sliding, so that row comes first
    # per token per layer = 8 KV heads x (64 K + 64 V) x 2 B (bfloat16, the model dtype; mxfp4 is weights only)
    #                     = 2,048 B
    # full: 18 layers x 2,048 x 131,072 = 4,831,838,208 B (4.5 GiB)
    assert (full.layers, full.bytes_per_token, full.bytes) == (18, 2_048, 18 * 2_048 * 131_072)
    assert full.bytes == 4_831_838_208
    # sliding: bound min(131,072, 128) = 128; vLLM min(127 + 8,192, 131,072) = 8,319 -> 520 + 1 blocks = 8,336
    # 18 x 2,048 x 8,336 = 307,298,304 B
    assert (sliding.layers, sliding.bound_tokens, sliding.reserved_tokens) == (18, 128, 8_336)
    assert sliding.bytes == 18 * 2_048 * 8_336 == 307_298_304
    # total 4,831,838,208 + 307,298,304 = 5,139,136,512 B
    assert kv.bytes == 5_139_136_512
    assert kv.kv_dtype == "bfloat16"


def test_gemma_style_sliding_window_pattern_makes_every_sixth_layer_global():
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4,
           "head_dim": 256, "hidden_size": 2560, "sliding_window": 1024, "sliding_window_pattern": 6,
           "torch_dtype": "bfloat16"}
    kv = kv_cache_estimate(cfg, 4096, None, 512)
    sliding, full = kv.layers
    # layers 5 and 11 are global (2); 10 slide. 4 x (256 + 256) x 2 = 4,096 B per token per layer
    # full: 2 x 4,096 x 4,096 = 33,554,432; sliding: min(1,023 + 512, 4,096) = 1,535 -> 96 + 1 blocks = 1,552
    #       tokens > window bound 1,024 -> 10 x 4,096 x 1,552 = 63,569,920
    assert (full.layers, sliding.layers) == (2, 10)
    assert sliding.reserved_tokens == 1_552
    assert kv.bytes == 2 * 4_096 * 4_096 + 10 * 4_096 * 1_552 == 97_124_352


def test_qwen3_next_linear_attention_state_is_constant_per_sequence():
    cfg = {"model_type": "qwen3_next", "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
           "head_dim": 256, "hidden_size": 2048, "torch_dtype": "bfloat16",
           "layer_types": ["linear_attention"] * 3 + ["full_attention"],
           "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
    short = kv_cache_estimate(cfg, 1024, None, 512)
    long = kv_cache_estimate(cfg, 2048, None, 512)
    linear = short.layers[0]
    # conv dim = 2 x 16 x 128 + 32 x 128 = 8,192; conv state 8,192 x (4 - 1) x 2 B = 49,152 B
    # recurrent state 32 x 128 x 128 x 2 B = 1,048,576 B; per layer 1,097,728 B; 3 layers = 3,293,184 B
    assert linear.state_bytes == 8_192 * 3 * 2 + 32 * 128 * 128 * 2 == 1_097_728
    assert linear.bytes == 3 * 1_097_728
    assert long.layers[0].bytes == linear.bytes  # does not grow with the context
    # the one full layer: 2 x (256 + 256) x 2 = 2,048 B per token
    assert long.bytes - short.bytes == 2_048 * 1024


def test_nemotron_h_mamba2_state_and_attention_blocks():
    cfg = {"model_type": "nemotron_h", "num_hidden_layers": 4, "hybrid_override_pattern": "M-M*",
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096,
           "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
           "torch_dtype": "bfloat16"}
    kv = kv_cache_estimate(cfg, 1024, "fp8", 512)
    mamba, full = kv.layers
    # conv dim = 128 x 64 + 2 x 8 x 128 = 10,240; conv 10,240 x 3 x 2 B = 61,440; ssm 128 x 64 x 128 x 2 B
    # = 2,097,152; 2 mamba layers = 2 x 2,158,592 (model dtype: fp8 KV does not apply to states)
    assert (mamba.kind, mamba.layers, mamba.state_bytes) == ("mamba", 2, 61_440 + 2_097_152)
    # one attention block: 8 x (128 + 128) x 1 B x 1,024 tokens = 2,097,152
    assert full.layers == 1 and full.bytes == 2_097_152
    assert kv.bytes == 2 * 2_158_592 + 2_097_152


def test_qwen3_sliding_window_switched_off_counts_every_layer_in_full():
    cfg = {"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
           "head_dim": 128, "hidden_size": 1024, "sliding_window": 4096, "use_sliding_window": False,
           "torch_dtype": "bfloat16"}
    kv = kv_cache_estimate(cfg, 32768, None, 2048)
    assert [r.kind for r in kv.layers] == ["full_attention"]
    assert kv.bytes == 2 * 2 * 256 * 2 * 32768


def test_text_config_of_a_multimodal_wrapper_is_read():
    kv = kv_cache_estimate({"model_type": "llava", "text_config": LLAMA3_8B}, 8192, None, 2048)
    assert kv.bytes == GIB


def test_unreadable_shapes_are_unknown_with_a_reason_never_an_exception():
    cases = {
        "num_hidden_layers": {"num_attention_heads": 8, "torch_dtype": "bfloat16"},
        "hybrid_layer_pattern": {**MIMO_V2_FLASH, "hybrid_layer_pattern": [0, 1]},
        "layer_types[1]": {**GPT_OSS_120B, "layer_types": ["sliding_attention", "weird"] * 18},
        "torch_dtype": {**LLAMA3_8B, "torch_dtype": None},
        "expected an integer": {**LLAMA3_8B, "num_key_value_heads": "8"},
        "indexer": {**DEEPSEEK_V3, "index_topk": 2048},
        "chunked": {**LLAMA3_8B, "model_type": "llama4"},
        "not an object": ["a", "list"],
    }
    for needle, cfg in cases.items():
        kv = kv_cache_estimate(cfg, 4096, None, 512)
        assert kv.bytes is None and kv.unknown_reason and needle in kv.unknown_reason, (needle, kv.unknown_reason)
        assert "UNKNOWN" in describe_kv(kv)[0]


def test_an_explicit_kv_dtype_needs_no_model_dtype():
    kv = kv_cache_estimate({**LLAMA3_8B, "torch_dtype": None}, 8192, "fp8", 2048)
    assert kv.bytes == GIB // 2


def test_unknown_kv_dtype_name_is_unknown():
    kv = kv_cache_estimate(LLAMA3_8B, 8192, "int3", 2048)
    assert kv.bytes is None and "int3" in kv.unknown_reason


def test_described_lines_show_both_sliding_figures():
    lines = describe_kv(kv_cache_estimate(MIMO_V2_FLASH, 262144, None, 8192))
    assert lines[0].startswith("KV cache for 262,144 tokens, one sequence, bfloat16: 7,704,330,240 bytes")
    sliding = next(line for line in lines if "sliding_attention" in line)
    assert "window bound 128 tokens" in sliding and "vLLM reserves 8,336" in sliding and "1,664,532,480" in sliding
