"""Bad request files and protocol files, each with the fragments its refusal must name (line, field, rule).

Shared by the unit tests of onegpu.requests.requests_file / onegpu.requests.protocol and the fixture-level tests.
"""
from __future__ import annotations

import hashlib
import json

MODEL = "org/model-x"
CONTEXT = 4096
MAX_REQUESTS = 50
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def chat_line(custom_id: str = "r1", **body_over) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16}
    body.update(body_over)
    return {"custom_id": custom_id, "method": "POST", "url": CHAT, "body": body}


def completion_line(custom_id: str = "c1", **body_over) -> dict:
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 16}
    body.update(body_over)
    return {"custom_id": custom_id, "method": "POST", "url": COMPLETIONS, "body": body}


def jsonl(*objs) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def _drop(obj: dict, key: str) -> dict:
    return {k: v for k, v in obj.items() if k != key}


def _drop_body(obj: dict, key: str) -> dict:
    return {**obj, "body": {k: v for k, v in obj["body"].items() if k != key}}


GOOD = jsonl(chat_line("a"), completion_line("b"))

# (name, file bytes, fragments that one of the refusal's lines must all contain, for each expected problem)
BAD_REQUEST_FILES: list[tuple[str, bytes, list[list[str]]]] = [
    ("wrong model", jsonl(chat_line(model="other/model")),
     [["line 1", "field body.model", "not the served model ID", "never rewrites"]]),
    ("missing custom_id", jsonl(_drop(chat_line(), "custom_id")),
     [["line 1", "field custom_id", "missing"]]),
    ("empty custom_id", jsonl(chat_line("")), [["line 1", "field custom_id", "non-empty string"]]),
    ("control character in custom_id", jsonl(chat_line("a\tb")),
     [["line 1", "field custom_id", "control characters"]]),
    ("duplicate custom_id", jsonl(chat_line("x"), chat_line("y"), chat_line("x")),
     [["line 3", "field custom_id", "repeats line 1", "unique"]]),
    ("unsupported url", jsonl({**chat_line(), "url": "/v1/embeddings"}),
     [["line 1", "field url", "/v1/chat/completions or /v1/completions"]]),
    ("method GET", jsonl({**chat_line(), "method": "GET"}), [["line 1", "field method", "POST"]]),
    ("no output budget", jsonl(_drop_body(chat_line(), "max_tokens")),
     [["line 1", "field body.max_tokens", "missing", "output budget"]]),
    ("budget beyond the context", jsonl(chat_line(max_tokens=CONTEXT)),
     [["line 1", "field body.max_tokens", f"below the context of {CONTEXT}"]]),
    ("max_completion_tokens beyond the context", jsonl(chat_line(max_completion_tokens=CONTEXT + 5)),
     [["line 1", "field body.max_completion_tokens", "below the context"]]),
    ("budget not a positive integer", jsonl(chat_line(max_tokens=0), chat_line("r2", max_tokens="16"),
                                            chat_line("r3", max_tokens=True)),
     [["line 1", "field body.max_tokens", "positive integer"], ["line 2", "positive integer"],
      ["line 3", "positive integer"]]),
    ("n above 1", jsonl(chat_line(n=2)), [["line 1", "field body.n", "absent or 1"]]),
    ("streaming", jsonl(chat_line(stream=True)), [["line 1", "field body.stream", "no streaming"]]),
    ("chat without messages", jsonl(_drop_body(chat_line(), "messages")),
     [["line 1", "field body.messages", "non-empty list"]]),
    ("completion without prompt", jsonl(_drop_body(completion_line(), "prompt")),
     [["line 1", "field body.prompt", "non-empty"]]),
    ("completion budget under the chat name", jsonl(_drop_body(completion_line(max_completion_tokens=8),
                                                               "max_tokens")),
     [["line 1", "field body.max_completion_tokens", "reads only max_tokens"],
      ["line 1", "field body.max_tokens", "missing"]]),
    ("unknown top-level field", jsonl({**chat_line(), "priority": 1}),
     [["line 1", "field priority", "unknown"]]),
    ("body not an object", jsonl({**chat_line(), "body": "{}"}), [["line 1", "field body", "JSON object"]]),
    ("duplicate JSON key", b'{"custom_id":"a","custom_id":"b","method":"POST","url":"/v1/completions",'
                           b'"body":{"model":"org/model-x","prompt":"p","max_tokens":4}}\n',
     [["line 1", "duplicate key", "custom_id"]]),
    ("duplicate key inside the body", b'{"custom_id":"a","method":"POST","url":"/v1/completions",'
                                      b'"body":{"model":"org/model-x","model":"other","prompt":"p","max_tokens":4}}\n',
     [["line 1", "duplicate key", "model"]]),
    ("NaN", jsonl(chat_line()).replace(b'"max_tokens": 16', b'"max_tokens": 16, "temperature": NaN'),
     [["line 1", "NaN", "not a JSON number"]]),
    ("Infinity", jsonl(chat_line()).replace(b'"max_tokens": 16', b'"max_tokens": 16, "top_p": -Infinity'),
     [["line 1", "Infinity", "not a JSON number"]]),
    ("float overflow", jsonl(chat_line()).replace(b'"max_tokens": 16', b'"max_tokens": 16, "top_p": -1e400'),
     [["line 1", "-1e400", "beyond the range of a 64-bit float"]]),
    ("blank line", jsonl(chat_line("a")) + b"\n" + jsonl(chat_line("b")), [["line 2", "blank line"]]),
    ("whitespace-only line", jsonl(chat_line("a")) + b"  \t\n" + jsonl(chat_line("b")), [["line 2", "blank"]]),
    ("not UTF-8", jsonl(chat_line("a")) + b'{"custom_id":"\xff"}\n', [["line 2", "byte 15", "not UTF-8"]]),
    ("byte-order mark", b"\xef\xbb\xbf" + jsonl(chat_line()), [["line 1", "byte-order mark"]]),
    ("truncated JSON", jsonl(chat_line("a")) + b'{"custom_id":"b","method":"POST"\n',
     [["line 2", "not valid JSON at column"]]),
    ("array instead of object", b"[1, 2]\n", [["line 1", "must be a JSON object"]]),
    ("empty file", b"", [["file", "no requests"]]),
    ("more lines than max_requests", jsonl(*(chat_line(f"r{i}") for i in range(MAX_REQUESTS + 1))),
     [["file", f"{MAX_REQUESTS + 1} request lines", f"max_requests {MAX_REQUESTS}"]]),
    ("many problems at once", jsonl(chat_line("a", model="m2"), {**chat_line("a"), "url": "/v2"},
                                    chat_line("c", n=3, stream=True)) + b"\n",
     [["line 1", "body.model"], ["line 2", "repeats line 1"], ["line 2", "field url"], ["line 3", "body.n"],
      ["line 3", "body.stream"], ["line 4", "blank"]]),
]

