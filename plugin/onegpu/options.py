"""The kit's command-line options and ini keys, and what is read from them once, at configure time. onegpu.plugin's
hooks call `add_options` and `read_options`; no other module registers an option. A malformed option file (the
settings aside: judging them is the plan phase's) is a usage error before anything runs, like a wrong --plan, and
so is a calibration run that is not of the same checkpoint, image, context and prefill chunk.
"""
from __future__ import annotations

import hashlib
import math
import os
from pathlib import Path

import pytest
from msgspec import Struct

from onegpu.checkpoint.files import cache_layout, list_files
from onegpu.checkpoint.hf_cache_auth import PublisherHashes, PublisherHashesError, parse_publisher_hashes
from onegpu.core import strict_json
from onegpu.core.jsonable import FactsFormatError
from onegpu.core.outcomes import Blocked
from onegpu.custody.flow import Reuse
from onegpu.custody.manifest import ManifestError, load_manifest
from onegpu.engine.image import resolve_local_image
from onegpu.machine.model import load_profile
from onegpu.plan import calibrate
from onegpu.plan import operator_score as score_mod
from onegpu.plan import propose as propose_mod
from onegpu.plan.approved import PlanFileError, load_plan
from onegpu.plan.settings import SettingsError
from onegpu.record.run_basis import run_basis
from onegpu.report.run_reader import NotARunFolder, read_run, read_samples
from onegpu.requests import canary as canary_mod
from onegpu.session.glue import session_settings, settings_path
from onegpu.session.state import kit_of


class CustodyOptions(Struct, frozen=True):
    publisher: PublisherHashes | None
    reuse: Reuse | None
    workers: int | None


CUSTODY_KEY = pytest.StashKey[CustodyOptions]()


class InsightOptions(Struct, frozen=True):
    request: propose_mod.ProposalRequest | None = None
    calibration: calibrate.Calibration | None = None
    score: tuple[dict, str, str] | None = None  # (record, path, sha256)


INSIGHT_KEY = pytest.StashKey[InsightOptions]()
MAX_OPTION_FILE_BYTES = 100_000_000  # above every option file's own limit (a publisher's hash list the largest)


def add_options(parser) -> None:
    """Every option and ini key of the kit, in the order `pytest --help` lists them."""
    group = parser.getgroup("onegpu", "onegpu kit")
    group.addoption("--settings", metavar="PATH", help="settings.json (kit schema or axm/one-gpu-settings@1)")
    parser.addini("onegpu_settings", "default settings.json path when --settings is not given", default="")
    group.addoption("--hardware", metavar="PROFILE", help="replay a recorded hardware profile instead of reading "
                    "this machine (nothing can start in a replayed session)")
    group.addoption("--host-ram-gib", type=float, metavar="GIB",
                    help="host RAM available on the target, for a replayed profile that leaves it unset")
    group.addoption("--out", metavar="DIR", help="run folder to create (must not exist)")
    group.addoption("--runs-dir", metavar="DIR", help="parent of the default run folders (default: runs/)")
    parser.addini("onegpu_runs_dir", "parent of the default run folders", default="runs")
    group.addoption("--requests", metavar="JSONL", help="frozen request file (OpenAI batch lines) for the batch "
                    "phase; needs --protocol")
    group.addoption("--protocol", metavar="JSON", help="protocol.json binding the request file to its benchmark")
    group.addoption("--resume-batch", metavar="RUN_FOLDER", help="resume an interrupted batch in its own run "
                    "folder: only the missing custom_ids are sent")
    group.addoption("--fail-on-blocked", action="store_true", default=None,
                    help="exit non-zero when any kit test is blocked (for scripts)")
    parser.addini("onegpu_fail_on_blocked", "exit non-zero when any kit test is blocked", type="bool",
                  default=False)
    group.addoption("--plan", metavar="PLAN_JSON", help="run exactly this approved plan (a plan.json a scan wrote): "
                    "PLAN_CHANGED if the image ID, GPU UUID, settings, checkpoint file list or launch argv differ now")
    group.addoption("--publisher-hashes", metavar="FILE", help="per-file SHA-256 values saved from the "
                    "publisher (sha256sum lines or a JSON object {path: sha256}); custody compares every file")
    group.addoption("--reuse-manifest", metavar="MANIFEST", help="reuse runs/X/manifest.json when every file "
                    "still has its recorded size, mtime and inode (stat-matched, not re-hashed)")
    group.addoption("--hash-workers", type=int, metavar="N", help="hashing threads (default: usable CPUs, "
                    "at most 32)")
    group.addoption("--needle-chars", type=int, metavar="N", help="add a needle-in-a-haystack request of N "
                    "characters to the canary (a load smoke check, never a benchmark)")
    group.addoption("--needle-depth", type=float, default=0.5, metavar="F", help="where the needle sits in "
                    "the filler, 0 (start) to 1 (end); default 0.5")
    group.addoption("--needle-seed", type=int, default=0, metavar="S", help="seed of the needle's filler and "
                    "code word (same seed, same bytes); default 0")
    group.addoption("--propose", metavar="REQUEST_JSON", help="write settings-proposed.json: the smallest budgets "
                    "for a checkpoint, image, model ID, revision and context on this machine (schema "
                    f"{propose_mod.REQUEST_SCHEMA}); nothing runs from a proposal")
    group.addoption("--calibrate-from", metavar="RUN_FOLDER", help="replace the assumed non-weight GPU reserve by "
                    "the one measured in RUN_FOLDER, an approved run of the same checkpoint, image, context and "
                    "prefill chunk (any other run is refused)")
    group.addoption("--operator-score", metavar="SCORE_JSON", help="record a native score obtained with your own "
                    f"scorer (schema {score_mod.SCHEMA}); marked operator-supplied, never computed by the kit")


