"""Pure: the report sections of the advice and measurements (proposal, calibration, consistency, landing,
operator-supplied score). Each reads its receipt section as onegpu.phases.plan_insight and load_landing record it;
a section that was not recorded says whether its option was not given or its phase did not establish it.
"""
from __future__ import annotations

from collections.abc import Iterable

from onegpu.core.outcomes import CODES
from onegpu.core.units import gib
from onegpu.plan.propose import NOT_SETTINGS
from onegpu.record.receipt import ReceiptRecord
from onegpu.record.sections_insight import (
    CalibrationEstimates,
    ProposalReserve,
    ProposedSettings,
    Scorer,
    ScoreRecord,
)
from onegpu.record.sections_load import LandingFloor, LandingMeasured, LandingProjected
from onegpu.record.sections_plan import CapacityNumber
from onegpu.report.parts import absent, e, fields, kv, num, recorded, section, table, text

OPERATOR = '<span class="og-operator">OPERATOR-SUPPLIED</span> '
BUDGETS = ("cpu_offload_gib", "container_ram_gib", "host_headroom_gib", "gpu_reserve_gib", "free_floor_gib")


def _missing(receipt: ReceiptRecord, key: str, title: str, option: str, value: str, why: str) -> str:
    """A section the receipt lacks: not established (the option was given) or not given (it was not)."""
    if option_given(receipt, option):
        return section(key, title, absent(receipt, "plan"))
    return section(key, title, _not_given(f"{option} {value}", why))


def option_given(receipt: ReceiptRecord, option: str) -> bool:
    """Whether the session's command line carried `option` (as `--opt VALUE` or `--opt=VALUE`)."""
    return any(a == option or a.startswith(option + "=") for a in receipt.command_line or [])


def _not_given(option: str, why: str) -> str:
    return f'<p class="og-notrun-text">{e(f"not given: no {option} in this session ({why})")}</p>'


