"""Session fixture of the link ceiling (tests_hw/test_2_plan_ceiling.py): the PCIe bound on decode and prefill before
the load, and again with the bandwidth the runtime probe measured."""
from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from msgspec import structs

from onegpu.phases.plan import gpu_or_reason
from onegpu.record.sections_insight import Ceiling
from onegpu.report.run_reader import recorded_link

# The serve window's outstanding calls: the decode ceiling is also shown for that many sequences a step.
CEILING_BATCHES = (1, 4)


def link_of(gpu, hardware, run_folder: Path, measured: dict | None = None, where: str = "", why_not: str = ""):
    """The selected GPU's link: this session's probe measurement, else an earlier probe's of the same GPU UUID in
    the run folders beside this one, else NVML's nominal rate x the ASSUMED practical share (`why_not` says why
    nothing measured it, when a probe tried)."""
    from onegpu.plan.ceiling import link_from_gpu

    if gpu is None:
        return link_from_gpu(None, None, "NOT MEASURED: no GPU is selected")
    if measured is None and not hardware.replayed:
        found = recorded_link(run_folder.parent, gpu.uuid, skip=run_folder)
        if found is not None:
            measured, where = found.measurement, f"the runtime probe of run folder {found.folder}"
    if measured is not None:
        link = link_from_gpu(gpu, measured)
        return structs.replace(link, how=f"{link.how} ({where or 'this session'})")
    why = why_not or (
        "NOT MEASURED: the hardware facts are replayed, and no probe can measure that machine's link from here"
        if hardware.replayed else "NOT MEASURED: no runtime probe has measured this GPU's link yet (an approval's "
                                  "probe does, on the card, in the engine image)")
    return link_from_gpu(gpu, None, why)


def ceiling_of(settings, checkpoint, link) -> tuple:
    """(traffic, ceilings) of the settings' offload on this link."""
    from onegpu.plan.capacity import plan_for
    from onegpu.plan.ceiling import ceilings, link_bytes

    traffic = link_bytes(plan_for(settings, checkpoint), checkpoint.config or {})
    return traffic, ceilings(traffic, link, settings.prefill_chunk_tokens, CEILING_BATCHES,
                             (settings.context_tokens,))


@pytest.fixture(scope="session")
def ceiling(settings, hardware, checkpoint, kit) -> dict:
    """How fast the engine could possibly answer: the bytes the offload makes cross the PCIe link per step, the
    link's bandwidth (measured, recorded or ASSUMED), and the upper bounds that follow (onegpu.plan.ceiling)."""
    from onegpu.plan.ceiling_record import ceiling_lines, ceiling_record

    if settings.multi_gpu is not None:
        record: dict = {"label": "not computed", "why": f"the {settings.protocol}: the link ceiling is computed for the "
                                                  "one-GPU protocol only (each rank's share crosses its own link)"}
        keep_ceiling(kit, record)
        return record
    gpu, _ = gpu_or_reason(hardware, settings)
    link = link_of(gpu, hardware, kit.run_folder)
    traffic, bounds = ceiling_of(settings, checkpoint, link)
    record = {**ceiling_record(traffic, link, bounds),
              "lines": ceiling_lines(traffic, link, bounds)}
    keep_ceiling(kit, record)
    return record


def keep_ceiling(kit, record: dict) -> None:
    """The receipt's ceiling section, and the session's latest ceiling for the request phases' measured rates
    (the probe's measured link replaces the scan's)."""
    kit.receipt.set("ceiling", record)
    kit.ceiling = msgspec.convert(record, Ceiling)


def measured_ceiling(request, h2d: dict | None, h2d_error: str | None, kit) -> None:
    """The link ceiling again with the bandwidth this session's probe measured on the card (the scan's used the
    nominal rate or an earlier measurement); where the probe could not measure it, the ceiling says why."""
    from onegpu.plan.ceiling_record import ceiling_lines, ceiling_record

    settings, hardware = request.getfixturevalue("settings"), request.getfixturevalue("hardware")
    if settings.multi_gpu is not None:
        return
    gpu, _ = gpu_or_reason(hardware, settings)
    why_not = f"NOT MEASURED: this session's runtime probe could not copy to a CUDA device ({h2d_error})"
    link = link_of(gpu, hardware, kit.run_folder, h2d, "this session's runtime probe", why_not if h2d_error else "")
    traffic, bounds = ceiling_of(settings, request.getfixturevalue("checkpoint"), link)
    lines = ceiling_lines(traffic, link, bounds)
    keep_ceiling(kit, {**ceiling_record(traffic, link, bounds), "lines": lines})
    for line in lines[:1] + [line for line in lines if line.startswith("UPPER")]:
        kit.show("probe", line)
