"""Real clients through the serve window: the openai SDK and lm-eval's local-completions model.

The stub engine container runs on the real Docker engine; the clients read the URL, key and model from
connection-private.json as a native harness would. Every answer of the stub names the SHA-256 of the
request body it received, so each test also proves the bytes arrived unchanged.
"""
from __future__ import annotations

import importlib.util
import json
import re
import threading
import time
from pathlib import Path

import pytest

from devkit.stub_serving import stub_serving
from onegpu.serve.transport_log import read_entries
from onegpu.serve.window import ServeWindow
from tests_offline.docker_required import skip_unless_ci
from tests_offline.lm_eval_driver import DATA, run_lm_eval

STUB_ENV = {"STUB_TOKEN_DELAY_S": 0.05, "STUB_ANSWER_TOKENS": 64}
DIGEST = re.compile(r"sha256=([0-9a-f]{64})")


def require_module(name: str, install: str):
    """Skip when a client library is missing; under CI=true that is a failure (CI must run these)."""
    if importlib.util.find_spec(name) is None:
        skip_unless_ci(f"{name} is not installed ({install})")


@pytest.fixture(scope="module")
def window(docker_client, tmp_path_factory):
    run_folder = tmp_path_factory.mktemp("run")
    with stub_serving(docker_client, STUB_ENV) as stub:
        def engine_state():
            stub.container.reload()
            return None if stub.container.status == "running" else {"status": stub.container.status}
        serving = ServeWindow(run_folder, stub.socket_path, stub.model_id, window_s=600, engine_state=engine_state)
        serving.wait_ready()
        yield serving
        serving.close("the tests are done")


@pytest.fixture
def connection(window):
    return json.loads(window.connection_path.read_text())


@pytest.fixture
def openai_client(connection):
    require_module("openai", "pip install openai==3.57.0")
    import openai

    return openai.OpenAI(base_url=connection["openai_base_url"], api_key=connection["api_key"], max_retries=0,
                         timeout=30)


def new_entries(window, before: int, expected: int) -> list[dict]:
    """Transport lines written since `before` lines, once `expected` of them are there (or 10 s passed).

    A call's line is written just after its answer is out, so a client can finish reading the answer
    before the line lands: wait for it rather than read a moment too early.
    """
    deadline = time.monotonic() + 10
    while True:
        window.adapter.log.flush()
        entries = read_entries(window.adapter.log.path)[before:]
        if len(entries) >= expected or time.monotonic() > deadline:
            return entries
        time.sleep(0.01)


def log_length(window, idle: bool = True) -> int:
    """Lines in the transport log once the count held still for 50 ms and, when `idle`, no call is in flight
    (the line of an earlier test's last call may land just after that test ended)."""
    last = -1
    while True:
        window.adapter.log.flush()
        count = len(read_entries(window.adapter.log.path))
        if count == last and (not idle or window.adapter.outstanding == 0):
            return count
        last = count
        time.sleep(0.05)


def test_openai_sdk_lists_the_exact_model(openai_client, connection):
    assert [m.id for m in openai_client.models.list()] == [connection["model"]]


@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_openai_sdk_gets_the_engine_answer_to_the_bytes_it_sent(openai_client, connection, window, kind):
    before = log_length(window)
    if kind == "chat":
        answer = openai_client.chat.completions.create(
            model=connection["model"], messages=[{"role": "user", "content": "Say hi"}], max_tokens=5)
        text = answer.choices[0].message.content
    else:
        answer = openai_client.completions.create(model=connection["model"], prompt="Say hi", max_tokens=5)
        text = answer.choices[0].text
    (entry,) = new_entries(window, before, 1)
    assert DIGEST.search(text).group(1) == entry["request_sha256"]
    assert answer.usage.completion_tokens == entry["completion_tokens"] == 5 and not entry["streamed"]


@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_openai_sdk_streams_chunk_by_chunk(openai_client, connection, window, kind):
    before = log_length(window)
    options = {"include_usage": True}
    if kind == "chat":
        stream = openai_client.chat.completions.create(
            model=connection["model"], messages=[{"role": "user", "content": "Say hi"}], max_tokens=12,
            stream=True, stream_options=options)
        pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    else:
        stream = openai_client.completions.create(model=connection["model"], prompt="Say hi", max_tokens=12,
                                                  stream=True, stream_options=options)
        pieces = [c.choices[0].text for c in stream if c.choices]
    (entry,) = new_entries(window, before, 1)
    assert len([p for p in pieces if p]) == 12  # one chunk per token, as the engine sent them
    assert DIGEST.search("".join(pieces)).group(1) == entry["request_sha256"]
    assert entry["streamed"] and entry["completion_tokens"] == 12 and entry["stream_ttft_s"] is not None
    assert entry["stream_output_tokens_per_s"] > 0


