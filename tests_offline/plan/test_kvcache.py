"""KV cache for one sequence, from config.json shapes of real models, with the arithmetic written out."""
from onegpu.plan.kvcache import describe_kv, kv_cache_estimate
from onegpu.plan.vllm_versions import DECLARED, accounting_for
from tests_offline.model_configs import DEEPSEEK_V3, GPT_OSS_120B, LLAMA3_8B, MIMO_V2_FLASH

GIB = 2**30
# The hand-worked figures below are in 16-token blocks, vLLM 0.32's and 0.33's default on CUDA; 0.34's 64-token
# blocks are worked out in their own tests at the end.
V033 = accounting_for("0.33.0", DECLARED, "the test")
V034 = accounting_for("0.34.0", DECLARED, "the test")


def test_llama3_8b_gqa_at_8k_context_is_one_gib_plus_the_null_block():
    kv = kv_cache_estimate(LLAMA3_8B, 8192, None, 2048, accounting=V033)
    # head_dim = 4096 / 32 = 128; per token per layer = 8 KV heads x (128 K + 128 V) x 2 B = 4,096 B
    # one group of all 32 layers; a block = 32 pages of 16 tokens x 4,096 B = 2,097,152 B
    # a request: 8,192 / 16 = 512 blocks = 1 GiB; the pool also keeps one null block back
    assert kv.layers[0].bytes_per_token == 8 * (128 + 128) * 2 == 4_096
    assert kv.bytes_per_token_full == 32 * 4_096 == 131_072
    assert kv.pool.bytes_per_block == 32 * 16 * 4_096 == 2_097_152 and kv.pool.blocks_per_request == 512
    assert kv.pool.request_bytes == 1 * GIB
    assert kv.bytes == 1 * GIB + 2_097_152
    assert kv.kv_dtype == "bfloat16" and kv.dtype_bytes == 2
    assert any("assumed" in n and "bfloat16" in n for n in kv.notes)


def test_llama3_8b_fp8_kv_halves_the_bytes():
    kv = kv_cache_estimate(LLAMA3_8B, 8192, "fp8", 2048, accounting=V033)
    # 8 x (128 + 128) x 1 B = 2,048 B per token per layer; (512 + 1) blocks x 32 x 16 x 2,048 B
    assert kv.bytes == 513 * 32 * 16 * 2_048 == GIB // 2 + 1_048_576
    assert not any("assumed" in n for n in kv.notes)


def test_llama_context_not_a_block_multiple_is_judged_on_whole_blocks():
    kv = kv_cache_estimate(LLAMA3_8B, 1000, None, 512, accounting=V033)
    # vLLM reserves whole 16-token blocks: ceil(1,000 / 16) = 63 blocks = 1,008 tokens > 1,000
    assert kv.layers[0].bound_tokens == 1_000 and kv.layers[0].reserved_tokens == 63 * 16 == 1_008
    assert kv.bytes == 32 * 4_096 * 16 * (63 + 1)


def test_deepseek_v3_mla_latent_at_128k():
    kv = kv_cache_estimate(DEEPSEEK_V3, 131072, None, 8192, accounting=V033)
    # one latent per token per layer shared by K and V: (512 + 64) x 2 B = 1,152 B (the 128 heads do not count)
    # 61 layers x 1,152 = 70,272 B per token; 8,192 blocks of 16 tokens + the null block
    (row,) = kv.layers
    assert row.kind == "mla" and row.layers == 61 and row.bytes_per_token == (512 + 64) * 2 == 1_152
    assert kv.bytes_per_token_full == 61 * 1_152 == 70_272
    assert kv.bytes == 70_272 * 16 * (8_192 + 1) == 9_211_815_936
    assert any("MTP" in n for n in kv.notes)  # num_nextn_predict_layers is named, not counted


