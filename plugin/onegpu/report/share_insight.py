"""Pure: the summary-share.md lines of the advice and measurements: the proposed budgets, the calibrated reserve,
the consistency checks, the landing at READY and the operator-supplied score. Numbers, kit words, outcome codes
and shaped identifiers only (onegpu.report.share_shapes); never a path, a message or the operator's score file."""
from __future__ import annotations

from onegpu.core.outcomes import CODES
from onegpu.plan.operator_score import LABEL as OPERATOR_LABEL
from onegpu.record.receipt import ReceiptRecord
from onegpu.record.sections_insight import (
    CalibrationEstimates,
    ProposalReserve,
    ProposedSettings,
    Scorer,
    ScoreRecord,
)
from onegpu.record.sections_load import LandingFloor
from onegpu.record.sections_plan import CapacityNumber, ConsistencyCheck
from onegpu.report.parts import multi_gpu_protocol, recorded
from onegpu.report.share_shapes import SHAPES, WITHHELD, finite, gib, number, shaped


def _numeric(numbers: dict[str, CapacityNumber] | None) -> str:
    """A blocked outcome's numbers: word-shaped keys with numeric values only."""
    return ", ".join(f"{k} {number(v)}" for k, v in (numbers or {}).items()
                     if SHAPES["word"].fullmatch(k) and finite(v) is not None)


def proposal_lines(receipt: ReceiptRecord) -> list[str]:
    """The proposed budgets (numbers), the reserve they carry, or the codes and numbers that block every budget."""
    p = receipt.proposal
    if p is None or not recorded(p):
        return ["- no proposal (no --propose request in this session)"]
    s, res = p.settings or ProposedSettings(), p.reserve or ProposalReserve()
    alts = p.alternatives or []
    source = {"assumed": "ASSUMED", "request": "from the request",
              "calibrated": f"CALIBRATED FROM {shaped('run_id', res.calibrated_from)}"}.get(res.source or "", WITHHELD)
    if p.proposed is True:
        line = (f"- proposed budgets (a proposal: nothing ran from it): CPU offload "
                f"{number(s.cpu_offload_gib, ' GiB')}, container RAM cap "
                f"{number(s.container_ram_gib, ' GiB')}, host headroom "
                f"{number(s.host_headroom_gib, ' GiB')}, context {number(s.context_tokens)} tokens")
        for alt in alts:
            name = {"exact pinning": "exact pinning", "selective expert offload": "selective expert offload"}.get(
                alt.name or "", WITHHELD)  # only the kit's own names go into the public summary
            line += (f"; alternative to measure ({name}): container RAM cap "
                     f"{number(alt.container_ram_gib, ' GiB')} ({gib(alt.pinned_bytes)} pinned over "
                     f"{number(alt.parameters)} offloaded parameters)")
    else:
        line = "- no budget proposed: " + ("; ".join(
            f"BLOCKED {b.code if b.code in CODES else WITHHELD} ({shaped('word', b.check)})"
            + (f", numbers: {_numeric(b.numbers)}" if _numeric(b.numbers) else "") for b in p.blockers or [])
            or f"{len(p.unknown or [])} fact(s) unknown")
    counts = f"{len(p.unknown or [])} unknown, {len(p.warnings or [])} warning(s)"
    return [line, f"- the proposal's non-weight GPU reserve {gib(res.bytes)} {source}; {counts}"]


def calibration_lines(receipt: ReceiptRecord) -> list[str]:
    """The calibrated reserve, its run and its two measurements; or the reserve the plan assumed."""
    c = receipt.calibration
    if c is None or not recorded(c):
        empty: dict[str, CapacityNumber] = {}
        budget = next(((r.numbers or empty) for r in receipt.capacity or [] if r.check == "gpu_budget"), empty)
        if not budget:
            return []
        how = "ASSUMED" if budget.get("reserve_assumed") is True else "from the settings"
        return [f"- non-weight GPU reserve {gib(budget.get('reserve_bytes'))} {how}: not calibrated"]
    est = c.estimates or CalibrationEstimates()
    nvml = gib(est.nvml_bytes) if finite(est.nvml_bytes) is not None else "not measured"
    return [f"- non-weight GPU reserve CALIBRATED FROM run {shaped('run_id', c.run_id)}: "
            f"{gib(c.reserve_bytes)}, the larger of vLLM's boot-log accounting {gib(est.boot_log_bytes)}"
            f" and NVML at READY ({nvml}), rounded up to whole MiB; {len(c.warnings or [])} warning(s)"]


