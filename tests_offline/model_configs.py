"""config.json attention fields of real models, shared by the KV cache and per-rank capacity tests."""

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
