"""Session fixtures of the machine phase. Each is overridable in a conftest (e.g. to replay or simulate)."""
from __future__ import annotations

from pathlib import Path

import pytest

from . import hardware as hardware_reader
from .glue import blocked_as_xfail, phase_of
from .hardware_model import HardwareFacts, facts_to_json
from .jsonable import FactsFormatError
from .machine_checks import require_gpus, select_gpu
from .outcomes import Blocked
from .rundir import write_json
from .session import KitSession, kit_of


@pytest.fixture(scope="session")
def kit(pytestconfig) -> KitSession:
    """The session's run folder and receipt (created when kit tests were selected)."""
    state = kit_of(pytestconfig)
    assert state.receipt is not None, "kit fixtures are used only by tests marked scan or approve_load"
    return state


@pytest.fixture
def fact(request, kit):
    """Establish one fact: call a core check, show the line(s) it returns, xfail if it is Blocked."""
    phase = phase_of(request.node)

    def establish(check, *args, **kwargs):
        with blocked_as_xfail():
            result = check(*args, **kwargs)
        for line in result if isinstance(result, list) else [result]:
            if isinstance(line, str):
                kit.show(phase, line)
        return result

    return establish


@pytest.fixture(scope="session")
def hardware(pytestconfig, kit) -> HardwareFacts:
    """Facts of this machine, or of the profile given with --hardware (then nothing may start)."""
    profile = pytestconfig.getoption("hardware")
    if profile:
        try:
            facts = hardware_reader.replay(Path(profile), pytestconfig.getoption("host_ram_gib"))
        except FactsFormatError as exc:
            raise pytest.UsageError(str(exc)) from None
        kit.receipt.update("replay", profile=str(Path(profile).absolute()), name=facts.profile)
        kit.receipt.set("banners", [*kit.receipt.data.get("banners", []), f"HARDWARE FACTS REPLAYED from profile {facts.profile or profile}: they "
                                    "describe that machine, not this one; nothing can be started in this session"])
    else:
        facts = hardware_reader.read_live([("run folder", kit.run_folder)])
    data = facts_to_json(facts)
    write_json(kit.run_folder / "hardware.json", data)
    kit.receipt.set("hardware", data)
    return facts


@pytest.fixture(scope="session")
def gpu_facts(hardware):
    return hardware.gpu


@pytest.fixture(scope="session")
def host_facts(hardware):
    return hardware.host


@pytest.fixture(scope="session")
def docker_facts(hardware):
    return hardware.docker


@pytest.fixture(scope="session")
def selected_gpu(gpu_facts, request, kit):
    """The one GPU the settings select; only its memory is ever counted."""
    with blocked_as_xfail():
        require_gpus(gpu_facts)  # no driver blocks before "no settings" does
    settings = request.getfixturevalue("settings")
    with blocked_as_xfail():
        device = select_gpu(gpu_facts, settings.gpu)
    kit.receipt.update("selection", gpu_index=device.index, gpu_uuid=device.uuid, gpu_name=device.name)
    return device


@pytest.fixture(scope="session")
def live_hardware(hardware):
    """Approve_load guard: a replayed profile describes another machine, so nothing may start."""
    if hardware.replayed:
        with blocked_as_xfail():
            raise Blocked("HARDWARE_REPLAYED", f"facts come from profile {hardware.profile!r}, not this machine; "
                                               "run the approval on the target machine without --hardware")
    return hardware