def test_deepseek_v3_fp8_latent():
    kv = kv_cache_estimate(DEEPSEEK_V3, 131072, "fp8_e4m3", 8192, accounting=V033)
    # (512 + 64) x 1 B = 576 B; 61 x 576 x 16 x (8,192 + 1)
    assert kv.bytes == 61 * 576 * 16 * 8_193 == 4_605_907_968


def test_mimo_v2_flash_hybrid_groups_pad_the_sliding_layers_and_reserve_two_batches_in_flight():
    kv = kv_cache_estimate(MIMO_V2_FLASH, 262144, None, 8192, accounting=V033)
    full, sliding = kv.layers
    # full layers: 0, 5, 11, 17, 23, 29, 35, 41, 47 = 9 layers; 4 KV heads x (192 K + 128 V) x 2 B = 2,560 B
    # sliding: 39 layers; 8 x (192 + 128) x 2 B = 5,120 B. Pages of 16 tokens: 40,960 B (full), 81,920 B (sliding)
    # -> the full layers' block grows to 32 tokens so every page is 81,920 B
    assert (full.kind, full.layers, full.bytes_per_token, full.block_tokens) == ("full_attention", 9, 2_560, 32)
    assert (sliding.layers, sliding.bytes_per_token, sliding.window, sliding.block_tokens) == (39, 5_120, 128, 16)
    # groups hold 9 layers (the smaller count): 39 sliding layers fill 5 groups, padded with 6 empty slots
    assert (sliding.groups, sliding.padded_layers, full.groups, full.padded_layers) == (5, 6, 1, 0)
    assert kv.pool.layers_per_group == 9 and kv.pool.bytes_per_block == 9 * 81_920 == 737_280
    # a request: full 262,144 / 32 = 8,192 blocks; sliding: async scheduling keeps 2 x 8,192 tokens in flight,
    # min(128 - 1 + 16,384, 262,144) = 16,511 tokens -> ceil(16,511 / 16) + 1 = 1,033 blocks in each of 5 groups
    assert kv.pool.in_flight_tokens == 16_384
    assert sliding.reserved_tokens == 1_033 * 16 and full.reserved_tokens == 262_144
    assert kv.pool.blocks_per_request == 8_192 + 5 * 1_033 == 13_357
    assert full.bytes == 9 * 81_920 * 8_192 and sliding.bytes == 45 * 81_920 * 1_033
    # plus the null block: (13,357 + 1) x 737,280 B = 9,848,586,240 B (9.17 GiB)
    assert kv.bytes == 13_358 * 737_280 == 9_848_586_240
    assert kv.bytes_per_token_full == 9 * 2_560 == 23_040
    assert any("192 / 128" in n for n in kv.notes)


def test_mimo_without_async_scheduling_keeps_one_batch_in_flight():
    on = kv_cache_estimate(MIMO_V2_FLASH, 65536, "fp8", 2048, accounting=V033)
    off = kv_cache_estimate(MIMO_V2_FLASH, 65536, "fp8", 2048, async_scheduling=False, accounting=V033)
    # fp8: pages 20,480 B / 40,960 B; a block 9 x 40,960 = 368,640 B; full 65,536 / 32 = 2,048 blocks
    # on:  min(127 + 4,096, 65,536) = 4,223 -> 264 + 1 = 265 blocks x 5 groups
    # off: min(127 + 2,048, 65,536) = 2,175 -> 136 + 1 = 137 blocks x 5 groups
    assert on.pool.blocks_per_request == 2_048 + 5 * 265 and off.pool.blocks_per_request == 2_048 + 5 * 137
    assert on.bytes == 368_640 * (2_048 + 5 * 265 + 1) == 1_243_791_360
    assert off.bytes == 368_640 * (2_048 + 5 * 137 + 1) == 1_007_861_760


def test_mimo_refuses_kv_dtypes_its_diff_kv_backends_do_not_run():
    for dtype in ("fp8_e5m2", "float16"):
        kv = kv_cache_estimate(MIMO_V2_FLASH, 4096, dtype, 2048, accounting=V033)
        assert kv.bytes is None and "DiffKV" in kv.unknown_reason and dtype in kv.unknown_reason
    assert kv_cache_estimate(LLAMA3_8B, 4096, "fp8_e5m2", 2048, accounting=V033).bytes is not None  # equal K and V: any backend


