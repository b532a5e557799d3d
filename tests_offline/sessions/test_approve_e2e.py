"""`pytest -m approve_load --settings s.json` end to end, through the real plugin and the real phase tests, on
the real Docker engine with the stub engine image; plus SIGTERM and SIGKILL of such a session mid-boot.

WHAT IS SIMULATED: this machine has no NVIDIA GPU. The throwaway project's tests_hw/conftest.py
(devkit/e2e/conftest_simulated_gpu.py) replaces the GPU facts with recorded NVML answers of an H200
and rebuilds the launch plan without the GPU device request. Because of that one change, the plan test that
demands the GPU device request is deselected here (it would rightly fail); everything else runs as an
operator's approval does.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import time
import uuid
from pathlib import Path

import pytest

from devkit.e2e.harness import add_batch, finish, make_project, outcomes, receipt_of, session, wait_for

# The throwaway project and its sessions are devkit/e2e/harness.py's (the stub engine seam); the image
# comes from the `stub_tag` fixture of tests_offline/conftest.py.


def kit_containers(client, run_id: str) -> list:
    # sparse: one list call, no inspect per container (a container removed between the two would raise NotFound)
    return client.containers.list(all=True, sparse=True, filters={"label": f"onegpu.run_id={run_id}"})


def test_approve_load_end_to_end(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    started = time.monotonic()
    out = finish(session(project, "runs/e2e", {"STUB_BOOT_DELAY_S": "1.5"}))
    elapsed = time.monotonic() - started
    receipt = receipt_of(project, "runs/e2e")
    folder = project / "runs" / "e2e"
    tests = outcomes(receipt)
    assert receipt["phases"]["probe"]["verdict"] == "PASSED", (out, tests)
    assert receipt["phases"]["load"]["verdict"] == "PASSED", (out, tests)
    assert receipt["probe"]["passed"] and receipt["probe"]["vllm_version"] == "0.34.0"
    # the plan assumed the newest rules (no vllm_version in the settings, no earlier probe): the probe confirms them
    assert receipt["capacity_accounting"]["version"]["basis"] == "ASSUMED"
    assert (receipt["probe"]["accounting"]["basis"], receipt["probe"]["accounting"]["series"]) == ("PROBED", "0.34")
    assert receipt["probe"]["missing_flags"] == [] and "--uds" in receipt["probe"]["flags_checked"]
    boot = receipt["boot"]
    assert boot["ready"] and boot["facts"]["server_started"] and boot["facts"]["kv_cache_tokens"] > 0
    assert boot["facts"]["vllm_version"] == "0.34.0" and boot["elapsed_s"] >= 1.5
    # 0.34's after-warmup lines reach the landing (the stub's numbers are its own: they describe no model)
    assert boot["facts"]["kv_extended_blocks"] and receipt["landing"]["kv_after_warmup"]["rows"]
    assert receipt["timings_s"]["probe"] > 0 and receipt["timings_s"]["load"] >= 1.5
    assert receipt["engine"]["end"]["removed"] and receipt["engine"]["end"]["state_at_end"]["status"] == "running"
    assert kit_containers(docker_client, "e2e") == []  # engine and probe containers are gone
    log = folder / "engine.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and "Starting vLLM server on" in log.read_text()
    samples = (folder / "samples.jsonl").read_text().splitlines()
    assert samples and receipt["samples"]["count"] == len(samples)
    assert receipt["launch"]["gpu_uuid"] is None and receipt["launch"]["network_mode"] == "none"
    recorded = json.loads((project / "nvml-record.json").read_text())["raw"]["devices"][0]
    assert receipt["gpu_lock"]["gpu_uuid"] == recorded["uuid"] and receipt["selection"]["gpu_name"] == "NVIDIA H200"
    assert any("GPU SIMULATED" in b for b in receipt["banners"])
    assert "engine ready on its Unix socket" in out and "onegpu launch plan" in out
    print(f"end-to-end approve_load session: {elapsed:.1f} s; tests: {tests}")


def test_a_boot_failure_xfails_the_load_with_its_code_and_keeps_the_evidence(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    out = finish(session(project, "runs/oom", {"STUB_FAIL": "load_oom"}))
    receipt = receipt_of(project, "runs/oom")
    load = receipt["phases"]["load"]
    assert load["verdict"] == "BLOCKED" and load["code"] == "LOAD_OOM", (out, load)
    assert receipt["phases"]["canary"]["code"] == "LOAD_OOM"  # everything downstream, with the same reason
    assert receipt["boot"]["ready"] is False and receipt["boot"]["code"] == "LOAD_OOM"
    assert receipt["boot"]["failure"]["exit_code"] == 1 and receipt["boot"]["failure"]["log_tail"]
    assert "CUDA out of memory" in (project / "runs" / "oom" / "engine.log").read_text()
    assert receipt["engine"]["end"]["removed"] and kit_containers(docker_client, "oom") == []
    assert "XFAIL" in out and "BLOCKED LOAD_OOM" in out


def test_pytest_timeout_mid_boot_still_removes_the_container(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    out = finish(session(project, "runs/slow", {"STUB_BOOT_DELAY_S": "120"}, "--timeout", "6"))
    receipt = receipt_of(project, "runs/slow")
    load = [e for n, e in receipt["tests"].items() if n.endswith("test_engine_is_ready_within_the_boot_deadline")][0]
    assert load["outcome"] == "interrupted" and load["when"] == "setup" and "Timeout (>6.0s) from pytest-timeout" in out
    assert receipt["phases"]["load"]["verdict"] == "INTERRUPTED" and receipt["phases"]["canary"]["verdict"] == "INTERRUPTED"
    assert receipt["engine"]["end"]["removed"] and receipt["engine"]["end"]["state_at_end"]["status"] == "running"
    assert kit_containers(docker_client, "slow") == []


def engine_container(client, run_id: str):
    found = client.containers.list(filters={"label": [f"onegpu.run_id={run_id}", "onegpu.role=engine"],
                                            "status": "running"})
    return found[0] if found else None


def test_sigterm_mid_boot_removes_the_container_at_once_and_a_second_session_is_gpu_locked(
        docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    proc = session(project, "runs/a", {"STUB_BOOT_DELAY_S": "120"})
    try:
        container = wait_for(lambda: engine_container(docker_client, "a"), 120, "the engine container to run")
        # While A boots, a second session on the same GPU is refused, naming A.
        finish(session(project, "runs/b"))
        second = receipt_of(project, "runs/b")
        lock_test = [e for n, e in second["tests"].items() if n.endswith("test_this_session_holds_its_gpus_alone")]
        assert lock_test[0]["code"] == "GPU_LOCKED" and f"pid {proc.pid}" in lock_test[0]["message"]
        assert second["phases"]["load"]["verdict"] == "BLOCKED" and kit_containers(docker_client, "b") == []
        assert engine_container(docker_client, "a") is not None  # B touched nothing of A's
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: not kit_containers(docker_client, "a"), 20, "the engine container to be removed")
        gone_after = time.monotonic() - signalled
        finish(proc, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    receipt = receipt_of(project, "runs/a")
    assert receipt["engine"]["end"]["removed"] and receipt["engine"]["container_id"] == container.id
    assert proc.returncode != 0
    assert gone_after < 15, gone_after
    print(f"container removed {gone_after:.2f} s after SIGTERM")


def foreign_container(client, project: Path):
    """A running container the kit did not create, from the same image: no kit label."""
    foreign = client.containers.create(
        json.loads((project / "s.json").read_text())["image"],
        entrypoint=["python3"], command=["-c", "import time; time.sleep(300)"], network_mode="none",
        labels={"onegpu.test": "1", "onegpu.test_case": uuid.uuid4().hex}, name=f"foreign-{uuid.uuid4().hex[:8]}")
    foreign.start()
    return foreign


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def ready_window(folder: Path) -> bool:
    try:
        return json.loads((folder / "connection-private.json").read_text()).get("state") == "READY"
    except (FileNotFoundError, ValueError):
        return False


# Where a session is SIGKILLed: mid-boot, mid-batch (3 of 40 answered), and with its serve window READY.
KILL_POINTS = {
    "load": ({"STUB_BOOT_DELAY_S": "120"}, "approve_load", 0, lambda folder: False),
    "batch": ({"STUB_RESPONSE_DELAY_S": "0.3"}, "approve_load", 40, lambda folder: answered(folder) >= 3),
    "window": ({}, "approve_load and serve", 0, ready_window),
}


@pytest.mark.parametrize("stage", sorted(KILL_POINTS))
def test_sigkill_the_reaper_removes_the_engine_within_15_s_and_says_closed(docker_client, tmp_path, stub_tag, stage):
    engine_env, mark, batch, reached = KILL_POINTS[stage]
    project = make_project(tmp_path / "p", stub_tag)
    extra = add_batch(project, batch) if batch else []
    run = f"kill-{stage}"
    folder = project / "runs" / run
    foreign = foreign_container(docker_client, project)
    proc = session(project, f"runs/{run}", engine_env, *extra, mark=mark)
    try:
        container = wait_for(lambda: engine_container(docker_client, run), 120, "the engine container to run")
        if stage != "load":
            wait_for(lambda: reached(folder), 120, f"the session to reach its {stage}")
        proc.send_signal(signal.SIGKILL)  # nothing of the session runs any more
        killed = time.monotonic()
        proc.wait(timeout=30)
        wait_for(lambda: not kit_containers(docker_client, run), 15, "the engine container to be removed")
        gone_after = time.monotonic() - killed
        # The reaper writes its evidence just after the removal: wait for it rather than read a moment early.
        receipt = wait_for(lambda: (lambda r: r if "reaper" in r else None)(receipt_of(project, f"runs/{run}")), 10,
                           "the reaper's CLOSED in the receipt")
        end = receipt["engine"]["end"]
        # Another kit session sharing this daemon may sweep the dead owner's container first: both are fine.
        assert end["removed"] and end["removed_by"] in ("reaper", "someone else before the reaper (it was gone)")
        assert receipt["reaper"]["closed"] and "pid %d" % proc.pid in receipt["reaper"]["reason"]
        assert receipt["verdict"].startswith("INTERRUPTED: the session never finished")
        assert receipt["engine"]["container_id"] == container.id
        if stage == "window":
            doc = json.loads((folder / "connection-private.json").read_text())
            assert doc["state"] == "CLOSED" and "pid %d" % proc.pid in doc["closed_reason"]
            serve = receipt["serve"]  # the record says what the connection file says, never READY of a dead window
            assert serve["state"] == "CLOSED" and serve["closed_reason"] == doc["closed_reason"]
            assert serve["closed_at"] == doc["closed_at"] and serve["engine_end"] == end
        wait_for(lambda: not pid_alive(receipt["engine"]["reaper_pid"]), 10, "the reaper to exit")
        foreign.reload()
        assert foreign.status == "running"  # never touched
        print(f"{stage}: container removed {gone_after:.2f} s after SIGKILL")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for c in kit_containers(docker_client, run) + [foreign]:
            c.remove(force=True)


def test_a_reaper_exits_with_its_container_and_a_normal_session_releases_it(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    out = finish(session(project, "runs/normal"))
    receipt = receipt_of(project, "runs/normal")
    assert receipt["phases"]["load"]["verdict"] == "PASSED", out
    assert "reaper" not in receipt and receipt["engine"]["end"]["removed"]
    assert not pid_alive(receipt["engine"]["reaper_pid"])


def test_when_the_reaper_is_killed_too_the_next_session_removes_the_leftover(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    for attempt in (1, 2):
        run = f"killed{attempt}"
        proc = session(project, f"runs/{run}", {"STUB_BOOT_DELAY_S": "120"})
        foreign = None
        try:
            container = wait_for(lambda: engine_container(docker_client, run), 120, "the engine container to run")
            reaper_pid = receipt_of(project, f"runs/{run}")["engine"]["reaper_pid"]
            os.kill(reaper_pid, signal.SIGKILL)  # both gone: the machine's own last line of defence is next
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            time.sleep(1)
            assert docker_client.containers.get(container.id).status == "running"  # left behind
            foreign = foreign_container(docker_client, project)
            finish(session(project, f"runs/next{attempt}"))
            receipt = receipt_of(project, f"runs/next{attempt}")
            rows = {r["name"]: r for r in receipt["leftovers"]["containers"]}
            if container.name not in rows and kit_containers(docker_client, run) == [] and attempt == 1:
                continue  # another kit session on this machine started in between and swept it first: retry once
            assert rows[container.name]["removed"] and rows[container.name]["owner_dead"], rows
            assert "is gone" in rows[container.name]["why"]
            assert foreign.name not in rows
            assert kit_containers(docker_client, run) == []
            foreign.reload()
            assert foreign.status == "running"  # never touched
            assert receipt["phases"]["load"]["verdict"] == "PASSED"
            assert any(container.name in line for line in receipt["shown"]["probe"])
            return
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for c in kit_containers(docker_client, run) + ([foreign] if foreign else []):
                c.remove(force=True)


def answered(folder: Path) -> int:
    try:
        return (folder / "responses.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def test_sigterm_mid_batch_reads_interrupted_with_what_was_answered_everywhere(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    extra = add_batch(project, 50)
    proc = session(project, "runs/cut", {"STUB_RESPONSE_DELAY_S": "0.2"}, *extra)
    folder = project / "runs" / "cut"
    try:
        wait_for(lambda: answered(folder) >= 10, 180, "10 batch answers")
        proc.send_signal(signal.SIGTERM)
        out = finish(proc, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    receipt = receipt_of(project, "runs/cut")
    done = answered(folder)
    assert 10 <= done < 50
    batch = receipt["phases"]["batch"]
    assert batch["verdict"] == "INTERRUPTED", (out, batch)
    assert batch["progress"] == {"done": done, "of": 50, "unit": "answered"}
    assert batch["message"] == f"{done} of 50 answered; cut by SIGTERM while this test ran"
    assert receipt["phases"]["canary"]["verdict"] == "PASSED"
    assert receipt["verdict"].startswith(f"INTERRUPTED in phase batch: {done} of 50 answered")
    assert f"  batch    INTERRUPTED: {done} of 50 answered" in out and "batch    PASSED" not in out
    share = (folder / "summary-share.md").read_text()
    assert f"**Verdict: INTERRUPTED in phase batch** ({done} of 50 answered)" in share
    assert "NO DEFINITE FAILURE" not in share and "| batch | PASSED" not in share
    assert f"INTERRUPTED in phase batch: {done} of 50 answered" in (folder / "report.html").read_text()
    assert receipt["engine"]["end"]["removed"] and kit_containers(docker_client, "cut") == []
