"""Fixtures that turn measurements into advice: proposed settings (--propose), a reserve calibrated from an
earlier run (--calibrate-from), the measured landing at READY, checkpoint consistency warnings, and an
operator-supplied native score (--operator-score). The deciding is done in plugin.propose, calibrate,
landing, consistency and operator_score; this module reads files, the image and the sampler, and records.

Option files are read once at start: a malformed one, or a calibration run that is not of the same
checkpoint, image, context and prefill chunk, is a usage error before anything runs (like a wrong --plan).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import calibrate, landing as landing_mod, operator_score as score_mod, propose as propose_mod
from .checkpoint import read_checkpoint
from .session import kit_of
from .checkpoint_files import cache_layout, list_files
from .consistency import check_kv_dtype, consistency_checks
from .fixtures_plan import _run_disk_free
from .glue import blocked_as_xfail, session_settings, settings_path
from .image import resolve_local_image
from .kvcache import kv_cache_estimate
from .machine_checks import select_gpu
from .outcomes import Blocked
from .receipt import now_iso
from .run_reader import NotARunFolder, read_run, read_samples
from .rundir import write_json
from .settings import SettingsError, load_settings
from .units import GIB

PROPOSAL_FILE = "settings-proposed.json"
PROPOSAL_TITLE = "onegpu proposed settings (a proposal: nothing runs from it; copy the values into your settings)"


@dataclass(frozen=True)
class InsightOptions:
    request: propose_mod.ProposalRequest | None = None
    calibration: calibrate.Calibration | None = None
    score: tuple[dict, str, str] | None = None  # (record, path, sha256)


INSIGHT_KEY = pytest.StashKey[InsightOptions]()
LANDING_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser):
    group = parser.getgroup("onegpu")
    group.addoption("--propose", metavar="REQUEST_JSON", help="write settings-proposed.json: the smallest budgets "
                    "for a checkpoint, image, model ID, revision and context on this machine (schema "
                    f"{propose_mod.REQUEST_SCHEMA}); nothing runs from a proposal")
    group.addoption("--calibrate-from", metavar="RUN_FOLDER", help="replace the assumed non-weight GPU reserve by "
                    "the one measured in RUN_FOLDER, an approved run of the same checkpoint, image, context and "
                    "prefill chunk (any other run is refused)")
    group.addoption("--operator-score", metavar="SCORE_JSON", help="record a native score obtained with your own "
                    f"scorer (schema {score_mod.SCHEMA}); marked operator-supplied, never computed by the kit")


def _read_bytes(option: str, given: str) -> bytes:
    try:
        return Path(given).read_bytes()
    except OSError as exc:
        raise pytest.UsageError(f"{option} {given}: cannot read ({exc.strerror})") from None


def _read_request(config) -> propose_mod.ProposalRequest | None:
    given = config.getoption("propose")
    if not given:
        return None
    raw = _read_bytes("--propose", given)
    try:
        return propose_mod.load_request(raw, str(Path(given).absolute()), hashlib.sha256(raw).hexdigest())
    except SettingsError as exc:
        raise pytest.UsageError(f"--propose {exc}") from None


def _read_score(config) -> tuple[dict, str, str] | None:
    given = config.getoption("operator_score")
    if not given:
        return None
    shown = str(Path(given).absolute())
    try:
        record, sha = score_mod.load_operator_score(_read_bytes("--operator-score", given), shown)
    except score_mod.OperatorScoreError as exc:
        raise pytest.UsageError(f"--operator-score {exc}") from None
    return record, shown, sha


def load_run(folder: Path) -> calibrate.RunBasis:
    """An earlier run folder's basis; raises CalibrationError naming what is missing."""
    folder = folder.absolute()
    run_id = folder.name
    try:
        run = read_run(folder)
    except NotARunFolder as exc:
        raise calibrate.CalibrationError(f"run {run_id}: {exc}") from None
    if isinstance(run.settings, SettingsError):
        raise calibrate.CalibrationError(f"run {run_id}: its settings.json cannot be read: {run.settings}")
    return calibrate.run_basis(run_id, str(folder), run.receipt, run.settings, run.manifest, read_samples(folder))


