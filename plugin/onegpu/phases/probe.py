"""Session fixtures of the probe phase (tests_hw/test_3_probe.py): the Docker client, leftovers of earlier sessions,
the GPU lock, the runtime probe of the image (KIT.md 3.5, 10) and the KV dtypes it accepts."""
from __future__ import annotations

import os
import time

import pytest

from onegpu.checkpoint.consistency import check_kv_dtype
from onegpu.core.outcomes import Blocked
from onegpu.engine.gpu_lock import LIMITATION as LOCK_LIMITATION
from onegpu.engine.gpu_lock import GpuLock, GpuSetLock
from onegpu.engine.interrupts import GUARD
from onegpu.engine.leftovers import describe as describe_leftovers
from onegpu.engine.leftovers import find_kit_containers, remove_dead_owner_containers
from onegpu.phases.plan_ceiling import measured_ceiling
from onegpu.plan.vllm_versions import probed_against_plan
from onegpu.session.glue import blocked_as_xfail

DOCKER_TIMEOUT_S = 120  # API calls (create, stop, logs) on a busy daemon can take a while


@pytest.fixture(scope="session")
def kit_docker_client(docker_facts):
    """A docker SDK client of the daemon the machine phase found (NO_DOCKER when none answers)."""
    import docker
    from docker.errors import DockerException

    with blocked_as_xfail():
        if not docker_facts.reachable:
            raise Blocked("NO_DOCKER", f"no Docker daemon answers at {docker_facts.endpoint}: {docker_facts.error}")
        try:
            client = docker.from_env(timeout=DOCKER_TIMEOUT_S)
        except DockerException as exc:
            raise Blocked("NO_DOCKER", f"no Docker daemon answers at {docker_facts.endpoint}: {exc}") from None
    yield client
    client.close()


def _kit_containers_on_socket(docker_facts) -> list[dict] | None:
    """find_kit_containers on a local daemon's socket without the docker SDK (onegpu.machine.docker_api); None when the
    SDK client must ask (another kind of endpoint, no daemon, or no clean answer: it then words the error)."""
    from onegpu.machine.docker_api import LocalClient, NotAnswered

    if not docker_facts.reachable:
        return None
    try:
        return find_kit_containers(LocalClient(docker_facts.endpoint, DOCKER_TIMEOUT_S))
    except NotAnswered:
        return None


@pytest.fixture(scope="session")
def kit_leftovers(request, hardware, kit) -> list[dict] | None:
    """Kit-labelled containers on the daemon, their owners judged; read-only (a scan never removes).
    None in a replayed session: the replayed machine's daemon cannot be asked from here."""
    if hardware.replayed:
        return None
    rows = _kit_containers_on_socket(request.getfixturevalue("docker_facts"))
    if rows is None:
        rows = find_kit_containers(request.getfixturevalue("kit_docker_client"))
    kit.receipt.set("leftovers", {"removed_any": False, "containers": rows})
    return rows


@pytest.fixture(scope="session")
def sigterm_guard():
    """For the acting part of the session: SIGTERM becomes KeyboardInterrupt so finalizers take containers
    down (pytest-timeout's signal method is the backstop)."""
    GUARD.install()
    yield GUARD
    GUARD.uninstall()


@pytest.fixture(scope="session")
def leftovers_removed(live_hardware, kit_docker_client, sigterm_guard, kit) -> list[dict]:
    """Before this session starts its own: kit containers whose owner is dead are removed, and reported."""
    rows = remove_dead_owner_containers(kit_docker_client)
    kit.receipt.set("leftovers", {"removed_any": any(r.get("removed") for r in rows), "containers": rows})
    acted_on = [r for r in rows if r.get("removed") or r.get("error")]
    for line in describe_leftovers(acted_on, acted=True) if acted_on else []:
        kit.show("probe", line)
    return rows


@pytest.fixture(scope="session")
def gpu_lock(live_hardware, selected_gpu, gpu_set, kit):
    """This session's exclusive hold on every GPU it uses: the selected one, or each GPU of the multi-GPU
    protocol's set (GPU_LOCKED names the other holder; the locks taken before it are let go)."""
    lock: GpuLock | GpuSetLock
    if len(gpu_set) == 1:
        lock = GpuLock(selected_gpu.uuid, str(kit.run_folder))
    else:
        lock = GpuSetLock([d.uuid for d in gpu_set], str(kit.run_folder))
    with blocked_as_xfail():
        lock.acquire()
    kit.receipt.update("gpu_lock", gpu_uuid=selected_gpu.uuid, pid=os.getpid(), since=lock.since)
    if isinstance(lock, GpuSetLock):
        kit.receipt.update("gpu_lock", gpu_uuids=[d.uuid for d in gpu_set])
    kit.receipt.limitation(LOCK_LIMITATION)
    yield lock
    lock.release()


@pytest.fixture(scope="session")
def runtime_probe(request, request_files_checked, approved_plan, live_hardware, launch_spec, gpu_lock,
                  leftovers_removed, kit_docker_client, accounting, kit):
    """vLLM and torch versions, one CUDA device, every launch flag known; RUNTIME_INCOMPATIBLE otherwise; the vLLM
    version planned with the rules the plan applied, PLAN_CHANGED otherwise (nothing loads under another's plan).

    Refusals that need no container come first (the arguments resolve in order): a bad request file or a
    definite capacity failure starts nothing, not even this probe."""
    from onegpu.engine.probe import facts_json as probe_json  # the docker SDK and requests: for acting sessions only
    from onegpu.engine.probe import run_probe

    started = time.monotonic()
    try:
        facts, elapsed = run_probe(kit_docker_client, launch_spec)
    except Blocked as blocked:
        kit.receipt.timing("probe", time.monotonic() - started)
        # the version it read is kept at the top, as for a passed probe: a later plan of this image reads it
        kit.receipt.set("probe", {"passed": False, "vllm_version": blocked.numbers.get("vllm_version"),
                                  **blocked.as_json()})
        with blocked_as_xfail():
            raise
    kit.receipt.timing("probe", elapsed)
    kit.receipt.set("probe", {"passed": True, **probe_json(facts, elapsed)})
    with blocked_as_xfail():
        probed, warnings = probed_against_plan(accounting, facts.vllm_version)
    kit.receipt.update("probe", accounting=probed.as_json())
    for warning in warnings:
        kit.receipt.warn(f"accounting: {warning}")
    measured_ceiling(request, facts.h2d, facts.h2d_error, kit)
    return facts


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