def test_openai_sdk_sees_429_once_and_never_retries(openai_client, connection, window):
    import openai

    holders = [threading.Thread(target=lambda: list(openai_client.completions.create(
        model=connection["model"], prompt="hold", max_tokens=60, stream=True))) for _ in range(4)]
    for t in holders:
        t.start()
    while window.adapter.outstanding < 4:
        threading.Event().wait(0.01)
    before = log_length(window, idle=False)  # four streams are held open on purpose
    with pytest.raises(openai.RateLimitError):
        openai_client.completions.create(model=connection["model"], prompt="one too many", max_tokens=2)
    for t in holders:
        t.join(30)
    refused = [e for e in new_entries(window, before, 5) if e["status"] == 429]  # 4 held streams + 1
    assert len(refused) == 1  # max_retries=0: the SDK sent it once, the adapter answered at once


def test_openai_sdk_meets_adapter_required_for_other_apis(openai_client, connection):
    import openai

    with pytest.raises(openai.APIStatusError) as caught:
        openai_client.embeddings.create(model=connection["model"], input="x")
    assert caught.value.status_code == 501 and "ADAPTER REQUIRED" in caught.value.message
    with pytest.raises(openai.APIStatusError) as caught:
        openai_client.responses.create(model=connection["model"], input="x")
    assert caught.value.status_code == 501


def test_openai_sdk_with_a_wrong_key_is_refused(connection):
    require_module("openai", "pip install openai==3.57.0")
    import openai

    client = openai.OpenAI(base_url=connection["openai_base_url"], api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def write_tokenizer(folder: Path) -> Path:
    """A tiny word-level tokenizer saved as a local folder transformers can load (nothing downloaded)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = " ".join(json.loads(line)["question"] + " " + json.loads(line)["answer"]
                     for line in (DATA / "docs.jsonl").read_text().splitlines())
    vocab = {"[UNK]": 0, "<eos>": 1}
    for word in re.findall(r"\w+|[^\w\s]", words + " Q : A"):
        vocab.setdefault(word, len(vocab))
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "unk_token": "[UNK]"}))
    return folder


@pytest.mark.parametrize("tokenizer", ["none", "local path"])
def test_lm_eval_local_completions_runs_a_generation_task_through_the_window(connection, window, tmp_path,
                                                                           tokenizer):
    require_module("lm_eval", "pip install 'lm-eval[api]==0.4.13'")
    settings = "num_concurrent=4,max_retries=1,timeout=600,tokenized_requests=False"
    if tokenizer == "none":
        settings += ",tokenizer_backend=none"
    else:
        require_module("transformers", "pip install transformers==5.24.0 (no torch needed for a tokenizer)")
        settings += f",tokenizer_backend=huggingface,tokenizer={write_tokenizer(tmp_path / 'tok')}"
    before = log_length(window)
    done = run_lm_eval(connection, tmp_path, settings)
    assert done.returncode == 0, done.stderr[-3000:]
    calls = new_entries(window, before, 3)
    assert [(e["path"], e["status"]) for e in calls] == [("/v1/completions", 200)] * 3
    answered = {DIGEST.search(text).group(1) for text in json.loads(done.stdout.strip().splitlines()[-1])}
    assert answered == {e["request_sha256"] for e in calls}  # each doc's answer names its exact request bytes


@pytest.mark.parametrize("max_retries,attempts", [("1", 1), (None, 3)])
def test_lm_eval_max_retries_counts_attempts(connection, window, tmp_path, max_retries, attempts):
    require_module("lm_eval", "pip install 'lm-eval[api]==0.4.13'")
    settings = "num_concurrent=1,timeout=60,tokenizer_backend=none,tokenized_requests=False"
    if max_retries is not None:
        settings += f",max_retries={max_retries}"
    before = log_length(window)
    done = run_lm_eval(connection, tmp_path, settings, base_path="/v1/embeddings")  # 501 ADAPTER REQUIRED
    assert done.returncode != 0
    assert [e["status"] for e in new_entries(window, before, attempts)] == [501] * attempts
