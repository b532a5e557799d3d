"""How vLLM places a checkpoint on the ranks of a tensor x pipeline parallel launch, rule by rule, each with the
vLLM file and function that states it (paths under vllm/ of the source read); onegpu.plan.rank_share and
onegpu.plan.parallel apply them.

The source read is vLLM's main branch as stored in the public index (the files carry no release tag); where a
rule could not be confirmed there, its text says UNCONFIRMED. The rules that are version-sensitive are the ones
0.33 moved (the offloader, the MoE runner); the splits themselves have not changed since 0.6.
"""
from __future__ import annotations

from onegpu.plan.offload_rules import Rule

_M = "vllm/model_executor/"
_L = f"{_M}layers/linear.py"

# The architectures whose vLLM model builds the embedding, the final norm and the LM head each as PPMissingLayer
# off the stages that use them: every *ForCausalLM class of the vllm/model_executor/models/*.py files of vLLM 0.32.0
# (the real-engine image) that builds all three so. Not their subclasses: those were not read one by one.
PP_ENDS_ON_THEIR_STAGES = frozenset({
    "AXK1ForCausalLM", "AfmoeForCausalLM", "ApertusForCausalLM", "DeciLMForCausalLM", "DeepseekForCausalLM",
    "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM", "Exaone4ForCausalLM", "ExaoneMoeForCausalLM",
    "FalconH1ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM",
    "GraniteForCausalLM", "HyperCLOVAXForCausalLM", "LagunaForCausalLM", "LlamaForCausalLM",
    "LongcatFlashForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM", "MiniMaxM2ForCausalLM",
    "NemotronForCausalLM", "PanguEmbeddedForCausalLM", "PanguProMoEV2ForCausalLM", "PanguUltraMoEForCausalLM",
    "Param2MoEForCausalLM", "Qwen2ForCausalLM", "SarvamMLAForCausalLM", "SarvamMoEForCausalLM", "SolarForCausalLM",
    "Step1ForCausalLM", "Step3TextForCausalLM", "Step3p5ForCausalLM",
})

