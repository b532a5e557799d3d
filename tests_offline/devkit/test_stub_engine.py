"""The stub engine image on the real Docker engine: built locally without a pull, run like the kit runs
vLLM (non-root uid, read-only root, tmpfs /tmp, no network, socket in a bind-mounted folder).

No GPU exists here; the stub plays vLLM's control surface only (command line, boot log, OpenAI endpoints
on the Unix socket, failure modes). Every container is labelled onegpu.test=1 and removed in teardown.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import math
import os
import re
import threading
import time
from pathlib import Path

import pytest
from docker.models.containers import Container

from devkit.stub_engine.build import REPOSITORY, ensure_stub_image, stub_tag
from devkit.stub_engine.payload.vllm_stub.logfmt import boot_numbers
from onegpu.core.uds_http import uds_request, uds_stream
from onegpu.engine.bootlog import Failure, classify_failure, explain_failure, parse_boot_log

UID = "1000:1000"
MODEL_ID = "org/stub-model"
SERVE = ["serve", "/models/m", "--served-model-name", MODEL_ID, "--uds", "/run/onegpu/engine.sock",
         "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1", "--max-num-seqs", "1",
         "--gpu-memory-utilization", "0.85", "--max-model-len", "4096", "--max-num-batched-tokens", "2048",
         "--enable-chunked-prefill", "--enforce-eager", "--cpu-offload-gb", "2", "--generation-config", "vllm"]


@pytest.fixture(scope="module")
def stub_image(docker_client):
    return ensure_stub_image(docker_client)


class Stub:
    """One stub container created (never `run`, which pulls on a miss) and removed by the fixture."""

    def __init__(self, client, image, socket_dir: Path):
        self.client, self.image, self.socket_dir = client, image, socket_dir
        self.socket_path = str(socket_dir / "engine.sock")
        self.container: Container | None = None  # set by start

    def start(self, command, env=None, entrypoint=None, mem_limit=None):
        self.container = self.client.containers.create(
            self.image, command=command, entrypoint=entrypoint, environment={"HOME": "/tmp", **(env or {})},
            user=UID, network_mode="none", read_only=True, tmpfs={"/tmp": "size=16m"},
            labels={"onegpu.test": "1"}, volumes={str(self.socket_dir): {"bind": "/run/onegpu", "mode": "rw"}},
            mem_limit=mem_limit, memswap_limit=mem_limit, security_opt=["no-new-privileges"], cap_drop=["ALL"])
        self.container.start()
        return self

    def wait(self, timeout=20) -> int:
        assert self.container is not None
        return self.container.wait(timeout=timeout)["StatusCode"]

    def logs(self) -> str:
        assert self.container is not None
        return self.container.logs(stdout=True, stderr=True).decode()

    def state(self) -> dict:
        assert self.container is not None
        self.container.reload()
        return self.container.attrs["State"]

    def wait_log(self, text: str, timeout=20) -> str:
        end = time.monotonic() + timeout
        while text not in (logs := self.logs()):
            if time.monotonic() > end:
                raise AssertionError(f"{text!r} not logged in {timeout} s:\n{logs}")
            time.sleep(0.05)
        return logs

    def ready(self, timeout=20) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if uds_request(self.socket_path, "GET", "/health", timeout=1).status == 200:
                    return
            except OSError:
                pass
            if self.state()["Status"] != "running":
                raise AssertionError(f"stub exited before ready:\n{self.logs()}")
            time.sleep(0.05)
        raise AssertionError(f"stub not ready in {timeout} s:\n{self.logs()}")

    def post(self, path, obj, timeout=10):
        return uds_request(self.socket_path, "POST", path, body=json.dumps(obj).encode(), timeout=timeout)

    def stats(self) -> dict:
        return json.loads(uds_request(self.socket_path, "GET", "/stub/stats", timeout=5).body)

    def remove(self):
        if self.container is not None:
            self.container.remove(force=True)


@pytest.fixture
def stub_factory(docker_client, stub_image, tmp_path_factory):
    made = []

    def make(command, env=None, entrypoint=None, mem_limit=None) -> Stub:
        socket_dir = tmp_path_factory.mktemp("sock")
        os.chown(socket_dir, 1000, 1000)  # the engine's uid must be able to create its socket
        socket_dir.chmod(0o700)
        stub = Stub(docker_client, stub_image, socket_dir)
        made.append(stub)
        return stub.start(command, env, entrypoint, mem_limit)

    yield make
    for stub in made:
        stub.remove()


@pytest.fixture(scope="module")
def serving(docker_client, stub_image, tmp_path_factory):
    """One stub serving the kit's launch line with a small per-token delay."""
    socket_dir = tmp_path_factory.mktemp("serving")
    os.chown(socket_dir, 1000, 1000)
    socket_dir.chmod(0o700)
    stub = Stub(docker_client, stub_image, socket_dir)
    try:
        stub.start(SERVE, {"STUB_TOKEN_DELAY_S": "0.03"})
        stub.ready()
        yield stub
    finally:
        stub.remove()


