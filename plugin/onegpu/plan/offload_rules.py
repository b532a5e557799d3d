"""The offload accounting's rules, each with the vLLM file and function that states it (0.33.0 wheel paths; the
UVA offloader and device_loading_context are the same in 0.32, 0.33 and 0.34, replace_parameter is not:
REPACK_BY_VERSION); the plan cites them, and the receipt and report carry them beside the KV rules."""
from __future__ import annotations

from msgspec import Struct

from onegpu.plan.kv_pool import kv_rules_json
from onegpu.plan.kv_sizing import sizing_rules_json
from onegpu.plan.vllm_versions import Accounting


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
                   "(device_loading_context leaves UVA-offloaded parameters in place) and re-pins a parameter under an "
                   "offloaded name that is a new object: torch.empty_like(pin_memory=True) and a new UVA view, while "
                   "torch's host cache keeps the first pinned block (a later allocation of the same power-of-two size "
                   "may reuse it once it is freed, so the second allocation is the most the host peak can add). "
                   "Whether a repack makes a new object depends on the version's replace_parameter (the rule of the "
                   "version applied follows) and on the backend the method picks on the card",
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


# What replace_parameter does with an offloaded parameter that a quantization method repacks, by release.
REPACK_BY_VERSION = {
    "new_object": Rule("repack_version", "0.32: replace_parameter registers a new parameter object for every "
                                         "replace, so every repacked offloaded parameter is pinned again (rounded "
                                         "again): a certain re-pin for each method that repacks",
                       (f"{_M}utils.py:replace_parameter (0.32.0)",)),
    "keep_object": Rule("repack_version", "0.33: replace_parameter keeps the object: a repack with the same shape, "
                                          "stride and dtype is copied into the pinned buffer (no new host bytes); any "
                                          "other repack rebinds the parameter to the repacked tensor, computed on the "
                                          "GPU, so those bytes stay on the GPU and the pinned buffer goes back to "
                                          "torch's host cache (still held); only a method that registers new objects "
                                          "(Humming's conversion) is pinned again",
                        (f"{_M}utils.py:replace_parameter (0.33.0)",)),
    "keep_object_own_storage": Rule(
        "repack_version", "0.34: replace_parameter keeps the object: a repack with the same shape, stride and dtype "
                          "is copied in place, one that is not larger is copied into the parameter's own (pinned) "
                          "storage, a larger one is rebound to its GPU tensor (those bytes stay on the GPU); only a "
                          "method that registers new objects (Humming's conversion) is pinned again, into a second "
                          "pinned allocation", (f"{_M}utils.py:replace_parameter (0.34.0)",
                                                f"{_M}utils.py:_in_own_storage")),
}


def repack_rule(accounting: Accounting) -> Rule:
    return REPACK_BY_VERSION[accounting.rules.replace_parameter]


def rules_json(accounting: Accounting) -> dict:
    """The receipt's record of the accounting: the version applied (and how it is known) and every rule with its
    sources: the offloader's, the version's repack, its KV pool and its KV sizing."""
    rules = accounting.rules
    return {"accounting": accounting.label, "version": accounting.as_json(),
            "rules": [r.as_json() for r in RULES.values()] + [repack_rule(accounting).as_json()]
            + kv_rules_json(rules) + sizing_rules_json(rules)}
