"""Session fixtures of the launch plan, the runtime probe and the engine (KIT.md 3.3, 3.5, 6, 10).

Each is overridable in a conftest (e.g. `launch_spec` rebuilt without a GPU device request for tests).
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from .checkpoint import read_config
from .fixtures_plan import image_or_none
from .glue import blocked_as_xfail
from .gpu_lock import LIMITATION as LOCK_LIMITATION, GpuLock
from .interrupts import GUARD
from .launch import LaunchSpec, build_launch_spec
from .leftovers import current_owner, describe as describe_leftovers, find_kit_containers, \
    remove_dead_owner_containers
from .outcomes import Blocked
from .progress import TerminalProgress
from .rundir import FOLDER_MODE
from .towers import has_towers

SOCKET_FOLDER = "sock"
DOCKER_TIMEOUT_S = 120  # API calls (create, stop, logs) on a busy daemon can take a while


def socket_folder(run_folder: Path) -> Path:
    """<run folder>/sock, 0700: the only host folder the engine may write to."""
    folder = run_folder / SOCKET_FOLDER
    folder.mkdir(mode=FOLDER_MODE, exist_ok=True)
    os.chmod(folder, FOLDER_MODE)
    return folder


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


def _image_for_plan(request, hardware, settings) -> tuple[str, list[str]]:
    """The image ID for the plan; a replayed scan plans for another machine, so it names the reference and
    says the approval resolves it on the target."""
    image = image_or_none(request, hardware)
    if image is not None:
        return image.id, []
    return settings.image, [f"REPLAYED: image {settings.image!r} is not resolved on this machine; the approval on "
                            "the target resolves it to its sha256 ID and creates the container from that ID"]


@pytest.fixture(scope="session")
def launch_spec(request, settings, selected_gpu, hardware, kit) -> LaunchSpec:
    """The exact engine launch (argv, mounts, caps) a person approves; shown and kept in the receipt."""
    image_id, notes = _image_for_plan(request, hardware, settings)
    root = os.path.realpath(settings.model_path)
    with blocked_as_xfail():  # the launch depends on config.json: its towers decide --language-model-only
        towers = has_towers(read_config(root))
    spec = build_launch_spec(settings, selected_gpu.uuid, image_id, kit.run_folder.name,
                             str(socket_folder(kit.run_folder)), current_owner(), checkpoint_root=root,
                             towers=towers)
    if notes:
        spec = dataclasses.replace(spec, notes=[*spec.notes, *notes])
    kit.table("onegpu launch plan", spec.plan_lines())
    kit.receipt.set("launch", spec.to_json())
    return spec


def _kit_containers_on_socket(docker_facts) -> list[dict] | None:
    """find_kit_containers on a local daemon's socket without the docker SDK (plugin.docker_api); None when the
    SDK client must ask (another kind of endpoint, no daemon, or no clean answer: it then words the error)."""
    from .docker_api import LocalClient, NotAnswered

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
def gpu_lock(live_hardware, selected_gpu, kit):
    """This session's exclusive hold on the selected GPU (GPU_LOCKED names the other holder)."""
    lock = GpuLock(selected_gpu.uuid, str(kit.run_folder))
    with blocked_as_xfail():
        lock.acquire()
    kit.receipt.update("gpu_lock", gpu_uuid=selected_gpu.uuid, pid=os.getpid(), since=lock.since)
    kit.receipt.limitation(LOCK_LIMITATION)
    yield lock
    lock.release()


@pytest.fixture(scope="session")
def runtime_probe(request_files_checked, approved_plan, live_hardware, launch_spec, gpu_lock, leftovers_removed,
                  kit_docker_client, kit):
    """vLLM and torch versions, one CUDA device, every launch flag known; RUNTIME_INCOMPATIBLE otherwise.

    Refusals that need no container come first (the arguments resolve in order): a bad request file or a
    definite capacity failure starts nothing, not even this probe."""
    from .probe import facts_json as probe_json, run_probe  # the docker SDK and requests: for acting sessions only

    started = time.monotonic()
    try:
        facts, elapsed = run_probe(kit_docker_client, launch_spec)
    except Blocked as blocked:
        kit.receipt.timing("probe", time.monotonic() - started)
        kit.receipt.set("probe", {"passed": False, **blocked.as_json()})
        with blocked_as_xfail():
            raise
    kit.receipt.timing("probe", elapsed)
    kit.receipt.set("probe", {"passed": True, **probe_json(facts, elapsed)})
    return facts


@pytest.fixture(scope="session")
def engine(request, live_hardware, runtime_probe, manifest, checkpoint_unchanged, launch_spec, settings,
           kit_docker_client, sigterm_guard, kit):
    """The session's engine container, ready on its Unix socket, after custody; always stopped and removed."""
    from .engine import Engine, facts_json as boot_json  # the docker SDK and psutil: for acting sessions only

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
    kit.receipt.timing("load", eng.boot_elapsed_s)
    kit.receipt.set("boot", {"ready": True, "elapsed_s": round(eng.boot_elapsed_s, 3),
                             "facts": boot_json(handle.boot)})
    kit.show("load", boot_line(handle.boot, eng.boot_elapsed_s))
    from .fixtures_insight import record_landing  # late: pytest registers (and rewrites) that module itself

    record_landing(request, kit, handle.boot, eng.sampler)  # measured at READY: GPU free, host RAM, vs the plan
    return handle


def boot_line(boot, elapsed_s: float) -> str:
    """The load fact line: how long, and what the boot log said about weights and the KV cache."""
    parts = [f"engine ready on its Unix socket after {elapsed_s:,.1f} s"]
    if boot is None:
        return parts[0]
    if boot.load_gib is not None:
        parts.append(f"weights {boot.load_gib:,.2f} GiB loaded in {boot.load_s or 0:,.1f} s")
    if boot.cpu_offload_gib is not None:
        parts.append(f"{boot.cpu_offload_gib:,.2f} GiB offloaded to CPU")
    if boot.kv_cache_gib is not None:
        parts.append(f"KV cache {boot.kv_cache_gib:,.2f} GiB = {boot.kv_cache_tokens or 0:,} tokens")
    if boot.max_concurrency is not None:
        parts.append(f"max concurrency {boot.max_concurrency:,.2f}x at {boot.concurrency_tokens or 0:,} tokens")
    return "; ".join(parts)