def test_image_is_local_tagged_by_content_and_reused(docker_client, stub_image):
    tag = stub_tag()
    assert re.fullmatch(rf"{REPOSITORY}:[0-9a-f]{{12}}", tag)
    assert ensure_stub_image(docker_client) == stub_image  # cached: the same image, not a rebuild
    image = docker_client.images.get(stub_image)
    assert tag in image.tags
    assert image.attrs["RepoDigests"] == []  # imported here, never pulled from a registry
    assert image.attrs["Config"]["Entrypoint"] == ["vllm"]
    assert image.attrs["Size"] < 80 * 10**6


def test_probe_python_sees_fake_vllm_torch_and_devices(stub_factory):
    stub = stub_factory(["-c", "import vllm, torch; print(vllm.__version__, torch.__version__, "
                               "torch.cuda.device_count())"],
                        env={"STUB_VLLM_VERSION": "0.10.2", "STUB_CUDA_DEVICES": "2"}, entrypoint=["python3"])
    assert stub.wait() == 0
    assert stub.logs().split() == ["0.10.2", "2.8.0+cu128", "2"]


def test_serves_as_non_root_with_read_only_root_and_no_network(serving):
    host = serving.container.attrs["HostConfig"]
    assert host["ReadonlyRootfs"] and host["NetworkMode"] == "none"
    assert serving.container.attrs["Config"]["User"] == UID
    assert os.stat(serving.socket_path).st_uid == 1000  # created by the container's own uid
    resp = uds_request(serving.socket_path, "GET", "/health", timeout=5)
    assert resp.status == 200 and resp.body == b""
    models = json.loads(uds_request(serving.socket_path, "GET", "/v1/models", timeout=5).body)
    assert [m["id"] for m in models["data"]] == [MODEL_ID]


