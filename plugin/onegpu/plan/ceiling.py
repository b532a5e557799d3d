"""Pure: how fast the engine could possibly answer, from the bytes its offload makes cross the PCIe link.

With vLLM's UVA weight offload, an offloaded parameter stays in pinned host memory and the GPU reads it in place
over PCIe in every forward step (vllm/model_executor/offloader/uva.py: UVAOffloader._maybe_offload_to_cpu makes a
CUDA view of the pinned copy, vllm/utils/torch_utils.py: get_accelerator_view_from_cpu_tensor). So the link bounds
every step: a step cannot be faster than the bytes it must read from the host divided by the link's bandwidth. The
kernels read at least (rules, CEILING_RULES):
* an offloaded dense parameter (attention, norms, the router, shared experts) whole, once per forward step;
* an offloaded routed-expert tensor (and its scales) only in the slices of the experts the step's tokens were routed
  to: the fused MoE kernel groups each expert's tokens and reads that expert's rows of the stacked tensor, "every
  repeated read crosses PCIe" for weights in host memory (vllm/model_executor/layers/fused_moe/fused_moe.py:
  _prepare_expert_assignment). A step of T routed tokens, each to k of E experts, touches E(1 - (1 - k/E)^T)
  distinct experts per layer under uniform routing (the assumption, named as such): k at T = 1, all E for a long
  prefill chunk.
These are lower bounds on the bytes (a kernel may read an expert more than once; activations, the KV cache and the
GPU-resident weights cost time too), so every figure here is an UPPER BOUND on the rate, never a prediction.
"""
from __future__ import annotations

import math
from fractions import Fraction

from msgspec import Struct, field, structs

from onegpu.plan.offload import OffloadPlan

# Keys that name the routed experts and the experts a token goes to, across the configs the kit reads.
_EXPERT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
_TOP_K_KEYS = ("num_experts_per_tok", "moe_topk", "num_experts_per_token", "top_k")
EXACT_TOKENS = 64  # steps up to this many tokens are counted in exact fractions
_U = "vllm/model_executor/offloader/uva.py:UVAOffloader._maybe_offload_to_cpu"
CEILING_RULES = (
    ("link_reads", "an offloaded parameter is read by the GPU in place, from pinned host memory over PCIe, in every "
                   "forward step that uses it", (_U, "vllm/utils/torch_utils.py:get_accelerator_view_from_cpu_tensor")),
    ("dense_whole", "an offloaded dense parameter (attention, norms, router, shared experts) is read whole once per "
                    "forward step, at least", (_U,)),
    ("experts_routed", "an offloaded routed-expert tensor (and its scales) is read only in the slices of the experts "
                       "the step routes tokens to, each expert's tokens grouped so its rows cross the link once at "
                       "least", ("vllm/model_executor/layers/fused_moe/fused_moe.py:_prepare_expert_assignment",
                                 "vllm/model_executor/layers/fused_moe/fused_moe.py:fused_experts")),
    ("uniform_routing", "ASSUMED: tokens are routed uniformly, so a step of T routed tokens touches E(1 - (1 - k/E)^T) "
                        "distinct experts per layer (k at T = 1, all E for a long prefill chunk)", ()),
    ("upper_bound", "compute, activations, the KV cache and the GPU-resident weights are left out, and a kernel may "
                    "read an expert more than once: the bytes are a lower bound, every rate an UPPER BOUND", ()),
)


def ceiling_rules_json() -> list[dict]:
    return [{"rule": key, "text": text, "sources": list(sources)} for key, text, sources in CEILING_RULES]


