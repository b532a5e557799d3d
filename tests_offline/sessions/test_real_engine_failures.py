"""approve_load sessions on the REAL engine (vLLM's CPU build, tiny Qwen3-MoE) that each end in their own named
code, with the words of whichever layer caught the fault: the kit's plan or probe when they catch it before
anything starts, else the engine's own line quoted from engine.log; never a bare ENGINE_DIED when the log
says why. The quote reaches the receipt and report.html; summary-share.md keeps to the code and the kit's
sentence and says the reason is quoted in the private report.

Which layer catches what, as these sessions show it:
* unknown architecture (config.json names NoSuchMoeForCausalLM): the kit reads architectures but judges none,
  so the engine refuses it while reading the config: UNSUPPORTED_ARCH in vLLM's words.
* a shard missing while the index still lists it: the kit's plan refuses it (CHECKPOINT_INCOMPLETE, naming the
  shard) before any container starts. The engine's own wording for that case ("Weight files referenced in
  index but missing") can only be reached by going around the plan, which an approved session never does; it
  is recorded in tests_offline/data/engine_logs/fail-shard-missing.log and read by test_bootlog.py. What does
  reach the engine is a copy whose index was rewritten without the shard (consistent files, tensors missing):
  the kit cannot know which tensors a model class needs, the engine's loader does: CHECKPOINT_INCOMPLETE in
  vLLM's words ("Following weights were not initialized from checkpoint").
* context_tokens over the config's max_position_embeddings (4096): the kit's plan does not compare the two,
  the engine refuses the max_model_len: CONTEXT_TOO_LONG in vLLM's words.
* a launch flag vLLM does not know: the kit's probe (the image's own `vllm serve --help`) refuses it before
  the engine starts: RUNTIME_INCOMPATIBLE naming the flag. vLLM's "unrecognized arguments" is never printed
  because nothing is started with it (recorded in fail-unknown-flag.log).
* the container's RAM cap, guarded twice before the kernel's OOM killer can act at boot: the kit's plan refuses
  a cap below its assumed 8 GiB of container needs (INSUFFICIENT_HOST_RAM, no container), and vLLM's CPU worker
  checks the cap itself before it allocates its KV cache (8 GiB asked under an 8 GiB cap: NO_KV_MEMORY in vLLM's
  words, which name the cap's numbers). With 5 GiB the same boot succeeds and peaks at 7.5 GiB; the KV sizes
  that pass vLLM's check yet overflow the cap are a few hundredths of a GiB wide here, too narrow for a test.
  That session stands for "too little memory for the KV cache" as well (VLLM_CPU_KVCACHE_SPACE=0 reads
  NO_KV_MEMORY too, "No available memory for the cache blocks": recorded in fail-no-kv-memory.log).
  The kill itself is shown while serving: memory taken inside the engine container (docker exec) until the cap,
  the kernel's OOM killer steered to the worker (its oom_score_adj raised): HOST_OOM_KILLED with Docker's
  OOMKilled, the cgroup's OOM kill count and the worker's "died unexpectedly" line.
* the engine's worker SIGKILLed inside the container mid-batch, no memory pressure: ENGINE_DIED with the same
  line and the note that the API server's exit code 0 is no clean stop.
Both deaths are in one batch run folder: the request in flight gets vLLM's HTTP 500 as the engine goes down,
which the kit records as the death, not an answer; two resumed sessions (--resume-batch) then answer exactly
the requests without an answer, each custom_id once, in file order.

Each boot costs about a minute on two cores and the probe about 45 s more, so a fault the plan or probe catches
is shown without an engine, and the three sessions of the batch share one project.
"""
from __future__ import annotations

import html
import json
import shutil
import struct
from pathlib import Path
from typing import Any, Mapping

import pytest

from devkit.e2e.harness import add_batch, finish, make_project, receipt_of, session, wait_for
from onegpu.engine.launch import LABEL_ROLE, SOCKET_MOUNT
from onegpu.evidence.journal import read_receipt

SESSION_TIMEOUT_S = 900
MODEL = "qwen3-moe"
MODEL_ID = "tiny/qwen3-moe"
INDEX = "model.safetensors.index.json"
QUOTED = "reason quoted in the private report"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from devkit.real_engine.tiny_models import build

    return build(tmp_path_factory.mktemp("models"), (MODEL,))[MODEL]


