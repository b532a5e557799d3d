"""Session fixtures of the plan phase: settings first; checkpoint, image, capacity and the plan build on it."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .capacity import TABLE_TITLE, capacity_table, capacity_verdicts, verdict_line
from .checkpoint import read_checkpoint
from .glue import blocked_as_xfail, session_settings, settings_path
from .image import describe_image, resolve_local_image
from .jsonable import to_json
from .kvcache import kv_cache_estimate
from .machine_checks import require_docker, select_gpu
from .offload_rules import rules_json
from .outcomes import Blocked
from .plan import SYNTHETIC_LINE, PlanFileError, load_plan, plan_bytes, plan_digest, plan_document, \
    require_same_plan
from .rundir import write_private
from .settings import Settings, SettingsError


def pytest_addoption(parser):
    group = parser.getgroup("onegpu")
    group.addoption("--plan", metavar="PLAN_JSON", help="run exactly this approved plan (a plan.json a scan wrote): "
                    "PLAN_CHANGED if the image ID, GPU UUID, settings, checkpoint file list or launch argv differ now")


def pytest_configure(config):
    path = config.getoption("plan", None)
    if path:
        try:
            load_plan(Path(path))  # a wrong file is a usage error now, not a blocked test hours later
        except PlanFileError as exc:
            raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def settings(pytestconfig, kit) -> Settings:
    """The validated settings; NO_SETTINGS or SETTINGS_INVALID (every broken rule listed) otherwise."""
    path = settings_path(pytestconfig)
    with blocked_as_xfail():
        if path is None:
            raise Blocked("NO_SETTINGS", "no --settings file given: the machine facts stand alone; give "
                                         "--settings=s.json to read the checkpoint and see the plan")
        try:
            raw, loaded = session_settings(pytestconfig)
        except SettingsError as exc:
            kit.receipt.set("settings_errors", exc.errors)
            raise Blocked("SETTINGS_INVALID", f"{exc.path}: " + "; ".join(exc.errors),
                          {"errors": len(exc.errors)}) from None
    write_private(kit.run_folder / "settings.json", raw)  # the bytes judged above
    kit.receipt.set("settings", {"path": str(path.absolute()), "sha256": loaded.sha256,
                                 "schema": loaded.source_schema, "assumed": loaded.assumed,
                                 "values": to_json(loaded)})
    return loaded


@pytest.fixture(scope="session")
def checkpoint(settings, hardware, kit):
    """The checkpoint's facts from config.json, the index and the shard headers (no weight is read).

    Requests `hardware` first so a replay banner is in place before a synthetic-checkpoint banner joins it.
    """
    with blocked_as_xfail():
        facts = read_checkpoint(Path(settings.model_path))
    kit.receipt.set("checkpoint", facts.summary())
    if facts.synthetic:
        kit.synthetic_checkpoint = True
        banner = (f"CHECKPOINT IS SYNTHETIC: {facts.root} holds header-only shards and no weights; every number "
                  "below is about its layout, and nothing can be loaded from it")
        banners = list(kit.receipt.data.get("banners", []))
        if banner not in banners:
            kit.receipt.set("banners", [*banners, banner])
        kit.show("plan", SYNTHETIC_LINE)
    return facts


@pytest.fixture(scope="session")
def kv_estimate(settings, checkpoint, kit):
    """KV cache bytes for the configured context and one sequence (bytes None: UNKNOWN, with the reason)."""
    kv = kv_cache_estimate(checkpoint.config, settings.context_tokens, settings.kv_cache_dtype,
                           settings.prefill_chunk_tokens)
    kit.receipt.set("kv_cache", to_json(kv))
    return kv


def _gpu_or_reason(hardware, settings) -> tuple:
    """(the selected GPU, None) or (None, why none is selected): the host side is judged either way."""
    try:
        return select_gpu(hardware.gpu, settings.gpu), None
    except Blocked as blocked:
        return None, blocked.reason


def _run_disk_free(hardware, kit) -> int | None:
    """Free bytes where the run folder lives: read now when live; a replayed profile's record, if any."""
    recorded = next((d.free_bytes for d in hardware.host.disks if d.label == "run folder"), None)
    if recorded is not None or hardware.replayed:
        return recorded
    return shutil.disk_usage(kit.run_folder).free