def _items(values: Iterable[str], cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return "<ul>" + "".join(f"<li{attr}>{e(v)}</li>" for v in values) + "</ul>"


def _numbers(numbers: dict[str, CapacityNumber] | None) -> str:
    return ", ".join(f"{k} = {num(v)}" for k, v in (numbers or {}).items())


def _bytes(value: int | None) -> str:
    return f"{gib(value)} ({num(value)} bytes)" if value is not None else text(value)


def _numbers_of(receipt: ReceiptRecord, check: str) -> dict[str, CapacityNumber]:
    """The numbers of one capacity verdict (a mapping: its keys vary by check), {} when not recorded."""
    row = next((r for r in receipt.capacity or [] if r.check == check), None)
    return (row.numbers if row is not None else None) or {}


def _size(value: CapacityNumber) -> int | float | None:
    """A capacity number that is a number (bytes), else None."""
    return value if isinstance(value, (int, float)) else None


# -- near the plan and the capacity --------------------------------------------------------------------------------

def consistency(receipt: ReceiptRecord) -> str:
    """Does the checkpoint hold what its config promises, and does the image's vLLM take the KV dtype."""
    title = "Checkpoint consistency (warnings never block)"
    c = receipt.consistency
    if c is None or not recorded(c):
        return section("consistency", title, absent(receipt, "plan"))
    body = []
    rows = c.checks or []
    if rows:
        warned = [r.check for r in rows if r.status == "warning"]
        unknown = [r.check for r in rows if r.status == "unknown"]
        body.append(f"<p><b>{len(warned)} warning(s)</b>{': ' + e(', '.join(map(str, warned))) if warned else ''}; "
                    f"{len(unknown)} unknown{': ' + e(', '.join(map(str, unknown))) if unknown else ''}; "
                    f"{len(rows) - len(warned) - len(unknown)} ok</p>")
        version = (f"{text(c.vllm_version)} ({text(c.vllm_version_source)})" if c.vllm_version
                   else "not known in the plan phase (the runtime probe reads it during an approval)")
        body.append(kv([("image's vLLM version for the KV-dtype check", version)]))
        body.append(table(["check", "status", "what was found"],
                          [[r.check, str(r.status).upper(), r.message] for r in rows], status_col=1))
    probe = c.kv_dtype_at_probe or []
    if probe:
        body.append(f"<h4>KV dtype against the vLLM the runtime probe read ({e(c.probe_vllm_version)})</h4>"
                    + table(["check", "status", "what was found"],
                            [[r.check, str(r.status).upper(), r.message] for r in probe], status_col=1))
    return section("consistency", title, "".join(body) or absent(receipt, "plan"))


def calibration(receipt: ReceiptRecord) -> str:
    """The non-weight GPU reserve measured in an earlier run (--calibrate-from), or the reserve the plan assumed."""
    title = "GPU reserve calibration"
    c = receipt.calibration
    budget = _numbers_of(receipt, "gpu_budget")
    if c is None or not recorded(c):
        if option_given(receipt, "--calibrate-from"):
            return section("calibration", title, absent(receipt, "plan"))
        reserve = _size(budget.get("reserve_bytes"))
        how = ("ASSUMED (the kit's named default)" if budget.get("reserve_assumed") else "from the settings") \
            if reserve is not None else "no GPU budget was computed"
        shown = f"{gib(reserve)} {how}" if reserve is not None else how
        return section("calibration", title, _not_given(
            "--calibrate-from RUN_FOLDER", f"the plan's non-weight GPU reserve is {shown}; a run of the same "
            "checkpoint, image, context and prefill chunk would replace it by a measurement"))
    estimates = c.estimates or CalibrationEstimates()
    nvml = estimates.nvml_bytes
    used = budget.get("reserve_calibrated_from") == c.run_id and budget.get("budget_bytes") is not None
    body = [f'<p class="og-verdict og-plain">CALIBRATED FROM {e(c.run_id)}</p>', kv([
        ("non-weight GPU reserve", _bytes(c.reserve_bytes)), ("how it was measured", c.how),
        ("vLLM's accounting in the boot log", _bytes(estimates.boot_log_bytes)),
        ("NVML at READY", _bytes(nvml) if nvml is not None else "not measured (no NVML reading at READY)"),
        ("the plan's GPU budget", f"target {gib(_size(budget.get('target_bytes')))} - this reserve "
                                  f"{gib(_size(budget.get('reserve_bytes')))} = "
                                  f"{gib(_size(budget.get('budget_bytes')))}"
         if used else "not computed with it in this session"),
        ("run folder", c.folder), ("its image ID", c.image_id),
        ("its vLLM version / GPU", f"{text(c.vllm_version)} / {text(c.gpu_name)}")])]
    body.append("<h4>Derivation</h4>" + _items(c.rows or []))
    if c.warnings:
        body.append("<h4>Warnings</h4>" + _items(c.warnings, "og-bad"))
    return section("calibration", title, "".join(body))


def proposal(receipt: ReceiptRecord) -> str:
    """settings-proposed.json: the proposed budgets, the alternatives to measure, every derivation."""
    title = "Proposed settings (a proposal: nothing runs from it)"
    p = receipt.proposal
    if p is None or not recorded(p):
        return _missing(receipt, "proposal", title, "--propose", "REQUEST_JSON", "a request names the checkpoint, "
                        "image, model ID, revision and context; the kit then proposes the budgets")
    settings, alts = p.settings or ProposedSettings(), p.alternatives or []
    reserve = p.reserve or ProposalReserve()
    state = ("yes: copy the values below into your settings" if p.proposed else
             "NO: a fact blocks every budget (below)" if p.blockers else "no: a fact is unknown (below)")
    body = [f'<p class="og-note">{e(NOT_SETTINGS)}</p>', kv([
        ("settings-proposed.json", p.path), ("its SHA-256", p.sha256), ("proposed", state),
        ("non-weight reserve used", f"{gib(reserve.bytes)} " + (
            f"CALIBRATED FROM {text(reserve.calibrated_from)}" if reserve.source == "calibrated"
            else "ASSUMED (the kit's named default)" if reserve.source == "assumed"
            else f"from the {text(reserve.source)}"))])]
    if recorded(settings):
        shown = sorted(fields(settings), key=lambda kv_: (kv_[0] not in BUDGETS, kv_[0] != "schema"))
        body.append("<h4>Proposed settings</h4>" + table(["setting", "value"], [[k, v] for k, v in shown]))
    for alt in alts:
        body.append(f"<h4>Alternative to measure, not a result: {e(alt.name)}</h4>" + kv([
            ("container_ram_gib", f"{text(alt.container_ram_gib)} GiB"),
            ("engine arguments", " ".join(alt.engine_args or []) or "none"),
            ("settings", ", ".join(f"{k} {v}" for k, v in fields(alt.settings)) or "none"),
            ("pinned", _bytes(alt.pinned_bytes)), ("offloaded parameters", num(alt.parameters)),
            ("why", alt.why)]))
    if not alts and p.proposed:
        body.append('<p class="og-note">No alternatives: nothing is offloaded, nothing is pinned.</p>')
    if p.blockers:
        body.append("<h4>What blocks every budget, with its numbers</h4><ul>" + "".join(
            f"<li><b>BLOCKED {e(b.code)}</b> ({e(b.check)}): {e(b.message)}"
            + (f'<br><span class="og-num">numbers: {e(_numbers(b.numbers))}</span>' if b.numbers else "")
            + (f'<br><span class="og-note">{e(b.code)} means: {e(CODES[b.code])}</span>'
               if b.code is not None and b.code in CODES else "") + "</li>" for b in p.blockers) + "</ul>")
    if p.unknown:
        body.append("<h4>Unknown</h4>" + _items(p.unknown))
    if p.warnings:
        body.append("<h4>Warnings</h4>" + _items(p.warnings, "og-bad"))
    body.append("<h4>Derivation</h4>" + table(["quantity", "value", "derivation"], [
        [r.quantity, r.value, r.derivation] for r in p.derivation or []]))
    return section("proposal", title, "".join(body))


# -- after the boot facts -------------------------------------------------------------------------------------------

def _amount(unit: str | None, value: int | None, signed: bool = False) -> str:
    if value is None:
        return "none"
    sign = ("+" if value >= 0 else "-") if signed else ""
    return f"{sign}{abs(value):,} tokens" if unit == "tokens" else f"{sign}{gib(abs(value))}"


def under_floor(receipt: ReceiptRecord) -> str | None:
    """The one-line alarm when the engine landed under the free-memory floor; None otherwise."""
    floor = receipt.landing.floor if receipt.landing is not None else None
    if floor is None or floor.status != "UNDER":
        return None
    limit, margin = floor.bytes or 0, floor.margin_bytes or 0
    return (f"LANDED UNDER THE FREE-MEMORY FLOOR: GPU free at READY is {gib(limit + margin)}, under the floor "
            f"{gib(limit)}{' (ASSUMED)' if floor.assumed else ''} by {gib(abs(margin))}")


def landing(receipt: ReceiptRecord) -> str:
    """Where the engine landed at READY against the plan's projection and the free-memory floor."""
    title = "Landing at READY: measured against the plan"
    record = receipt.landing
    if record is None or not recorded(record):
        return section("landing", title, absent(receipt, "load", "no landing (measured once the engine is READY)"))
    body = []
    alarm = under_floor(receipt)
    if alarm:
        body.append(f'<p class="og-alarm">{e(alarm)}</p>')
    body += [f'<p class="og-alarm">WARNING: {e(w)}</p>' for w in record.warnings or []
             if not w.startswith("LANDED UNDER")]
    rows = []
    for r in record.errors or []:
        unit = r.unit
        bound = "at least " if r.projected_is_lower_bound else ""
        pct = f" ({r.error_percent:+.1f}%)" if r.error_percent is not None else ""
        rows.append([f"{text(r.quantity)} ({text(unit)})",
                     _amount(unit, r.measured) if r.measured is not None else "not measured",
                     bound + _amount(unit, r.projected),
                     _amount(unit, r.error, signed=True) + pct if r.error is not None else "",
                     r.why or ""])
    body.append(table(["quantity", "measured", "projected", "prediction error", "note"], rows))
    f = record.floor or LandingFloor()
    floor = f"{gib(f.bytes)} " + ("ASSUMED (the kit's default; set free_floor_gib)" if f.assumed
                                  else "(from the settings)")
    status = (f"not checked: {text(f.why)}" if f.status == "not checked" else
              f"{text(f.status)} by {gib(abs(f.margin_bytes or 0))}")
    measured, projected = record.measured or LandingMeasured(), record.projected or LandingProjected()
    body.append(kv([("free-memory floor", floor), ("floor status", status),
                    ("non-weight reserve of the projection", projected.reserve_source),
                    ("container memory at READY", gib(measured.container_memory_bytes)
                     if measured.container_memory_bytes is not None else "not measured"),
                    ("measured at", record.at)]))
    return section("landing", title, "".join(body))


# -- near the UNSCORED batch results ----------------------------------------------------------------------------------

def operator_score(receipt: ReceiptRecord) -> str:
    """The native score the operator obtained with their own scorer, labelled as theirs."""
    title = "Operator-supplied score (not computed by the kit)"
    s = receipt.operator_score
    if s is None or not recorded(s):
        return _missing(receipt, "score", title, "--operator-score", "SCORE_JSON", "the kit never computes a score; "
                        "a native score appears here only as the operator states it")
    r = s.record or ScoreRecord()
    scorer = r.scorer or Scorer()
    body = [f"<p>{OPERATOR}{e(s.label)}: the operator's statement, carried as given; the kit did not "
            "compute, check or rescore it.</p>", kv([
                ("value", r.value), ("metric", r.metric), ("benchmark", r.benchmark),
                ("scorer / revision", f"{text(scorer.name)} / {text(scorer.revision)}"),
                ("samples scored", num(r.sample_count)),
                ("model / revision (as stated)", f"{r.model_id or 'not stated'} / "
                                                 f"{r.model_revision or 'not stated'}"),
                ("scored run", r.scored_run or "not stated"), ("obtained at", r.obtained_at or
                                                                "not stated"),
                ("notes", r.notes or "none"), ("score file", s.file),
                ("its SHA-256", s.file_sha256)])]
    if s.mismatches:
        body.append("<h4>Mismatches with this session's settings</h4>" + _items(s.mismatches, "og-bad"))
    return section("score", title, "".join(body))