def consistency_lines(receipt: ReceiptRecord) -> list[str]:
    """How many consistency checks warned, and which. Their messages stay private: they quote the checkpoint's
    tensor names and config entries (quantization ignored-layer strings can hold anything)."""
    c = receipt.consistency
    rows: list[tuple[ConsistencyCheck, str]] = []
    if c is not None:
        rows += [(r, "") for r in c.checks or []]
        rows += [(r, " at the probe") for r in c.kv_dtype_at_probe or []]
    if not rows:
        return ["- checkpoint consistency: not checked"]
    named = {st: [shaped("word", r.check) + where for r, where in rows if r.status == st]
             for st in ("warning", "unknown")}
    return [f"- checkpoint consistency: {len(rows)} check(s), {len(named['warning'])} warning(s)"
            + (f" ({', '.join(named['warning'])})" if named["warning"] else "") + f", {len(named['unknown'])} unknown"
            + (f" ({', '.join(named['unknown'])})" if named["unknown"] else "")
            + "; what each found is in the private report"]


LANDING_QUANTITIES = ("GPU-resident weights", "KV pool", "GPU free after boot", "host available RAM",
                      "CPU-offloaded parameters", "container memory")


def _amount(unit: str, value: int | None, signed: bool = False) -> str:
    v = finite(value)
    if v is None:
        return "unknown"
    sign = ("+" if v >= 0 else "-") if signed else ""
    return f"{sign}{number(abs(v))} tokens" if unit == "tokens" else f"{sign}{gib(abs(v))}"


def landing_lines(receipt: ReceiptRecord) -> list[str]:
    """Measured against projected at READY, with each prediction error, and the free-memory floor's status."""
    record = receipt.landing
    if record is None or not recorded(record):
        return ["- not measured (no engine reached READY in this session)"]
    out = []
    if multi_gpu_protocol(receipt):
        out.append("- multi-GPU protocol: the GPU figures measured are rank 0's card and one worker's boot-log line; "
                   "the plan's per-rank figures are not paired with them, so they project none")
    for r in record.errors or []:
        unit = "tokens" if r.unit == "tokens" else "bytes"
        what = f"{r.quantity if r.quantity in LANDING_QUANTITIES else WITHHELD} ({unit})"
        bound = "at least " if r.projected_is_lower_bound is True else ""
        projected = bound + _amount(unit, r.projected)
        if finite(r.measured) is None:
            out.append(f"- {what}: not measured; projected {projected}")
            continue
        error_percent = finite(r.error_percent)
        pct = f" ({error_percent:+.1f}%)" if error_percent is not None else ""
        out.append(f"- {what}: measured {_amount(unit, r.measured)} vs projected {projected}, prediction error "
                   f"{_amount(unit, r.error, signed=True)}{pct}")
    floor = record.floor or LandingFloor()
    status = floor.status if floor.status in ("above", "UNDER", "not checked") else WITHHELD
    margin = gib(abs(finite(floor.margin_bytes) or 0))
    out.append(("- **LANDED UNDER THE FREE-MEMORY FLOOR**: " if status == "UNDER" else "- ")
               + f"free-memory floor {gib(floor.bytes)}{' ASSUMED' if floor.assumed is True else ''}: "
               + ("not checked (GPU free memory not measured)" if status == "not checked" else f"{status} by {margin}"))
    return out


def score_lines(receipt: ReceiptRecord) -> list[str]:
    """The operator's native score as they stated it, labelled; never the score file's path."""
    s = receipt.operator_score
    if s is None or not recorded(s):
        return ["- none given (the kit never computes a score)"]
    r = s.record or ScoreRecord()
    scorer = r.scorer or Scorer()
    value = finite(r.value)
    line = (f"- **OPERATOR-SUPPLIED** ({OPERATOR_LABEL}): {shaped('score_text', r.metric)} = "
            f"{'unknown' if value is None else value} on {shaped('score_text', r.benchmark)}, over "
            f"{number(r.sample_count)} samples, scored by {shaped('score_text', scorer.name)} "
            f"{shaped('word', scorer.revision)}")
    if r.model_id:
        line += f"; of `{shaped('model_id', r.model_id)}`"
    if r.model_revision:
        line += f" at revision `{shaped('revision', r.model_revision)}`"
    if r.scored_run:
        line += f"; scored run {shaped('run_id', r.scored_run)}"
    if s.mismatches:
        line += f"; MISMATCH: it names another model or revision than the settings ({len(s.mismatches)})"
    return [line]