def current_basis(model_path: str, image: str, context: int, chunk: int, kv_dtype, offload, source: str,
                  model_id: str | None = None, model_revision: str | None = None):
    """The identity of what this session would run, read now; raises CalibrationError when it cannot be read."""
    root = Path(model_path)
    if not (root / "config.json").is_file():
        raise calibrate.CalibrationError(f"the {source}'s checkpoint {root} has no config.json to compare")
    try:
        listing = list_files(root, cache_layout(root))
        image_id = resolve_local_image(image).id
    except Blocked as blocked:
        raise calibrate.CalibrationError(f"the {source}'s checkpoint or image cannot be compared: {blocked.reason}") \
            from None
    files = {name: os.stat(root / name).st_size for name in listing.files}
    config_sha = hashlib.sha256((root / "config.json").read_bytes()).hexdigest()
    return calibrate.CurrentBasis(str(root), files, config_sha, image, image_id, context, chunk, kv_dtype, offload,
                                  source, model_id, model_revision)


def _read_calibration(config, request) -> calibrate.Calibration | None:
    given = config.getoption("calibrate_from")
    if not given:
        return None
    targets = []
    path = settings_path(config)
    try:
        run = load_run(Path(given))
        if path is not None:
            try:
                s = load_settings(path)
            except SettingsError as exc:
                raise calibrate.CalibrationError(f"nothing to compare with: {exc}") from None
            targets.append(current_basis(s.model_path, s.image, s.context_tokens, s.prefill_chunk_tokens,
                                         s.kv_cache_dtype, s.cpu_offload_gib, "settings", s.model_id,
                                         s.model_revision))
        if request is not None:
            targets.append(current_basis(request.model_path, request.image, request.context_tokens,
                                         request.prefill_chunk_tokens, request.kv_cache_dtype, None,
                                         "proposal request", request.model_id, request.model_revision))
        if not targets:
            raise calibrate.CalibrationError("a calibration replaces the reserve of a plan: give --settings (or "
                                             "--propose) too")
        for target in targets:
            calibrate.require_same_basis(run, target)
        return calibrate.measure(run, targets[0])
    except calibrate.CalibrationError as exc:
        raise pytest.UsageError(f"--calibrate-from {given}: {exc}") from None


def pytest_configure(config):
    request = _read_request(config)
    config.stash[INSIGHT_KEY] = InsightOptions(request, _read_calibration(config, request), _read_score(config))


def pytest_collection_modifyitems(config, items):
    """Tests of an option that was not given are deselected: they have nothing to establish."""
    opts = config.stash.get(INSIGHT_KEY, InsightOptions())
    absent = {name: option for name, attr, option in (("proposal", "request", "--propose"),
                                                       ("operator_score", "score", "--operator-score"))
              if getattr(opts, attr) is None}
    held = [i for i in items if set(absent) & set(getattr(i, "fixturenames", ()))
            and (i.get_closest_marker("scan") or i.get_closest_marker("approve_load"))]
    kit_of(config).held_for_options = sorted({absent[n] for i in held for n in absent if n in i.fixturenames})
    kit_of(config).held_for_options_count = len(held)
    if held:
        items[:] = [i for i in items if i not in held]
        config.hook.pytest_deselected(items=held)


def _options(config) -> InsightOptions:
    return config.stash[INSIGHT_KEY]


def _gpu_name(hardware, selector) -> str | None:
    try:
        return select_gpu(hardware.gpu, selector).name
    except Blocked:
        return None


@pytest.fixture(scope="session")
def calibration(pytestconfig, hardware, kit):
    """The reserve measured by --calibrate-from (checked at start to be of the same checkpoint, image, context and
    prefill chunk), or None: the plan then shows the assumed reserve."""
    cal = _options(pytestconfig).calibration
    if cal is None:
        return None
    opts = _options(pytestconfig)
    selector = opts.request.gpu if opts.request is not None else session_settings(pytestconfig)[1].gpu
    warnings = [*cal.warnings, *filter(None, [calibrate.gpu_warning(cal, _gpu_name(hardware, selector))])]
    kit.receipt.set("calibration", {**cal.as_json(), "warnings": warnings})
    for warning in warnings:
        kit.receipt.warn(warning)
    return cal


@pytest.fixture(scope="session")
def consistency(pytestconfig, settings, checkpoint, kit):
    """Does the checkpoint hold what its config promises (and is the KV dtype one the image accepts)? Warnings."""
    cal = _options(pytestconfig).calibration
    version = cal.vllm_version if cal is not None else None
    source = f"the probe of run {cal.run_id}, same image ID" if version else ""
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
def kv_dtype_support(runtime_probe, settings, checkpoint, kit):
    """The KV dtype against the vLLM version this session's runtime probe read."""
    rows = check_kv_dtype(settings.kv_cache_dtype, runtime_probe.vllm_version, "read by this session's runtime probe",
                          checkpoint.config)
    kit.receipt.update("consistency", kv_dtype_at_probe=[r.as_json() for r in rows],
                       probe_vllm_version=runtime_probe.vllm_version)
    for row in rows:
        if row.status == "warning":
            kit.receipt.warn(f"consistency {row.check}: {row.message}")
    return rows


