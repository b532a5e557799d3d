"""Deterministic OpenAI-shaped answers derived from the exact request body bytes.

The answer text is "stub answer sha256=<hex of the body> tokens=N": a test can check that the engine
received exactly the bytes it sent. Token counts: prompt = ceil(body bytes / 4); completion =
min(max_tokens, answer_tokens); finish_reason "length" when max_tokens cut the answer, else "stop".
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass


class RequestError(Exception):
    """A request vLLM would refuse: HTTP status, error type, message, offending parameter."""

    def __init__(self, status: int, err_type: str, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.err_type, self.message, self.param = status, err_type, message, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.err_type, "param": self.param,
                          "code": self.status}}


@dataclass(frozen=True)
class Plan:
    """What one completion request will answer."""

    kind: str  # "chat" | "completion"
    body_sha256: str
    model: str
    stream: bool
    include_usage: bool
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    text: str

    @property
    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens, "prompt_tokens_details": None}

    @property
    def pieces(self) -> list[str]:
        """The text cut into `completion_tokens` streamed pieces that join back to `text`."""
        n, t = self.completion_tokens, self.text
        return [t[i * len(t) // n:(i + 1) * len(t) // n] for i in range(n)]

    @property
    def response_id(self) -> str:
        return ("chatcmpl-" if self.kind == "chat" else "cmpl-") + self.body_sha256[:32]


def plan_answer(kind: str, body: bytes, served: list[str], max_model_len: int, answer_tokens: int) -> Plan:
    """Check a request as vLLM would and plan its answer; raises RequestError."""
    try:
        req = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(400, "BadRequestError", f"JSON decode error: {exc}") from None
    if not isinstance(req, dict):
        raise RequestError(400, "BadRequestError", "Input should be a valid dictionary")
    model = req.get("model") or served[0]
    if model not in served:
        raise RequestError(404, "NotFoundError", f"The model `{model}` does not exist.", "model")
    field = "messages" if kind == "chat" else "prompt"
    if field not in req or (kind == "chat" and not isinstance(req[field], list)):
        raise RequestError(400, "BadRequestError", f"Field required: {field}", field)
    max_tokens = req.get("max_completion_tokens", req.get("max_tokens")) if kind == "chat" else req.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1):
        raise RequestError(400, "BadRequestError", f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
    prompt_tokens = (len(body) + 3) // 4
    completion = answer_tokens if max_tokens is None else min(max_tokens, answer_tokens)
    asked = max_tokens if max_tokens is not None else completion
    if prompt_tokens + asked > max_model_len:
        raise RequestError(400, "BadRequestError",
                           f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                           f"{prompt_tokens + asked} tokens ({prompt_tokens} in the messages, {asked} in the "
                           "completion). Please reduce the length of the messages or completion.")
    digest = hashlib.sha256(body).hexdigest()
    options = req.get("stream_options") or {}
    return Plan(
        kind=kind, body_sha256=digest, model=model, stream=bool(req.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        prompt_tokens=prompt_tokens, completion_tokens=completion,
        finish_reason="length" if max_tokens is not None and max_tokens < answer_tokens else "stop",
        text=f"stub answer sha256={digest} tokens={completion}",
    )


def full_response(plan: Plan, created: int | None = None) -> dict:
    """The non-streamed response body."""
    created = int(time.time()) if created is None else created
    if plan.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": plan.text, "refusal": None,
                                          "tool_calls": [], "reasoning_content": None},
                  "logprobs": None, "finish_reason": plan.finish_reason, "stop_reason": None}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": plan.text, "logprobs": None, "finish_reason": plan.finish_reason,
                  "stop_reason": None, "prompt_logprobs": None}
        obj = "text_completion"
    return {"id": plan.response_id, "object": obj, "created": created, "model": plan.model,
            "choices": [choice], "usage": plan.usage, "system_fingerprint": None}


def stream_events(plan: Plan, created: int | None = None) -> list[dict]:
    """The streamed chunks (each becomes one `data: {...}` event), before `data: [DONE]`."""
    created = int(time.time()) if created is None else created
    obj = "chat.completion.chunk" if plan.kind == "chat" else "text_completion"
    events = []

    def chunk(choice: dict | None) -> dict:
        return {"id": plan.response_id, "object": obj, "created": created, "model": plan.model,
                "choices": [choice] if choice else []}

    if plan.kind == "chat":
        events.append(chunk({"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                             "finish_reason": None}))
    last = len(plan.pieces) - 1
    for i, piece in enumerate(plan.pieces):
        finish = plan.finish_reason if i == last else None
        if plan.kind == "chat":
            choice = {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": piece, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        events.append(chunk(choice))
    if plan.include_usage:
        final = chunk(None)
        final["usage"] = plan.usage
        events.append(final)
    return events


def models_list(served: list[str], root: str, max_model_len: int, created: int | None = None) -> dict:
    """GET /v1/models."""
    created = int(time.time()) if created is None else created
    return {"object": "list", "data": [
        {"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": root,
         "parent": None, "max_model_len": max_model_len, "permission": []} for name in served]}