def test_mimo_tiny_context_the_context_caps_the_sliding_reservation():
    kv = kv_cache_estimate(MIMO_V2_FLASH, 64, "fp8", 8192, accounting=V033)
    full, sliding = kv.layers
    # sliding: min(127 + 16,384, 64) = 64 tokens -> 4 blocks + 1 = 5 blocks of 16; full: ceil(64 / 32) = 2 blocks
    assert sliding.bound_tokens == 64 and sliding.reserved_tokens == 80 and full.reserved_tokens == 64
    assert kv.bytes == 368_640 * (2 + 5 * 5 + 1) == 10_321_920


def test_gpt_oss_120b_equal_counts_make_18_layer_groups_without_padding():
    kv = kv_cache_estimate(GPT_OSS_120B, 131072, None, 8192, accounting=V033)
    sliding, full = kv.layers  # layer 0 is sliding, so that row comes first
    # per token per layer = 8 KV heads x (64 K + 64 V) x 2 B = 2,048 B for both kinds: one page size, 16 tokens
    # 18 + 18 layers: groups of 18, no padding; a block = 18 x 16 x 2,048 = 589,824 B
    assert (full.groups, sliding.groups, full.padded_layers, sliding.padded_layers) == (1, 1, 0, 0)
    assert kv.pool.bytes_per_block == 589_824
    # full: 131,072 / 16 = 8,192 blocks; sliding: min(127 + 16,384, 131,072) = 16,511 -> 1,032 + 1 = 1,033 blocks
    assert kv.pool.blocks_per_request == 8_192 + 1_033
    assert kv.bytes == 589_824 * (8_192 + 1_033 + 1) == 5_441_716_224
    assert kv.kv_dtype == "bfloat16"


def test_gemma_style_five_to_one_pattern_makes_groups_of_two():
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 12, "num_attention_heads": 8, "num_key_value_heads": 4,
           "head_dim": 256, "hidden_size": 2560, "sliding_window": 1024, "sliding_window_pattern": 6,
           "torch_dtype": "bfloat16"}
    kv = kv_cache_estimate(cfg, 4096, None, 512, accounting=V033)
    sliding, full = kv.layers
    # layers 5 and 11 are global (2); 10 slide. 4 x (256 + 256) x 2 = 4,096 B per token per layer, one page size
    # groups of 2: 1 full group, 5 sliding groups; a block = 2 x 16 x 4,096 = 131,072 B
    # full 4,096 / 16 = 256 blocks; sliding min(1,023 + 1,024, 4,096) = 2,047 -> 128 + 1 = 129 blocks per group
    assert (full.layers, sliding.layers, sliding.groups) == (2, 10, 5)
    assert sliding.reserved_tokens == 129 * 16
    assert kv.bytes == 131_072 * (256 + 5 * 129 + 1) == 118_226_944


def test_qwen3_next_linear_attention_state_is_constant_per_sequence():
    cfg = {"model_type": "qwen3_next", "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 2,
           "head_dim": 256, "hidden_size": 2048, "torch_dtype": "bfloat16",
           "layer_types": ["linear_attention"] * 3 + ["full_attention"],
           "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_num_value_heads": 32,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4}
    short = kv_cache_estimate(cfg, 1024, None, 512, accounting=V033)
    long = kv_cache_estimate(cfg, 2048, None, 512, accounting=V033)
    linear = next(r for r in short.layers if r.kind == "linear_attention")
    # conv dim = 2 x 16 x 128 + 32 x 128 = 8,192; conv state 8,192 x (4 - 1) x 2 B = 49,152 B
    # recurrent state 32 x 128 x 128 x 2 B = 1,048,576 B; per layer 1,097,728 B; 3 layers = 3,293,184 B
    assert linear.state_bytes == 8_192 * 3 * 2 + 32 * 128 * 128 * 2 == 1_097_728
    assert linear.bytes == 3 * 1_097_728
    assert short.pool is None and any("recurrent" in n for n in short.notes)  # summed, not vLLM's pool
    # the one full layer: 2 x (256 + 256) x 2 = 2,048 B per token
    assert long.bytes - short.bytes == 2_048 * 1024


