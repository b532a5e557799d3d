"""Session fixture of the landing (tests_hw/test_5_load_landing.py): at READY, one fresh sample (NVML, host,
container) against the plan's projection and the free-memory floor (onegpu.plan.landing decides)."""
from __future__ import annotations

import pytest

from onegpu.core.jsonable import to_json
from onegpu.core.units import GIB
from onegpu.evidence.receipt import now_iso
from onegpu.plan import landing as landing_mod

LANDING_KEY = pytest.StashKey[dict]()


def record_landing(request, kit, boot, sampler) -> dict:
    """At READY: one fresh sample (NVML, host, container) against the plan's projection and the floor.

    Called by the engine fixture right after the health check passed; the record goes to the receipt's
    "landing" section, its warnings to the receipt's warnings, its lines to the load phase.
    """
    sample = sampler.sample_once() if sampler is not None else None
    settings = request.getfixturevalue("settings")
    # the capacity verdicts: made before the engine (engine <- runtime_probe <- approved_plan <- capacity)
    projection = landing_mod.projection_from_plan(request.getfixturevalue("capacity"))
    if settings.multi_gpu is not None:
        projection = landing_mod.per_rank_unpaired(projection)
    record = landing_mod.landing_record(
        projection, to_json(boot) if boot is not None else None, sample,
        round(settings.free_floor_gib * GIB), "free_floor_gib" in settings.assumed,
        round(settings.host_headroom_gib * GIB))
    if settings.multi_gpu is not None:
        record["warnings"].insert(0, f"{settings.protocol}: {landing_mod.PER_RANK_UNPAIRED}")
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
