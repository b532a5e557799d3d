"""Pure: the report sections of the advice and measurements (proposal, calibration, consistency, landing,
operator-supplied score). Each reads its receipt section as onegpu.phases.plan_insight and load_landing record it;
a section that was not recorded says whether its option was not given or its phase did not establish it.
"""
from __future__ import annotations

from onegpu.core.outcomes import CODES
from onegpu.core.units import gib
from onegpu.evidence.receipt_schema import ReceiptData
from onegpu.plan.propose import NOT_SETTINGS
from onegpu.report.parts import absent, e, kv, num, section, table, text

OPERATOR = '<span class="og-operator">OPERATOR-SUPPLIED</span> '
BUDGETS = ("cpu_offload_gib", "container_ram_gib", "host_headroom_gib", "gpu_reserve_gib", "free_floor_gib")


def _missing(receipt: ReceiptData, key: str, title: str, option: str, value: str, why: str) -> str:
    """A section the receipt lacks: not established (the option was given) or not given (it was not)."""
    if option_given(receipt, option):
        return section(key, title, absent(receipt, "plan"))
    return section(key, title, _not_given(f"{option} {value}", why))


def option_given(receipt: ReceiptData, option: str) -> bool:
    """Whether the session's command line carried `option` (as `--opt VALUE` or `--opt=VALUE`)."""
    return any(str(a) == option or str(a).startswith(option + "=") for a in receipt.get("command_line") or [])


def _not_given(option: str, why: str) -> str:
    return f'<p class="og-notrun-text">{e(f"not given: no {option} in this session ({why})")}</p>'


