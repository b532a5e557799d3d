"""Session fixtures of the custody phase (tests_hw/test_4_custody.py): the manifest (approve_load) and the re-check
right before launch."""
from __future__ import annotations

from pathlib import Path

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.custody.flow import Custody, CustodyRequest, fact_lines, summary, take_custody
from onegpu.custody.manifest import default_workers, recheck
from onegpu.evidence.receipt import now_iso
from onegpu.options import CUSTODY_KEY
from onegpu.session.glue import blocked_as_xfail
from onegpu.session.progress import TerminalProgress


@pytest.fixture(scope="session")
def manifest(request, live_hardware, settings, runtime_probe, checkpoint, kit) -> Custody:
    """The SHA-256 manifest of every checkpoint file, after the runtime probe (a wrong image must cost seconds,
    not hours of hashing); hashing timed on its own."""
    options = request.config.stash[CUSTODY_KEY]
    workers = options.workers or default_workers(live_hardware.host.cpus_usable)
    planned = list(checkpoint.files)
    request_ = CustodyRequest(Path(settings.model_path), settings.model_revision, settings.model_id,
                              kit.run_folder, workers, options.publisher, options.reuse, planned)
    with blocked_as_xfail():
        custody = take_custody(request_, TerminalProgress(request.config))
    kit.receipt.set("custody", summary(custody))
    if custody.hashing_s is not None:
        kit.receipt.timing("hashing", custody.hashing_s)
    for warning in custody.warnings:
        kit.receipt.warn(warning)
    for line in fact_lines(custody):
        kit.show("custody", line)
    if custody.blocked is not None:
        with blocked_as_xfail():
            raise custody.blocked
    return custody


@pytest.fixture(scope="session")
def checkpoint_unchanged(manifest, kit):
    """A callable for the engine to call right before it creates the container: every file re-stat'ed.

    The call returns the fact line, or xfails BLOCKED CHECKPOINT_CHANGED naming the changed files.
    """
    def check() -> str:
        with blocked_as_xfail():
            try:
                line = recheck(manifest.manifest, manifest.layout)
            except Blocked as exc:
                kit.receipt.update("custody", recheck={"at": now_iso(), "unchanged": False, **exc.as_json()})
                raise
        kit.receipt.update("custody", recheck={"at": now_iso(), "unchanged": True})
        kit.show("custody", line)
        return line

    return check
