"""Leftover kit containers: owners judged (pure), and on the real Docker engine only kit-labelled containers
whose owner is dead are removed; live owners' and foreign (unlabelled) containers are left running."""
from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from onegpu.engine.launch import (
    KIT_LABEL,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_PIDNS,
    LABEL_OWNER_START,
    owner_labels,
)
from onegpu.engine.leftovers import (
    _proc_start_ticks,
    current_owner,
    describe,
    find_kit_containers,
    judge_owner,
    remove_dead_owner_containers,
    summary,
)
from tests_offline.engine_helpers import make_spec

ME = current_owner()


def labels(pid, start, boot=ME.boot_id, ns=ME.pidns):
    return {KIT_LABEL: "1", LABEL_OWNER_PID: str(pid), LABEL_OWNER_START: str(start), LABEL_OWNER_HOST: boot,
            LABEL_OWNER_PIDNS: ns}


def ticks(table):
    return lambda pid: table.get(pid)


def test_owner_judgement():
    table = {100: 5000}
    assert judge_owner(labels(100, 5000), ME.boot_id, ME.pidns, ticks(table)).dead is False
    assert judge_owner(labels(101, 5000), ME.boot_id, ME.pidns, ticks(table)).dead is True  # gone
    reused = judge_owner(labels(100, 4999), ME.boot_id, ME.pidns, ticks(table))
    assert reused.dead is True and "reused" in reused.why
    rebooted = judge_owner(labels(100, 5000, boot="other-boot"), ME.boot_id, ME.pidns, ticks(table))
    assert rebooted.dead is True and "reboot" in rebooted.why
    elsewhere = judge_owner(labels(100, 5000, ns="pid:[1]"), ME.boot_id, ME.pidns, ticks(table))
    assert elsewhere.dead is None  # another PID namespace: not judged, never removed
    assert judge_owner({KIT_LABEL: "1"}, ME.boot_id, ME.pidns, ticks(table)).dead is None


def test_this_process_reads_as_alive():
    assert ME.start_ticks == _proc_start_ticks(ME.pid) and ME.boot_id and ME.pidns.startswith("pid:[")
    assert judge_owner(owner_labels("r", ME, "engine"), ME.boot_id, ME.pidns, _proc_start_ticks).dead is False


def _container(client, spec, case, extra_labels, start):
    kwargs = spec.create_kwargs()
    kwargs.update(name=f"{spec.name}-{uuid.uuid4().hex[:6]}", entrypoint=["python3"],
                  command=["-c", "import time; time.sleep(120)"],
                  labels={"onegpu.test": "1", "onegpu.test_case": case, **extra_labels})
    container = client.containers.create(**kwargs)
    if start:
        container.start()
    return container


def test_only_dead_owners_kit_containers_are_removed(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    case = uuid.uuid4().hex
    gone = subprocess.Popen(["sleep", "60"])
    gone_ticks = _proc_start_ticks(gone.pid)
    gone.kill()
    gone.wait()
    made = {
        "dead": _container(docker_client, spec, case, labels(gone.pid, gone_ticks), start=True),
        "reused": _container(docker_client, spec, case, labels(ME.pid, ME.start_ticks + 1), start=False),
        "alive": _container(docker_client, spec, case, labels(ME.pid, ME.start_ticks), start=True),
        "foreign": _container(docker_client, spec, case, {}, start=True),  # no kit label
    }
    try:
        listed = {r["name"] for r in find_kit_containers(docker_client, {"onegpu.test_case": case})}
        assert listed == {made[k].name for k in ("dead", "reused", "alive")}  # the foreign one is not even listed
        rows = remove_dead_owner_containers(docker_client, {"onegpu.test_case": case})
        by_name = {r["name"]: r for r in rows}
        assert by_name[made["dead"].name]["removed"] and by_name[made["reused"].name]["removed"]
        assert not by_name[made["alive"].name]["removed"]
        for key in ("dead", "reused"):
            with pytest.raises(Exception, match="404|No such container"):
                docker_client.containers.get(made[key].id)
        for key in ("alive", "foreign"):
            assert docker_client.containers.get(made[key].id).status == "running"
        lines = describe(rows, acted=True)
        assert any("is gone; removed" in line for line in lines) and any("is alive; left alone" in line for line in lines)
        assert summary(rows).startswith("2 kit container(s) of dead sessions removed")
    finally:
        for container in made.values():
            try:
                container.remove(force=True)
            except Exception:  # already removed by the code under test
                pass


def test_scan_only_reports(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    case = uuid.uuid4().hex
    dead = _container(docker_client, spec, case, labels(2**22 + 7, 1), start=False)  # pid above pid_max: gone
    try:
        (row,) = find_kit_containers(docker_client, {"onegpu.test_case": case})
        assert row["owner_dead"] is True and "would be removed" in describe([row], acted=False)[0]
        time.sleep(0.1)
        assert docker_client.containers.get(dead.id).status == "created"
    finally:
        dead.remove(force=True)


def test_the_direct_socket_listing_reads_what_the_sdk_reads(docker_client, tmp_path, stub_image, monkeypatch):
    """A scan lists kit containers on a local socket without the docker SDK (onegpu.machine.docker_api): same rows."""
    from onegpu.machine.docker_api import LocalClient

    monkeypatch.delenv("DOCKER_HOST", raising=False)
    spec = make_spec(tmp_path, stub_image)
    case = uuid.uuid4().hex
    made = [_container(docker_client, spec, case, labels(2**22 + 7, 1), start=False),
            _container(docker_client, spec, case, labels(ME.pid, ME.start_ticks), start=True),
            _container(docker_client, spec, case, {}, start=False)]
    try:
        direct = LocalClient("unix:///var/run/docker.sock", 30)
        assert find_kit_containers(direct, {"onegpu.test_case": case}) == \
            find_kit_containers(docker_client, {"onegpu.test_case": case})
        assert len(find_kit_containers(direct, {"onegpu.test_case": case})) == 2
        mine = {"label": [f"onegpu.test_case={case}"]}  # other sessions' containers may come and go meanwhile
        seen = [(c.id, c.name, c.status, c.labels) for c in direct.containers.list(all=True, filters=mine)]
        assert seen == [(c.id, c.name, c.status, c.labels)
                        for c in docker_client.containers.list(all=True, filters=mine)]
        assert len(seen) == 3
    finally:
        for container in made:
            container.remove(force=True)


def test_a_sweep_survives_containers_removed_while_it_runs(docker_client, tmp_path, stub_image):
    """Another session removing its own containers mid-sweep must not break this session's start."""
    import threading

    spec = make_spec(tmp_path, stub_image)
    case = uuid.uuid4().hex
    made = [_container(docker_client, spec, case, labels(ME.pid, ME.start_ticks), start=False) for _ in range(12)]
    remover = threading.Thread(target=lambda: [c.remove(force=True) for c in made])
    try:
        remover.start()
        while remover.is_alive():
            rows = remove_dead_owner_containers(docker_client, {"onegpu.test_case": case})
            assert all(not r["removed"] for r in rows)  # every owner here is alive: nothing is removed by the sweep
    finally:
        remover.join()
        for container in made:
            try:
                container.remove(force=True)
            except Exception:  # the remover got it
                pass