def _items(values, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return "<ul>" + "".join(f"<li{attr}>{e(v)}</li>" for v in values) + "</ul>"


def _numbers(numbers: dict) -> str:
    return ", ".join(f"{k} = {num(v)}" for k, v in (numbers or {}).items())


def _bytes(value) -> str:
    return f"{gib(value)} ({num(value)} bytes)" if isinstance(value, int) else text(value)


def _numbers_of(receipt: ReceiptData, check: str) -> dict:
    row = next((r for r in receipt.get("capacity") or [] if isinstance(r, dict) and r.get("check") == check), None)
    return (row or {}).get("numbers") or {}


# -- near the plan and the capacity --------------------------------------------------------------------------------

def consistency(receipt: ReceiptData) -> str:
    """Does the checkpoint hold what its config promises, and does the image's vLLM take the KV dtype."""
    title = "Checkpoint consistency (warnings never block)"
    c = receipt.get("consistency")
    if not c:
        return section("consistency", title, absent(receipt, "plan"))
    body = []
    rows = [r for r in c.get("checks") or [] if isinstance(r, dict)]
    if rows:
        warned = [r.get("check") for r in rows if r.get("status") == "warning"]
        unknown = [r.get("check") for r in rows if r.get("status") == "unknown"]
        body.append(f"<p><b>{len(warned)} warning(s)</b>{': ' + e(', '.join(map(str, warned))) if warned else ''}; "
                    f"{len(unknown)} unknown{': ' + e(', '.join(map(str, unknown))) if unknown else ''}; "
                    f"{len(rows) - len(warned) - len(unknown)} ok</p>")
        version = (f"{text(c.get('vllm_version'))} ({text(c.get('vllm_version_source'))})" if c.get("vllm_version")
                   else "not known in the plan phase (the runtime probe reads it during an approval)")
        body.append(kv([("image's vLLM version for the KV-dtype check", version)]))
        body.append(table(["check", "status", "what was found"],
                          [[r.get("check"), str(r.get("status")).upper(), r.get("message")] for r in rows],
                          status_col=1))
    probe = [r for r in c.get("kv_dtype_at_probe") or [] if isinstance(r, dict)]
    if probe:
        body.append(f"<h4>KV dtype against the vLLM the runtime probe read ({e(c.get('probe_vllm_version'))})</h4>"
                    + table(["check", "status", "what was found"],
                            [[r.get("check"), str(r.get("status")).upper(), r.get("message")] for r in probe],
                            status_col=1))
    return section("consistency", title, "".join(body) or absent(receipt, "plan"))


def calibration(receipt: ReceiptData) -> str:
    """The non-weight GPU reserve measured in an earlier run (--calibrate-from), or the reserve the plan assumed."""
    title = "GPU reserve calibration"
    c = receipt.get("calibration")
    budget = _numbers_of(receipt, "gpu_budget")
    if not c:
        if option_given(receipt, "--calibrate-from"):
            return section("calibration", title, absent(receipt, "plan"))
        reserve = budget.get("reserve_bytes")
        how = ("ASSUMED (the kit's named default)" if budget.get("reserve_assumed") else "from the settings") \
            if reserve is not None else "no GPU budget was computed"
        shown = f"{gib(reserve)} {how}" if reserve is not None else how
        return section("calibration", title, _not_given(
            "--calibrate-from RUN_FOLDER", f"the plan's non-weight GPU reserve is {shown}; a run of the same "
            "checkpoint, image, context and prefill chunk would replace it by a measurement"))
    estimates = c.get("estimates") or {}
    nvml = estimates.get("nvml_bytes")
    used = budget.get("reserve_calibrated_from") == c.get("run_id") and budget.get("budget_bytes") is not None
    body = [f'<p class="og-verdict og-plain">CALIBRATED FROM {e(c.get("run_id"))}</p>', kv([
        ("non-weight GPU reserve", _bytes(c.get("reserve_bytes"))), ("how it was measured", c.get("how")),
        ("vLLM's accounting in the boot log", _bytes(estimates.get("boot_log_bytes"))),
        ("NVML at READY", _bytes(nvml) if nvml is not None else "not measured (no NVML reading at READY)"),
        ("the plan's GPU budget", f"target {gib(budget.get('target_bytes'))} - this reserve "
                                  f"{gib(budget.get('reserve_bytes'))} = {gib(budget.get('budget_bytes'))}"
         if used else "not computed with it in this session"),
        ("run folder", c.get("folder")), ("its image ID", c.get("image_id")),
        ("its vLLM version / GPU", f"{text(c.get('vllm_version'))} / {text(c.get('gpu_name'))}")])]
    body.append("<h4>Derivation</h4>" + _items(c.get("rows") or []))
    if c.get("warnings"):
        body.append("<h4>Warnings</h4>" + _items(c["warnings"], "og-bad"))
    return section("calibration", title, "".join(body))


def proposal(receipt: ReceiptData) -> str:
    """settings-proposed.json: the proposed budgets, the alternatives to measure, every derivation."""
    title = "Proposed settings (a proposal: nothing runs from it)"
    p = receipt.get("proposal")
    if not p:
        return _missing(receipt, "proposal", title, "--propose", "REQUEST_JSON", "a request names the checkpoint, "
                        "image, model ID, revision and context; the kit then proposes the budgets")
    settings, alts, reserve = p.get("settings") or {}, p.get("alternatives") or [], p.get("reserve") or {}
    state = ("yes: copy the values below into your settings" if p.get("proposed") else
             "NO: a fact blocks every budget (below)" if p.get("blockers") else "no: a fact is unknown (below)")
    body = [f'<p class="og-note">{e(NOT_SETTINGS)}</p>', kv([
        ("settings-proposed.json", p.get("path")), ("its SHA-256", p.get("sha256")), ("proposed", state),
        ("non-weight reserve used", f"{gib(reserve.get('bytes'))} " + (
            f"CALIBRATED FROM {text(reserve.get('calibrated_from'))}" if reserve.get("source") == "calibrated"
            else "ASSUMED (the kit's named default)" if reserve.get("source") == "assumed"
            else f"from the {text(reserve.get('source'))}"))])]
    if settings:
        shown = sorted(settings.items(), key=lambda kv_: (kv_[0] not in BUDGETS, kv_[0] != "schema"))
        body.append("<h4>Proposed settings</h4>" + table(["setting", "value"], [[k, v] for k, v in shown]))
    for alt in alts if isinstance(alts, list) else []:
        if not isinstance(alt, dict):
            continue
        body.append(f"<h4>Alternative to measure, not a result: {e(alt.get('name'))}</h4>" + kv([
            ("container_ram_gib", f"{text(alt.get('container_ram_gib'))} GiB"),
            ("engine arguments", " ".join(str(a) for a in alt.get("engine_args") or []) or "none"),
            ("settings", ", ".join(f"{k} {v}" for k, v in (alt.get("settings") or {}).items()) or "none"),
            ("pinned", _bytes(alt.get("pinned_bytes"))), ("offloaded parameters", num(alt.get("parameters"))),
            ("why", alt.get("why"))]))
    if not alts and p.get("proposed"):
        body.append('<p class="og-note">No alternatives: nothing is offloaded, nothing is pinned.</p>')
    if p.get("blockers"):
        body.append("<h4>What blocks every budget, with its numbers</h4><ul>" + "".join(
            f"<li><b>BLOCKED {e(b.get('code'))}</b> ({e(b.get('check'))}): {e(b.get('message'))}"
            + (f'<br><span class="og-num">numbers: {e(_numbers(b.get("numbers")))}</span>' if b.get("numbers") else "")
            + (f'<br><span class="og-note">{e(b.get("code"))} means: {e(CODES[b["code"]])}</span>'
               if b.get("code") in CODES else "") + "</li>" for b in p["blockers"]) + "</ul>")
    if p.get("unknown"):
        body.append("<h4>Unknown</h4>" + _items(p["unknown"]))
    if p.get("warnings"):
        body.append("<h4>Warnings</h4>" + _items(p["warnings"], "og-bad"))
    body.append("<h4>Derivation</h4>" + table(["quantity", "value", "derivation"], [
        [r.get("quantity"), r.get("value"), r.get("derivation")] for r in p.get("derivation") or []]))
    return section("proposal", title, "".join(body))


# -- after the boot facts -------------------------------------------------------------------------------------------

def _amount(unit: str, value, signed: bool = False) -> str:
    if value is None:
        return "none"
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return text(value)
    sign = ("+" if value >= 0 else "-") if signed else ""
    return f"{sign}{abs(value):,} tokens" if unit == "tokens" else f"{sign}{gib(abs(value))}"


def under_floor(receipt: ReceiptData) -> str | None:
    """The one-line alarm when the engine landed under the free-memory floor; None otherwise."""
    floor = (receipt.get("landing") or {}).get("floor") or {}
    if floor.get("status") != "UNDER":
        return None
    limit, margin = floor.get("bytes") or 0, floor.get("margin_bytes") or 0
    return (f"LANDED UNDER THE FREE-MEMORY FLOOR: GPU free at READY is {gib(limit + margin)}, under the floor "
            f"{gib(limit)}{' (ASSUMED)' if floor.get('assumed') else ''} by {gib(abs(margin))}")


def landing(receipt: ReceiptData) -> str:
    """Where the engine landed at READY against the plan's projection and the free-memory floor."""
    title = "Landing at READY: measured against the plan"
    record = receipt.get("landing")
    if not record:
        return section("landing", title, absent(receipt, "load", "no landing (measured once the engine is READY)"))
    body = []
    alarm = under_floor(receipt)
    if alarm:
        body.append(f'<p class="og-alarm">{e(alarm)}</p>')
    body += [f'<p class="og-alarm">WARNING: {e(w)}</p>' for w in record.get("warnings") or []
             if not str(w).startswith("LANDED UNDER")]
    rows = []
    for r in record.get("errors") or []:
        unit = r.get("unit")
        bound = "at least " if r.get("projected_is_lower_bound") else ""
        pct = f" ({r['error_percent']:+.1f}%)" if isinstance(r.get("error_percent"), (int, float)) else ""
        rows.append([f"{text(r.get('quantity'))} ({text(unit)})",
                     _amount(unit, r.get("measured")) if r.get("measured") is not None else "not measured",
                     bound + _amount(unit, r.get("projected")),
                     _amount(unit, r.get("error"), signed=True) + pct if r.get("error") is not None else "",
                     r.get("why") or ""])
    body.append(table(["quantity", "measured", "projected", "prediction error", "note"], rows))
    f = record.get("floor") or {}
    floor = f"{gib(f.get('bytes'))} " + ("ASSUMED (the kit's default; set free_floor_gib)" if f.get("assumed")
                                         else "(from the settings)")
    status = (f"not checked: {text(f.get('why'))}" if f.get("status") == "not checked" else
              f"{text(f.get('status'))} by {gib(abs(f.get('margin_bytes') or 0))}")
    measured, projected = record.get("measured") or {}, record.get("projected") or {}
    body.append(kv([("free-memory floor", floor), ("floor status", status),
                    ("non-weight reserve of the projection", projected.get("reserve_source")),
                    ("container memory at READY", gib(measured.get("container_memory_bytes"))
                     if measured.get("container_memory_bytes") is not None else "not measured"),
                    ("measured at", record.get("at"))]))
    return section("landing", title, "".join(body))


# -- near the UNSCORED batch results ----------------------------------------------------------------------------------

def operator_score(receipt: ReceiptData) -> str:
    """The native score the operator obtained with their own scorer, labelled as theirs."""
    title = "Operator-supplied score (not computed by the kit)"
    s = receipt.get("operator_score")
    if not s:
        return _missing(receipt, "score", title, "--operator-score", "SCORE_JSON", "the kit never computes a score; "
                        "a native score appears here only as the operator states it")
    r = s.get("record") or {}
    scorer = r.get("scorer") or {}
    body = [f"<p>{OPERATOR}{e(s.get('label'))}: the operator's statement, carried as given; the kit did not "
            "compute, check or rescore it.</p>", kv([
                ("value", r.get("value")), ("metric", r.get("metric")), ("benchmark", r.get("benchmark")),
                ("scorer / revision", f"{text(scorer.get('name'))} / {text(scorer.get('revision'))}"),
                ("samples scored", num(r.get("sample_count"))),
                ("model / revision (as stated)", f"{r.get('model_id') or 'not stated'} / "
                                                 f"{r.get('model_revision') or 'not stated'}"),
                ("scored run", r.get("scored_run") or "not stated"), ("obtained at", r.get("obtained_at") or
                                                                      "not stated"),
                ("notes", r.get("notes") or "none"), ("score file", s.get("file")),
                ("its SHA-256", s.get("file_sha256"))])]
    if s.get("mismatches"):
        body.append("<h4>Mismatches with this session's settings</h4>" + _items(s["mismatches"], "og-bad"))
    return section("score", title, "".join(body))
