"""summary-share.md: the reduced summary safe to post publicly, built from an allow-list of receipt fields.

The real run is an approve_load session with the canary, a frozen batch and the serve window (one chat call
through the adapter with a planted prompt), on the real Docker engine with the stub engine image (GPU facts
simulated: see tests_offline/test_report.py). Then every string in its receipt is planted with a marker, and
local paths, a GPU UUID, a host name, an API key, a prompt and a response are planted where they live; none
may reach summary-share.md.
"""
from __future__ import annotations

import json
import shutil
import stat

import pytest

from plugin.report_html import SHARE_NAME, write_share_summary
from plugin.share_summary import WITHHELD, shaped, share_text
from tests_offline.test_report import PROJECT_NAME, PROMPT, partial_receipt, real_runs  # noqa: F401

MARK = "PLANTED-MARK-zx81"
HOST = "gpu-box-17.corp.example.com"
UUID = "GPU-5e1f0c3a-9b7d-4e2a-8c6f-0123456789ab"
KEY = "sk-planted-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
RESPONSE = "PLANTED-RESPONSE-the-answer-is-cobalt"


def read_json_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def secrets_of(folder) -> dict[str, str]:
    """What the real run put in its private files that must never reach the public summary."""
    receipt = json.loads((folder / "receipt.json").read_text())
    connection = json.loads((folder / "connection-private.json").read_text())
    reply = read_json_lines(folder / "responses.jsonl")[0]["response"]["body"]["choices"][0]["message"]["content"]
    return {"project path": PROJECT_NAME, "run folder": str(folder), "GPU UUID": receipt["selection"]["gpu_uuid"],
            "host name": receipt["hardware"]["host"]["hostname"],
            "machine id label": receipt["launch"]["labels"]["onegpu.owner_host"],
            "API key": connection["api_key"], "adapter URL": connection["url"], "prompt": PROMPT,
            "response": reply, "image tag": receipt["image"]["reference"], "cgroup path":
            receipt["hardware"]["host"]["cgroup"]["path"], "Docker endpoint": receipt["hardware"]["docker"]["endpoint"]}


def plant(value):
    """Every string in a JSON value with the marker and the private values appended."""
    if isinstance(value, dict):
        return {k: plant(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plant(v) for v in value]
    if isinstance(value, str):
        return f"{value} {MARK} /home/{HOST}/{UUID} {KEY} {PROMPT} {RESPONSE}"
    return value


@pytest.fixture(scope="module")
def served(real_runs):
    return real_runs.folder("serve")


def test_the_session_writes_summary_share_md_privately(served):
    path = served / SHARE_NAME
    assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert f"public summary: {path}" in (served / "terminal.txt").read_text()


def test_the_summary_holds_what_an_issue_needs(served):
    receipt = json.loads((served / "receipt.json").read_text())
    text = (served / SHARE_NAME).read_text()
    wanted = ["**Verdict: NO DEFINITE FAILURE FOUND** in phases machine, plan, canary, batch, serve",
              f"`stub-org/e2e-model` at revision `{'e' * 40}`", f"image ID: `{receipt['image']['id']}`",
              "one GPU: NVIDIA H200 140.40 GiB; no second card counted",
              "container RAM cap 9.00 GiB (swap cap equal to it)", "CPU offload 0.00 GiB", "context 8,192 tokens",
              "vLLM 0.11.0", "batch (UNSCORED): expected 4, received 4, HTTP 2xx 4",
              "serve window (UNSCORED transport record): ", f"load {receipt['timings_s']['load']:,.2f} s",
              f"serve {receipt['timings_s']['serve']:,.2f} s", "## Failures\n- none", "abstract Unix socket"]
    assert [w for w in wanted if w not in text] == [], text


def test_nothing_private_from_the_real_run_reaches_the_summary(served):
    text = (served / SHARE_NAME).read_text()
    found = {name: value for name, value in secrets_of(served).items() if value and value in text}
    assert found == {}


def test_nothing_planted_anywhere_in_a_run_folder_reaches_the_summary(served, tmp_path):
    folder = tmp_path / "planted-run"
    shutil.copytree(served, folder, ignore=shutil.ignore_patterns("sock"))
    receipt = plant(json.loads((folder / "receipt.json").read_text()))
    receipt["hardware"]["host"]["hostname"] = receipt["hardware"]["docker"]["daemon_name"] = HOST
    receipt["selection"]["gpu_uuid"] = receipt["hardware"]["gpu"]["devices"][0]["uuid"] = UUID
    receipt["serve"]["api_key"] = KEY  # as if a module had put the key where it must not be
    (folder / "receipt.json").write_text(json.dumps(receipt))
    connection = json.loads((folder / "connection-private.json").read_text())
    (folder / "connection-private.json").write_text(json.dumps({**connection, "api_key": KEY}))
    with open(folder / "responses.jsonl", "a") as fh:
        fh.write(json.dumps({"custom_id": "planted", "prompt": PROMPT, "response": {"status_code": 200, "body": {
            "choices": [{"message": {"role": "assistant", "content": RESPONSE}}]}}}) + "\n")
    settings = json.loads((folder / "settings.json").read_text())
    settings["model_path"] = f"/home/{HOST}/models/{UUID}"
    (folder / "settings.json").write_text(json.dumps(settings))

    text = write_share_summary(folder, receipt).read_text()
    for planted in (MARK, HOST, UUID, KEY, PROMPT, RESPONSE, str(folder), "/home/"):
        assert planted not in text, planted
    assert WITHHELD in text  # shaped fields that carry the marker are withheld, not copied
    assert "`stub-org/e2e-model`" in text  # from the settings copy, which still has its real model ID
    assert "expected 4, received 4" in text  # numbers pass


def test_identifiers_pass_only_in_their_shape():
    assert shaped("model_id", "XiaomiMiMo/MiMo-V2.6-Pro") == "XiaomiMiMo/MiMo-V2.6-Pro"
    assert shaped("model_id", "/srv/models/mimo") == WITHHELD
    assert shaped("image_id", "sha256:" + "a" * 64) != WITHHELD and shaped("image_id", "vllm/vllm:latest") == WITHHELD
    assert shaped("gpu_name", "NVIDIA H200") == "NVIDIA H200" and shaped("gpu_name", UUID + " /x") == WITHHELD
    assert shaped("revision", None) == "none"


def test_a_run_that_read_no_settings_still_says_what_it_found():
    text = share_text(partial_receipt(), None)
    assert "settings: not read" in text and "capacity: not computed" in text
    assert "hashing not run" in text and "**Verdict: NO DEFINITE FAILURE FOUND** in phases machine" in text
    assert share_text({}, {}).startswith("# onegpu run summary (safe to share)")  # a receipt cut short


def test_blocked_outcomes_are_shared_as_code_meaning_and_numbers_only():
    receipt = partial_receipt()
    receipt["phases"]["plan"] = {"verdict": "BLOCKED", "code": "INSUFFICIENT_VRAM", "message": f"at /home/{HOST}"}
    receipt["tests"]["t"] = {"phase": "plan", "outcome": "blocked", "code": "INSUFFICIENT_VRAM",
                             "message": f"GPU {UUID} at /home/{HOST}", "numbers": {"budget_bytes": 123,
                                                                                  "where": f"/home/{HOST}"}}
    text = share_text(receipt, None)
    assert "**Verdict: BLOCKED INSUFFICIENT_VRAM in phase plan**: the weights that must stay on the GPU" in text
    assert "BLOCKED INSUFFICIENT_VRAM (1 test(s))" in text and "budget_bytes 123" in text
    assert HOST not in text and UUID not in text
