"""`pytest -m approve_load --settings s.json` end to end, through the real plugin and the real phase tests, on
the real Docker engine with the stub engine image; plus SIGTERM and SIGKILL of such a session mid-boot.

WHAT IS SIMULATED: this machine has no NVIDIA GPU. The throwaway project's tests_hw/conftest.py
(tests_offline/e2e/conftest_simulated_gpu.py) replaces the GPU facts with recorded NVML answers of an H200
and rebuilds the launch plan without the GPU device request. Because of that one change, the plan test that
demands the GPU device request is deselected here (it would rightly fail); everything else runs as an
operator's approval does.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests_offline.synth import SYNTHETIC_METADATA, write_checkpoint

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
NVML_RECORD = HERE / "data" / "nvml" / "h200-nvidia-smi-q.json"
GPU_ELEMENT_TEST = "tests_hw/test_2_plan_launch.py::test_launch_plan_has_every_element_of_the_engine_container"
LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_size": 512, "intermediate_size": 1024,
         "vocab_size": 4096, "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}


def llama_tensors() -> dict:
    t = {"model.embed_tokens.weight": ("BF16", [4096, 512]), "model.norm.weight": ("BF16", [512]),
         "lm_head.weight": ("BF16", [4096, 512])}
    for i in range(2):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", [512, 512]), ("self_attn.k_proj", [128, 512]),
                            ("self_attn.v_proj", [128, 512]), ("self_attn.o_proj", [512, 512]),
                            ("mlp.gate_proj", [1024, 512]), ("mlp.up_proj", [1024, 512]),
                            ("mlp.down_proj", [512, 1024])):
            t[p + name + ".weight"] = ("BF16", shape)
        t[p + "input_layernorm.weight"] = ("BF16", [512])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [512])
    return t


@pytest.fixture(scope="module")
def stub_tag(docker_client) -> str:
    from tests_offline.stub_engine.build import ensure_stub_image, stub_tag

    ensure_stub_image(docker_client)
    return stub_tag()


def make_project(root: Path, stub_tag: str) -> Path:
    """A kit project like the repo root: pytest.ini, conftest.py, the real tests_hw, the simulation conftest."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "pytest.ini", root / "pytest.ini")
    shutil.copy(REPO / "conftest.py", root / "conftest.py")
    shutil.copytree(REPO / "tests_hw", root / "tests_hw", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(HERE / "e2e" / "conftest_simulated_gpu.py", root / "tests_hw" / "conftest.py")
    ckpt = write_checkpoint(root / "ckpt", LLAMA, llama_tensors(), shards=2, metadata=SYNTHETIC_METADATA)
    settings = {"schema": "onegpu/settings@1", "model_id": "stub-org/e2e-model", "model_revision": "e" * 40,
                "model_path": str(ckpt), "image": stub_tag, "gpu": 0, "context_tokens": 8192,
                "prefill_chunk_tokens": 2048, "cpu_offload_gib": 0, "container_ram_gib": 9,
                "host_headroom_gib": 1, "deadline_s": 600, "boot_deadline_s": 60, "shm_gib": 0.25,
                "pids_limit": 512}
    (root / "s.json").write_text(json.dumps(settings))
    # The recorded H200 answers, under a GPU UUID of this project's own: concurrent test runs on one machine
    # would otherwise share the per-GPU lock (which then rightly refuses the second one).
    record = json.loads(NVML_RECORD.read_text())
    record["raw"]["devices"][0]["uuid"] = f"GPU-{uuid.uuid4()}"
    (root / "nvml-record.json").write_text(json.dumps(record))
    return root


def session(project: Path, out: str, stub_env: dict | None = None, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "ONEGPU_E2E_NVML_RECORD": str(project / "nvml-record.json"),
           "ONEGPU_E2E_STUB_ENV": json.dumps(stub_env or {})}
    env.pop("PYTEST_ADDOPTS", None)
    argv = [sys.executable, "-m", "pytest", "-m", "approve_load", "--settings", "s.json", "--out", out,
            "--deselect", GPU_ELEMENT_TEST, "-p", "no:randomly", "-rA", *extra]
    return subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout_s: float = 300) -> str:
    out, _ = proc.communicate(timeout=timeout_s)
    return out


def receipt_of(project: Path, out: str) -> dict:
    return json.loads((project / out / "receipt.json").read_text())


