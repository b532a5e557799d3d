"""The multi-GPU protocol for real: a TP 2 session of the tiny Qwen3-MoE on vLLM's CPU build, end to end.

vLLM's CPU backend runs tensor parallelism as it does on GPUs: one worker process per rank, the ranks talking
through torch.distributed. The seam (devkit/e2e/conftest_cpu_engine.py) gives the session two recorded cards (no
GPU here) and each rank one CPU (VLLM_CPU_OMP_THREADS_BIND); everything else is the product path: the settings'
multi_gpu block, the per-rank capacity, the launch with the parallel sizes and the NCCL environment shown, the
GPU lock of every card, the probe, custody, the boot and the canary.
"""
from __future__ import annotations

import pytest

from devkit.e2e.harness import finish, make_project, outcomes, receipt_of, session

LABEL = "2-GPU protocol (TP 2 x PP 1)"


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory):
    from devkit.real_engine.tiny_models import build

    return build(tmp_path_factory.mktemp("models"), ("qwen3-moe",))["qwen3-moe"]


def test_a_tp2_session_on_the_real_engine_loads_and_answers_the_canary(docker_client, tmp_path, real_engine_image,
                                                                       qwen3_moe):
    project = make_project(tmp_path / "p", real_engine_image, "cpu", qwen3_moe, model_id="tiny/qwen3-moe", gpus=2)
    proc = session(project, "runs/tp2", None, "--timeout=1200", mark="approve_load and canary")
    try:
        out = finish(proc, 1200)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    folder = project / "runs" / "tp2"
    receipt = receipt_of(project, "runs/tp2")
    tests = outcomes(receipt)
    assert set(tests.values()) <= {"passed", "deselected"}, (out[-6000:], receipt["tests"])
    for phase in ("machine", "plan", "probe", "custody", "load", "canary"):
        assert receipt["phases"][phase]["verdict"] == "PASSED", (phase, receipt["phases"][phase])
    # The protocol's own checks ran; the one-GPU claim is not part of this session at all.
    assert tests["test_peer_access_is_enabled_between_the_gpus"] == "passed"
    assert "test_selected_gpu_is_the_only_one_counted" not in tests
    # Every artefact names the protocol.
    selection = receipt["selection"]
    assert selection["protocol"] == LABEL and [m["rank"] for m in selection["gpu_set"]] == [0, 1]
    assert any(b.startswith(f"MULTI-GPU: {LABEL}") for b in receipt["banners"])
    assert f"{LABEL}, not a one-GPU result" in (folder / "summary-share.md").read_text()
    assert f"MULTI-GPU: {LABEL}" in (folder / "report.html").read_text()
    # The launch: vLLM's parallel sizes, its multiprocessing backend, the field's NCCL environment, both cards locked.
    launch = receipt["launch"]
    command = launch["command"]
    assert command[command.index("--tensor-parallel-size") + 1] == "2"
    assert command[command.index("--distributed-executor-backend") + 1] == "mp"
    assert launch["environment"]["NCCL_P2P_LEVEL"] == "SYS" and "|" in launch["environment"]["VLLM_CPU_OMP_THREADS_BIND"]
    assert launch["protocol"] == LABEL and len(launch["gpu_uuids"]) == 2
    assert receipt["gpu_lock"]["gpu_uuids"] == [m["uuid"] for m in selection["gpu_set"]]
    # The engine really ran two ranks: its own log says so.
    log = (folder / "engine.log").read_text()
    assert "world_size=2 rank=1" in log and "(Worker_TP1 pid=" in log, log[-3000:]
    # Capacity was judged per rank, each rank on its own card.
    gpu_weights = next(v for v in receipt["capacity"] if v["check"] == "gpu_weights")
    assert "rank 1" in gpu_weights["message"], gpu_weights
    # The canary was answered through the adapter by the two-rank engine.
    summary = receipt["canary"]["summary"]
    assert summary["answered_2xx"] == summary["expected"] >= 1, summary
    assert receipt["engine"]["end"]["removed"]
