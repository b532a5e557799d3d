"""approve_load sessions against the REAL engine: vLLM's CPU build in the locally built image, a tiny real model
loaded from its safetensors shards, the real Docker engine, the kit's own phase tests (tests_hw).

The one seam is devkit/e2e/conftest_cpu_engine.py (recorded H200 facts, engine_platform "cpu",
VLLM_CPU_KVCACHE_SPACE). One whole session covers probe, custody, load, canary, a batch and a serve window
used by the openai SDK (stream and not) and lm-eval's local-completions, closed by STOP: a boot costs about a
minute on two cores, so the clients run inside that one session (`-m "approve_load and (canary or batch or
serve)"` approves all three acting phases at once).
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from devkit.e2e.harness import add_batch, finish, make_project, outcomes, receipt_of, session, wait_for
from tests_offline.lm_eval_driver import run_lm_eval

BATCH = 6
SESSION_TIMEOUT_S = 900


def ready_connection(folder: Path):
    path = folder / "connection-private.json"
    try:
        doc = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return doc if doc.get("state") == "READY" else None


def use_the_window(connection: dict, tmp_path: Path, seen: dict) -> None:
    """What a native harness does: the openai SDK (whole and streamed answers), then lm-eval."""
    import openai

    client = openai.OpenAI(base_url=connection["openai_base_url"], api_key=connection["api_key"], max_retries=0,
                           timeout=120)
    seen["models"] = [m.id for m in client.models.list()]
    whole = client.chat.completions.create(model=connection["model"], max_tokens=5,
                                           messages=[{"role": "user", "content": "Say hello."}],
                                           extra_body={"ignore_eos": True})
    assert whole.usage is not None
    seen["whole_tokens"] = whole.usage.completion_tokens
    stream = client.chat.completions.create(model=connection["model"], max_tokens=4, stream=True,
                                            messages=[{"role": "user", "content": "Count."}],
                                            stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    seen["stream_chunks"] = len(chunks)
    seen["stream_usage"] = chunks[-1].usage.completion_tokens if chunks[-1].usage else None
    done = run_lm_eval(connection, tmp_path, "num_concurrent=1,max_retries=1,timeout=300,tokenizer_backend=none,"
                                             "tokenized_requests=False")
    seen["lm_eval_rc"], seen["lm_eval_err"] = done.returncode, done.stderr[-3000:]
    seen["lm_eval_answers"] = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None


def test_a_whole_approved_session_on_the_real_engine_passes_every_phase(docker_client, tmp_path, real_engine_image,
                                                                        tiny_models):
    import transformers

    model = tiny_models["qwen3-moe"]
    # 0.01 GiB of offload in the plan: every decoder layer of the tiny model, so the plan has a link ceiling (the
    # CPU build keeps its CPU weights where they are: vLLM's offloader leaves a module on the CPU device alone);
    # the RAM cap one GiB above the 8 GiB the plan ASSUMES the container needs for itself, to hold the pinned copy
    project = make_project(tmp_path / "p", real_engine_image, "cpu", model, model_id="tiny/qwen3-moe",
                           cpu_offload_gib=0.01, container_ram_gib=9)
    extra = add_batch(project, BATCH, ignore_eos=True)
    bodies = [json.loads(line)["body"] for line in (project / "r.jsonl").read_text().splitlines()]
    proc = session(project, "runs/real", None, *extra, "--timeout=1200", mark="approve_load and (canary or batch or serve)")
    folder = project / "runs" / "real"
    seen: dict = {}
    try:
        # a session that ends before READY (a blocked plan, a failed boot) ends the wait at once
        connection = wait_for(lambda: ready_connection(folder) or proc.poll() is not None, SESSION_TIMEOUT_S,
                              "the serve window to be READY", step_s=0.25)
        assert isinstance(connection, dict), (finish(proc, 60)[-6000:], receipt_of(project, "runs/real")["verdict"])
        worker = threading.Thread(target=use_the_window, args=(connection, tmp_path, seen))
        worker.start()
        worker.join(600)
        (folder / "STOP").touch()
        out = finish(proc, 300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    receipt = receipt_of(project, "runs/real")
    assert set(outcomes(receipt).values()) <= {"passed", "deselected"}, (out[-6000:], receipt["tests"])
    for phase in ("machine", "plan", "probe", "custody", "load", "canary", "batch", "serve"):
        assert receipt["phases"][phase]["verdict"] == "PASSED", (phase, receipt["phases"][phase])
    # The probe saw vLLM's CPU platform; the run folder says which engine this was.
    assert receipt["probe"]["platform"] == "cpu" and receipt["probe"]["cuda_device_count"] == 0
    assert receipt["launch"]["engine_platform"] == "cpu"
    assert any(b.startswith("CPU ENGINE DOUBLE") for b in receipt["banners"])
    assert "CPU ENGINE DOUBLE" in (folder / "summary-share.md").read_text()
    assert "CPU ENGINE DOUBLE" in (folder / "report.html").read_text()
    # The boot log was read: the engine's own figures, not the stub's strings.
    facts = receipt["boot"]["facts"]
    assert facts["server_started"] and facts["kv_cache_tokens"] > 0, facts
    assert facts["vllm_version"].startswith("0.32.0"), facts
    # The plan's KV pool (vLLM's accounting with the CPU build's 128-token blocks, no async scheduling) predicts
    # the engine's own boot line for the 1 GiB of VLLM_CPU_KVCACHE_SPACE.
    pool = receipt["kv_cache"]["pool"]
    assert (pool["block_size"], pool["async_scheduling"]) == (128, False)
    blocks = 2**30 // pool["bytes_per_block"]
    assert facts["kv_cache_tokens"] == int(blocks / pool["blocks_per_request"] * pool["max_model_len"]), (facts, pool)
    # Each batch body arrived as written: with ignore_eos, the engine generated exactly its max_tokens, and its
    # prompt is the chat template of exactly its messages.
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    answers = {json.loads(line)["custom_id"]: json.loads(line)["response"]
               for line in (folder / "responses.jsonl").read_text().splitlines()}
    assert len(answers) == BATCH
    for i, body in enumerate(bodies):
        answer = answers[f"r{i:02d}"]
        assert answer["status_code"] == 200, answer
        usage = answer["body"]["usage"]
        assert usage["completion_tokens"] == body["max_tokens"]
        prompt = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]
        assert usage["prompt_tokens"] == len(prompt)
    # The link ceiling of the plan's offload on the recorded H200's PCIe 5.0 x16: ASSUMED, NOT MEASURED (the CPU
    # build's torch has no CUDA device to copy to, and says so); the canary's and the batch's rates set against it.
    ceiling, link = receipt["ceiling"], receipt["ceiling"]["link"]
    assert receipt["probe"]["h2d"] is None and receipt["probe"]["h2d_error"] == "torch in the engine image sees no " \
                                                                               "CUDA device"
    assert (link["basis"], link["gen"], link["width"]) == ("ASSUMED", 5, 16)
    assert link["not_measured"].startswith("NOT MEASURED: this session's runtime probe could not copy to a CUDA "
                                           "device")
    assert ceiling["traffic"]["experts"] == 4 and ceiling["traffic"]["top_k"] == 2 and ceiling["offloaded"]
    rows = {(r["run"], r["rate"]): r for r in receipt["rates_vs_ceiling"]}
    assert {("canary", "decode"), ("batch", "decode"), ("batch", "prefill")} <= set(rows), rows
    summary = receipt["batch"]["summary"]
    batch_decode = rows[("batch", "decode")]
    assert batch_decode["measured_tps"] == pytest.approx(summary["output_tokens_per_s"], abs=0.001)
    assert batch_decode["ceiling_tps"] == pytest.approx(ceiling["decode_tps"]["1"], abs=0.001)
    for row in rows.values():  # two CPU cores against a 56 GB/s link: far below, never above
        assert 0 < row["fraction"] < 1 and row["link_basis"] == "ASSUMED", row
    assert 'class="og-rate"' in (folder / "report.html").read_text()
    assert "- measured batch decode: at least " in (folder / "summary-share.md").read_text()
    # The serve window, used by real clients, closed by STOP.
    assert seen.get("models") == ["tiny/qwen3-moe"], seen
    assert seen["whole_tokens"] == 5 and seen["stream_usage"] == 4 and seen["stream_chunks"] >= 4
    assert seen["lm_eval_rc"] == 0, seen["lm_eval_err"]
    assert len(seen["lm_eval_answers"]) == 3
    assert receipt["serve"]["state"] == "CLOSED" and "STOP" in receipt["serve"]["closed_reason"]
    assert receipt["engine"]["end"]["removed"]
    print(f"real-engine session: boot {receipt['boot'].get('elapsed_s')} s, timings {receipt['timings_s']}")


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict:
    from devkit.real_engine.tiny_models import build

    return build(tmp_path_factory.mktemp("models"))