@pytest.fixture(scope="session")
def proposal(pytestconfig, hardware, kit) -> dict:
    """settings-proposed.json (0600) from --propose and this machine's facts; shown as a table."""
    opts = _options(pytestconfig)
    req = opts.request
    assert req is not None, "tests of the proposal are deselected without --propose"
    try:
        gpu, why = select_gpu(hardware.gpu, req.gpu), None
    except Blocked as blocked:
        gpu, why = None, blocked.reason
    with blocked_as_xfail():
        ckpt = read_checkpoint(Path(req.model_path))
    kv = kv_cache_estimate(ckpt.config, req.context_tokens, req.kv_cache_dtype, req.prefill_chunk_tokens)
    try:
        image = {"reference": req.image, "id": resolve_local_image(req.image).id, "note": None}
    except Blocked as blocked:
        image = {"reference": req.image, "id": None, "note": blocked.reason}
    if hardware.replayed:
        image["note"] = (image["note"] + "; " if image["note"] else "") + "resolved on this machine's Docker engine: " \
            "the replayed machine may hold another image under that name"
    result = propose_mod.propose(req, gpu, why, hardware.host, ckpt, kv, opts.calibration,
                                 _run_disk_free(hardware, kit))
    differs = propose_mod.kv_differs_from_plan(req, kv, kit.receipt.data.get("kv_cache"))
    if differs:
        result.warnings.append(differs)
    cal = opts.calibration
    rows = consistency_checks(ckpt.config, ckpt.tensors.names, ckpt.quant.ignored_layers, req.kv_cache_dtype,
                              cal.vllm_version if cal else None,
                              f"the probe of run {cal.run_id}, same image ID" if cal else "",
                              (ckpt.tensors.group_of, ckpt.tensors.group_names))
    gpu_json = None if gpu is None else {k: getattr(gpu, k) for k in ("index", "name", "uuid", "total_bytes",
                                                                       "free_bytes")}
    doc = propose_mod.proposal_document(
        result, req, now_iso(), {"source": hardware.source, "profile": hardware.profile, "gpu": gpu_json}, image,
        {"root": ckpt.root, "weight_bytes": ckpt.weight_bytes, "synthetic": ckpt.synthetic, "files": len(ckpt.files)},
        [r.as_json() for r in rows])
    path = write_json(kit.run_folder / PROPOSAL_FILE, doc)
    kit.table(PROPOSAL_TITLE, propose_mod.proposal_table(result))
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
    score = _options(pytestconfig).score
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


def record_landing(request, kit, boot, sampler) -> dict:
    """At READY: one fresh sample (NVML, host, container) against the plan's projection and the floor.

    Called by the engine fixture right after the health check passed; the record goes to the receipt's
    "landing" section, its warnings to the receipt's warnings, its lines to the load phase.
    """
    sample = sampler.sample_once() if sampler is not None else None
    settings = request.getfixturevalue("settings")
    projection = landing_mod.projection_from_plan(kit.receipt.data.get("capacity") or [])
    record = landing_mod.landing_record(
        projection, dataclasses.asdict(boot) if boot is not None else None, sample,
        round(settings.free_floor_gib * GIB), "free_floor_gib" in settings.assumed,
        round(settings.host_headroom_gib * GIB))
    record["at"] = now_iso()
    kit.receipt.set("landing", record)
    for warning in record["warnings"]:
        kit.receipt.warn(warning)
    for line in landing_lines_of(record):
        kit.show("load", line)
    request.config.stash[LANDING_KEY] = record
    return record


def landing_lines_of(record: dict) -> list[str]:
    return landing_mod.landing_lines(record) + [f"WARNING: {w}" for w in record["warnings"]]


@pytest.fixture(scope="session")
def landing(request, engine, kit) -> dict:
    """The landing recorded at READY (recorded now, without a fresh sample, if the engine fixture did not)."""
    record = request.config.stash.get(LANDING_KEY, None)
    return record if record is not None else record_landing(request, kit, engine.boot, None)