def read_options(config) -> None:
    """Judge the options and read their files, once: the option files first, then how the options combine."""
    request = _read_request(config)
    config.stash[INSIGHT_KEY] = InsightOptions(request, _read_calibration(config, request), _read_score(config))
    chars, depth = config.getoption("needle_chars"), config.getoption("needle_depth")
    if chars is not None and not canary_mod.NEEDLE_MIN_CHARS <= chars <= canary_mod.NEEDLE_MAX_CHARS:
        raise pytest.UsageError(f"--needle-chars {chars}: must be from {canary_mod.NEEDLE_MIN_CHARS} to "
                                f"{canary_mod.NEEDLE_MAX_CHARS}")
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise pytest.UsageError(f"--needle-depth {depth}: must be from 0 (start) to 1 (end)")
    config.stash[CUSTODY_KEY] = _read_custody_options(config)
    path = config.getoption("plan", None)
    if path:
        try:
            load_plan(Path(path))  # a wrong file is a usage error now, not a blocked test hours later
        except PlanFileError as exc:
            raise pytest.UsageError(str(exc)) from None
    if config.getoption("requests") and not config.getoption("protocol"):
        raise pytest.UsageError("--requests needs --protocol: a frozen batch is bound to its benchmark protocol")
    if config.getoption("protocol") and not config.getoption("requests"):
        raise pytest.UsageError("--protocol needs --requests")
    stated_ram = config.getoption("host_ram_gib")
    if config.getoption("hardware"):
        # A malformed profile is a usage error before anything runs, not an error in every test.
        try:
            profile = load_profile(Path(config.getoption("hardware")))
        except FactsFormatError as exc:
            raise pytest.UsageError(str(exc)) from None
        if stated_ram is not None and profile.host.ram_total_bytes is not None:
            raise pytest.UsageError("--host-ram-gib: this profile already records host RAM; the operator states "
                                    "it only for a profile that leaves it unset")
    elif stated_ram is not None:
        raise pytest.UsageError("--host-ram-gib applies only with --hardware: this machine's RAM is read, not stated")
    if stated_ram is not None and not (math.isfinite(stated_ram) and stated_ram > 0):
        raise pytest.UsageError(f"--host-ram-gib {stated_ram}: must be a finite positive number of GiB")


def insight_options(config) -> InsightOptions:
    return config.stash[INSIGHT_KEY]


def deselect_tests_of_absent_options(config, items) -> None:
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


def _read_custody_options(config) -> CustodyOptions:
    """Read the option files once, at start: a malformed file is a usage error naming the line."""
    publisher = reuse = None
    given = config.getoption("publisher_hashes")
    if given:
        raw = _read_bytes("--publisher-hashes", given)
        try:
            publisher = parse_publisher_hashes(raw, str(Path(given).absolute()), hashlib.sha256(raw).hexdigest())
        except PublisherHashesError as exc:
            raise pytest.UsageError(f"--publisher-hashes {exc}") from None
    given = config.getoption("reuse_manifest")
    if given:
        try:
            data, digest = load_manifest(Path(given))
        except ManifestError as exc:
            raise pytest.UsageError(f"--reuse-manifest {exc}") from None
        reuse = Reuse(str(Path(given).absolute()), digest, data)
    workers = config.getoption("hash_workers")
    if workers is not None and not 1 <= workers <= 256:
        raise pytest.UsageError(f"--hash-workers {workers}: must be from 1 to 256")
    return CustodyOptions(publisher, reuse, workers)


def _read_bytes(option: str, given: str) -> bytes:
    """An option file's bytes, bounded: each file's own parser then holds it to its own, smaller, limit."""
    try:
        return strict_json.read_bounded(Path(given), MAX_OPTION_FILE_BYTES)
    except strict_json.JSONFileError as exc:
        raise pytest.UsageError(f"{option} {given}: {exc}") from None


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


def calibration_run(folder: Path) -> calibrate.RunBasis:
    """An earlier run folder's basis; raises CalibrationError naming what is missing."""
    folder = folder.absolute()
    run_id = folder.name
    try:
        run = read_run(folder)
    except NotARunFolder as exc:
        raise calibrate.CalibrationError(f"run {run_id}: {exc}") from None
    if isinstance(run.settings, SettingsError):
        raise calibrate.CalibrationError(f"run {run_id}: its settings.json cannot be read: {run.settings}")
    return run_basis(run_id, str(folder), run.receipt, run.settings, run.manifest, read_samples(folder))


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
        run = calibration_run(Path(given))
        if path is not None:
            try:
                _, s = session_settings(config)  # the session's one reading
            except SettingsError as exc:
                raise calibrate.CalibrationError(f"nothing to compare with: {exc}") from None
            if s.multi_gpu is not None:
                raise calibrate.CalibrationError(calibrate.MULTI_GPU_REFUSAL.format(what=f"the settings declare the "
                                                                                          f"{s.protocol}"))
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
