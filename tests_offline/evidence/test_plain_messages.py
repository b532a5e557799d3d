"""Small truths of what the kit says, each from a real session: hints in the form the kit accepts, counts that add
up to pytest's own, settings errors in the JSON the person wrote and in the phase they belong to, deadlines under
their own names, the proposal's KV figure with its inputs, a linked model_path named as such, a demo that writes
into the clone rather than a folder every user of the machine shares."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec

from onegpu.engine.launch import Owner, build_launch_spec
from onegpu.plan.settings import parse_settings
from onegpu.record.sections_plan import SettingsValues
from onegpu.report.share_summary import settings_lines
from tests_offline.paths import PROFILES, REPO_ROOT

PROFILE = PROFILES / "research-target-rtx-pro-6000-96gb.json"
EXAMPLES = REPO_ROOT / "examples"
SETTINGS = {"schema": "onegpu/settings@1", "model_id": "a/b", "model_revision": "0" * 40, "model_path": "/srv/m",
            "image": "x:y", "gpu": 0, "context_tokens": 2048, "prefill_chunk_tokens": 512, "cpu_offload_gib": 0,
            "container_ram_gib": 8, "host_headroom_gib": 1, "deadline_s": 100}


def kit(*args: str, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_no_settings_hint_shows_the_form_the_kit_accepts(tmp_path):
    done = kit("-m", "scan", f"--hardware={PROFILE}", "--host-ram-gib=100", f"--out={tmp_path / 'r'}")
    receipt = json.loads((tmp_path / "r" / "receipt.json").read_text())
    message = receipt["phases"]["plan"]["message"]
    assert "--settings=s.json" in message and "--settings s.json" not in done.stdout


def test_the_space_form_refusal_is_printed_once(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(SETTINGS))
    done = kit("-m", "scan", "--settings", str(tmp_path / "s.json"))
    assert done.returncode == 4  # pytest's usage error
    assert (done.stdout + done.stderr).count("write path options with '='") == 1


def test_the_kit_line_accounts_for_every_test_pytest_deselected(tmp_path):
    done = kit("-m", "scan", f"--hardware={PROFILE}", "--host-ram-gib=100", f"--out={tmp_path / 'r'}")
    header = int(re.search(r"collected \d+ items / (\d+) deselected", done.stdout).group(1))
    line = next(x for x in done.stdout.splitlines() if x.startswith("onegpu: "))
    parts = [int(n) for n in re.findall(r"(?:deselected: |; )(\d+) that", line)]
    assert line.startswith(f"onegpu: {header} test(s) deselected: ") and sum(parts) == header, line
    assert "need an option not given (--operator-score, --propose)" in line


def test_settings_errors_show_the_json_written_and_block_the_plan_not_the_machine(tmp_path):
    bad = {**SETTINGS, "gpu": True, "context_tokens": "2048", "extra_field": None}
    (tmp_path / "s.json").write_text(json.dumps(bad))
    kit("-m", "scan", f"--settings={tmp_path / 's.json'}", f"--hardware={PROFILE}", "--host-ram-gib=100",
        f"--out={tmp_path / 'r'}")
    receipt = json.loads((tmp_path / "r" / "receipt.json").read_text())
    plan, machine = receipt["phases"]["plan"], receipt["phases"]["machine"]
    assert plan["code"] == "SETTINGS_INVALID"
    assert "field 'gpu': value true:" in plan["message"] and "field 'context_tokens': value \"2048\":" in plan["message"]
    assert "field 'extra_field': value null: unknown field" in plan["message"]
    assert "True" not in plan["message"] and "'2048'" not in plan["message"]
    assert machine["verdict"] != "BLOCKED" and machine["code"] is None
    assert machine["message"] == "3 test(s) not run here: they wait on phase plan (SETTINGS_INVALID)"
    assert receipt["verdict"].startswith("BLOCKED SETTINGS_INVALID in phase plan:")


def test_the_shared_summary_names_each_deadline_by_its_setting():
    values = {k: v for k, v in SETTINGS.items() if k != "schema"}
    line = settings_lines(msgspec.convert({**values, "boot_deadline_s": 60, "request_timeout_s": 30},
                                          SettingsValues))[-1]
    assert line == ("- deadlines: boot 60 s; overall deadline_s 100 s (counted from the first request phase); each "
                    "request request_timeout_s 30 s")


def test_the_proposal_names_its_kv_inputs_and_says_when_the_plan_differs(tmp_path):
    ckpt = tmp_path / "MiMo-V2.6-Flash"
    subprocess.run([sys.executable, str(EXAMPLES / "make_mimo_checkpoint.py"), "--out", str(ckpt)], check=True,
                   capture_output=True)
    settings = json.loads(ckpt.with_name("MiMo-V2.6-Flash.settings.json").read_text())
    request = {"schema": "onegpu/proposal-request@1", "kv_cache_dtype": settings["kv_cache_dtype"],
               **{k: settings[k] for k in ("model_id", "model_revision", "model_path", "image", "gpu",
                                           "context_tokens")}}
    (tmp_path / "req.json").write_text(json.dumps(request))
    done = kit("-m", "scan", f"--settings={ckpt.with_name('MiMo-V2.6-Flash.settings.json')}",
               f"--hardware={PROFILE}", "--host-ram-gib=256", f"--propose={tmp_path / 'req.json'}",
               f"--out={tmp_path / 'r'}")
    assert re.search(r"KV cache +[\d.]+ GiB +[\d,]+ tokens, one sequence, prefill chunk 2,048 ASSUMED, ", done.stdout)
    assert (f"the plan of this session's settings puts the KV cache for the same {settings['context_tokens']:,} "
            f"tokens at") in done.stdout
    assert f"prefill chunk {settings['prefill_chunk_tokens']:,}" in done.stdout
    assert "the chunk or dtype differs, not the arithmetic" in done.stdout


def test_a_linked_model_path_is_mounted_by_its_target_and_the_plan_says_so(tmp_path):
    settings = parse_settings({**SETTINGS, "model_path": str(tmp_path / "link")}, "s.json", "0" * 64)
    owner = Owner(pid=1, start_ticks=1, boot_id="b", pidns="p", uid=0, gid=0)
    spec = build_launch_spec(settings, None, "sha256:" + "0" * 64, "r", str(tmp_path / "sock"), owner,
                             checkpoint_root=str(tmp_path / "real"))
    assert spec.mounts[0].source == str(tmp_path / "real")
    assert any(f"model_path {tmp_path / 'link'} is a link" in n and str(tmp_path / "real") in n for n in spec.notes)
    same = build_launch_spec(settings, None, "sha256:" + "0" * 64, "r", str(tmp_path / "sock"), owner,
                             checkpoint_root=str(tmp_path / "link"))
    assert not any("is a link" in n for n in same.notes)


def test_the_demo_writes_inside_the_clone_with_settings_beside_it(tmp_path):
    source = (EXAMPLES / "make_mimo_checkpoint.py").read_text()
    assert 'DEMO_ROOT = EXAMPLES / "demo-checkpoints"' in source and "/tmp/" not in source
    assert "/examples/demo-checkpoints/" in (REPO_ROOT / ".gitignore").read_text()
    out = tmp_path / "flash"
    done = subprocess.run([sys.executable, str(EXAMPLES / "make_mimo_checkpoint.py"), "--out", str(out)],
                          capture_output=True, text=True, check=True)
    written = json.loads((tmp_path / "flash.settings.json").read_text())
    assert written["model_path"] == str(out) and f"settings: {tmp_path / 'flash.settings.json'}" in done.stdout
    template = json.loads((EXAMPLES / "demo-settings.json").read_text())
    assert {k: v for k, v in written.items() if k != "model_path"} == {k: v for k, v in template.items()
                                                                        if k != "model_path"}
    assert template["model_path"].startswith("/choose/")  # the template alone is refused as a placeholder