@pytest.fixture
def kit_project(tmp_path, real_engine_image):
    """make(checkpoint, **settings) -> a throwaway kit project on the real engine."""
    def make(checkpoint: Path, **settings) -> Path:
        return make_project(tmp_path / "p", real_engine_image, "cpu", checkpoint, model_id=MODEL_ID, **settings)
    return make


def approve(monkeypatch, project: Path, out: str, *extra: str, extra_args=None, kv_gib: str | None = None,
            mark: str = "approve_load") -> tuple[Path, Mapping[str, Any], str]:
    """One approve_load session in the project: (run folder, receipt, terminal output)."""
    monkeypatch.setenv("ONEGPU_E2E_EXTRA_ARGS", json.dumps(extra_args or []))
    monkeypatch.setenv("ONEGPU_E2E_CPU_KVCACHE_GIB", kv_gib or "1")
    proc = session(project, out, None, *extra, "--timeout=1200", mark=mark)
    try:
        text = finish(proc, SESSION_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return project / out, receipt_of(project, out), text


def blocked_in(receipt: dict, phase: str, code: str) -> list[dict]:
    """The phase reads BLOCKED with this code; its blocked test entries."""
    p = receipt["phases"][phase]
    assert p["verdict"] == "BLOCKED" and p["code"] == code, (phase, p, receipt["phases"])
    return [t for t in receipt["tests"].values() if t.get("phase") == phase and t["outcome"] == "blocked"]


def assert_shown_privately_only(folder: Path, code: str, words: str) -> None:
    """The words in report.html (escaped); summary-share.md with the code and where the reason is, not the words."""
    report = (folder / "report.html").read_text()
    assert html.escape(words) in report, words
    share = (folder / "summary-share.md").read_text()
    assert f"BLOCKED {code}" in share and QUOTED in share, share
    assert words not in share and "could not classify" not in share


def assert_nothing_started(receipt: dict) -> None:
    assert "boot" not in receipt and "engine" not in receipt, (receipt.get("boot"), receipt.get("engine"))


def assert_engine_words(folder: Path, receipt: dict, code: str, words: str) -> dict:
    """A boot that ended in `code` with the engine's own line (holding `words`) quoted everywhere private."""
    tests = blocked_in(receipt, "load", code)
    assert tests and all(words in t["message"] and "the engine said: " in t["message"] for t in tests), tests
    failure = receipt["boot"]["failure"]
    assert failure["code"] == code and words in failure["quote"], failure
    assert words in (folder / "engine.log").read_text()
    assert receipt["engine"]["end"]["removed"]
    assert_shown_privately_only(folder, code, words)
    return failure


def test_an_unknown_architecture_is_refused_in_the_engines_own_words(monkeypatch, tiny_model, kit_project, tmp_path):
    checkpoint = shutil.copytree(tiny_model, tmp_path / "arch")
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "architectures": ["NoSuchMoeForCausalLM"]}))
    folder, receipt, out = approve(monkeypatch, kit_project(checkpoint), "runs/arch")
    assert receipt["probe"]["passed"], receipt["probe"]
    assert_engine_words(folder, receipt, "UNSUPPORTED_ARCH",
                        "Model architectures ['NoSuchMoeForCausalLM'] are not supported for now")


