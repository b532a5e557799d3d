"""Pure: the summary-share.md lines of the advice and measurements: the proposed budgets, the calibrated reserve,
the consistency checks, the landing at READY and the operator-supplied score. Numbers, kit words, outcome codes
and shaped identifiers only (onegpu.report.share_shapes); never a path, a message or the operator's score file."""
from __future__ import annotations

from onegpu.core.outcomes import CODES
from onegpu.evidence.receipt_schema import ReceiptData
from onegpu.plan.operator_score import LABEL as OPERATOR_LABEL
from onegpu.report.parts import multi_gpu_protocol
from onegpu.report.share_shapes import SHAPES, WITHHELD, as_dict, finite, gib, number, shaped


def _numeric(numbers) -> str:
    """A blocked outcome's numbers: word-shaped keys with numeric values only."""
    return ", ".join(f"{k} {number(v)}" for k, v in as_dict(numbers).items()
                     if SHAPES["word"].fullmatch(str(k)) and finite(v) is not None)


def proposal_lines(receipt: ReceiptData) -> list[str]:
    """The proposed budgets (numbers), the reserve they carry, or the codes and numbers that block every budget."""
    p = as_dict(receipt.get("proposal"))
    if not p:
        return ["- no proposal (no --propose request in this session)"]
    s, res = as_dict(p.get("settings")), as_dict(p.get("reserve"))
    alts = [as_dict(a) for a in p.get("alternatives") or [] if isinstance(a, dict)] \
        if isinstance(p.get("alternatives"), list) else []
    source = {"assumed": "ASSUMED", "request": "from the request",
              "calibrated": f"CALIBRATED FROM {shaped('run_id', res.get('calibrated_from'))}"}.get(res.get("source") or "",
                                                                                                WITHHELD)
    if p.get("proposed") is True:
        line = (f"- proposed budgets (a proposal: nothing ran from it): CPU offload "
                f"{number(s.get('cpu_offload_gib'), ' GiB')}, container RAM cap "
                f"{number(s.get('container_ram_gib'), ' GiB')}, host headroom "
                f"{number(s.get('host_headroom_gib'), ' GiB')}, context {number(s.get('context_tokens'))} tokens")
        for alt in alts:
            name = {"exact pinning": "exact pinning", "selective expert offload": "selective expert offload"}.get(
                alt.get("name") or "", WITHHELD)  # only the kit's own names go into the public summary
            line += (f"; alternative to measure ({name}): container RAM cap "
                     f"{number(alt.get('container_ram_gib'), ' GiB')} ({gib(alt.get('pinned_bytes'))} pinned over "
                     f"{number(alt.get('parameters'))} offloaded parameters)")
    else:
        blockers = [b for b in p.get("blockers") or [] if isinstance(b, dict)]
        line = "- no budget proposed: " + ("; ".join(
            f"BLOCKED {b.get('code') if b.get('code') in CODES else WITHHELD} ({shaped('word', b.get('check'))})"
            + (f", numbers: {_numeric(b.get('numbers'))}" if _numeric(b.get("numbers")) else "") for b in blockers)
            or f"{len(p.get('unknown') or [])} fact(s) unknown")
    counts = f"{len(p.get('unknown') or [])} unknown, {len(p.get('warnings') or [])} warning(s)"
    return [line, f"- the proposal's non-weight GPU reserve {gib(res.get('bytes'))} {source}; {counts}"]


def calibration_lines(receipt: ReceiptData) -> list[str]:
    """The calibrated reserve, its run and its two measurements; or the reserve the plan assumed."""
    c = as_dict(receipt.get("calibration"))
    if not c:
        budget = next((as_dict(r.get("numbers")) for r in receipt.get("capacity") or []
                       if isinstance(r, dict) and r.get("check") == "gpu_budget"), {})
        if not budget:
            return []
        how = "ASSUMED" if budget.get("reserve_assumed") is True else "from the settings"
        return [f"- non-weight GPU reserve {gib(budget.get('reserve_bytes'))} {how}: not calibrated"]
    est = as_dict(c.get("estimates"))
    nvml = gib(est.get("nvml_bytes")) if finite(est.get("nvml_bytes")) is not None else "not measured"
    return [f"- non-weight GPU reserve CALIBRATED FROM run {shaped('run_id', c.get('run_id'))}: "
            f"{gib(c.get('reserve_bytes'))}, the larger of vLLM's boot-log accounting {gib(est.get('boot_log_bytes'))}"
            f" and NVML at READY ({nvml}), rounded up to whole MiB; {len(c.get('warnings') or [])} warning(s)"]