def _first_int(config: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def routing_of(config: dict) -> tuple[int | None, int | None]:
    """(routed experts E, experts per token k) from config.json (its text_config for a multimodal wrapper)."""
    inner = config.get("text_config")
    merged = {**config, **inner} if isinstance(inner, dict) else config
    return _first_int(merged, _EXPERT_KEYS), _first_int(merged, _TOP_K_KEYS)


def is_routed_expert(local: str) -> bool:
    """A routed-expert tensor as vLLM's MoE methods register it (mlp.experts...w13_weight, its scales), not a shared
    expert's."""
    return ".experts." in f".{local}" and "shared_expert" not in local


class LinkBytes(Struct, frozen=True):
    """The offloaded bytes a forward step reads over the link, split by how the kernels read them."""

    expert_bytes: int  # every offloaded routed-expert tensor and its scales, all experts, all layers
    dense_bytes: int  # every other offloaded parameter, read whole each step
    experts: int | None  # E, routed experts per MoE layer
    top_k: int | None  # k, experts per token
    moe_layers: int  # layers with offloaded routed-expert tensors
    dense_layers: int  # layers (or towers) with offloaded dense parameters

    def touched_fraction(self, tokens: int) -> Fraction | float:
        """Share of an MoE layer's experts a step of `tokens` routed tokens touches (uniform routing); exact for the
        small steps of decoding, a float for a prefill chunk (where it is all experts to the last byte)."""
        if not self.experts or not self.top_k:
            return 1  # routing unknown: every expert, the most that can be read
        untouched = Fraction(self.experts - min(self.top_k, self.experts), self.experts)
        tokens = max(tokens, 0)
        return 1 - untouched ** tokens if tokens <= EXACT_TOKENS else 1.0 - float(untouched) ** tokens

    def per_step(self, tokens: int) -> int:
        """Bytes a forward step over `tokens` tokens reads from the host at least."""
        return self.dense_bytes + math.ceil(self.expert_bytes * self.touched_fraction(tokens))


def link_bytes(plan: OffloadPlan, config: dict) -> LinkBytes:
    """What the offload plan's parameters make cross the link (config.json gives E and k)."""
    experts, top_k = routing_of(config or {})
    routed = [p for p in plan.offloaded if is_routed_expert(p.local)]
    dense = [p for p in plan.offloaded if not is_routed_expert(p.local)]
    if routed and (experts is None or top_k is None):
        experts = top_k = None  # both or neither: a half-known routing is no routing
    return LinkBytes(expert_bytes=sum(p.nbytes for p in routed), dense_bytes=sum(p.nbytes for p in dense),
                     experts=experts, top_k=top_k, moe_layers=len({p.module for p in routed}),
                     dense_layers=len({p.module for p in dense}))


# PCIe: GT/s per lane and the line code's payload share, by generation (PCI-SIG base specifications; 6.0 counts its
# FLIT mode, 242 of every 256 bytes).
_PCIE = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130),
         6: (64.0, 242 / 256)}
# Pinned host-to-device copies reach about 25 GB/s on PCIe 4.0 x16 (31.5 GB/s nominal) and about 56 GB/s on PCIe
# 5.0 x16 (63 GB/s nominal), measured with nvbandwidth (an RTX 5090 for 5.0): the share of the nominal rate a link
# of that generation delivers, ASSUMED where nothing measured this one. Older generations take 4.0's share, newer
# ones 5.0's.
PRACTICAL_SHARE = {4: 25.0 / 31.5, 5: 56.0 / 63.0}
PUBLIC_FIGURES = "about 25 GB/s on PCIe 4.0 x16 and 56 GB/s on PCIe 5.0 x16 (nvbandwidth, pinned host-to-device)"


def nominal_gbps(gen: int | None, width: int | None) -> float | None:
    """The link's nominal rate in one direction, GB/s (10^9 bytes a second)."""
    if gen not in _PCIE or not width:
        return None
    rate, payload = _PCIE[gen]
    return rate * payload / 8 * width


def practical_share(gen: int) -> float:
    return PRACTICAL_SHARE[4] if gen <= 4 else PRACTICAL_SHARE[5]


class Link(Struct, frozen=True):
    """The host-to-device bandwidth the ceilings use, and how it is known."""

    gbps: float | None
    basis: str  # "MEASURED" | "ASSUMED" | "UNKNOWN"
    how: str
    gen: int | None = None  # the link's maximum generation (it trains up under load) and width
    width: int | None = None
    current_gen: int | None = None  # what NVML reads now (an idle card may run its link slower)
    current_width: int | None = None
    nominal_gbps: float | None = None
    measurement: dict | None = None  # the probe's copy: bytes, repeats, seconds, GB/s
    measured_note: str = ""  # "NOT MEASURED" where no probe measured this link, and why