def _shard_tensor_bytes(shard: Path) -> dict[str, int]:
    """Tensor name -> bytes of data, from a safetensors header."""
    with shard.open("rb") as fh:
        (length,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(length))
    return {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__"}


def test_a_missing_shard_is_refused_by_the_plan_or_by_the_engine_in_its_own_words(monkeypatch, tiny_model,
                                                                                   kit_project, tmp_path):
    gone = "model-00002-of-00002.safetensors"
    # The index still lists the deleted shard: the kit's plan refuses it; no container is started.
    listed = shutil.copytree(tiny_model, tmp_path / "listed")
    (listed / gone).unlink()
    project = kit_project(listed)
    folder, receipt, _ = approve(monkeypatch, project, "runs/listed")
    tests = blocked_in(receipt, "plan", "CHECKPOINT_INCOMPLETE")
    assert any(gone in t["message"] and "named by the index are missing" in t["message"] for t in tests), tests
    assert_nothing_started(receipt)
    # The index rewritten without it (every file consistent, tensors missing): only the engine's loader knows
    # the model class needs them.
    unlisted = shutil.copytree(tiny_model, tmp_path / "unlisted")
    dropped = _shard_tensor_bytes(unlisted / gone)
    index = json.loads((unlisted / INDEX).read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != gone}
    index["metadata"]["total_size"] -= sum(dropped.values())
    (unlisted / INDEX).write_text(json.dumps(index))
    (unlisted / gone).unlink()
    settings = json.loads((project / "s.json").read_text())
    (project / "s.json").write_text(json.dumps({**settings, "model_path": str(unlisted)}))
    folder, receipt, _ = approve(monkeypatch, project, "runs/unlisted")
    assert receipt["phases"]["plan"]["verdict"] == "PASSED", receipt["phases"]["plan"]
    failure = assert_engine_words(folder, receipt, "CHECKPOINT_INCOMPLETE",
                                  "Following weights were not initialized from checkpoint")
    assert any(name in failure["quote"] for name in dropped), failure["quote"]


def test_a_context_over_the_models_maximum_is_refused_in_the_engines_own_words(monkeypatch, tiny_model, kit_project):
    folder, receipt, _ = approve(monkeypatch, kit_project(tiny_model, context_tokens=8192), "runs/context")
    assert receipt["phases"]["plan"]["verdict"] == "PASSED"  # the plan does not read max_position_embeddings
    assert_engine_words(folder, receipt, "CONTEXT_TOO_LONG",
                        "User-specified max_model_len (8192) is greater than the derived max_model_len "
                        "(max_position_embeddings=4096")


def test_an_unknown_launch_flag_is_refused_by_the_probe_before_the_engine_starts(monkeypatch, tiny_model,
                                                                                  kit_project):
    folder, receipt, _ = approve(monkeypatch, kit_project(tiny_model), "runs/flag",
                                 extra_args=["--no-such-flag", "1"])
    tests = blocked_in(receipt, "probe", "RUNTIME_INCOMPATIBLE")
    assert tests and all("does not know the flag(s) --no-such-flag" in t["message"] for t in tests), tests
    assert receipt["probe"]["passed"] is False and receipt["probe"]["numbers"]["missing_flags"] == ["--no-such-flag"]
    assert receipt["launch"]["command"][-2:] == ["--no-such-flag", "1"]
    assert_nothing_started(receipt)
    assert "BLOCKED RUNTIME_INCOMPATIBLE" in (folder / "summary-share.md").read_text()


def test_a_ram_cap_below_the_kits_own_needs_is_refused_by_the_plan(monkeypatch, tiny_model, kit_project):
    folder, receipt, _ = approve(monkeypatch, kit_project(tiny_model, container_ram_gib=2), "runs/small-cap")
    tests = blocked_in(receipt, "plan", "INSUFFICIENT_HOST_RAM")
    assert any("RAM cap 2.00 GiB minus" in t["message"] for t in tests), tests
    assert_nothing_started(receipt)


def test_a_kv_cache_over_what_the_ram_cap_leaves_is_refused_in_the_engines_own_words(monkeypatch, tiny_model,
                                                                                      kit_project):
    # 8 GiB passes the plan (its assumed container needs); vLLM's CPU worker asks for 8 GiB of KV cache inside
    # it and checks the cap itself before it allocates.
    folder, receipt, _ = approve(monkeypatch, kit_project(tiny_model, container_ram_gib=8), "runs/kv", kv_gib="8")
    assert receipt["phases"]["plan"]["verdict"] == "PASSED", receipt["phases"]["plan"]
    failure = assert_engine_words(folder, receipt, "NO_KV_MEMORY",
                                  "on kv cache allocation is less than requested memory for kv (8.0 GiB)")
    assert "/8.0 GiB)" in failure["quote"]  # the node's memory as the engine saw it: the container's cap
    assert failure["oom_killed"] is False and failure["oom_kill_count_rose"] is False


def _lines(path: Path) -> list[dict]:
    """The complete JSON lines of a record file (one being written may end in a partial line)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def _container_id(folder: Path) -> str | None:
    """The engine container the session recorded (mid-session it is in the receipt's journal)."""
    try:
        return (read_receipt(folder).get("engine") or {}).get("container_id")
    except (FileNotFoundError, ValueError):
        return None


# Run inside the engine container (docker exec, the engine's own uid): the engine's worker is the process titled
# VLLM::Worker. KILL sends it SIGKILL. RAM_CAP makes it the OOM killer's choice (oom_score_adj 1000: a process
# may raise its own kind's) and then takes memory in 16 MiB steps until the cap's OOM killer has ended it; the
# taker itself may be the killer's next choice while the worker's memory is still being freed (then it writes
# nothing). Each script is started (armed) as soon as the session's engine container runs, and waits for a
# trigger file in the private socket folder, the one folder the container shares with the host: a `docker exec`
# started only when the fault is due took 10-20 s to start Python in a container whose engine holds both CPUs,
# and answers of 4-6 s each went by meanwhile (the batch could end before the fault came).
ARMED = '''
import os, sys, time
trigger, said = sys.argv[1], sys.argv[2]
while not os.path.exists(trigger):
    time.sleep(0.05)
sys.stdout = open(said + ".part", "w")
'''
SAID = '''
sys.stdout.close()
os.rename(said + ".part", said)
'''
FIND_WORKER = '''
import os, signal, sys
def worker():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/cmdline", "rb").read().startswith(b"VLLM::Worker"):
                return int(pid)
        except OSError:
            pass
    sys.exit("no VLLM::Worker process")
def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
'''
KILL = FIND_WORKER + '''
pid = worker()
os.kill(pid, signal.SIGKILL)
print(f"SIGKILL sent to VLLM::Worker pid {pid}")
'''
RAM_CAP = FIND_WORKER + '''
pid = worker()
open(f"/proc/{pid}/oom_score_adj", "w").write("1000")
limit = int(open("/sys/fs/cgroup/memory/memory.limit_in_bytes").read())
held = []
while alive(pid) and len(held) * 16 * 2**20 < limit:
    held.append(b"\\x5a" * (16 * 2**20))
print(f"VLLM::Worker pid {pid} alive: {alive(pid)} after {len(held) * 16} MiB were taken under a cap of {limit} bytes")
'''
# The second fault needs one request to die in and one after it, so the first must leave at least three: its OOM
# kill has landed as late as six answers after its trigger (a 2-CPU guest, answers of 4-10 s each), which
# left two of eight, and the second kill then came after the last of them.
BATCH = 12
MAX_TOKENS = 1900


def _engine_container(docker_client, earlier: str | None):
    """This session's engine container once it runs: the running engine container of the kit Docker reports,
    not the receipt's word for it (a receipt read mid-session can lag)."""
    running = [c for c in docker_client.containers.list(filters={"label": f"{LABEL_ROLE}=engine"})
               if c.id != earlier]
    assert len(running) <= 1, [c.id for c in running]
    return running[0] if running else None


def _inject_mid_batch(docker_client, proc, folder: Path, script: str, after: int, earlier: str | None) -> str | None:
    """Once this session's engine has given `after` more answers, fire `script` in its container; what the
    script printed, "nothing written" if it ended without writing (the OOM killer took it too), None if the
    session ended before the fault was due. `earlier`: the container ID an earlier session left in the receipt.

    The answers are counted from the session's start (it boots for many seconds before its first)."""
    answered = len(_lines(folder / "responses.jsonl"))
    engine = wait_for(lambda: _engine_container(docker_client, earlier) or proc.poll() is not None,
                      SESSION_TIMEOUT_S, "the session's engine container", step_s=0.25)
    if proc.poll() is not None:
        return None
    name = f"fault-{engine.id[:12]}"
    trigger, said = folder / "sock" / f"{name}.go", folder / "sock" / f"{name}.said"
    in_container = f"{SOCKET_MOUNT}/{name}"
    engine.exec_run(["python3", "-c", ARMED + script + SAID, f"{in_container}.go", f"{in_container}.said"],
                    detach=True)
    wait_for(lambda: len(_lines(folder / "responses.jsonl")) >= answered + after or proc.poll() is not None,
             SESSION_TIMEOUT_S, f"{after} more answer(s)", step_s=0.05)
    if proc.poll() is not None:
        return None
    trigger.touch(mode=0o600)
    try:
        wait_for(lambda: said.exists() or proc.poll() is not None, SESSION_TIMEOUT_S, "the fault's own words")
        return said.read_text() if said.exists() else "nothing written"
    finally:
        trigger.unlink(missing_ok=True)
        said.unlink(missing_ok=True)


def _session_with_fault(monkeypatch, docker_client, project: Path, out: str, extra, script: str | None):
    """A batch session in the project, with `script` run in its engine container after its first answer."""
    monkeypatch.setenv("ONEGPU_E2E_EXTRA_ARGS", "[]")
    monkeypatch.setenv("ONEGPU_E2E_CPU_KVCACHE_GIB", "1")
    earlier = _container_id(project / out)
    proc = session(project, out, None, *extra, "--timeout=1200", mark="approve_load and batch")
    try:
        said = _inject_mid_batch(docker_client, proc, project / out, script, 1, earlier) if script else None
        text = finish(proc, SESSION_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert script is None or said is not None, f"the session ended before the fault was injected:\n{text[-5000:]}"
    return receipt_of(project, out), text, said


def _assert_batch_death(folder: Path, receipt: dict, code: str) -> dict:
    """The batch phase BLOCKED with `code`, the engine's own line quoted in the message, the receipt, the report."""
    tests = blocked_in(receipt, "batch", code)
    end = receipt["batch"]["session_run"]["engine_end"]
    assert end["code"] == code and end["quote"] and "died unexpectedly" in end["quote"], end
    assert tests and all(f"the engine said: {end['quote']!r}" in t["message"] for t in tests), tests
    assert_shown_privately_only(folder, code, end["quote"])
    return tests[0]


def test_the_engine_killed_mid_batch_is_named_and_a_resume_answers_each_request_once(monkeypatch, docker_client,
                                                                                       tiny_model, kit_project):
    project = kit_project(tiny_model)
    extra = add_batch(project, BATCH, max_tokens=MAX_TOKENS, ignore_eos=True)
    ids = [f"r{i:02d}" for i in range(BATCH)]
    folder = project / "runs" / "batch"
    responses = folder / "responses.jsonl"
    # 1. The RAM cap's OOM killer takes the worker mid-batch: HOST_OOM_KILLED with the cgroup's evidence.
    receipt, out, said = _session_with_fault(monkeypatch, docker_client, project, "runs/batch", extra, RAM_CAP)
    assert "alive: False" in said or said == "nothing written", said
    message = _assert_batch_death(folder, receipt, "HOST_OOM_KILLED")["message"]
    assert "the RAM cap of 8.00 GiB was exceeded: " in message and "OOM kill(s)" in message, message
    first = [r["custom_id"] for r in _lines(responses)]
    assert first and first == ids[:len(first)] and len(first) < BATCH
    assert all(r["response"]["status_code"] == 200 for r in _lines(responses))  # a dying engine's 500 is no answer
    errors = _lines(folder / "responses.errors.jsonl")
    assert errors and {e["error"]["code"] for e in errors} == {"HOST_OOM_KILLED"}
    # 2. Resumed; its worker SIGKILLed without any memory pressure: ENGINE_DIED in the engine's words, and the API
    # server's exit code 0 read as no clean stop.
    receipt, out, said = _session_with_fault(monkeypatch, docker_client, project, "runs/batch",
                                             ["--resume-batch=runs/batch"], KILL)
    message = _assert_batch_death(folder, receipt, "ENGINE_DIED")["message"]
    assert receipt["batch"]["session_run"]["engine_death"]["exit_code"] == 0, receipt["batch"]["session_run"]
    assert "exit code 0 is no clean stop here" in message and "OOM" not in message.replace("OOMKilled False", "")
    assert receipt["batch"]["resumed"]["answered_before"] == len(first)
    second = [r["custom_id"] for r in _lines(responses)]
    assert second[:len(first)] == first and len(first) < len(second) < BATCH
    # 3. Resumed again, undisturbed: every request answered, each custom_id exactly once, in file order.
    receipt, out, _ = _session_with_fault(monkeypatch, docker_client, project, "runs/batch",
                                          ["--resume-batch=runs/batch"], None)
    assert receipt["phases"]["batch"]["verdict"] == "PASSED", (receipt["phases"]["batch"], out[-3000:])
    assert receipt["batch"]["resumed"]["answered_before"] == len(second)
    final = _lines(responses)
    assert [r["custom_id"] for r in final] == ids
    assert all(r["response"]["status_code"] == 200 for r in final)
    assert all(r["response"]["body"]["usage"]["completion_tokens"] == MAX_TOKENS for r in final)
    assert len(receipt["earlier_sessions"]) == 2