def test_boot_lines_state_the_numbers_of_the_arguments(serving):
    """The default voice is vLLM 0.34.0's CUDA build (its format strings, voices.py): 64-token blocks of the
    stub's 131,072 bytes a token, the extensible KV cache's after-warmup lines, the one-line capacity."""
    logs = serving.logs()
    n = boot_numbers(4096, 2.0, 0.0)
    blocks = math.ceil(n.kv_cache_tokens / 64)  # 13,312 tokens -> 208 blocks of 8 MiB
    assert f"GPU KV cache size: {int(blocks / 64 * 4096):,} tokens, Maximum concurrency for 4,096 tokens per " \
           f"request: {blocks / 64:.2f}x" in logs
    assert f"Model loading took {n.load_gib:.4f} GiB memory and" in logs
    assert f"Available KV cache memory: {round(blocks * 64 * 131072 / 2**30, 2)} GiB" in logs
    assert f"Extended KV cache to {blocks} blocks ({blocks * 8 / 1024:.2f} GiB)." in logs
    assert re.search(rf"Memory after warmup: .* {blocks} KV cache blocks \(1\.62 GiB\) fit within the requested "
                     r"68\.0 GiB\. Torch may reserve up to 2\.5 GiB\.", logs)
    assert "gpu_memory_utilization=0.85 caps this instance at 68.0 GiB" in logs  # the kit's 0.85 under 0.34
    assert "Total CPU offloaded parameters: 2.0\n" in logs  # format_gib's round(x, 2) printed with %s
    assert "Starting vLLM server on unix:/run/onegpu/engine.sock" in logs
    # The processes as vLLM 0.32.0 names them: the engine core and its worker, each with its own pid.
    assert re.search(r"\(EngineCore pid=\d+\)\S* INFO .*Initializing a V1 LLM engine", logs)
    assert re.search(r"\(Worker pid=\d+\)\S* INFO .*Loading weights took", logs)
    assert "EngineCore_DP0" not in logs
    facts = parse_boot_log(logs)
    assert (facts.kv_cache_tokens, facts.concurrency_tokens, facts.load_gib, facts.cpu_offload_gib) == \
        (n.kv_cache_tokens, 4096, n.load_gib, 2.0)
    assert (facts.kv_extended_blocks, facts.kv_after_warmup.blocks, facts.kv_after_warmup.requested_gib) == \
        (blocks, blocks, 68.0)
    assert facts.server_started and facts.vllm_version == "0.34.0"


def test_the_cpu_build_voice_speaks_as_the_recorded_032_cpu_engine(stub_factory):
    stub = stub_factory(SERVE, {"STUB_VLLM_VERSION": "0.32.0+cpu"})
    stub.ready()
    logs = stub.logs()
    n = boot_numbers(4096, 2.0, 0.0)
    assert "Automatically detected platform cpu." in logs and " version 0.32.0\n" in logs
    assert f"Explicitly set ({n.kv_cache_gib}/23.54) GiB for KV cache on node 0." in logs
    assert f"CPU KV cache size: {n.kv_cache_tokens:,} tokens" in logs
    assert "Model loading took" not in logs and "GPU KV cache" not in logs and "Memory after warmup" not in logs
    facts = parse_boot_log(logs)
    assert (facts.kv_cache_device, facts.kv_cache_gib, facts.vllm_version) == ("CPU", n.kv_cache_gib, "0.32.0")


def test_an_older_cuda_voice_keeps_the_estimate_and_refuses_a_busy_card(stub_factory):
    stub = stub_factory(SERVE, {"STUB_VLLM_VERSION": "0.33.0"})
    stub.ready()
    assert "Memory after warmup" not in stub.logs() and "Starting vLLM API server 0 on unix:" in stub.logs()
    busy = stub_factory(SERVE, {"STUB_VLLM_VERSION": "0.33.0", "STUB_FAIL": "gpu_memory_taken"})
    assert busy.wait() == 1 and "Free memory on device cuda:0" in busy.logs()


