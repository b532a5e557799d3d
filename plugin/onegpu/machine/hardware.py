"""Hardware facts for the session: read live from this machine, or replayed from a recorded profile."""
from __future__ import annotations

import datetime as _dt
from pathlib import Path

from msgspec import structs

from onegpu.core.units import GIB
from onegpu.machine.docker_facts import read_docker_facts
from onegpu.machine.host import read_host_facts
from onegpu.machine.model import SCHEMA, HardwareFacts, load_profile
from onegpu.machine.nvml import read_gpu_facts


def read_live(disks: list[tuple[str, Path]]) -> HardwareFacts:
    """Read GPU (NVML), host (/proc, /sys) and Docker facts of the machine the kit runs on."""
    return HardwareFacts(
        schema=SCHEMA, source="live",
        recorded_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        gpu=read_gpu_facts(), host=read_host_facts(disks), docker=read_docker_facts(),
    )


def replay(path: Path, stated_ram_gib: float | None) -> HardwareFacts:
    """Load a profile. Host RAM a profile leaves unset can be stated by the operator (--host-ram-gib)."""
    facts = load_profile(path)
    facts = structs.replace(facts, source="replayed")
    host = facts.host
    if stated_ram_gib is not None and host.ram_total_bytes is None:
        stated = int(stated_ram_gib * GIB)
        host = structs.replace(host, ram_total_bytes=stated, ram_available_bytes=stated,
                                   ram_stated_by_operator=True)
        facts = structs.replace(facts, host=host)
    return facts