REQUESTS_SHA256 = hashlib.sha256(GOOD).hexdigest()


def own_protocol(**over) -> dict:
    doc = {"schema": "onegpu/protocol@1",
           "benchmark": {"id": "gsm8k", "split": "test"},
           "harness": {"name": "lm-evaluation-harness", "revision": "v0.4.9 a1b2c3d",
                       "configuration": "5-shot, chat template from the checkpoint"},
           "dataset": {"id": "openai/gsm8k", "revision": "e53f048856ff4f594e959d75785d2c2d37b678ee",
                       "items": 1319},
           "scorer": {"name": "lm-eval exact_match", "revision": "v0.4.9"},
           "interaction": "independent_requests", "timing_policy": "offline-no-per-request-deadline",
           "context_tokens": CONTEXT, "requests_sha256": REQUESTS_SHA256}
    doc.update(over)
    return doc


def legacy_protocol(**over) -> dict:
    doc = {"schema": "axm/frozen-benchmark-requests@1", "benchmark_id": "gsm8k test",
           "harness_revision": "lm-eval a1b2c3d 5-shot", "dataset_revision": "openai/gsm8k e53f048 1319 items",
           "scorer_revision": "lm-eval exact_match a1b2c3d", "interaction": "independent_requests",
           "timing_policy": "offline-no-per-request-deadline", "context": CONTEXT,
           "requests_sha256": REQUESTS_SHA256}
    doc.update(over)
    return doc


def _js(doc) -> bytes:
    return json.dumps(doc, indent=1).encode()


def _without(doc: dict, key: str) -> dict:
    return {k: v for k, v in doc.items() if k != key}


BAD_PROTOCOLS: list[tuple[str, bytes, list[list[str]]]] = [
    ("legacy placeholders", _js(legacy_protocol(benchmark_id="REPLACE_WITH_EXACT_BENCHMARK_AND_SPLIT",
                                                requests_sha256="REPLACE_WITH_EXACT_REQUEST_FILE_SHA256")),
     [["field benchmark_id", "placeholder"], ["field requests_sha256", "placeholder", REQUESTS_SHA256]]),
    ("unknown schema", _js(own_protocol(schema="onegpu/protocol@9")), [["field schema", "must be"]]),
    ("context differs from the settings", _js(own_protocol(context_tokens=8192)),
     [["field context_tokens", "8192", f"settings' context of {CONTEXT}"]]),
    ("legacy context differs", _js(legacy_protocol(context=2048)), [["field context", "2048", "must equal"]]),
    ("request file hash differs", _js(own_protocol(requests_sha256="0" * 64)),
     [["field requests_sha256", "does not match", REQUESTS_SHA256]]),
    ("hash malformed", _js(own_protocol(requests_sha256="abc")), [["field requests_sha256", "64 hex"]]),
    ("interactive benchmark", _js(own_protocol(interaction="multi_turn_agent")),
     [["field interaction", "independent_requests", "native harness"]]),
    ("per-request deadlines", _js(own_protocol(timing_policy="per-request-deadline-30s")),
     [["field timing_policy", "offline-no-per-request-deadline"]]),
    ("scorer missing", _js(_without(own_protocol(), "scorer")), [["field scorer", "required"]]),
    ("revision missing", _js(own_protocol(harness={"name": "lm-eval"})), [["field harness.revision", "required"]]),
    ("empty revision", _js(own_protocol(dataset={"id": "d", "revision": " "})),
     [["field dataset.revision", "non-empty"]]),
    ("unknown field", _js(own_protocol(temperature=0)), [["field temperature", "unknown"]]),
    ("legacy unknown field", _js(legacy_protocol(split="test")), [["field split", "unknown"]]),
    ("duplicate key", b'{"schema":"onegpu/protocol@1","schema":"onegpu/protocol@1"}', [["duplicate key", "schema"]]),
    ("NaN context", _js(own_protocol()).replace(f'"context_tokens": {CONTEXT}'.encode(), b'"context_tokens": NaN'),
     [["NaN", "not a JSON number"]]),
    ("not an object", b"[]", [["must be a JSON object"]]),
    ("bad item denominator", _js(own_protocol(dataset={"id": "d", "revision": "r", "items": 0})),
     [["field dataset.items", "positive integer"]]),
    ("identity not a string", _js(own_protocol(benchmark={"id": 7, "split": "test"})),
     [["field benchmark.id", "non-empty string"]]),
]
