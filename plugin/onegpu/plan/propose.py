"""Pure: a proposal request (checkpoint, image, model ID, revision, context; no budgets) + the machine's facts
-> the smallest budgets that pass the capacity checks, each with its derivation (settings-proposed.json).

A proposal is never settings: its file has its own schema, so `--settings settings-proposed.json` is refused,
and its "settings" object lacks the deadlines the operator must choose. The rules are the capacity code's own
(onegpu.plan.capacity, onegpu.plan.offload, vLLM 0.33 accounting): vLLM's offloader moves decoder-layer weights only, so
embeddings/head stay on the GPU; the RAM cap holds what vLLM pins for the offload, not the budget; the proposed
settings are checked by running those very verdicts on them. Exact pinning and selective expert offload are shown
beside the proposal as alternatives: choices to measure, never results.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

from msgspec import Struct, field

from onegpu.core import strict_json
from onegpu.core.shown import as_json
from onegpu.core.units import GIB, gib
from onegpu.plan.capacity import GPU_UTILIZATION, capacity_verdicts, kit_plan
from onegpu.plan.capacity_host import CONTAINER_OWN_NEEDS_BYTES, UNCONFIRMED
from onegpu.plan.ceiling import Link
from onegpu.plan.ceiling_record import plan_ceiling, plan_ceiling_text
from onegpu.plan.kv_sizing import kv_budget
from onegpu.plan.kvcache import KvEstimate
from onegpu.plan.offload import engine_layout, where_lines
from onegpu.plan.offload_rules import RULES
from onegpu.plan.settings import ASSUMED_DEFAULTS, OWN_FIELDS, SettingsError, check_field
from onegpu.plan.vllm_versions import Accounting, assumed_newest

REQUEST_SCHEMA = "onegpu/proposal-request@1"
PROPOSAL_SCHEMA = "onegpu/settings-proposal@1"
NOT_SETTINGS = ("A PROPOSAL, NOT SETTINGS: nothing runs from this file. Copy the values under 'settings' into your "
                "settings file (onegpu/settings@1), choose its deadlines, and approve that file")
# Named assumption for the host's own share: the OS, the page cache that feeds the load, the kit itself.
HEADROOM_MIN_GIB = 8
HEADROOM_FRACTION = 0.05
HEADROOM_RULE = f"the larger of {HEADROOM_MIN_GIB} GiB and {HEADROOM_FRACTION:.0%} of host RAM, ASSUMED for the " \
                "host itself (OS, page cache while loading, the kit)"
DEFAULT_PREFILL_CHUNK = 2048
_REQUIRED = ("model_id", "model_revision", "model_path", "image", "gpu", "context_tokens")
_OPTIONAL = ("prefill_chunk_tokens", "kv_cache_dtype", "gpu_reserve_gib", "free_floor_gib")
_BUDGETS = ("cpu_offload_gib", "container_ram_gib", "host_headroom_gib")


class ProposalRequest(Struct, frozen=True):
    path: str
    sha256: str
    model_id: str
    model_revision: str
    model_path: str
    image: str
    gpu: int | str
    context_tokens: int
    prefill_chunk_tokens: int
    kv_cache_dtype: str | None
    gpu_reserve_gib: float | None  # None: the kit's named default, shown as ASSUMED
    free_floor_gib: float | None = None  # None: the kit's named default, shown as ASSUMED
    assumed: dict[str, str] = field(default_factory=dict)

    def values(self) -> dict:
        return {k: getattr(self, k) for k in (*_REQUIRED, *_OPTIONAL)}


def parse_request(data, path: str, sha256: str) -> ProposalRequest:
    """Validate a proposal request like settings (field, value, rule); raises SettingsError listing every rule."""
    if not isinstance(data, dict):
        raise SettingsError(path, [f"the document must be a JSON object, found {type(data).__name__}"])
    if data.get("schema") != REQUEST_SCHEMA:
        raise SettingsError(path, [f"field 'schema': value {as_json(data.get('schema'))}: must be {REQUEST_SCHEMA!r}"])
    body = {k: v for k, v in data.items() if k != "schema"}
    errors = [f"field {k!r}: value {v!r}: a proposal request carries no budgets: the proposal computes them"
              for k, v in body.items() if k in _BUDGETS]
    errors += [f"field {k!r}: value {v!r}: unknown field (not in {REQUEST_SCHEMA})" for k, v in body.items()
               if k not in (*_REQUIRED, *_OPTIONAL, *_BUDGETS)]
    errors += [f"field {k!r}: required" for k in _REQUIRED if k not in body]
    checked = (check_field(k, v, OWN_FIELDS[k]) for k, v in body.items() if k in (*_REQUIRED, *_OPTIONAL))
    errors += [problem for problem in checked if problem]
    if errors:
        raise SettingsError(path, errors)
    assumed = {}
    if "prefill_chunk_tokens" not in body:
        assumed["prefill_chunk_tokens"] = f"{DEFAULT_PREFILL_CHUNK} (vLLM's chunked-prefill batch size)"
    if "gpu_reserve_gib" not in body:
        default, why = ASSUMED_DEFAULTS["gpu_reserve_gib"]
        assumed["gpu_reserve_gib"] = f"{default} ({why})"
    if "free_floor_gib" not in body:
        default, why = ASSUMED_DEFAULTS["free_floor_gib"]
        assumed["free_floor_gib"] = f"{default} ({why})"
    reserve, floor = body.get("gpu_reserve_gib"), body.get("free_floor_gib")
    return ProposalRequest(path=path, sha256=sha256, model_id=body["model_id"], model_revision=body["model_revision"],
                           model_path=body["model_path"], image=body["image"], gpu=body["gpu"],
                           context_tokens=body["context_tokens"],
                           prefill_chunk_tokens=body.get("prefill_chunk_tokens", DEFAULT_PREFILL_CHUNK),
                           kv_cache_dtype=body.get("kv_cache_dtype"),
                           gpu_reserve_gib=float(reserve) if reserve is not None else None,
                           free_floor_gib=float(floor) if floor is not None else None, assumed=assumed)


def load_request(raw: bytes, path: str, sha256: str) -> ProposalRequest:
    try:
        data = strict_json.loads(raw)
    except (strict_json.StrictJSONError, UnicodeDecodeError) as exc:
        raise SettingsError(path, [str(exc)]) from None
    return parse_request(data, path, sha256)


class Proposal(Struct):
    proposed: bool  # False: no budget can work (blockers) or the facts do not allow a number (unknown)
    settings: dict | None
    alternatives: list[dict]  # exact pinning, selective expert offload: choices to measure beside the proposal
    rows: list[tuple[str, str, str]]  # (quantity, value, derivation)
    blockers: list[dict]  # {check, code, message, numbers}
    unknown: list[str]
    check: list  # the capacity verdicts of the proposed settings on this machine
    reserve: dict
    warnings: list[str] = field(default_factory=list)
    accounting: str = ""  # the label of the vLLM version's rules the proposal applied


def _assumed_gib(name: str) -> float:
    value = ASSUMED_DEFAULTS[name][0]
    assert isinstance(value, (int, float)), f"{name}'s assumed default is a number of GiB"
    return float(value)


def _ceil_gib(n: int) -> int:
    return max(0, math.ceil(n / GIB))


def _reserve(req: ProposalRequest, calibration) -> tuple[float, str, dict]:
    """(reserve GiB the proposed settings carry, how it is shown, the receipt's reserve record)."""
    if calibration is not None:
        value = math.ceil(calibration.reserve_bytes / GIB * 100) / 100  # settings hold GiB: round up, never down
        return value, f"{value:g} GiB CALIBRATED FROM {calibration.run_id}", \
            {"source": "calibrated", "calibrated_from": calibration.run_id, "bytes": round(value * GIB)}
    if req.gpu_reserve_gib is not None:
        return req.gpu_reserve_gib, f"{req.gpu_reserve_gib:g} GiB (from the request)", \
            {"source": "request", "bytes": round(req.gpu_reserve_gib * GIB)}
    default = _assumed_gib("gpu_reserve_gib")
    return default, f"{default:g} GiB ASSUMED ({ASSUMED_DEFAULTS['gpu_reserve_gib'][1]})", \
        {"source": "assumed", "bytes": round(default * GIB)}


def _headroom_gib(host) -> tuple[int, str]:
    if host.ram_total_bytes is None:
        return HEADROOM_MIN_GIB, f"{HEADROOM_MIN_GIB} GiB: host RAM total unknown, so the minimum of the rule"
    share = math.ceil(host.ram_total_bytes * HEADROOM_FRACTION / GIB)
    return max(HEADROOM_MIN_GIB, share), f"{HEADROOM_RULE}: max({HEADROOM_MIN_GIB}, {HEADROOM_FRACTION:g} x " \
                                         f"{gib(host.ram_total_bytes)} = {share} GiB)"


def kv_inputs(req: ProposalRequest, kv) -> str:
    """Every input the KV figure depends on: the same context gives another figure with another chunk or dtype."""
    chunk = " ASSUMED" if "prefill_chunk_tokens" in req.assumed else ""
    dtype = "" if req.kv_cache_dtype else " (the model's own, assumed)"
    return (f"{kv.context_tokens:,} tokens, one sequence, prefill chunk {kv.prefill_chunk_tokens:,}{chunk}, "
            f"{kv.kv_dtype}{dtype}")


def kv_differs_from_plan(req: ProposalRequest, kv: KvEstimate, plan_kv: KvEstimate | None) -> str | None:
    """A warning when this session's plan (from --settings; its KV estimate, None when the session estimated
    none) put another KV figure on the same context."""
    plan_bytes = plan_kv.bytes if plan_kv is not None else None
    if (kv.bytes is None or plan_kv is None or plan_kv.context_tokens != kv.context_tokens
            or plan_bytes is None or plan_bytes == kv.bytes):
        return None
    return (f"the plan of this session's settings puts the KV cache for the same {kv.context_tokens:,} tokens at "
            f"{gib(plan_bytes)} (prefill chunk {plan_kv.prefill_chunk_tokens:,}, "
            f"{plan_kv.kv_dtype}); this proposal's {gib(kv.bytes)} uses {kv_inputs(req, kv)}: "
            "the chunk or dtype differs, not the arithmetic")


def propose(req: ProposalRequest, gpu, gpu_missing_reason: str | None, host, ckpt, kv, calibration=None,
            run_disk_free_bytes: int | None = None, accounting: Accounting | None = None,
            link: Link | None = None) -> Proposal:
    """The smallest whole-GiB CPU-offload budget (and the RAM cap and headroom that follow) for these facts, by the
    rules of `accounting`'s vLLM version (the newest known, ASSUMED, when None); with `link`, the link's upper bounds
    on the rates under the proposal and under each alternative (onegpu.plan.ceiling)."""
    accounting = accounting or assumed_newest()
    reserve_gib, reserve_text, reserve = _reserve(req, calibration)
    rows: list[tuple[str, str, str]] = []
    if gpu is None:
        return Proposal(False, None, [], rows, [{"check": "gpu", "code": _code(gpu_missing_reason), "numbers": {},
                        "message": f"no GPU is selected ({gpu_missing_reason}): the GPU side cannot be sized"}],
                        [], [], reserve, accounting=accounting.label)
    if kv.bytes is None:
        return Proposal(False, None, [], rows, [], [f"the KV cache for {kv.context_tokens:,} tokens is not "
                        f"estimated ({kv.unknown_reason}): no budget is proposed without it"], [], reserve,
                        accounting=accounting.label)
    layout = engine_layout(ckpt)  # one pass over the tensors; every plan below reuses it
    everything = kit_plan(ckpt, 2**62, layout=layout)  # every parameter the offloader is offered
    weights, offloadable = everything.loaded_bytes, everything.offerable_bytes
    stays = weights - offloadable
    reserve_bytes = round(reserve_gib * GIB)
    sized = kv_budget(gpu.total_bytes, gpu.free_bytes, reserve_bytes, accounting.rules)
    target, budget = sized.requested_bytes, sized.budget_bytes
    need = weights + kv.bytes - budget
    skipped = everything.not_loaded_bytes
    rows += [("GPU target", gib(target),
              f"{GPU_UTILIZATION} x GPU {gpu.index} {gpu.name} total {gib(gpu.total_bytes)}"),
             ("non-weight reserve", gib(reserve_bytes), reserve_text),
             ("GPU budget (weights + KV)", gib(budget),
              f"target {gib(target)} - reserve {gib(reserve_bytes)} ({accounting.label})" if sized.binding == "requested"
              else f"device headroom {gib(sized.headroom_bound_bytes or 0)} (free - the 1 GiB margin floor, below the "
                   f"target {gib(target)}) - reserve {gib(reserve_bytes)} ({accounting.label})"),
             ("weights the engine loads", gib(weights),
              f"decoder layers {gib(offloadable)} (offloadable) + embeddings/head and other non-layer tensors "
              f"{gib(stays)} (stay on the GPU)" + (f"; header bytes {gib(ckpt.weight_bytes)} of which "
                                                   f"{gib(skipped)} (draft layers, left-out towers) are not loaded"
                                                   if skipped else "")),
             ("KV cache", gib(kv.bytes), kv_inputs(req, kv))]
    if need <= 0:
        offload_gib = 0
        why = f"weights {gib(weights)} + KV {gib(kv.bytes)} fit the budget with {gib(-need)} to spare: no offload"
    elif need <= offloadable:
        offload_gib, before, moved = _smallest_budget(everything.offloaded, need)
        why = (f"weights {gib(weights)} + KV {gib(kv.bytes)} - budget {gib(budget)} = {gib(need)} must leave the GPU; "
               f"the engine moves whole parameters in its order until the budget is crossed, so the first {moved} "
               f"reach it, and any budget above the {gib(before)} before the last of them moves them all: the "
               f"smallest whole GiB above it ({RULES['budget'].short()})")
    else:
        offload_gib = _ceil_gib(offloadable)
        why = (f"{gib(need)} must leave the GPU but only the {gib(offloadable)} of decoder-layer weights can "
               f"(embeddings/head stay): short by {gib(need - offloadable)}")
    plan = kit_plan(ckpt, offload_gib * GIB, layout=layout)
    offloaded = plan.offloaded_bytes
    rows += [("cpu_offload_gib", f"{offload_gib} GiB", why),
             ("GPU left after", gib(budget - (weights - offloaded) - kv.bytes),
              f"budget - (weights - offloaded {gib(offloaded)}) - KV")]
    if offload_gib:
        rows.append(("engine offload", gib(offloaded), f"{accounting.label}: whole parameters in the engine's order until "
                     f"the budget is crossed; {where_lines(plan)}"))
    cap_gib = _ceil_gib(plan.peak_bytes + CONTAINER_OWN_NEEDS_BYTES)
    pinned_why = (f"{len(plan.offloaded)} parameters pinned by vLLM's default pinning, each rounded up to a power of "
                  f"two: {gib(plan.pinned_bytes)}; peak while offloading {gib(plan.peak_bytes)}" if offload_gib
                  else "nothing offloaded, nothing pinned")
    rows.append(("container_ram_gib", f"{cap_gib} GiB", f"{pinned_why} + {gib(CONTAINER_OWN_NEEDS_BYTES)} ASSUMED "
                 f"for the container's own needs, rounded up to whole GiB (rule: {RULES['pinned'].cite()})"))
    alternatives = _alternatives(ckpt, offload_gib, everything, budget, kv.bytes, layout) if offload_gib else []
    for alt in alternatives:
        rows.append((f"container_ram_gib ({alt['name']})", f"{alt['container_ram_gib']} GiB", alt["why"]))
    plans = [alt.pop("plan") for alt in alternatives]  # the document keeps numbers, not plans
    if link is not None:
        rows += _ceiling_rows(ckpt.config, plan, list(zip(alternatives, plans)), link, req.prefill_chunk_tokens)
    headroom_gib, headroom_why = _headroom_gib(host)
    rows.append(("host_headroom_gib", f"{headroom_gib} GiB", headroom_why))
    rows += _host_rows(host, cap_gib, headroom_gib, alternatives)
    free_after, warnings = gpu.free_bytes - target, []
    floor_gib = req.free_floor_gib if req.free_floor_gib is not None else _assumed_gib("free_floor_gib")
    floor = f"floor {floor_gib:g} GiB{' ASSUMED' if req.free_floor_gib is None else ''}"
    rows.append(("GPU free after boot", gib(free_after), f"driver-reported free now {gib(gpu.free_bytes)} - target "
                 f"{gib(target)} (projected; the landing measures it) vs the free-memory {floor}: "
                 f"{'above' if free_after >= round(floor_gib * GIB) else 'UNDER'}"))
    if free_after < round(floor_gib * GIB):
        warnings.append(f"the projected GPU free memory after boot {gib(free_after)} is under the free-memory {floor}: "
                        "other memory on the card leaves less than the floor beside the engine's target")
    settings = {"schema": "onegpu/settings@1", **{k: getattr(req, k) for k in _REQUIRED},
                "prefill_chunk_tokens": req.prefill_chunk_tokens, "cpu_offload_gib": offload_gib,
                "container_ram_gib": cap_gib, "host_headroom_gib": headroom_gib}
    if req.kv_cache_dtype is not None:
        settings["kv_cache_dtype"] = req.kv_cache_dtype
    if req.free_floor_gib is not None:
        settings["free_floor_gib"] = req.free_floor_gib
    if reserve["source"] != "assumed":
        settings["gpu_reserve_gib"] = reserve_gib
    shaped = SimpleNamespace(cpu_offload_gib=offload_gib, container_ram_gib=cap_gib, host_headroom_gib=headroom_gib,
                             gpu_reserve_gib=reserve_gib,
                             assumed={} if reserve["source"] != "assumed" else {"gpu_reserve_gib": req.assumed.get(
                                 "gpu_reserve_gib", "")})
    check = capacity_verdicts(shaped, gpu, host, ckpt, kv, run_disk_free_bytes, accounting=accounting)
    blockers = [{"check": v.check, "code": v.code, "message": v.message, "numbers": dict(v.numbers)}
                for v in check if v.status == "BLOCKED"]
    unknown = [f"{v.check}: {v.message}" for v in check if v.status == "UNKNOWN" and v.check in ("host_ram",)]
    if need > offloadable:
        blockers.insert(0, {"check": "offload", "code": "INSUFFICIENT_VRAM" if stays > budget else "KV_DOES_NOT_FIT",
                            "numbers": {"short_bytes": need - offloadable, "stays_on_gpu_bytes": stays,
                                        "kv_bytes": kv.bytes, "gpu_budget_bytes": budget},
                            "message": f"no CPU-offload budget can work: what must stay on the GPU (embeddings/head "
                                       f"and other non-layer tensors {gib(stays)}) + KV {gib(kv.bytes)} = "
                                       f"{gib(stays + kv.bytes)} exceeds the GPU budget {gib(budget)} by "
                                       f"{gib(need - offloadable)}"})
    ok = not blockers
    # the alternatives stay when the proposal is blocked: exact pinning may be what a short host needs to measure
    return Proposal(ok, settings if ok else None, alternatives, rows, blockers, unknown, check, reserve, warnings,
                    accounting.label)


def _code(reason: str | None) -> str | None:
    """The outcome code a 'BLOCKED CODE: ...' reason names."""
    if reason and reason.startswith("BLOCKED "):
        return reason[len("BLOCKED "):].split(":", 1)[0]
    return None


def _smallest_budget(params, need: int) -> tuple[int, int, int]:
    """(smallest whole-GiB budget that makes the engine move at least `need` bytes, the bytes moved before the
    parameter that reaches `need`, how many parameters that is). uva.py moves a parameter while its running total
    is below the budget, so any budget above the total before that parameter moves it."""
    before = 0
    for count, p in enumerate(params, 1):
        if before + p.nbytes >= need:
            return before // GIB + 1, before, count
        before += p.nbytes
    return _ceil_gib(before), before, len(params)


def _alternative(name: str, plan, gpu_budget: int, kv_bytes: int, why: str, **extra) -> dict:
    """One alternative's record: its RAM cap, pinned and peak bytes, what it moves and leaves on the GPU, its plan
    (for the link ceiling; the document keeps numbers only)."""
    cap = _ceil_gib(plan.peak_bytes + CONTAINER_OWN_NEEDS_BYTES)
    return {"name": name, **extra, "container_ram_gib": cap, "pinned_bytes": plan.pinned_bytes,
            "peak_bytes": plan.peak_bytes, "parameters": len(plan.offloaded), "offloaded_bytes": plan.offloaded_bytes,
            "gpu_left_bytes": gpu_budget - plan.gpu_resident_bytes - kv_bytes, "confirmed": False, "plan": plan,
            "why": why}


def _alternatives(ckpt, offload_gib: int, everything, gpu_budget: int, kv_bytes: int, layout) -> list[dict]:
    """Exact pinning, more offload and selective expert offload: choices to measure, never results."""
    own = gib(CONTAINER_OWN_NEEDS_BYTES)
    exact = kit_plan(ckpt, offload_gib * GIB, "exact", layout=layout)
    out = [_alternative("exact pinning", exact, gpu_budget, kv_bytes,
                        f"offload_pinning \"exact\" (VLLM_WEIGHT_OFFLOADING_DISABLE_PIN_MEMORY=1): the same "
                        f"{len(exact.offloaded)} parameters pinned at their own size = {gib(exact.pinned_bytes)}, "
                        f"peak {gib(exact.peak_bytes)}, + {own} ASSUMED own needs, rounded up; {UNCONFIRMED}",
                        settings={"offload_pinning": "exact",
                                  "container_ram_gib": _ceil_gib(exact.peak_bytes + CONTAINER_OWN_NEEDS_BYTES)})]
    whole = _ceil_gib(everything.offerable_bytes)
    if whole > offload_gib:
        more = kit_plan(ckpt, whole * GIB, layout=layout)
        left = gpu_budget - more.gpu_resident_bytes - kv_bytes
        out.append(_alternative(
            "more offload", more, gpu_budget, kv_bytes,
            f"cpu_offload_gib {whole}: every decoder-layer weight the offloader is offered "
            f"({gib(more.offloaded_bytes)}) leaves the GPU, {gib(left)} of it left after for the KV cache to grow; "
            f"{len(more.offloaded)} parameters pinned, rounded = {gib(more.pinned_bytes)}, peak "
            f"{gib(more.peak_bytes)} + {own} ASSUMED own needs",
            settings={"cpu_offload_gib": whole,
                      "container_ram_gib": _ceil_gib(more.peak_bytes + CONTAINER_OWN_NEEDS_BYTES)}))
    names = sorted({p.local.rsplit(".", 1)[-1] for p in everything.offloaded if ".experts." in f".{p.local}"})
    if names:
        sel = kit_plan(ckpt, offload_gib * GIB, "rounded", selected=tuple(names), layout=layout)
        out.append(_alternative(
            "selective expert offload", sel, gpu_budget, kv_bytes,
            f"A CHOICE TO MEASURE, NOT A FASTER RESULT: --cpu-offload-params {' '.join(names)} keeps the budget but "
            f"offers only the experts' parameters ({RULES['selective'].cite()}): {where_lines(sel)}; every attention "
            f"and dense weight stays on the GPU; {len(sel.offloaded)} parameters pinned, rounded = "
            f"{gib(sel.pinned_bytes)}, peak {gib(sel.peak_bytes)} + {own} ASSUMED own needs; GPU left after "
            f"{gib(gpu_budget - sel.gpu_resident_bytes - kv_bytes)}; the kit's settings cannot ask for it: it is "
            "not in the launch", engine_args=["--cpu-offload-params", *names]))
    return out


def _ceiling_rows(config: dict | None, plan, alternatives: list[tuple[dict, object]], link: Link,
                  chunk: int) -> list[tuple[str, str, str]]:
    """The link's upper bounds under the proposal, then how each alternative (its record, its plan) moves them."""
    base = plan_ceiling(plan, config or {}, link, chunk)
    rows = [("link ceiling", _short(base), plan_ceiling_text(base))]
    for alt, alt_plan in alternatives:
        bound = plan_ceiling(alt_plan, config or {}, link, chunk)
        text = plan_ceiling_text(bound, base)
        if alt["name"] == "exact pinning":
            text += ("; the same parameters cross the link, from memory the engine did not pin: whether the link "
                     "keeps its rate for it is not measured")
        alt["ceiling"] = {**bound, "text": text}
        rows.append((f"link ceiling ({alt['name']})", _short(bound), text))
    return rows


def _short(bound: dict) -> str:
    decode = bound["decode_tps"]
    if not bound["offloaded"] or decode is None or math.isinf(decode):
        return "not bound" if bound["offloaded"] is False else "unknown"
    return f"<= {decode:,.2f} tok/s"


def _host_rows(host, cap_gib: int, headroom_gib: int, alternatives: list[dict]) -> list[tuple[str, str, str]]:
    avail = host.ram_available_bytes
    rows = []
    for label, cap in (("host need", cap_gib), *((f"host need ({a['name']})", a["container_ram_gib"])
                                                  for a in alternatives)):
        if not cap:
            continue
        need = (cap + headroom_gib) * GIB
        if avail is None:
            verdict = "host RAM unknown (state it with --host-ram-gib N for a replayed profile): not checked"
        elif need <= avail:
            verdict = f"within host RAM available {gib(avail)} ({gib(avail - need)} left)"
        else:
            verdict = f"host RAM available {gib(avail)} is short by {gib(need - avail)}"
        limit = host.cgroup.memory_limit_bytes
        if limit is not None:
            verdict += f"; kit cgroup limit {gib(limit)}" + (f" short by {gib(need - limit)}" if need > limit else "")
        rows.append((label, gib(need), f"cap {cap} GiB + headroom {headroom_gib} GiB: {verdict}"))
    return rows