def test_nemotron_h_mamba2_state_and_attention_blocks():
    cfg = {"model_type": "nemotron_h", "num_hidden_layers": 4, "hybrid_override_pattern": "M-M*",
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096,
           "mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
           "torch_dtype": "bfloat16"}
    kv = kv_cache_estimate(cfg, 1024, "fp8", 512, accounting=V033)
    full, mamba = kv.layers
    # conv dim = 128 x 64 + 2 x 8 x 128 = 10,240; conv 10,240 x 3 x 2 B = 61,440; ssm 128 x 64 x 128 x 2 B
    # = 2,097,152; 2 mamba layers = 2 x 2,158,592 (model dtype: fp8 KV does not apply to states)
    assert (mamba.kind, mamba.layers, mamba.state_bytes) == ("mamba", 2, 61_440 + 2_097_152)
    # one attention layer: 8 x (128 + 128) x 1 B x 1,024 tokens = 2,097,152
    assert full.layers == 1 and full.bytes == 2_097_152
    assert kv.bytes == 2 * 2_158_592 + 2_097_152


def test_qwen3_sliding_window_switched_off_counts_every_layer_in_full():
    cfg = {"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
           "head_dim": 128, "hidden_size": 1024, "sliding_window": 4096, "use_sliding_window": False,
           "torch_dtype": "bfloat16"}
    kv = kv_cache_estimate(cfg, 32768, None, 2048, accounting=V033)
    assert [r.kind for r in kv.layers] == ["full_attention"]
    assert kv.bytes == 2 * 2 * 256 * 2 * 16 * (2_048 + 1)


def test_text_config_of_a_multimodal_wrapper_is_read():
    kv = kv_cache_estimate({"model_type": "llava", "text_config": LLAMA3_8B}, 8192, None, 2048, accounting=V033)
    assert kv.bytes == GIB + 2_097_152


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
        kv = kv_cache_estimate(cfg, 4096, None, 512, accounting=V033)
        assert kv.bytes is None and kv.unknown_reason and needle in kv.unknown_reason, (needle, kv.unknown_reason)
        assert "UNKNOWN" in describe_kv(kv)[0]


def test_an_explicit_kv_dtype_needs_no_model_dtype():
    kv = kv_cache_estimate({**LLAMA3_8B, "torch_dtype": None}, 8192, "fp8", 2048, accounting=V033)
    assert kv.bytes == GIB // 2 + 1_048_576


def test_unknown_kv_dtype_name_is_unknown():
    kv = kv_cache_estimate(LLAMA3_8B, 8192, "int3", 2048, accounting=V033)
    assert kv.bytes is None and "int3" in kv.unknown_reason


def test_described_lines_show_the_pool_arithmetic():
    lines = describe_kv(kv_cache_estimate(MIMO_V2_FLASH, 262144, None, 8192, accounting=V033))
    assert lines[0].startswith("KV cache for 262,144 tokens, one sequence, bfloat16: 9,848,586,240 bytes")
    assert lines[0].endswith("vLLM 0.33 accounting")
    sliding = next(line for line in lines if "sliding_attention" in line)
    assert "5 group(s) + 6 padding layer slot(s)" in sliding and "window - 1 + 16,384 in-flight" in sliding
    pool = next(line for line in lines if line.strip().startswith("pool:"))
    assert "737,280 B per block" in pool and "13,357 blocks per request" in pool and "x 2 (async" in pool


