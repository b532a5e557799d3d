"""The vLLM version a plan applies, across sessions, through the real plugin and the stub engine image.

With no vllm_version in the settings and no earlier probe of the image, a scan plans with the newest rules, ASSUMED.
An approval whose probe then finds another release (the stub told to be vLLM 0.33.0) stops with PLAN_CHANGED
before anything is hashed or loaded, naming both versions and what changes; a later scan of the same image ID
plans with the version that probe recorded. A version the settings declare is applied as declared.

WHAT IS SIMULATED: as in test_approve_e2e.py, recorded NVML answers of an H200 stand in for a GPU.
"""
from __future__ import annotations

import json

from devkit.e2e.harness import finish, make_project, outcomes, receipt_of, session


def test_a_probe_that_finds_another_release_stops_the_approval_and_teaches_the_next_plan(docker_client, tmp_path,
                                                                                        stub_tag):
    project = make_project(tmp_path / "p", stub_tag)
    out = finish(session(project, "runs/a", {"STUB_VLLM_VERSION": "0.33.0"}))
    receipt = receipt_of(project, "runs/a")
    assert receipt["capacity_accounting"]["version"]["basis"] == "ASSUMED", out
    assert receipt["kv_cache"]["block_size"] == 64  # 0.34's, assumed
    probe = receipt["phases"]["probe"]
    assert (probe["verdict"], probe["code"]) == ("BLOCKED", "PLAN_CHANGED"), (out, outcomes(receipt))
    assert "vLLM 0.34 accounting (ASSUMED)" in probe["message"] and "vLLM 0.33.0" in probe["message"]
    assert "KV block 64 -> 16 tokens" in probe["message"]
    for phase in ("custody", "load", "canary"):  # nothing was hashed or loaded under the wrong plan
        assert receipt["phases"][phase]["verdict"] in ("NOT RUN", "BLOCKED"), receipt["phases"][phase]
    assert "custody" not in receipt and "boot" not in receipt
    assert receipt["probe"]["vllm_version"] == "0.33.0"

    scan = finish(session(project, "runs/b", None, mark="scan"))
    again = receipt_of(project, "runs/b")
    version = again["capacity_accounting"]["version"]
    assert (version["basis"], version["series"], version["version"]) == ("RECORDED", "0.33", "0.33.0"), scan
    assert str(project / "runs" / "a") in version["evidence"]
    assert again["kv_cache"]["block_size"] == 16 and again["kv_cache"]["accounting"] == "vLLM 0.33 accounting"


def test_a_declared_version_is_applied_and_confirmed_by_the_probe(docker_client, tmp_path, stub_tag):
    project = make_project(tmp_path / "p", stub_tag, vllm_version="0.33.0")
    out = finish(session(project, "runs/c", {"STUB_VLLM_VERSION": "0.33.1"}))
    receipt = receipt_of(project, "runs/c")
    assert receipt["capacity_accounting"]["version"]["basis"] == "DECLARED", out
    assert receipt["phases"]["probe"]["verdict"] == "PASSED", (out, outcomes(receipt))
    assert (receipt["probe"]["accounting"]["basis"], receipt["probe"]["accounting"]["version"]) == ("PROBED",
                                                                                                    "0.33.1")
    assert json.loads((project / "s.json").read_text())["vllm_version"] == "0.33.0"