PARALLEL_RULES = {r.key: r for r in (
    Rule("rank_order", "ranks are laid out DP x PP x PCP x TP, so with one data-parallel replica rank = PP stage x TP "
                       "+ TP rank; each worker takes the CUDA device of its local rank. CUDA numbers the container's "
                       "GPUs by PCI bus under CUDA_DEVICE_ORDER=PCI_BUS_ID (the launch sets it; the default puts a "
                       "faster card first), and the kit refuses a set not listed in that order, so rank r is the "
                       "r-th GPU listed",
         ("vllm/distributed/parallel_state.py:initialize_model_parallel (all_ranks reshape)",
          "vllm/platforms/cuda.py:NvmlCudaPlatform.log_warnings (asks for CUDA_DEVICE_ORDER=PCI_BUS_ID on mixed cards)",
          "CUDA Toolkit documentation: CUDA environment variables (CUDA_DEVICE_ORDER)")),
    Rule("pp_layers", "each PP stage builds the decoder layers [start, end) of get_pp_indices: num_hidden_layers // PP "
                      "each, and the remainder r adds one layer to each of the r stages before the last (the last "
                      "stage gets none, it already runs the final norm and head); VLLM_PP_LAYER_PARTITION replaces "
                      "the split when set; every other layer is a PPMissingLayer with no parameters",
         ("vllm/distributed/utils.py:get_pp_indices", f"{_M}models/utils.py:make_layers",
          f"{_M}models/utils.py:PPMissingLayer")),
    Rule("pp_ends", "for the architectures of PP_ENDS_ON_THEIR_STAGES the embedding is built on the first stage (and "
                    "on the last too when tie_word_embeddings, for the head to share), the final norm and the LM "
                    "head on the last stage only, PPMissingLayer elsewhere; any other architecture is counted with "
                    "all three on every stage, as qwen2_moe.py and qwen3_moe.py build them (an upper bound where "
                    "the model was not read)",
         (f"{_M}models/llama.py:LlamaModel.__init__", f"{_M}models/mimo_v2.py:MiMoV2Model.__init__",
          f"{_M}models/llama.py:LlamaForCausalLM.__init__", f"{_M}models/qwen3_moe.py:Qwen3MoeModel.__init__",
          f"{_M}models/qwen3_moe.py:Qwen3MoeForCausalLM.__init__")),
    Rule("tp_column", "column-parallel weights (q_proj, gate/up projections, MLA q_b_proj and kv_b_proj, shared "
                      "experts' gate/up) hold output_size / TP rows on every rank, their bias too",
         (f"{_L}:ColumnParallelLinear.__init__", f"{_L}:MergedColumnParallelLinear.__init__")),
    Rule("tp_row", "row-parallel weights (o_proj, down projections) hold input_size / TP columns on every rank; their "
                   "bias is not split", (f"{_L}:RowParallelLinear.__init__",)),
    Rule("tp_kv", "k_proj and v_proj: KV heads / TP per rank when TP <= KV heads; when TP exceeds them each rank holds "
                  "one KV head (num_kv_head_replicas = TP / KV heads), so a rank's share is 1 / min(TP, KV heads)",
         (f"{_L}:QKVParallelLinear.__init__", f"{_L}:QKVParallelLinear.weight_loader",
          f"{_M}models/llama.py:LlamaAttention.__init__")),
    Rule("tp_fused_qkv", "a q/k/v projection stored fused on disk is split into its q, k and v rows by the config's "
                         "heads and head dims and each part shared as above (q / TP, k and v / min(TP, KV heads))",
         (f"{_L}:QKVParallelLinear._load_fused_module_from_checkpoint", f"{_M}models/mimo_v2.py:MiMoV2Attention")),
    Rule("tp_heads", "per-head parameters (attention sinks) hold num_heads / TP entries per rank",
         (f"{_M}models/mimo_v2.py:MiMoV2Attention.__init__ (attention_sink_bias of self.num_heads)",)),
    Rule("tp_replicated", "whole on every rank: norms, the MoE router gate and its correction bias, MLA's "
                          "down-projections (q_a_proj, kv_a_proj_with_mqa, fused_qkv_a_proj), per-tensor scalars",
         (f"{_L}:ReplicatedLinear.__init__", f"{_M}models/mimo_v2.py:MiMoV2MoE.__init__ (gate is nn.Linear)",
          f"{_M}models/deepseek_v2.py:DeepseekV2MLAAttention.__init__")),
    Rule("tp_experts", "without --enable-expert-parallel (the kit never passes it) every rank holds every routed "
                       "expert, each with intermediate_size / TP: w13 (gate+up) split on its output, w2 (down) on its "
                       "input, the w13 bias split, the w2 bias whole. With expert parallelism experts would be placed "
                       "whole across ranks instead, which this accounting does not cover. MXFP4 methods may round a "
                       "rank's intermediate size up for their kernels (intermediate_size_per_partition_after_pad): "
                       "not counted, UNCONFIRMED per backend",
         (f"{_M}layers/fused_moe/layer.py:FusedMoE.__init__",
          f"{_M}layers/fused_moe/unquantized_fused_moe_method.py:UnquantizedFusedMoEMethod.create_weights",
          f"{_M}layers/quantization/mxfp4.py:Mxfp4MoEMethod.create_weights")),
    Rule("tp_vocab", "VocabParallelEmbedding and ParallelLMHead pad the vocabulary to a multiple of 64 and give each "
                     "rank padded_vocab / TP rows (the padding rows are allocated, zero-filled)",
         (f"{_M}layers/vocab_parallel_embedding.py:pad_vocab_size",
          f"{_M}layers/vocab_parallel_embedding.py:VocabParallelEmbedding.__init__")),
    Rule("tp_scales", "quantization scales follow their weight's split; a per-tensor scalar is whole on every rank. "
                      "Block scales are allocated per rank as whole blocks (ceil(rows / block)): where a rank's rows "
                      "are not a whole number of blocks the kit rounds its share up to whole bytes, which can differ "
                      "from vLLM's by under one block row per parameter; per-channel scales of a row-parallel layer "
                      "are counted whole (UNCONFIRMED: not read). vLLM allows that mismatch for merged layers (QKV, "
                      "gate/up) and routed experts adapt their block grid, but it refuses a block-fp8 row-parallel "
                      "layer whose input per rank is not whole blocks, and an unmerged column layer whose output per "
                      "rank is not: the kit does not check those two refusals",
         (f"{_L}:adjust_block_scale_shard", f"{_L}:ColumnParallelLinear._maybe_allow_fp8_block_shape_mismatch",
          f"{_M}layers/quantization/utils/fp8_utils.py:validate_fp8_block_shape",
          f"{_M}layers/quantization/fp8.py:Fp8MoEMethod.__init__ (resolve_fp8_moe_weight_block_shape)")),
    Rule("tp_unknown", "a module the kit has no rule for is counted whole on every rank: an upper bound, named in the "
                       "plan", ("onegpu.plan.rank_share (no vLLM rule read for it)",)),
    Rule("tp_divisible", "vLLM refuses a split that does not divide: attention heads by TP (divide), KV heads by TP or "
                         "TP by KV heads, the experts' intermediate size by TP, the padded vocabulary by TP",
         (f"{_L}:QKVParallelLinear.__init__ (divide)", f"{_M}models/llama.py:LlamaAttention.__init__ (asserts)",
          f"{_M}layers/fused_moe/layer.py:FusedMoE.__init__ (assert intermediate_size % tp_size == 0)",
          f"{_M}layers/vocab_parallel_embedding.py:VocabParallelEmbedding.__init__ (divide)")),
    Rule("per_worker_offload", "every worker process builds its own offloader from the same config: "
                               "--cpu-offload-gb is per worker, each rank offloads up to that many GiB of its own "
                               "(already split) decoder-layer parameters, in its own stage's layer order",
         ("vllm/v1/worker/gpu_model_runner.py:GPUModelRunner.__init__ (set_offloader(create_offloader(...)))",
          f"{_M}offloader/base.py:create_offloader", f"{_M}models/utils.py:make_layers (wrap_modules)")),
    Rule("kv_heads", "a rank's attention layer keeps max(1, KV heads // TP) KV heads (replicated when TP exceeds "
                     "them); an MLA layer keeps its one latent (kv_lora_rank + qk_rope_head_dim) on every rank",
         (f"{_M}models/llama.py:LlamaAttention.__init__", f"{_M}models/mimo_v2.py:MiMoV2Attention.__init__",
          f"{_M}layers/attention/mla_attention.py:MLAAttention.get_kv_cache_spec (MLAAttentionSpec, num_kv_heads=1)")),
    Rule("kv_workers", "KV cache groups are formed over the whole model's layers (every stage's specs merged), then "
                       "projected onto each worker's own layers; each worker's memory is checked for one request of "
                       "its layers, and every worker gets the smallest worker's number of blocks",
         ("vllm/v1/core/kv_cache_utils.py:get_kv_cache_configs",
          "vllm/v1/core/kv_cache_utils.py:merge_kv_cache_specs_across_workers",
          "vllm/v1/core/kv_cache_utils.py:project_kv_cache_groups_to_worker")),
)}


def parallel_rules_json() -> list[dict]:
    """Every rule of the multi-GPU accounting with its sources, for the receipt."""
    return [r.as_json() for r in PARALLEL_RULES.values()]
