"""summary-share.md: the reduced summary safe to post publicly, built from an allow-list of receipt fields.

The real run is an approve_load session with the canary, a frozen batch and the serve window (one chat call
through the adapter with a planted prompt), on the real Docker engine with the stub engine image (GPU facts
simulated: see tests_offline/report/test_report.py), with the proposal, calibration and operator-supplied score of a
real scan (tests_offline/report/test_report_insight.py) added to its receipt. Then every string in its receipt is
planted with a marker, and local paths, a GPU UUID, a host name, an API key, a prompt and a response are planted
where they live; none may reach summary-share.md.
"""
from __future__ import annotations

import json
import shutil
import stat

import pytest

from onegpu.record.receipt import ReceiptShapeError, record_of
from onegpu.report.page import SHARE_NAME, write_share_summary
from onegpu.report.share_summary import WITHHELD, shaped, share_text
from tests_offline.report_sessions import PROJECT_NAME, PROMPT, partial_receipt

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
    wanted = ["**Verdict: NO DEFINITE FAILURE FOUND** in phases machine, plan, probe, custody, load, canary, batch, serve",
              f"`stub-org/e2e-model` at revision `{'e' * 40}`", f"image ID: `{receipt['image']['id']}`",
              "one GPU: NVIDIA H200 140.40 GiB; no second card counted",
              "container RAM cap 9.00 GiB (swap cap equal to it)", "CPU offload 0.00 GiB", "context 8,192 tokens",
              "vLLM 0.34.0", "batch (UNSCORED): expected 4, received 4, HTTP 2xx 4",
              "serve window (UNSCORED transport record): ", f"load {receipt['timings_s']['load']:,.2f} s",
              f"serve {receipt['timings_s']['serve']:,.2f} s", "## Failures\n- none", "abstract Unix socket",
              "- GPU-resident weights (bytes): measured 4.00 GiB vs projected", "- GPU free after boot (bytes): "
              "not measured; projected", "- free-memory floor 2.00 GiB ASSUMED: not checked (GPU free memory not "
              "measured)", "- checkpoint consistency: 8 check(s), 0 warning(s), 1 unknown (tied_embeddings)",
              "- no proposal (no --propose request in this session)", "- none given (the kit never computes a score)"]
    assert [w for w in wanted if w not in text] == [], text


def test_nothing_private_from_the_real_run_reaches_the_summary(served):
    text = (served / SHARE_NAME).read_text()
    found = {name: value for name, value in secrets_of(served).items() if value and value in text}
    assert found == {}


def test_nothing_planted_anywhere_in_a_run_folder_reaches_the_summary(served, insight_runs, tmp_path):
    folder = tmp_path / "planted-run"
    shutil.copytree(served, folder, ignore=shutil.ignore_patterns("sock"))
    receipt = json.loads((folder / "receipt.json").read_text())
    scan = insight_runs.receipt("insight")
    assert receipt["landing"] and receipt["consistency"]  # the approval's own; the scan's three are added
    receipt.update({k: scan[k] for k in ("proposal", "calibration", "operator_score")})
    model_id = receipt["settings"]["values"]["model_id"]
    receipt = plant(receipt)
    receipt["settings"]["values"]["model_id"] = model_id  # one clean field: a shaped value that holds passes
    receipt["hardware"]["host"]["hostname"] = receipt["hardware"]["docker"]["daemon_name"] = HOST
    receipt["selection"]["gpu_uuid"] = receipt["hardware"]["gpu"]["devices"][0]["uuid"] = UUID
    receipt["serve"]["api_key"] = KEY  # as if a module had put the key where it must not be
    with pytest.raises(ReceiptShapeError, match="api_key"):  # the record refuses a key no type declares
        record_of(receipt)
    del receipt["serve"]["api_key"]
    receipt["serve"]["note"] = KEY  # a declared free-text field holds it instead: still never shared
    receipt["settings"]["values"]["model_path"] = f"/home/{HOST}/models/{UUID}"
    (folder / "receipt.json").write_text(json.dumps(receipt))
    connection = json.loads((folder / "connection-private.json").read_text())
    (folder / "connection-private.json").write_text(json.dumps({**connection, "api_key": KEY}))
    with open(folder / "responses.jsonl", "a") as fh:
        fh.write(json.dumps({"custom_id": "planted", "prompt": PROMPT, "response": {"status_code": 200, "body": {
            "choices": [{"message": {"role": "assistant", "content": RESPONSE}}]}}}) + "\n")

    text = write_share_summary(folder, record_of(receipt)).read_text()
    for planted in (MARK, HOST, UUID, KEY, PROMPT, RESPONSE, str(folder), "/home/"):
        assert planted not in text, planted
    assert WITHHELD in text  # shaped fields that carry the marker are withheld, not copied
    assert "`stub-org/e2e-model`" in text  # from the receipt's settings
    assert "expected 4, received 4" in text  # numbers pass
    assert "= 0.8731 on (withheld" in text and "over 1,319 samples" in text  # the score's number, not its words
    boot_log = scan["calibration"]["estimates"]["boot_log_bytes"]
    assert f"the larger of vLLM's boot-log accounting {boot_log / 2**30:,.2f} GiB" in text
    assert "CALIBRATED FROM run (withheld" in text