def test_one_table_of_kv_dtypes_feeds_the_settings_the_estimate_and_the_version_check():
    """A dtype added to kv_dtypes.KV_DTYPES is accepted by the settings, sized by the estimate, version-checked and
    judged for the DiffKV backends, with nothing else to edit; each of today's rows is read that way."""
    from onegpu.checkpoint.consistency import check_kv_dtype
    from onegpu.core.kv_dtypes import KV_DTYPES
    from onegpu.plan.settings import check_field

    assert list(KV_DTYPES) == ["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]
    for name, row in KV_DTYPES.items():
        assert check_field("kv_cache_dtype", name, ("kv",)) is None, name
        llama = kv_cache_estimate(LLAMA3_8B, 8192, name, 2048, accounting=V033)
        assert llama.dtype_bytes == (row.element_bytes or 2), name  # auto: the model's bfloat16
        mimo = kv_cache_estimate(MIMO_V2_FLASH, 8192, name, 2048, accounting=V033)
        assert (mimo.bytes is not None) == row.diff_kv, name
        rows = check_kv_dtype(name, row.accepted_from, "the probe", LLAMA3_8B)
        assert rows[0].status == "ok", (name, rows[0].message)
        if row.refused_below:
            refused = check_kv_dtype(name, "0.1.0", "the probe", LLAMA3_8B)
            assert refused[0].status == "warning", (name, refused[0].message)
    assert check_field("kv_cache_dtype", "int8", ("kv",)) is not None


def test_034_blocks_of_64_tokens_when_the_launch_passes_none():
    """vLLM 0.34's CacheConfig.DEFAULT_BLOCK_SIZE is 64 (0.32 and 0.33: 16); the launch passes no --block-size."""
    kv = kv_cache_estimate(LLAMA3_8B, 8192, None, 2048, accounting=V034)
    # a block = 32 pages of 64 tokens x 4,096 B = 8,388,608 B; a request: 8,192 / 64 = 128 blocks = 1 GiB; + null block
    assert (kv.block_size, kv.pool.bytes_per_block, kv.pool.blocks_per_request) == (64, 8_388_608, 128)
    assert kv.bytes == GIB + 8_388_608 and kv.accounting == "vLLM 0.34 accounting"
    # a context off the block grid costs up to 63 more tokens than in 16-token blocks: 1,000 -> 16 blocks = 1,024
    odd = kv_cache_estimate(LLAMA3_8B, 1000, None, 512, accounting=V034)
    assert odd.layers[0].reserved_tokens == 16 * 64 and odd.bytes == 32 * 4_096 * 64 * (16 + 1)


def test_034_mimo_hybrid_pages_unify_at_64_token_blocks():
    kv = kv_cache_estimate(MIMO_V2_FLASH, 262144, None, 8192, accounting=V034)
    full, sliding = kv.layers
    # pages of 64 tokens: 163,840 B (full, 2,560 B a token) and 327,680 B (sliding, 5,120 B): the full layers' block
    # grows to 128 tokens; the full group takes 262,144 / 128 = 2,048 blocks; each of the 5 sliding groups
    # cdiv(min(128 - 1 + 2 x 8,192, 262,144), 64) + 1 = 258 + 1 = 259 blocks; a block = 9 slots x 327,680 B
    assert (full.block_tokens, sliding.block_tokens, sliding.groups, sliding.padded_layers) == (128, 64, 5, 6)
    assert kv.pool.blocks_per_request == 2_048 + 5 * 259 == 3_343
    assert kv.pool.bytes_per_block == 9 * 327_680 == 2_949_120
    assert kv.bytes == 2_949_120 * 3_344 == 9_861_857_280


def test_the_default_accounting_is_the_newest_known_and_says_it_is_assumed():
    kv = kv_cache_estimate(LLAMA3_8B, 8192, None, 2048)
    assert kv.block_size == 64 and kv.accounting == "vLLM 0.34 accounting (ASSUMED)"
    # an explicit block size wins over the version's default (the CPU build's 128, say)
    assert kv_cache_estimate(LLAMA3_8B, 8192, None, 2048, block_size=128, accounting=V033).block_size == 128