def outcomes(receipt: dict) -> dict:
    return {nodeid.split("::")[-1]: entry["outcome"] for nodeid, entry in receipt["tests"].items()}


def kit_containers(client, run_id: str) -> list:
    return client.containers.list(all=True, filters={"label": f"onegpu.run_id={run_id}"})


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
    assert receipt["probe"]["passed"] and receipt["probe"]["vllm_version"] == "0.11.0"
    assert receipt["probe"]["missing_flags"] == [] and "--uds" in receipt["probe"]["flags_checked"]
    boot = receipt["boot"]
    assert boot["ready"] and boot["facts"]["server_started"] and boot["facts"]["kv_cache_tokens"] > 0
    assert boot["facts"]["vllm_version"] == "0.11.0" and boot["elapsed_s"] >= 1.5
    assert receipt["timings_s"]["probe"] > 0 and receipt["timings_s"]["load"] >= 1.5
    assert receipt["engine"]["end"]["removed"] and receipt["engine"]["end"]["state_at_end"]["status"] == "running"
    assert kit_containers(docker_client, "e2e") == []  # engine and probe containers are gone
    log = folder / "engine.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and "Starting vLLM API server" in log.read_text()
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


def wait_for(predicate, timeout_s: float, what: str, step_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


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
        lock_test = [e for n, e in second["tests"].items() if n.endswith("test_this_session_holds_the_selected_gpu_alone")]
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


def sigkill_then_next_session(docker_client, project, attempt: int):
    """SIGKILL a session mid-boot, start a foreign container, run the next session; (killed, foreign, receipt)."""
    proc = session(project, f"runs/killed{attempt}", {"STUB_BOOT_DELAY_S": "120"})
    try:
        container = wait_for(lambda: engine_container(docker_client, f"killed{attempt}"), 120,
                             "the engine container to run")
        proc.send_signal(signal.SIGKILL)  # nothing of the session runs any more
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    time.sleep(1)
    assert docker_client.containers.get(container.id).status == "running"  # left behind
    # A container the kit did not create, from the same image: no kit label.
    foreign = docker_client.containers.create(
        json.loads((project / "s.json").read_text())["image"],
        entrypoint=["python3"], command=["-c", "import time; time.sleep(300)"], network_mode="none",
        labels={"onegpu.test": "1", "onegpu.test_case": uuid.uuid4().hex}, name=f"foreign-{uuid.uuid4().hex[:8]}")
    foreign.start()
    finish(session(project, f"runs/next{attempt}"))
    return container, foreign, receipt_of(project, f"runs/next{attempt}")


def test_sigkill_leaves_the_container_for_the_next_session_which_removes_it(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    for attempt in (1, 2):
        container, foreign, receipt = sigkill_then_next_session(docker_client, project, attempt)
        try:
            rows = {r["name"]: r for r in receipt["leftovers"]["containers"]}
            if container.name not in rows and kit_containers(docker_client, f"killed{attempt}") == [] and attempt == 1:
                continue  # another kit session on this machine started in between and swept it first: retry once
            assert rows[container.name]["removed"] and rows[container.name]["owner_dead"], rows
            assert "is gone" in rows[container.name]["why"]
            assert foreign.name not in rows
            assert kit_containers(docker_client, f"killed{attempt}") == []
            foreign.reload()
            assert foreign.status == "running"  # never touched
            assert receipt["phases"]["load"]["verdict"] == "PASSED"
            assert any(container.name in line for line in receipt["shown"]["probe"])
            return
        finally:
            for c in kit_containers(docker_client, f"killed{attempt}") + [foreign]:
                c.remove(force=True)


def add_batch(project: Path, n: int) -> list[str]:
    """A frozen request file of n chat requests and its protocol in the project; the session's extra options."""
    from tests_offline.request_corpus import chat_line, jsonl, legacy_protocol

    model = json.loads((project / "s.json").read_text())["model_id"]
    requests = jsonl(*(chat_line(f"r{i:02d}", model=model, temperature=i / 100) for i in range(n)))
    (project / "r.jsonl").write_bytes(requests)
    protocol = legacy_protocol(context=json.loads((project / "s.json").read_text())["context_tokens"],
                               requests_sha256=hashlib.sha256(requests).hexdigest())
    (project / "p.json").write_text(json.dumps(protocol))
    return ["--requests=r.jsonl", "--protocol=p.json"]


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