def planted_insight(receipt: dict, folder) -> dict:
    """The five sections with a private value in every free-text field where one could end up."""
    where = f"/home/{HOST}/{UUID}"
    p, cal = receipt["proposal"], receipt["calibration"]
    p.update(path=f"{folder}/settings-proposed.json", warnings=[f"{where} {KEY}"], unknown=[where],
             derivation=[{"quantity": HOST, "value": UUID, "derivation": where}])
    p["settings"]["model_path"], p["settings"]["image"] = where, f"{HOST}:5000/engine:{KEY}"
    p["reserve"]["calibrated_from"] = f"{where}/run"
    cal.update(folder=where, how=PROMPT, rows=[RESPONSE], warnings=[where], image_id=KEY, gpu_name=UUID,
               run_id=f"{where}/stub-ready-8k")
    receipt["operator_score"].update(file=f"{where}/score.json", mismatches=[f"{HOST} {KEY}"])
    record = receipt["operator_score"]["record"]
    # The score's words are the operator's, shared only in a short path-free shape: a prompt or a response pasted
    # there (a sentence with its question mark, several lines) does not fit it.
    record.update(benchmark=where, metric=f"{PROMPT}: which metal is blue?\n{RESPONSE}", notes=KEY,
                  scored_run=f"{HOST}/run")
    record["scorer"] = {"name": f"scorer at {where}", "revision": f"{UUID}/{KEY}"}
    receipt["consistency"]["checks"] += [{"check": "ignored_layers", "status": "warning", "message": where},
                                         {"check": f"{HOST} {UUID}", "status": "warning", "message": PROMPT}]
    landing = receipt["landing"]
    landing["floor"]["why"] = landing["measured"]["gpu_not_measured"] = f"NVML error on {UUID} at {HOST}"
    landing["errors"][0].update(why=where, quantity=f"{HOST} weights")
    landing["warnings"] = [where]
    return receipt


def test_private_values_planted_in_the_advice_and_measurements_never_reach_the_summary(insight_runs, served):
    scan, approval = insight_runs.receipt("insight"), json.loads((served / "receipt.json").read_text())
    receipt = planted_insight({**scan, "landing": approval["landing"]}, insight_runs.folder("insight"))
    text = share_text(record_of(receipt))
    for planted in (HOST, UUID, KEY, PROMPT, RESPONSE, "/home/", str(insight_runs.folder("insight"))):
        assert planted not in text, planted
    settings = scan["proposal"]["settings"]
    assert (f"CPU offload {settings['cpu_offload_gib']} GiB, container RAM cap {settings['container_ram_gib']} GiB"
            in text)  # the budgets are numbers and pass
    assert f"CALIBRATED FROM run {WITHHELD}" in text and "2 warning(s) (ignored_layers, " + WITHHELD in text
    assert f"scored by {WITHHELD} {WITHHELD}" in text and f"{WITHHELD} (bytes): measured" in text


def test_score_words_pass_only_short_and_path_free():
    assert shaped("score_text", "gsm8k / test") == "gsm8k / test"
    assert shaped("score_text", "exact_match, strict") == "exact_match, strict"
    for private in ("/srv/scores/gsm8k", "gsm8k/test", "a\nb", "x" * 81, "gsm8k /test"):
        assert shaped("score_text", private) == WITHHELD, private
    assert shaped("run_id", "20261202T101010Z-serve") != WITHHELD and shaped("run_id", "runs/a") == WITHHELD


def test_identifiers_pass_only_in_their_shape():
    assert shaped("model_id", "XiaomiMiMo/MiMo-V2.6-Pro") == "XiaomiMiMo/MiMo-V2.6-Pro"
    assert shaped("model_id", "/srv/models/mimo") == WITHHELD
    assert shaped("image_id", "sha256:" + "a" * 64) != WITHHELD and shaped("image_id", "vllm/vllm:latest") == WITHHELD
    assert shaped("gpu_name", "NVIDIA H200") == "NVIDIA H200" and shaped("gpu_name", UUID + " /x") == WITHHELD
    assert shaped("revision", None) == "none"


def test_a_run_that_read_no_settings_still_says_what_it_found():
    text = share_text(record_of(partial_receipt()))
    assert "settings: not read" in text and "capacity: not computed" in text
    assert "hashing not run" in text and "**Verdict: NO DEFINITE FAILURE FOUND** in phases machine" in text
    assert share_text(record_of({})).startswith("# onegpu run summary (safe to share)")  # a receipt cut short


def test_blocked_outcomes_are_shared_as_code_meaning_and_numbers_only():
    receipt = partial_receipt()
    receipt["phases"]["plan"] = {"verdict": "BLOCKED", "code": "INSUFFICIENT_VRAM", "message": f"at /home/{HOST}"}
    receipt["tests"]["t"] = {"phase": "plan", "outcome": "blocked", "code": "INSUFFICIENT_VRAM",
                             "message": f"GPU {UUID} at /home/{HOST}", "numbers": {"budget_bytes": 123,
                                                                                  "where": f"/home/{HOST}"}}
    text = share_text(record_of(receipt))
    assert "**Verdict: BLOCKED INSUFFICIENT_VRAM in phase plan**: the weights that must stay on the GPU" in text
    assert "BLOCKED INSUFFICIENT_VRAM (1 test(s))" in text and "budget_bytes 123" in text
    assert HOST not in text and UUID not in text