def test_chat_answer_names_the_body_hash_and_counts_tokens(serving):
    before = serving.stats()["requests"]
    body = json.dumps({"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5}).encode()
    resp = uds_request(serving.socket_path, "POST", "/v1/chat/completions", body=body, timeout=10)
    answer = json.loads(resp.body)
    digest = hashlib.sha256(body).hexdigest()
    assert resp.status == 200 and resp.header("content-length") == str(len(resp.body))
    assert answer["choices"][0]["message"]["content"] == f"stub answer sha256={digest} tokens=5"
    assert answer["choices"][0]["finish_reason"] == "length"
    assert answer["usage"] == {"prompt_tokens": (len(body) + 3) // 4, "completion_tokens": 5,
                               "total_tokens": (len(body) + 3) // 4 + 5, "prompt_tokens_details": None}
    stats = serving.stats()
    assert stats["requests"] == before + 1 and stats["bodies_sha256"][-1] == digest


def test_completion_without_max_tokens_stops_on_its_own(serving):
    answer = json.loads(serving.post("/v1/completions", {"model": MODEL_ID, "prompt": "Hello"}).body)
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == 16
    assert answer["choices"][0]["text"].startswith("stub answer sha256=")


def test_streamed_chat_is_sse_one_chunk_per_token_then_done(serving):
    req = {"model": MODEL_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
           "stream": True, "stream_options": {"include_usage": True}}
    body = json.dumps(req).encode()
    with uds_stream(serving.socket_path, "POST", "/v1/chat/completions", body=body, timeout=10) as stream:
        assert stream.header("content-type").startswith("text/event-stream")
        assert stream.header("transfer-encoding") == "chunked"
        raw = list(stream.chunks())
    events = b"".join(raw).decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(e[len("data: "):]) for e in events[:-2]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == f"stub answer sha256={hashlib.sha256(body).hexdigest()} tokens=4"
    assert chunks[-1]["usage"]["completion_tokens"] == 4 and chunks[-1]["choices"] == []
    assert len(raw) >= 5  # role chunk + 4 tokens (+ usage, [DONE]) arrive as separate chunks
    assert stream.chunk_times_s[-1] - stream.chunk_times_s[0] >= 4 * 0.03


def test_unknown_model_is_404_like_vllm(serving):
    resp = serving.post("/v1/chat/completions", {"model": "other", "messages": []})
    assert resp.status == 404
    assert json.loads(resp.body)["error"]["message"] == "The model `other` does not exist."


def test_concurrency_is_counted(stub_factory):
    stub = stub_factory(SERVE, {"STUB_RESPONSE_DELAY_S": "2"})
    stub.ready()
    threads = [threading.Thread(target=stub.post, args=("/v1/completions", {"prompt": str(i)})) for i in range(3)]
    for t in threads:
        t.start()
    seen = []
    for _ in range(20):  # sampled while the three are held by the response delay
        seen.append(stub.stats()["in_flight"])
        time.sleep(0.05)
    for t in threads:
        t.join()
    stats = stub.stats()
    assert (stats["requests"], stats["max_in_flight"], stats["in_flight"]) == (3, 3, 0)
    assert max(seen) >= 1  # in_flight is live, not only a total


def test_unknown_flag_is_refused_like_vllm(stub_factory):
    stub = stub_factory(SERVE + ["--not-a-vllm-flag", "1"])
    assert stub.wait() == 2
    logs = stub.logs()  # vLLM's top-level parser reports it, after its usage block (fail-unknown-flag.log)
    said = "vllm: error: unrecognized arguments: --not-a-vllm-flag 1"
    assert logs.startswith("usage: vllm [-h] [-v]\n") and f"\n{said}\n" in logs
    assert explain_failure(logs, 2, False, False, False) == Failure("RUNTIME_INCOMPATIBLE", said)


def test_help_all_lists_every_flag_and_bare_help_only_groups(stub_factory):
    full = stub_factory(["serve", "--help=all"])
    groups = stub_factory(["serve", "--help"])
    assert full.wait() == 0 and groups.wait() == 0
    assert all(flag in full.logs() for flag in SERVE if flag.startswith("--"))
    assert "--help=all" in groups.logs() and "--max-model-len" not in groups.logs()


def test_vllm_before_0_10_1_has_no_uds(stub_factory):
    env = {"STUB_VLLM_VERSION": "0.9.2"}
    helped = stub_factory(["serve", "--help"], env)
    launched = stub_factory(SERVE, env)
    help_all = stub_factory(["serve", "--help=all"], env)
    assert helped.wait() == 0 and "--max-model-len" in helped.logs() and "--uds" not in helped.logs()
    assert launched.wait() == 2 and "unrecognized arguments: --uds" in launched.logs()
    assert help_all.wait() == 2 and "ignored explicit argument 'all'" in help_all.logs()


def test_language_model_only_as_vllm_0_32_takes_it_and_older_stubs_refuse_it(stub_factory):
    # vLLM's parser declares it with BooleanOptionalAction (engine/arg_utils.py): both forms, in MultiModalConfig.
    help_all = stub_factory(["serve", "--help=all"], {"STUB_VLLM_VERSION": "0.32.0"})
    launched = stub_factory(SERVE + ["--language-model-only"], {"STUB_VLLM_VERSION": "0.32.0"})
    older = stub_factory(SERVE + ["--language-model-only"], {"STUB_VLLM_VERSION": "0.11.0"})
    assert help_all.wait() == 0
    assert "\nMultiModalConfig:\n" in help_all.logs()
    assert "  --language-model-only, --no-language-model-only\n" in help_all.logs()
    launched.ready()
    assert "'generation_config': 'vllm'" in launched.logs() and "'language_model_only': True" in launched.logs()
    assert older.wait() == 2 and "unrecognized arguments: --language-model-only" in older.logs()


def test_old_log_format_prints_two_lines(stub_factory):
    stub = stub_factory(SERVE, {"STUB_LOG_FORMAT": "old", "STUB_VLLM_VERSION": "0.11.0"})
    stub.ready()
    logs = stub.logs()
    n = boot_numbers(4096, 2.0, 0.0)
    assert f"GPU KV cache size: {n.kv_cache_tokens} tokens\n" in logs
    assert f"Maximum concurrency for 4096 tokens per request: {n.max_concurrency:.2f}x" in logs
    assert f"Model loading took {n.load_gib:.4f} GiB and" in logs
    assert "\x1b[" not in logs and "(EngineCore" not in logs
    facts = parse_boot_log(logs)
    assert (facts.kv_cache_tokens, facts.max_concurrency, facts.load_gib) == \
        (n.kv_cache_tokens, n.max_concurrency, n.load_gib)


@pytest.mark.parametrize("fail, line, code", [
    ("load_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "LOAD_OOM"),
    ("no_kv_memory", "No available memory for the cache blocks", "NO_KV_MEMORY"),
    ("unsupported_quant", "ValueError: Unknown quantization method: stubq", "UNSUPPORTED_QUANT"),
    ("unsupported_arch", "Model architectures ['StubUnknownForCausalLM'] are not supported for now", "UNSUPPORTED_ARCH"),
    ("trust_remote_code", "set the option `trust_remote_code=True` to remove this error", "TRUST_REMOTE_CODE_REQUIRED"),
    ("die_at_boot", "CUDA error: an illegal memory access was encountered", "CUDA_ERROR"),
    # 0.34 refuses no busy card at start: the cache measured after warmup is too small for one request
    ("gpu_memory_taken", "is larger than the available KV cache memory (0.19 GiB)", "CONTEXT_EXCEEDS_KV"),
    ("needs_network", "We couldn't connect to 'https://huggingface.co'", "RUNTIME_NEEDS_NETWORK"),
])
def test_failure_knob_prints_vllms_error_and_exits_1(stub_factory, fail, line, code):
    stub = stub_factory(SERVE, {"STUB_FAIL": fail})
    assert stub.wait() == 1
    logs = stub.logs()
    assert line in logs
    assert "Application startup complete." not in logs
    assert classify_failure(logs, 1, stub.state()["OOMKilled"], False, False) == code
    if fail in ("load_oom", "no_kv_memory", "die_at_boot", "gpu_memory_taken"):
        # The engine core gave up: the API server's own traceback ends the log, without a process prefix.
        assert logs.endswith("\nRuntimeError: Engine core initialization failed. See root cause above. Failed core "
                             "proc(s): {'EngineCore': 1}\n") and "\nProcess EngineCore:\n" in logs


def test_needs_network_proves_no_interface_but_lo(stub_factory):
    stub = stub_factory(SERVE, {"STUB_FAIL": "needs_network"})
    assert stub.wait() == 1
    assert "[Errno 101] Network is unreachable" in stub.logs()  # printed only when /proc/net shows lo alone


def test_trust_remote_code_allowed_boots(stub_factory):
    stub = stub_factory(SERVE + ["--trust-remote-code"], {"STUB_FAIL": "trust_remote_code"})
    stub.ready()


def test_hang_at_boot_never_answers_and_stops_on_sigterm(stub_factory):
    stub = stub_factory(SERVE, {"STUB_FAIL": "hang_at_boot"})
    stub.wait_log("Model loading took")
    time.sleep(1)
    assert stub.state()["Status"] == "running"
    assert "Application startup complete." not in stub.logs()
    assert classify_failure(stub.logs(), None, False, False, timed_out=True) == "LOAD_TIMEOUT"
    with pytest.raises(TimeoutError):  # the socket is bound early, as vLLM does, but nobody answers
        uds_request(stub.socket_path, "GET", "/health", timeout=0.5)
    started = time.monotonic()
    stub.container.stop(timeout=10)
    assert time.monotonic() - started < 5 and stub.state()["ExitCode"] == 0


def test_ignore_sigterm_needs_the_stop_timeout(stub_factory):
    stub = stub_factory(SERVE, {"STUB_IGNORE_SIGTERM": "1"})
    stub.ready()
    started = time.monotonic()
    stub.container.stop(timeout=1)
    assert time.monotonic() - started >= 1 and stub.state()["ExitCode"] == 137


def test_crash_mid_stream_cuts_the_stream_and_exits(stub_factory):
    stub = stub_factory(SERVE, {"STUB_FAIL": "crash_mid_stream"})
    stub.ready()
    body = json.dumps({"prompt": "x", "stream": True}).encode()
    got = []
    with uds_stream(stub.socket_path, "POST", "/v1/completions", body=body, timeout=10) as stream:
        with pytest.raises(http.client.IncompleteRead):
            for chunk in stream.chunks():
                got.append(chunk)
    assert got and b"[DONE]" not in b"".join(got)
    assert stub.wait() == 0 and "EngineDeadError" in stub.logs()


def test_die_after_requests_answers_n_then_exits_with_vllms_lines(stub_factory):
    stub = stub_factory(SERVE, {"STUB_FAIL": "die_after_requests:2"})
    stub.ready()
    assert stub.post("/v1/completions", {"prompt": "a"}).status == 200
    assert stub.post("/v1/completions", {"prompt": "b"}).status == 200
    # vLLM's API server shuts down like a normal stop once its engine died while serving: exit status 0
    # (died-after-start.log); the reason is only in the log.
    assert stub.wait() == 0
    logs = stub.logs()
    assert "EngineCore encountered a fatal error." in logs and "INFO:     Application shutdown complete." in logs
    for status in (0, 1):
        assert explain_failure(logs, status, False, False, False) == Failure(
            "ENGINE_DIED", "Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.")


def test_die_after_zero_requests_answers_the_first_500_and_exits(stub_factory):
    stub = stub_factory(SERVE, {"STUB_FAIL": "die_after_requests:0"})
    stub.ready()
    answer = stub.post("/v1/completions", {"prompt": "a"})  # vLLM answers the request in flight, then goes down
    assert answer.status == 500 and b"EngineCore encountered an issue" in answer.body
    assert stub.wait() == 0


def test_boot_delay_keeps_the_socket_unanswered(stub_factory):
    started = time.monotonic()
    stub = stub_factory(SERVE, {"STUB_BOOT_DELAY_S": "1.5"})
    stub.ready()
    assert time.monotonic() - started >= 1.5
    assert parse_boot_log(stub.logs()).load_s == boot_numbers(4096, 2.0, 1.5).load_s


def test_alloc_past_cap_is_killed_by_the_ram_cap(stub_factory):
    stub = stub_factory(SERVE, {"STUB_FAIL": "alloc_past_cap"}, mem_limit="192m")
    assert stub.wait(timeout=60) == 137
    state = stub.state()
    assert state["OOMKilled"] is True
    assert "MiB of host memory held" in stub.logs()
    assert classify_failure(stub.logs(), 137, state["OOMKilled"], False, False) == "HOST_OOM_KILLED"


def test_bad_knob_is_refused_naming_it(stub_factory):
    stub = stub_factory(SERVE, {"STUB_FAIL": "explode"})
    assert stub.wait() == 64
    assert "STUB_FAIL='explode': must be one of" in stub.logs()
