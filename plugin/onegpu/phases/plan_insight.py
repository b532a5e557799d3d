"""Session fixtures that turn measurements into advice (tests_hw/test_2_plan_insight.py): proposed settings
(--propose), a reserve calibrated from an earlier run (--calibrate-from), checkpoint consistency warnings, and an
operator-supplied native score (--operator-score). The deciding is done in onegpu.plan.propose, calibrate,
consistency and operator_score; the option files are read once at start by onegpu.options."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from onegpu.checkpoint.consistency import consistency_checks
from onegpu.checkpoint.scan import read_checkpoint
from onegpu.core.outcomes import Blocked
from onegpu.engine.image import resolve_local_image
from onegpu.evidence.receipt import now_iso
from onegpu.evidence.rundir import write_json
from onegpu.machine.checks import select_gpu
from onegpu.options import insight_options
from onegpu.phases.plan import KV_ESTIMATE_KEY, recorded_version, run_disk_free
from onegpu.phases.plan_ceiling import link_of
from onegpu.plan import calibrate, propose_text
from onegpu.plan import operator_score as score_mod
from onegpu.plan import propose as propose_mod
from onegpu.plan.kvcache import kv_cache_estimate
from onegpu.plan.vllm_versions import choose_accounting
from onegpu.session.glue import blocked_as_xfail, session_settings, settings_path

PROPOSAL_FILE = "settings-proposed.json"


PROPOSAL_TITLE = "onegpu proposed settings (a proposal: nothing runs from it; copy the values into your settings)"


def _gpu_name(hardware, selector) -> str | None:
    try:
        return select_gpu(hardware.gpu, selector).name
    except Blocked:
        return None


@pytest.fixture(scope="session")
def calibration(pytestconfig, hardware, kit):
    """The reserve measured by --calibrate-from (checked at start to be of the same checkpoint, image, context and
    prefill chunk), or None: the plan then shows the assumed reserve."""
    cal = insight_options(pytestconfig).calibration
    if cal is None:
        return None
    opts = insight_options(pytestconfig)
    selector = opts.request.gpu if opts.request is not None else session_settings(pytestconfig)[1].gpu
    warnings = [*cal.warnings, *filter(None, [calibrate.gpu_warning(cal, _gpu_name(hardware, selector))])]
    kit.receipt.set("calibration", {**cal.as_json(), "warnings": warnings})
    for warning in warnings:
        kit.receipt.warn(warning)
    return cal


@pytest.fixture(scope="session")
def consistency(pytestconfig, settings, checkpoint, kit):
    """Does the checkpoint hold what its config promises (and is the KV dtype one the image accepts)? Warnings."""
    cal = insight_options(pytestconfig).calibration
    version = cal.vllm_version if cal is not None else None
    source = f"the probe of run {cal.run_id}, same image ID" if cal is not None and version else ""
    table = checkpoint.tensors
    rows = consistency_checks(checkpoint.config, table.names, checkpoint.quant.ignored_layers, settings.kv_cache_dtype,
                              version, source, (table.group_of, table.group_names))
    kit.receipt.update("consistency", checks=[r.as_json() for r in rows], vllm_version=version,
                       vllm_version_source=source or None)
    for row in rows:
        if row.status == "warning":
            kit.receipt.warn(f"consistency {row.check}: {row.message}")
    return rows


@pytest.fixture(scope="session")
def proposal(pytestconfig, hardware, kit) -> dict:
    """settings-proposed.json (0600) from --propose and this machine's facts; shown as a table."""
    opts = insight_options(pytestconfig)
    req = opts.request
    assert req is not None, "tests of the proposal are deselected without --propose"
    try:
        gpu, why = select_gpu(hardware.gpu, req.gpu), None
    except Blocked as blocked:
        gpu, why = None, blocked.reason
    with blocked_as_xfail():
        ckpt = read_checkpoint(Path(req.model_path))
    try:
        image = {"reference": req.image, "id": resolve_local_image(req.image).id, "note": None}
    except Blocked as blocked:
        image = {"reference": req.image, "id": None, "note": blocked.reason}
    accounting = choose_accounting(None, req.path, recorded_version(opts.calibration, lambda: image["id"],
                                                                    kit.run_folder))
    kv = kv_cache_estimate(ckpt.config, req.context_tokens, req.kv_cache_dtype, req.prefill_chunk_tokens,
                           accounting=accounting)
    if hardware.replayed:
        image["note"] = (image["note"] + "; " if image["note"] else "") + "resolved on this machine's Docker engine: " \
            "the replayed machine may hold another image under that name"
    result = propose_mod.propose(req, gpu, why, hardware.host, ckpt, kv, opts.calibration,
                                 run_disk_free(hardware, kit), accounting=accounting,
                                 link=link_of(gpu, hardware, kit.run_folder))
    differs = propose_mod.kv_differs_from_plan(req, kv, pytestconfig.stash.get(KV_ESTIMATE_KEY, None))
    if differs:
        result.warnings.append(differs)
    cal = opts.calibration
    rows = consistency_checks(ckpt.config, ckpt.tensors.names, ckpt.quant.ignored_layers, req.kv_cache_dtype,
                              cal.vllm_version if cal else None,
                              f"the probe of run {cal.run_id}, same image ID" if cal else "",
                              (ckpt.tensors.group_of, ckpt.tensors.group_names))
    gpu_json = None if gpu is None else {k: getattr(gpu, k) for k in ("index", "name", "uuid", "total_bytes",
                                                                       "free_bytes")}
    doc = propose_text.proposal_document(
        result, req, now_iso(), {"source": hardware.source, "profile": hardware.profile, "gpu": gpu_json}, image,
        {"root": ckpt.root, "weight_bytes": ckpt.weight_bytes, "synthetic": ckpt.synthetic, "files": len(ckpt.files)},
        [r.as_json() for r in rows])
    path = write_json(kit.run_folder / PROPOSAL_FILE, doc)
    kit.table(PROPOSAL_TITLE, propose_text.proposal_table(result))
    kit.receipt.set("proposal", {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                                 **{k: doc[k] for k in ("proposed", "settings", "alternatives", "derivation",
                                                        "blockers", "unknown", "warnings", "reserve")}})
    for text in [*result.unknown, *result.warnings,
                 *(f"consistency {r.check}: {r.message}" for r in rows if r.status == "warning")]:
        kit.receipt.warn(f"proposal: {text}")
    return {"proposal": result, "path": path, "document": doc}


@pytest.fixture(scope="session")
def operator_score(pytestconfig, kit, request) -> dict:
    """The operator's native score from --operator-score, recorded as operator-supplied (never computed here)."""
    score = insight_options(pytestconfig).score
    assert score is not None, "tests of the operator score are deselected without --operator-score"
    record, path, sha = score
    model_id = revision = None
    if settings_path(pytestconfig) is not None:
        try:
            s = request.getfixturevalue("settings")
            model_id, revision = s.model_id, s.model_revision
        except pytest.xfail.Exception:
            pass  # invalid settings block their own tests; the score is still recorded as stated
    section = score_mod.receipt_section(record, path, sha, model_id, revision)
    kit.receipt.set("operator_score", section)
    for mismatch in section["mismatches"]:
        kit.receipt.warn(f"operator-supplied score: {mismatch}")
    return section
