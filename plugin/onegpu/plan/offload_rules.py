"""The offload accounting's rules, each with the vLLM file and function that states it (0.33.0 wheel paths);
the plan cites them, and the receipt and report carry them beside the KV rules."""
from __future__ import annotations

from msgspec import Struct

from onegpu.plan.kv_pool import ACCOUNTING, kv_rules_json


class Rule(Struct, frozen=True):
    key: str
    text: str
    sources: tuple[str, ...]  # vLLM file:function (paths under vllm/ of the 0.33.0 wheel) or the named library

    def as_json(self) -> dict:
        return {"rule": self.key, "text": self.text, "sources": list(self.sources)}

    def cite(self) -> str:
        return "; ".join(self.sources)

    def short(self) -> str:
        """The first source as file:function without its directories, for a message."""
        first = self.sources[0].split(" (")[0]
        return first.rsplit("/", 1)[-1]


_M = "vllm/model_executor/"
RULES = {r.key: r for r in (
    Rule("order", "the offloader sees modules in the order the model builds them: the vision and audio towers first "
                  "(each wrapped as one module by _mark_tower_model before the language model is built), then the "
                  "decoder layers 0..N-1 (make_layers); inside a module, parameters in named_parameters order, i.e. "
                  "registration order: attention (its own sink first, then qkv_proj, o_proj, then the Attention "
                  "layer's KV scales), then the MLP (router gate, then the experts' w13/w2 parameters as the "
                  "quantization method registers them), then input_layernorm and post_attention_layernorm",
         (f"{_M}models/interfaces.py:SupportsMultiModal._mark_tower_model", f"{_M}models/utils.py:make_layers",
          f"{_M}models/mimo_v2_omni.py:MiMoV2OmniForCausalLM.__init__",
          f"{_M}models/mimo_v2.py:MiMoV2FlashDecoderLayer.__init__",
          f"{_M}layers/quantization/mxfp4.py:Mxfp4MoEMethod.create_weights")),
    Rule("budget", "parameter by parameter, the offloader moves a parameter while its running total of offloaded bytes "
                   "(numel x element_size) is below cpu_offload_gb x 2^30; the parameter that crosses the budget "
                   "moves whole, every later one stays on the GPU",
         (f"{_M}offloader/uva.py:UVAOffloader._maybe_offload_to_cpu", f"{_M}offloader/base.py:create_offloader")),
    Rule("stays", "the embeddings, the final norm and the LM head are built outside make_layers and never offered to "
                  "the offloader: they stay on the GPU",
         (f"{_M}models/mimo_v2.py:MiMoV2Model.__init__", f"{_M}models/utils.py:make_layers")),
    Rule("not_loaded", "draft (MTP) layers are neither built nor loaded without speculative decoding, which the launch "
                       "never enables (load_weights skips every name containing 'mtp'; layers numbered past "
                       "num_hidden_layers are not built); with --language-model-only every modality limit is 0 and "
                       "each tower is built on the meta device as a StageMissingLayer: no bytes anywhere",
         (f"{_M}models/mimo_v2.py:MiMoV2Model.load_weights", f"{_M}models/utils.py:no_init_weights",
          "vllm/config/multimodal.py:MultiModalConfig.get_limit_per_prompt")),
    Rule("engine_params", "an engine parameter is the checkpoint tensors the loader stacks into it: per layer every "
                          "expert's gate+up into one experts.routed_experts.w13_* and its down into one w2_* (with "
                          "their scales), q/k/v into qkv_proj, gate/up into gate_up_proj; its bytes are the "
                          "checkpoint's",
         (f"{_M}layers/fused_moe/routed_experts.py:RoutedExperts.build_expert_params_mapping",
          f"{_M}layers/fused_moe/runner/moe_runner.py:MoERunner.__init__",
          f"{_M}models/mimo_v2.py:MiMoV2Model.load_weights (stacked_params_mapping)",
          f"{_M}layers/quantization/mxfp4.py:Mxfp4MoEMethod.create_weights",
          f"{_M}layers/quantization/kv_cache.py:BaseKVCacheMethod.create_weights")),
    Rule("pinned", "rounded (vLLM's default): each offloaded parameter is copied to the CPU and pinned with "
                   "Tensor.pin_memory(); torch's caching host allocator rounds every pinned allocation up to the next "
                   "power of two and keeps freed blocks for reuse instead of returning them",
         (f"{_M}offloader/uva.py:UVAOffloader._maybe_offload_to_cpu", f"{_M}offloader/base.py:should_pin_memory",
          "torch aten/src/ATen/core/CachingHostAllocator.h:CachingHostAllocatorImpl::allocate (PowerOf2Ceil)")),
    Rule("exact", "exact (VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1): the copy stays pageable and the GPU's view is "
                  "made by get_cuda_view_from_cpu_tensor, which maps a pinned buffer of the parameter's own size "
                  "(cudaHostAlloc(nbytes)) and copies into it; not yet measured on a card",
         (f"{_M}offloader/base.py:should_pin_memory", "vllm/utils/torch_utils.py:get_accelerator_view_from_cpu_tensor",
          "csrc/libtorch_stable/cuda_view.cu:get_cuda_view_from_cpu_tensor (its cudaHostAlloc path is in the 0.33 "
          "wheel's _C_stable_libtorch)")),
    Rule("transient", "each parameter is first copied to pageable host memory (p.data.to('cpu')) and only then "
                      "pinned: while it is pinned, its pageable copy is alive beside the pinned total",
         (f"{_M}offloader/uva.py:UVAOffloader._maybe_offload_to_cpu",)),
    Rule("logged", "the boot line 'Total CPU offloaded parameters: N' is format_gib of the offloaded parameters' "
                   "numel x element_size: logical GiB to two decimals, not the pinned bytes; it is printed after each "
                   "wrap_modules call (towers, then the decoder stack) and counts cumulatively",
         (f"{_M}offloader/uva.py:UVAOffloader.wrap_modules", "vllm/utils/mem_utils.py:format_gib")),
    Rule("repack", "after loading, each quantization method processes its layer's weights where they are "
                   "(device_loading_context leaves UVA-offloaded parameters in place) and re-pins only a parameter "
                   "that is a new object. 0.33's replace_parameter keeps the object: a repack with the same shape, "
                   "stride and dtype is copied into the pinned buffer (no new host bytes); any other repack rebinds "
                   "the parameter to the repacked tensor, computed on the GPU, so those bytes stay on the GPU and "
                   "the pinned buffer goes back to torch's host cache (still held). A method that registers new "
                   "parameter objects (Humming's conversion in 0.33) is pinned again at the new size where the name "
                   "was offloaded. 0.32 registers a new parameter on every replace (pinned again, rounded again); "
                   "0.34 copies a repack of equal or smaller byte count into the pinned buffer",
         (f"{_M}model_loader/utils.py:process_weights_after_loading",
          f"{_M}model_loader/utils.py:device_loading_context", f"{_M}utils.py:replace_parameter",
          f"{_M}layers/quantization/utils/humming/moe.py:_replace_layer_parameters")),
    Rule("towers_flag", "the kit's runs are text-only: the launch passes --language-model-only whenever config.json "
                        "declares a tower (onegpu.checkpoint.towers), so the towers take no budget and no bytes",
         ("vllm/engine/arg_utils.py:EngineArgs (--language-model-only)",
          "vllm/config/multimodal.py:MultiModalConfig.language_model_only")),
    Rule("selective", "--cpu-offload-params NAME... keeps the same byte budget but offers only parameters whose "
                      "module-relative name contains a listed name as whole dot-separated segments "
                      "('experts' matches mlp.experts.routed_experts.w13_weight; 'w2_weight' does not match "
                      "w2_weight_scale)",
         (f"{_M}offloader/uva.py:UVAOffloader._maybe_offload_to_cpu", "vllm/config/offload.py:UVAOffloadConfig")),
)}


def rules_json() -> dict:
    """The receipt's record of the accounting: the engine version read and every rule with its sources."""
    return {"accounting": ACCOUNTING, "rules": [r.as_json() for r in RULES.values()] + kv_rules_json()}
