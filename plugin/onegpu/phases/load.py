"""Session fixture of the load phase (tests_hw/test_5_load.py): the engine container, from create to READY and down
again (KIT.md 6)."""
from __future__ import annotations

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.session.glue import blocked_as_xfail
from onegpu.session.progress import TerminalProgress


@pytest.fixture(scope="session")
def engine(request, live_hardware, runtime_probe, manifest, checkpoint_unchanged, launch_spec, settings,
           kit_docker_client, sigterm_guard, kit):
    """The session's engine container, ready on its Unix socket, after custody; always stopped and removed."""
    from onegpu.engine.container import Engine  # the docker SDK and psutil: for acting sessions only
    from onegpu.engine.container import facts_json as boot_json

    eng = Engine(kit_docker_client, launch_spec, kit.run_folder, settings.boot_deadline_s,
                 progress=TerminalProgress(request.config), record=lambda **kv: kit.receipt.update("engine", **kv))

    def take_down():
        final = eng.close()
        if final.get("samples"):
            kit.receipt.set("samples", final["samples"])

    request.addfinalizer(take_down)  # registered before create: nothing can skip it
    checkpoint_unchanged()  # files re-checked (size, mtime, inode) right before the container is created
    try:
        handle = eng.launch()
    except Blocked as blocked:
        kit.receipt.timing("load", blocked.numbers.get("elapsed_s") or 0.0)
        kit.receipt.set("boot", {"ready": False, **blocked.as_json(), "failure": eng.failure})
        with blocked_as_xfail():
            raise
    elapsed = eng.boot_elapsed_s
    assert elapsed is not None  # launch returned: the engine reached READY, and its boot was timed
    kit.receipt.timing("load", elapsed)
    kit.receipt.set("boot", {"ready": True, "elapsed_s": round(elapsed, 3), "facts": boot_json(handle.boot)})
    kit.show("load", boot_line(handle.boot, elapsed))
    from onegpu.phases.load_landing import record_landing  # late: pytest registers (and rewrites) that module itself

    record_landing(request, kit, handle.boot, eng.sampler)  # measured at READY: GPU free, host RAM, vs the plan
    return handle


def boot_line(boot, elapsed_s: float) -> str:
    """The load fact line: how long, and what the boot log said (onegpu.report.boot_facts, the one table)."""
    import msgspec

    from onegpu.engine.container import facts_json
    from onegpu.record.sections_load import BootFacts
    from onegpu.report.boot_facts import terminal_line

    return terminal_line(msgspec.convert(facts_json(boot), BootFacts) if boot is not None else None, elapsed_s)