def consistency_lines(receipt: ReceiptData) -> list[str]:
    """How many consistency checks warned, and which. Their messages stay private: they quote the checkpoint's
    tensor names and config entries (quantization ignored-layer strings can hold anything)."""
    c = as_dict(receipt.get("consistency"))
    rows = [(r, "") for r in c.get("checks") or [] if isinstance(r, dict)]
    rows += [(r, " at the probe") for r in c.get("kv_dtype_at_probe") or [] if isinstance(r, dict)]
    if not rows:
        return ["- checkpoint consistency: not checked"]
    named = {st: [shaped("word", r.get("check")) + where for r, where in rows if r.get("status") == st]
             for st in ("warning", "unknown")}
    return [f"- checkpoint consistency: {len(rows)} check(s), {len(named['warning'])} warning(s)"
            + (f" ({', '.join(named['warning'])})" if named["warning"] else "") + f", {len(named['unknown'])} unknown"
            + (f" ({', '.join(named['unknown'])})" if named["unknown"] else "")
            + "; what each found is in the private report"]


LANDING_QUANTITIES = ("GPU-resident weights", "KV pool", "GPU free after boot", "host available RAM",
                      "CPU-offloaded parameters", "container memory")


def _amount(unit: str, value, signed: bool = False) -> str:
    v = finite(value)
    if v is None:
        return "unknown"
    sign = ("+" if v >= 0 else "-") if signed else ""
    return f"{sign}{number(abs(v))} tokens" if unit == "tokens" else f"{sign}{gib(abs(v))}"


def landing_lines(receipt: ReceiptData) -> list[str]:
    """Measured against projected at READY, with each prediction error, and the free-memory floor's status."""
    record = as_dict(receipt.get("landing"))
    if not record:
        return ["- not measured (no engine reached READY in this session)"]
    out = []
    if multi_gpu_protocol(receipt):
        out.append("- multi-GPU protocol: the GPU figures measured are rank 0's card and one worker's boot-log line; "
                   "the plan's per-rank figures are not paired with them, so they project none")
    for r in [r for r in record.get("errors") or [] if isinstance(r, dict)]:
        unit = "tokens" if r.get("unit") == "tokens" else "bytes"
        what = f"{r.get('quantity') if r.get('quantity') in LANDING_QUANTITIES else WITHHELD} ({unit})"
        bound = "at least " if r.get("projected_is_lower_bound") is True else ""
        projected = bound + _amount(unit, r.get("projected"))
        if finite(r.get("measured")) is None:
            out.append(f"- {what}: not measured; projected {projected}")
            continue
        pct = f" ({finite(r.get('error_percent')):+.1f}%)" if finite(r.get("error_percent")) is not None else ""
        out.append(f"- {what}: measured {_amount(unit, r.get('measured'))} vs projected {projected}, prediction error "
                   f"{_amount(unit, r.get('error'), signed=True)}{pct}")
    floor = as_dict(record.get("floor"))
    status = floor.get("status") if floor.get("status") in ("above", "UNDER", "not checked") else WITHHELD
    margin = gib(abs(finite(floor.get("margin_bytes")) or 0))
    out.append(("- **LANDED UNDER THE FREE-MEMORY FLOOR**: " if status == "UNDER" else "- ")
               + f"free-memory floor {gib(floor.get('bytes'))}{' ASSUMED' if floor.get('assumed') is True else ''}: "
               + ("not checked (GPU free memory not measured)" if status == "not checked" else f"{status} by {margin}"))
    return out


def score_lines(receipt: ReceiptData) -> list[str]:
    """The operator's native score as they stated it, labelled; never the score file's path."""
    s = as_dict(receipt.get("operator_score"))
    if not s:
        return ["- none given (the kit never computes a score)"]
    r, scorer = as_dict(s.get("record")), as_dict(as_dict(s.get("record")).get("scorer"))
    value = finite(r.get("value"))
    line = (f"- **OPERATOR-SUPPLIED** ({OPERATOR_LABEL}): {shaped('score_text', r.get('metric'))} = "
            f"{'unknown' if value is None else value} on {shaped('score_text', r.get('benchmark'))}, over "
            f"{number(r.get('sample_count'))} samples, scored by {shaped('score_text', scorer.get('name'))} "
            f"{shaped('word', scorer.get('revision'))}")
    if r.get("model_id"):
        line += f"; of `{shaped('model_id', r.get('model_id'))}`"
    if r.get("model_revision"):
        line += f" at revision `{shaped('revision', r.get('model_revision'))}`"
    if r.get("scored_run"):
        line += f"; scored run {shaped('run_id', r.get('scored_run'))}"
    if s.get("mismatches"):
        line += f"; MISMATCH: it names another model or revision than the settings ({len(s['mismatches'])})"
    return [line]