def link_from_gpu(gpu, measured: dict | None = None, not_measured: str = "") -> Link:
    """The link of the selected GPU: a probe's measurement where one exists, else NVML's nominal rate times the
    ASSUMED practical share; UNKNOWN where NVML reads no link."""
    gen = getattr(gpu, "pcie_max_link_gen", None) or getattr(gpu, "pcie_link_gen", None)
    width = getattr(gpu, "pcie_max_link_width", None) or getattr(gpu, "pcie_link_width", None)
    unknown = Link(None, "UNKNOWN", "NVML reads no PCIe generation or width for the selected GPU", gen=gen,
                   width=width, current_gen=getattr(gpu, "pcie_link_gen", None),
                   current_width=getattr(gpu, "pcie_link_width", None), nominal_gbps=nominal_gbps(gen, width))
    if measured and isinstance(measured.get("gbps"), (int, float)) and measured["gbps"] > 0:
        return structs.replace(
            unknown, gbps=float(measured["gbps"]), basis="MEASURED", measurement=measured,
            how=f"pinned host-to-device copies measured by the runtime probe in the engine image: "
                f"{measured['gbps']:.1f} GB/s, the best of {measured.get('repeats')} copies of "
                f"{measured.get('bytes', 0) / 2**20:,.0f} MiB")
    note = not_measured or "NOT MEASURED: no runtime probe measured this link"
    nominal = unknown.nominal_gbps
    if nominal is None or gen is None:
        return structs.replace(unknown, measured_note=note)
    share = practical_share(gen)
    return structs.replace(unknown, gbps=nominal * share, basis="ASSUMED", measured_note=note,
                           how=f"PCIe {gen}.0 x{width}: {nominal:.1f} GB/s nominal x {share:.2f} ASSUMED practical "
                               f"share ({PUBLIC_FIGURES})")


class Ceilings(Struct, frozen=True):
    """Upper bounds on the engine's rates under the offload plan and the link (None where unknown)."""

    decode_tps: dict[int, float | None]  # batch size -> tokens a second
    prefill_tps: float | None  # at the prefill chunk
    chunk_tokens: int
    step_bytes: dict[int, int]  # batch size -> bytes a decode step reads
    chunk_bytes: int
    ttft_s: dict[int, float | None] = field(default_factory=dict)  # prompt tokens -> seconds, at least
    offloaded: bool = True


def _rate(tokens: int, nbytes: int, gbps: float | None) -> float | None:
    if gbps is None:
        return None
    if nbytes <= 0:
        return math.inf
    return tokens * gbps * 1e9 / nbytes


def prefill_seconds(link: Link, traffic: LinkBytes, prompt_tokens: int, chunk: int) -> float | None:
    """Time the link needs for a prompt of prompt_tokens in chunks of `chunk` tokens, at least."""
    if link.gbps is None:
        return None
    full, rest = divmod(prompt_tokens, chunk)
    nbytes = full * traffic.per_step(chunk) + (traffic.per_step(rest) if rest else 0)
    return nbytes / (link.gbps * 1e9)


def ceilings(traffic: LinkBytes, link: Link, chunk: int, batches: tuple[int, ...] = (1,),
             prompts: tuple[int, ...] = ()) -> Ceilings:
    """The upper bounds: decode at each batch size, prefill at the chunk, time to first token for each prompt."""
    steps = {b: traffic.per_step(b) for b in batches}
    chunk_bytes = traffic.per_step(chunk)
    return Ceilings(decode_tps={b: _rate(b, steps[b], link.gbps) for b in batches},
                    prefill_tps=_rate(chunk, chunk_bytes, link.gbps), chunk_tokens=chunk, step_bytes=steps,
                    chunk_bytes=chunk_bytes, ttft_s={p: prefill_seconds(link, traffic, p, chunk) for p in prompts},
                    offloaded=traffic.expert_bytes + traffic.dense_bytes > 0)
