"""The kit-project harness's command line, run as a contributor runs it: `python -m devkit.e2e.harness run` builds a
throwaway project around the stub engine, runs an approved session with a small frozen batch in it, and prints the
session's command line and the run folder's verdict."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from tests_offline.paths import REPO_ROOT


def test_run_builds_a_project_and_runs_an_approved_batch_session(docker_client, tmp_path):
    project = tmp_path / "kitp"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "devkit.e2e.harness", "run", str(project), "--engine", "stub",
                           "--batch", "3"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shown = done.stdout.splitlines()
    assert shown[0].startswith(f"cd {project} && ") and "approve_load" in shown[0] and "--requests" in shown[0]
    receipt = json.loads((project / "runs/by-hand/receipt.json").read_text())
    assert shown[-1] == str(receipt["verdict"])
    batch = {node: t["outcome"] for node, t in receipt["tests"].items() if node.startswith("tests_hw/test_7_batch.py")}
    assert batch and set(batch.values()) == {"passed"}, batch
    assert receipt["batch"]["request_file"]["requests"] == 3, receipt["batch"]


def test_gpus_2_runs_the_multi_gpu_protocol_through_every_acting_phase(docker_client, tmp_path):
    """`--gpus 2`: two recorded cards and the TP 2 protocol; the stub engine accepts the parallel flags as vLLM
    0.32 declares them, and the session locks both cards."""
    project = tmp_path / "kitp"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "devkit.e2e.harness", "run", str(project), "--engine", "stub",
                           "--gpus", "2"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    receipt = json.loads((project / "runs/by-hand/receipt.json").read_text())
    assert receipt["selection"]["protocol"] == "2-GPU protocol (TP 2 x PP 1)"
    assert [p["verdict"] for p in receipt["phases"].values()][:6] == ["PASSED"] * 6, receipt["phases"]
    assert len(receipt["gpu_lock"]["gpu_uuids"]) == 2 and "--disable-custom-all-reduce" in receipt["launch"]["command"]
