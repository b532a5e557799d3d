"""Pure: where the engine landed at READY (boot log + one NVML/host sample) against what the plan projected and
against the free-memory floor -> the receipt's "landing" section, its lines and its warnings.

Projection, from the plan's capacity rows: GPU-resident weights = header bytes - offload; KV pool = GPU budget
- resident weights, in tokens at the KV estimate's bytes per token; GPU free after boot = free at scan - the
0.85 target the engine takes; host available at least = available at scan - the container RAM cap.
Measured: "Model loading took X GiB", the KV pool lines, NVML free/used, psutil available. What was not
measured (no NVML reading, as on a machine without the NVIDIA driver) is "not measured", never invented.

Offload figures are compared like with like (vLLM 0.33 accounting, onegpu.plan.offload RULES["logged"]): the engine's
"Total CPU offloaded parameters: N" is logical GiB (numel x element_size, two decimals), so it meets the plan's
logical offload, never the pinned figure; the pinned figure meets the container's measured memory, of which it is
a lower bound. With exact pinning that comparison is what confirms the plan's figure.
"""
from __future__ import annotations

from msgspec import Struct
from msgspec.structs import replace

from onegpu.core.jsonable import to_json
from onegpu.core.units import GIB, gib
from onegpu.plan.landing_kv import extensible_kv_check, extensible_lines
from onegpu.plan.verdict import Verdict


class Projection(Struct, frozen=True):
    """What the plan's numbers predict for the landing (bytes, tokens); None where the plan does not say."""

    weights_gpu_bytes: int | None
    kv_pool_bytes: int | None
    kv_bytes_per_token: float | None
    kv_pool_tokens: int | None
    gpu_free_at_scan_bytes: int | None
    gpu_target_bytes: int | None
    gpu_free_after_bytes: int | None
    host_available_at_scan_bytes: int | None
    container_ram_cap_bytes: int | None
    host_available_min_bytes: int | None
    reserve_source: str | None  # "ASSUMED", "settings" or "CALIBRATED FROM <run>"
    offloaded_logical_bytes: int | None = None  # what the engine's "Total CPU offloaded parameters" should say
    pinned_bytes: int | None = None  # host bytes pinned for the offload, under the settings' pinning
    pinned_rounded_bytes: int | None = None
    pinned_exact_bytes: int | None = None
    pinning: str | None = None  # "rounded" | "exact"
    kv_sizing: str | None = None  # "estimate" | "extensible" (vLLM 0.34): how the version applied sizes the cache
    kv_bytes_per_block: int | None = None
    kv_blocks_per_request: int | None = None
    kv_layer_segments: int | None = None  # layer segments an extensible cache commits in whole granules
    kv_context_tokens: int | None = None
    requested_bytes: int | None = None  # ceil(total x 0.85): what the engine is told it may use
    reserve_bytes: int | None = None  # the plan's non-weight reserve (assumed, stated or calibrated)
    accounting: str | None = None


