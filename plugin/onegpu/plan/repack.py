"""Pure: what a quantization method's repack after loading does to offloaded weights, by the vLLM version applied.

After the weights are loaded, each quantization method processes its layer's weights where they lie
(vllm/model_executor/model_loader/utils.py:device_loading_context leaves UVA-offloaded parameters in place). A
parameter under an offloaded name that comes back as a NEW object is pinned again (torch.empty_like(pin_memory=True),
or an exact-size copy under exact pinning) while torch's host cache still holds the first pinned block: that second
allocation is a host figure the offload plan does not hold. Which repacks make new objects depends on the version's
replace_parameter (offload_rules.REPACK_BY_VERSION) and on the MoE backend the method picks on the card:
* 0.32 registers a new object for every replace: every MXFP4 backend but Triton's (which assigns its tensors
  directly) re-pins the offloaded experts (quantization/mxfp4.py:Mxfp4MoEMethod.process_weights_after_loading);
* 0.33 and 0.34 keep the object; only Humming's MXFP4 conversion registers new objects (humming/moe.py:
  _replace_layer_parameters).
The backend is picked on the card at load, so the kit names the re-pin a POSSIBLE cost in every version and shows
it beside the host verdicts; it would be CERTAIN only where the method and version leave no choice (none the kit
can place from the headers today). The figure is an upper bound: a freed first block of the same power-of-two
size may be reused by torch's cache.
"""
from __future__ import annotations

from msgspec import Struct

from onegpu.checkpoint.model import CheckpointFacts
from onegpu.core.units import gib
from onegpu.plan.offload import OffloadPlan, expert_method, pow2
from onegpu.plan.offload_rules import repack_rule
from onegpu.plan.verdict import Verdict, ok, unknown
from onegpu.plan.vllm_versions import Accounting

_RULE = "model_loader/utils.py:device_loading_context, model_executor/utils.py:replace_parameter"
_HUMMING = "layers/quantization/utils/humming/moe.py:_replace_layer_parameters"


class RepinCost(Struct, frozen=True):
    """Host bytes a repack may pin a second time, and how sure that is."""

    bytes: int  # the re-pinned parameters at the plan's pinning (an upper bound on what the peak adds)
    certainty: str | None  # "certain" | "possible" | None (no repack re-pins an offloaded parameter)
    parameters: int
    why: str
    source: str

    def as_numbers(self) -> dict:
        return {"repin_bytes": self.bytes, "repin_certainty": self.certainty, "repin_parameters": self.parameters}


NONE = RepinCost(0, None, 0, "", "")


def _pinned(plan: OffloadPlan, sizes: list[int]) -> int:
    return sum(sizes) if plan.pinning == "exact" else sum(pow2(n) for n in sizes)


def repin_cost(ckpt: CheckpointFacts, plan: OffloadPlan, accounting: Accounting) -> RepinCost:
    """The repack's re-pin of offloaded expert weights (MXFP4 experts: the only repack the kit can place from the
    headers); NONE when nothing offloaded is repacked into new objects."""
    if expert_method(ckpt.quant) != "mxfp4":
        return NONE
    experts = [p for p in plan.offloaded if ".experts." in f".{p.local}"]
    if not experts:
        return NONE
    size = _pinned(plan, [p.nbytes for p in experts])
    rule = repack_rule(accounting)
    if accounting.rules.replace_parameter == "new_object":
        return RepinCost(size, "possible", len(experts),
                         f"unless the Triton backend runs (picked on the card), the MXFP4 backends repack the experts "
                         f"through replace_parameter, which in vLLM {accounting.series} registers new objects: "
                         f"device_loading_context then pins all {len(experts)} offloaded expert parameters again",
                         f"{_RULE} ({rule.sources[0]}), layers/quantization/mxfp4.py:Mxfp4MoEMethod."
                         "process_weights_after_loading")
    return RepinCost(size, "possible", len(experts),
                     f"only if the Humming backend runs (chosen on the card at load), which registers new parameter "
                     f"objects: device_loading_context then pins the {len(experts)} offloaded expert parameters again",
                     f"{_RULE}, {_HUMMING}")


def repin_text(cost: RepinCost) -> str:
    """The re-pin whole, with why and its sources (the repack row)."""
    return (f"repack re-pin {gib(cost.bytes)}, a {cost.certainty} cost ({cost.why}; torch's host cache keeps the "
            f"first blocks, so this is the most it adds; {cost.source})")


def repin_short(cost: RepinCost) -> str:
    """The re-pin as a clause of a host RAM verdict; the repack row says why."""
    return f"a {cost.certainty} repack re-pin of up to {gib(cost.bytes)} (see 'repack after load')"


def repack_verdict(ckpt: CheckpointFacts, plan: OffloadPlan, accounting: Accounting) -> Verdict:
    """The repack row: known where the method and version settle it, UNKNOWN where the card decides."""
    method = expert_method(ckpt.quant)
    experts = [p for p in plan.offloaded if ".experts." in f".{p.local}"]
    expert_bytes = sum(p.nbytes for p in experts)
    scale_bytes = sum(p.nbytes for p in experts if "scale" in p.local.rsplit(".", 1)[-1])
    cost = repin_cost(ckpt, plan, accounting)
    nums = dict(offloaded_expert_bytes=expert_bytes, offloaded_expert_scale_bytes=scale_bytes,
                quant_method=ckpt.quant.method, store_dtype=ckpt.quant.store_dtype, accounting=accounting.label,
                **cost.as_numbers())
    rule = repack_rule(accounting)
    if not plan.offloaded:
        return ok("repack", "nothing is offloaded: no repack touches host memory", **nums)
    if ckpt.quant.method is None and ckpt.quant.recognised:
        return ok("repack", "unquantized: on CUDA no quantization method re-allocates an offloaded weight after "
                            "loading (linear.py:UnquantizedLinearMethod.process_weights_after_loading, "
                            "unquantized_fused_moe_method.py:UnquantizedFusedMoEMethod.process_weights_after_loading "
                            f"copy in place): the pinned figures stand ({_RULE})", **nums)
    if method == "mxfp4":
        return unknown(
            "repack", f"{accounting.label}: decided on the card at load, not in the headers: the {gib(expert_bytes)} "
            "of offloaded MXFP4 experts are repacked by the MoE backend vLLM picks there (oracle/mxfp4.py:"
            "select_deepseek_v4_mxfp4_moe_backend: FlashInfer TRTLLM on SM100 only, DeepGEMM MXFP4 on SM100/SM120 "
            "with DeepGEMM installed, then Marlin, batched Marlin, Humming; Humming ahead of Marlin on SM90). "
            f"{rule.text}. DeepGEMM keeps the weights and repacks the scales ({gib(scale_bytes)}); Marlin changes "
            f"dtype at equal bytes; Humming registers new objects. Host: {repin_text(cost)}. The block-fp8 linears "
            f"are repacked by the kernel init_fp8_linear_kernel picks, also at load ({_RULE})", **nums)
    return unknown("repack", f"{accounting.label}: {ckpt.quant.description}: how its methods repack an offloaded "
                             "weight after loading is decided by the kernel vLLM picks on the card at load; the host "
                             f"figures assume no repack adds pinned bytes ({rule.text}; {_RULE})", **nums)
