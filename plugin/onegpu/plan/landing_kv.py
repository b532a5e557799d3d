"""Pure: vLLM 0.34's extensible KV cache at READY against the plan's 0.34 prediction.

0.34 sizes the cache after warmup and says so in two lines (onegpu.engine.bootlog): "Memory after warmup: ... N KV
cache blocks (S GiB) fit within the requested R GiB" and "Extended KV cache to N blocks (X GiB)". The plan predicts
what those numbers must be once N is known: S = N x the plan's bytes per block (format_gib: two decimals), X within
[N x bytes per block, that + one 2 MiB granule per layer segment] (extensible_kv_cache.py:physical_bytes_for), R =
ceil(total x 0.85), and the boot line's tokens = N / a request's blocks x max_model_len (get_kv_cache_capacity).
The transient memory the engine kept free is set beside the plan's non-weight reserve, which stands for it. A log
with these lines under a plan made for another version is a contradiction, shown as one.
"""
from __future__ import annotations

from onegpu.core.units import GIB, gib
from onegpu.plan.kv_sizing import GRANULE_BYTES


def _gib2(num_bytes: float) -> float:
    return round(num_bytes / GIB, 2)


def _row(quantity: str, measured, projected, status: str, why: str) -> dict:
    return {"quantity": quantity, "measured": measured, "projected": projected, "status": status, "why": why}


def extensible_kv_check(projection, boot: dict) -> dict | None:
    """The receipt's landing.kv_after_warmup: one row per 0.34 figure; None when the log has no such line."""
    warm, blocks, extended_gib = boot.get("kv_after_warmup"), boot.get("kv_extended_blocks"), \
        boot.get("kv_extended_gib")
    if not isinstance(warm, dict) and blocks is None:
        return None
    per_block, segments = projection.kv_bytes_per_block, projection.kv_layer_segments
    rows = []
    if isinstance(warm, dict) and per_block:
        predicted = _gib2(warm["blocks"] * per_block)
        rows.append(_row("bytes of the blocks that fit", warm["blocks_gib"], predicted,
                         "agrees" if abs(warm["blocks_gib"] - predicted) < 0.005 else "DIFFERS",
                         f"{warm['blocks']:,} blocks x the plan's {per_block:,} B per block, in GiB to two decimals"))
    if isinstance(warm, dict) and projection.requested_bytes:
        predicted = _gib2(projection.requested_bytes)
        rows.append(_row("requested budget", warm["requested_gib"], predicted,
                         "agrees" if abs(warm["requested_gib"] - predicted) <= 0.01 else "DIFFERS",
                         "ceil(total x --gpu-memory-utilization 0.85) of the card the scan read"))
    if isinstance(warm, dict) and projection.reserve_bytes is not None:
        reserve = _gib2(projection.reserve_bytes)
        rows.append(_row("transient memory kept free", warm["transient_gib"], reserve,
                         "within the reserve" if warm["transient_gib"] <= reserve else "ABOVE THE RESERVE",
                         "the engine keeps max(peak, torch's reservation growth) free; the plan's non-weight "
                         f"reserve ({gib(projection.reserve_bytes)}) stands for it and the CUDA context"))
    if blocks is not None and extended_gib is not None and per_block and segments:
        least, most = blocks * per_block, blocks * per_block + segments * GRANULE_BYTES
        rows.append(_row("KV cache committed", extended_gib, [_gib2(least), _gib2(most)],
                         "within" if _gib2(least) - 0.005 <= extended_gib <= _gib2(most) + 0.005 else "OUTSIDE",
                         f"{blocks:,} blocks x {per_block:,} B, plus at most one 2 MiB granule for each of "
                         f"{segments} layer segments"))
    tokens = boot.get("kv_cache_tokens")
    if blocks is not None and tokens is not None and projection.kv_blocks_per_request and \
            projection.kv_context_tokens:
        predicted_tokens = int(blocks / projection.kv_blocks_per_request * projection.kv_context_tokens)
        rows.append(_row("KV cache tokens", tokens, predicted_tokens,
                         "agrees" if tokens == predicted_tokens else "DIFFERS",
                         f"{blocks:,} blocks / {projection.kv_blocks_per_request:,} per request x "
                         f"{projection.kv_context_tokens:,} tokens (get_kv_cache_capacity)"))
    contradiction = None
    if projection.kv_sizing not in (None, "extensible"):
        contradiction = (f"the log shows vLLM 0.34's extensible KV cache, but the plan applied {projection.accounting}, "
                         "which sizes the cache from a profiling estimate: the plan was made for another version")
    return {"rows": rows, "accounting": projection.accounting, "contradiction": contradiction}


def extensible_lines(check: dict | None) -> list[str]:
    """Fact lines for the terminal and the report."""
    if not check:
        return []
    lines = []
    for row in check["rows"]:
        projected = row["projected"]
        shown = (f"{projected[0]:,.2f}-{projected[1]:,.2f} GiB" if isinstance(projected, list)
                 else f"{projected:,}" if row["quantity"] == "KV cache tokens" else f"{projected:,.2f} GiB")
        measured = f"{row['measured']:,}" if row["quantity"] == "KV cache tokens" else f"{row['measured']:,.2f} GiB"
        lines.append(f"landing after warmup, {row['quantity']} ({check['accounting']}): measured {measured} vs "
                     f"predicted {shown}: {row['status']} ({row['why']})")
    if check.get("contradiction"):
        lines.append(f"landing CONTRADICTION: {check['contradiction']}")
    return lines