def _pool_tokens(pool: int | None, kv: dict, per_token: float | None) -> int | None:
    """The tokens the engine's boot line will print for a pool of this size: whole blocks of the pool over a
    request's blocks, times the context (vLLM's get_kv_cache_capacity); bytes per token where the plan has no
    pool arithmetic (recurrent layers)."""
    if pool is None or not per_token:
        return None
    if pool <= 0:
        return 0
    per_block, blocks = kv.get("pool_bytes_per_block"), kv.get("pool_blocks_per_request")
    if per_block and blocks:
        return int((pool // per_block) / blocks * kv["context_tokens"])
    return int(pool // per_token)


def projection_from_plan(verdicts: list[Verdict]) -> Projection:
    """The projection from the plan's capacity verdicts."""
    n = {v.check: v.numbers for v in verdicts}
    resident = n.get("gpu_weights", {}).get("gpu_resident_bytes")
    budget = n.get("gpu_budget", {}).get("budget_bytes")
    kv = n.get("kv_cache", {})
    per_token = kv["kv_bytes"] / kv["context_tokens"] if kv.get("kv_bytes") and kv.get("context_tokens") else None
    pool = budget - resident if budget is not None and resident is not None else None
    tokens = _pool_tokens(pool, kv, per_token)
    free, target = n.get("gpu_free", {}).get("free_bytes"), n.get("gpu_budget", {}).get("target_bytes")
    avail, cap = n.get("host_ram", {}).get("host_available_bytes"), n.get("host_ram", {}).get("container_ram_cap_bytes")
    gb = n.get("gpu_budget", {})
    source = None
    if gb:
        source = f"CALIBRATED FROM {gb['reserve_calibrated_from']}" if gb.get("reserve_calibrated_from") else \
            ("ASSUMED" if gb.get("reserve_assumed") else "settings")
    plan = n.get("offload_plan", {})
    pinned = n.get("host_offload", {})
    return Projection(
        kv_sizing=gb.get("kv_sizing"), kv_bytes_per_block=kv.get("pool_bytes_per_block"),
        kv_blocks_per_request=kv.get("pool_blocks_per_request"), kv_layer_segments=kv.get("pool_layer_segments"),
        kv_context_tokens=kv.get("context_tokens"), requested_bytes=gb.get("requested_bytes"),
        reserve_bytes=gb.get("reserve_bytes"),
        accounting=kv.get("accounting"),
        offloaded_logical_bytes=plan.get("offloaded_bytes"), pinned_bytes=pinned.get("pinned_bytes"),
        pinned_rounded_bytes=pinned.get("pinned_rounded_bytes"), pinned_exact_bytes=pinned.get("pinned_exact_bytes"),
        pinning=pinned.get("pinning"),
        weights_gpu_bytes=resident, kv_pool_bytes=pool, kv_bytes_per_token=per_token, kv_pool_tokens=tokens,
        gpu_free_at_scan_bytes=free, gpu_target_bytes=target,
        gpu_free_after_bytes=free - target if free is not None and target is not None else None,
        host_available_at_scan_bytes=avail, container_ram_cap_bytes=cap,
        host_available_min_bytes=avail - cap if avail is not None and cap is not None else None,
        reserve_source=source)


PER_RANK_UNPAIRED = ("the boot log has one line per worker and the plan one figure per rank; the landing does not "
                     "pair them yet, so the GPU-resident weights, the KV pool, the GPU free after boot and the "
                     "offloaded parameters are not projected")


def per_rank_unpaired(projection: Projection) -> Projection:
    """The projection of a multi-GPU protocol run: only the host-wide figures, none a rank's."""
    return replace(projection, weights_gpu_bytes=None, kv_pool_bytes=None, kv_pool_tokens=None,
                   kv_bytes_per_token=None, gpu_free_after_bytes=None, offloaded_logical_bytes=None)


def _row(quantity: str, unit: str, projected, measured, why_not: str | None = None) -> dict:
    row = {"quantity": quantity, "unit": unit, "projected": projected, "measured": measured, "error": None,
           "error_percent": None, "status": "measured" if measured is not None else "not measured", "why": why_not}
    if measured is not None and projected is not None:
        row["error"] = measured - projected
        row["error_percent"] = round(100.0 * (measured - projected) / projected, 2) if projected else None
    if projected is None:
        row["why"] = (row["why"] + "; " if row["why"] else "") + "the plan projects no value"
    return row


def _gpu_reading(sample: dict | None) -> tuple[dict, str | None]:
    """NVML figures of the READY sample, or why there are none."""
    if sample is None:
        return {}, "no sample was taken at READY"
    if sample.get("gpu_free_bytes") is None:
        errors = [e for e in sample.get("errors") or [] if "NVML" in e or e.startswith("gpu")]
        return {}, "no NVML reading: " + ("; ".join(errors) if errors else "the engine container holds no GPU")
    return {k: sample.get(k) for k in ("gpu_free_bytes", "gpu_used_bytes", "gpu_total_bytes")}, None


def landing_record(projection: Projection, boot: dict | None, sample: dict | None, floor_bytes: int,
                   floor_assumed: bool, headroom_bytes: int | None = None) -> dict:
    """The receipt's "landing" section: measured, projected, prediction errors, the floor, warnings."""
    boot = boot or {}
    load = round(boot["load_gib"] * GIB) if isinstance(boot.get("load_gib"), (int, float)) else None
    # the KV pool: 0.34's committed cache ("Extended KV cache to N blocks (X GiB)") where the log has it; else the
    # memory the estimate gave it ("Available KV cache memory", which 0.34 prints before warmup too)
    logged_pool = boot.get("kv_extended_gib") if boot.get("kv_extended_gib") is not None else boot.get("kv_cache_gib")
    pool = round(logged_pool * GIB) if isinstance(logged_pool, (int, float)) else None
    tokens = boot.get("kv_cache_tokens") if isinstance(boot.get("kv_cache_tokens"), int) else None
    gpu, gpu_why = _gpu_reading(sample)
    host = (sample or {}).get("host_available_bytes")
    log_why = "the boot log states no such line"
    errors = [
        _row("GPU-resident weights", "bytes", projection.weights_gpu_bytes, load,
             None if load is not None else log_why),
        _row("KV pool", "tokens", projection.kv_pool_tokens, tokens, None if tokens is not None else log_why),
        _row("KV pool", "bytes", projection.kv_pool_bytes, pool, None if pool is not None else log_why),
        _row("GPU free after boot", "bytes", projection.gpu_free_after_bytes, gpu.get("gpu_free_bytes"), gpu_why),
        _row("host available RAM", "bytes", projection.host_available_min_bytes, host,
             None if host is not None else "no host reading at READY"),
    ]
    errors[-1]["projected_is_lower_bound"] = True
    if projection.offloaded_logical_bytes:
        # two decimals of GiB in the log: a difference under 0.005 GiB is the log's rounding, not a prediction error
        logged = boot.get("cpu_offload_gib")
        offload = round(logged * GIB) if isinstance(logged, (int, float)) else None
        errors.append(_row("CPU-offloaded parameters", "bytes", projection.offloaded_logical_bytes, offload,
                           None if offload is not None else log_why))
        errors[-1]["logical"] = True
        container = (sample or {}).get("container_memory_bytes")
        errors.append(_row("container memory", "bytes", projection.pinned_bytes, container,
                           None if container is not None else "no container memory reading at READY"))
        errors[-1]["projected_is_lower_bound"] = True
    free = gpu.get("gpu_free_bytes")
    floor = {"bytes": floor_bytes, "assumed": floor_assumed, "status": "not checked", "margin_bytes": None}
    warnings = []
    if free is None:
        floor["why"] = f"GPU free memory not measured ({gpu_why})"  # never invented
    else:
        floor["margin_bytes"] = free - floor_bytes
        floor["status"] = "above" if free >= floor_bytes else "UNDER"
        if free < floor_bytes:
            warnings.append(f"LANDED UNDER THE FREE-MEMORY FLOOR: {gib(free)} of GPU memory free at READY < floor "
                            f"{gib(floor_bytes)}{' (ASSUMED)' if floor_assumed else ''}, short by "
                            f"{gib(floor_bytes - free)}: lower the context, or move weights to the CPU")
    if projection.gpu_free_after_bytes is not None and projection.gpu_free_after_bytes < floor_bytes:
        warnings.append(f"the plan itself projects only {gib(projection.gpu_free_after_bytes)} free after boot, under "
                        f"the floor {gib(floor_bytes)}{' (ASSUMED)' if floor_assumed else ''}")
    if host is not None and headroom_bytes is not None and host < headroom_bytes:
        warnings.append(f"host available RAM at READY {gib(host)} is under the host headroom {gib(headroom_bytes)} "
                        "the settings keep for the host")
    pinning = _pinning_record(projection, (sample or {}).get("container_memory_bytes"))
    if pinning.get("status") == "NOT CONFIRMED":
        warnings.append(f"exact pinning NOT CONFIRMED: the container holds {gib(pinning['measured_container_bytes'])} "
                        f"at READY, at least the rounded figure {gib(projection.pinned_rounded_bytes)}: the engine "
                        "pinned with rounding; count the rounded figure")
    kv_check = extensible_kv_check(projection, boot)
    if kv_check and kv_check.get("contradiction"):
        warnings.append(kv_check["contradiction"])
    for row in (kv_check or {}).get("rows", []):
        if row["status"] in ("DIFFERS", "OUTSIDE", "ABOVE THE RESERVE"):
            warnings.append(f"after warmup, {row['quantity']} {row['status']}: measured {row['measured']} vs "
                            f"predicted {row['projected']} ({row['why']})")
    return {"pinning": pinning, "kv_after_warmup": kv_check,
            "measured": {"weights_gpu_bytes": load, "kv_pool_bytes": pool, "kv_pool_tokens": tokens,
                         "host_available_bytes": host,
                         "container_memory_bytes": (sample or {}).get("container_memory_bytes"),
                         "gpu_not_measured": gpu_why, **gpu},
            "projected": to_json(projection), "errors": errors, "floor": floor, "warnings": warnings,
            "at_ready": sample}


def _pinning_record(projection: Projection, container: int | None) -> dict:
    """Whether the container's memory at READY confirms the plan's pinned figure.

    Pinned pages belong to the container, so its memory is at least what was pinned. Exact pinning is confirmed
    when the container holds the exact figure but less than the rounded one (the rounding would have pinned at
    least that); it is NOT CONFIRMED when the container holds the rounded figure or more."""
    record = {"mode": projection.pinning, "pinned_bytes": projection.pinned_bytes,
              "pinned_rounded_bytes": projection.pinned_rounded_bytes,
              "pinned_exact_bytes": projection.pinned_exact_bytes, "measured_container_bytes": container}
    if not projection.pinned_bytes:
        return {**record, "status": "nothing pinned" if projection.pinned_bytes == 0 else "not projected"}
    if container is None:
        return {**record, "status": "not measured"}
    if projection.pinning != "exact":
        return {**record, "status": "rounded (vLLM's default)"}
    exact, rounded = projection.pinned_exact_bytes or 0, projection.pinned_rounded_bytes or 0
    if rounded > exact and container >= rounded:
        return {**record, "status": "NOT CONFIRMED"}
    if exact <= container < rounded:
        return {**record, "status": "confirmed"}
    return {**record, "status": "not decided (the rounded and exact figures do not differ enough here)"}


def _value(row: dict, value) -> str:
    if value is None:
        return "none"
    return f"{value:,} tokens" if row["unit"] == "tokens" else gib(value)


def _error(row: dict) -> str:
    if row["error"] is None:
        return ""
    sign = "+" if row["error"] >= 0 else "-"
    amount = f"{abs(row['error']):,} tokens" if row["unit"] == "tokens" else gib(abs(row["error"]))
    pct = f" ({row['error_percent']:+.1f}%)" if row["error_percent"] is not None else ""
    return f": prediction error {sign}{amount}{pct}"


_KIND = {"CPU-offloaded parameters": " (logical bytes, as the engine's 'Total CPU offloaded parameters' counts them)",
         "container memory": " (the pinned offload is its lower bound)"}


def landing_lines(record: dict) -> list[str]:
    """Fact lines: one per quantity (measured vs projected, or not measured and why), then the floor."""
    lines = []
    for row in record["errors"]:
        if row["unit"] == "bytes" and row["quantity"] == "KV pool":
            continue  # the tokens row says it; bytes stay in the receipt
        bound = "at least " if row.get("projected_is_lower_bound") else ""
        projected = f"projected {bound}{_value(row, row['projected'])}"
        what = row["quantity"] + _KIND.get(row["quantity"], "")
        if row["measured"] is None:
            lines.append(f"landing {what}: not measured ({row['why']}); {projected}")
        else:
            lines.append(f"landing {what}: measured {_value(row, row['measured'])} vs {projected}{_error(row)}")
    pinning = record.get("pinning") or {}
    if pinning.get("mode") == "exact" and pinning.get("pinned_bytes"):
        lines.append(f"landing exact pinning: {pinning['status']} (pinned exact "
                     f"{gib(pinning.get('pinned_exact_bytes'))}, rounded {gib(pinning.get('pinned_rounded_bytes'))}, "
                     f"container memory at READY {gib(pinning.get('measured_container_bytes'))})")
    lines += extensible_lines(record.get("kv_after_warmup"))
    f = record["floor"]
    floor = f"{gib(f['bytes'])}{' ASSUMED' if f['assumed'] else ' (settings)'}"
    if f["status"] == "not checked":
        lines.append(f"landing free-memory floor {floor}: not checked: {f['why']}")
    else:
        lines.append(f"landing free-memory floor {floor}: {f['status']} by {gib(abs(f['margin_bytes']))}")
    return lines