@pytest.fixture(scope="session")
def capacity(settings, hardware, checkpoint, kv_estimate, calibration, kit):
    """The capacity verdicts of KIT.md 5: shown as a table, stored in the receipt. With --calibrate-from, the
    measured non-weight reserve (fixture `calibration`) replaces the assumed one."""
    gpu, why = _gpu_or_reason(hardware, settings)
    verdicts = capacity_verdicts(settings, gpu, hardware.host, checkpoint, kv_estimate,
                                 _run_disk_free(hardware, kit), gpu_missing_reason=why, calibration=calibration)
    kit.table(TABLE_TITLE, capacity_table(verdicts))
    kit.receipt.set("capacity", [v.as_json() for v in verdicts])
    kit.receipt.set("capacity_accounting", rules_json())  # the vLLM version read and each rule's source
    return verdicts


@pytest.fixture
def judge_capacity(capacity, kit):
    """Judge one capacity row in a test: BLOCKED xfails with its code and numbers, UNKNOWN passes with a
    visible warning, OK passes; the row is shown either way."""

    def judge(check: str):
        verdict = next(v for v in capacity if v.check == check)
        kit.show("plan", verdict_line(verdict))
        if verdict.status == "UNKNOWN":
            kit.receipt.warn(f"capacity {check} UNKNOWN: {verdict.message}")
        if verdict.status == "BLOCKED":
            with blocked_as_xfail():
                raise verdict.blocked()
        return verdict

    return judge


@pytest.fixture(scope="session")
def image(settings, docker_facts, hardware, kit):
    """The settings' image resolved to its immutable ID on the local Docker engine; never pulled.

    A replayed session plans for another machine: an image this machine lacks is resolved at approval on the
    target (HARDWARE_REPLAYED, not IMAGE_MISSING); one it has is shown with that caveat."""
    with blocked_as_xfail():
        try:
            require_docker(docker_facts)
            facts = resolve_local_image(settings.image)
        except Blocked as blocked:
            if not hardware.replayed or blocked.code not in ("IMAGE_MISSING", "NO_DOCKER"):
                raise
            raise Blocked("HARDWARE_REPLAYED", f"image {settings.image!r} is not on this machine's Docker engine "
                                               f"({blocked.code}); "
                                               "the approval on the target machine resolves it to its sha256 ID "
                                               "there") from None
    kit.receipt.set("image", to_json(facts))
    for line in describe_image(facts):
        kit.show("plan", line)
    if hardware.replayed:
        kit.show("plan", "  resolved on this machine's Docker engine: the replayed machine may hold another image "
                         "under that name")
    return facts


def image_or_none(request, hardware):
    """The resolved image, or None in a replayed session (the plan then names the reference only)."""
    try:
        return request.getfixturevalue("image")
    except pytest.xfail.Exception:
        if hardware.replayed:
            return None
        raise


@pytest.fixture(scope="session")
def plan(request, pytestconfig, settings, hardware, checkpoint, kv_estimate, capacity, launch_spec, kit) -> dict:
    """plan.json (0600) in the run folder and its digest in the receipt; with --plan, the approved plan must
    match it (PLAN_CHANGED otherwise). A replayed plan names the image reference, not an ID."""
    document = plan_document(settings, hardware, checkpoint.summary(), image_or_none(request, hardware), capacity,
                             launch_spec.to_json(), kv=kv_estimate)
    path = write_private(kit.run_folder / "plan.json", plan_bytes(document))
    digest = plan_digest(document)
    record: dict[str, object] = {"path": str(path), "sha256": digest, "approved": None}
    kit.receipt.set("plan", record)
    kit.show("plan", f"plan written: {path} (sha256 {digest})")
    approved_path = pytestconfig.getoption("plan")
    if approved_path:
        approved, approved_sha = load_plan(Path(approved_path))
        record["approved"] = {"path": str(Path(approved_path).absolute()), "sha256": approved_sha}
        kit.receipt.set("plan", record)
        with blocked_as_xfail():
            kit.show("plan", require_same_plan(approved, approved_sha, approved_path, document))
    return document


@pytest.fixture(scope="session")
def approved_plan(plan, capacity):
    """The plan an approval may run: the fresh plan (matching --plan when given) with no BLOCKED capacity row.

    The engine depends on this, so a definite capacity failure stops the approval before anything starts.
    """
    blocked = [v for v in capacity if v.status == "BLOCKED"]
    if blocked:
        with blocked_as_xfail():
            raise blocked[0].blocked()
    return plan
