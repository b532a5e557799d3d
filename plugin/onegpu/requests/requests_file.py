"""Pure: validate a request file (OpenAI batch lines) and keep each line's body bytes exactly as written.

The kit never rewrites a body: what is sent is the byte slice of the file that holds the "body" value.
Every problem of a file is reported at once, one "line N: field X: rule" string each.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Callable

from msgspec import Struct

from onegpu.core import strict_json
from onegpu.core.shown import as_json as _show
from onegpu.core.units import MIB

MAX_LINE_BYTES = 16 * MIB
MAX_FILE_BYTES = 256 * MIB
MAX_ERRORS_KEPT = 200  # a broken 100,000-line file must not produce a 100,000-line message
MAX_CUSTOM_ID_CHARS = 512

CHAT_URL = "/v1/chat/completions"
COMPLETIONS_URL = "/v1/completions"
URLS = (CHAT_URL, COMPLETIONS_URL)
LINE_FIELDS = ("custom_id", "method", "url", "body")

_WS = re.compile(r"[ \t\n\r]*")  # JSON's own whitespace set (RFC 8259)
_PLAIN = json.JSONDecoder()  # only ever run on text the strict parser already accepted
# json's own string scanner: in the module, not in its type stubs.
_scanstring: Callable[[str, int], tuple[str, int]] = getattr(json.decoder, "scanstring")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RequestLine(Struct, frozen=True):
    """One request: its line number, id, endpoint and the exact bytes of its body in the file."""

    line: int
    custom_id: str
    url: str
    body: bytes  # sent byte-for-byte; never re-serialised


class RequestFile(Struct, frozen=True):
    """A validated request file: its SHA-256 over the exact bytes, and its requests in file order."""

    path: str
    sha256: str
    size_bytes: int
    requests: tuple[RequestLine, ...]

    @property
    def custom_ids(self) -> list[str]:
        return [r.custom_id for r in self.requests]


class RequestFileError(ValueError):
    """Every rule a request file breaks (the first MAX_ERRORS_KEPT kept, plus how many there were)."""

    def __init__(self, path: str, errors: list[str], total: int | None = None):
        self.path, self.total = path, total if total is not None else len(errors)
        self.errors = list(errors)
        if self.total > len(self.errors):
            self.errors.append(f"... and {self.total - len(errors)} more problems (the first "
                               f"{len(errors)} are listed)")
        super().__init__(f"{path}: " + "; ".join(self.errors))


class _Problems:
    """Collects problems, keeping the first MAX_ERRORS_KEPT and counting the rest."""

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.total = 0

    def add(self, text: str) -> None:
        self.total += 1
        if len(self.kept) < MAX_ERRORS_KEPT:
            self.kept.append(text)


def value_spans(text: str) -> dict[str, tuple[int, int]]:
    """Character spans (start, end) of each top-level value of a JSON object text.

    Hand-written because no JSON library reports where a value sits in its source text. It walks the top
    level with json's own scanners: json.decoder.scanstring for keys and JSONDecoder.raw_decode(text, i),
    whose returned end position marks where each value stops. The text must already be valid JSON.
    """
    spans: dict[str, tuple[int, int]] = {}
    i = _past_ws(text, 0) + 1  # past "{"
    i = _past_ws(text, i)
    if text[i] == "}":
        return spans
    while True:
        key, i = _scanstring(text, i + 1)  # i + 1: past the key's opening quote
        i = _past_ws(text, i) + 1  # past ":"
        i = _past_ws(text, i)
        _, end = _PLAIN.raw_decode(text, i)
        spans[key] = (i, end)
        i = _past_ws(text, end)
        if text[i] == "}":
            return spans
        i = _past_ws(text, i + 1)  # past ","


def _past_ws(text: str, i: int) -> int:
    """Where the JSON whitespace starting at i ends."""
    match = _WS.match(text, i)
    assert match is not None  # the pattern matches the empty string too
    return match.end()


def body_bytes(raw: bytes, text: str) -> bytes:
    """The exact bytes of the "body" value in one line (raw: the line's bytes; text: the same, decoded).

    Positions come from the decoded text; the byte offset of a character position is the UTF-8 length of the
    text before it. Strict UTF-8 decoding is one-to-one, so the slice of `raw` is byte-identical to the file,
    including its whitespace, key order and \\u escapes.
    """
    start, end = value_spans(text)["body"]
    byte_start = len(text[:start].encode("utf-8"))
    byte_end = byte_start + len(text[start:end].encode("utf-8"))
    return raw[byte_start:byte_end]


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_problem(exc: strict_json.StrictJSONError) -> str:
    # A request line holds no raw newline, so "line 1" in the parser's message would only confuse.
    return re.sub(r"at line 1 column (\d+)", r"at column \1", str(exc))


def _check_budget(where: str, body: dict, chat: bool, context_tokens: int, out: _Problems) -> None:
    keys = ("max_tokens", "max_completion_tokens") if chat else ("max_tokens",)
    present = [k for k in keys if body.get(k) is not None]
    if not chat and body.get("max_completion_tokens") is not None:
        out.add(f"{where}: field body.max_completion_tokens: the completions endpoint reads only max_tokens; "
                "state the output budget as max_tokens")
    if not present:
        names = " or ".join(keys)
        out.add(f"{where}: field body.{keys[0]}: missing: an output budget ({names}) is required so no request "
                "runs to the end of the context")
    for key in present:
        value = body[key]
        if not _is_int(value) or value < 1:
            out.add(f"{where}: field body.{key}: value {_show(value)}: must be a positive integer")
        elif value >= context_tokens:
            out.add(f"{where}: field body.{key}: value {value}: must be below the context of {context_tokens} "
                    "tokens (the prompt needs room in it too)")


def _check_body(where: str, body, model_id: str, url, context_tokens: int, out: _Problems) -> None:
    if not isinstance(body, dict):
        out.add(f"{where}: field body: must be a JSON object (the request body)")
        return
    if "model" not in body:
        out.add(f"{where}: field body.model: missing: it must be the served model ID {model_id!r}")
    elif body["model"] != model_id:
        out.add(f"{where}: field body.model: value {_show(body['model'])} is not the served model ID "
                f"{model_id!r}: the kit never rewrites a body; export the requests with the exact model ID")
    if "n" in body and not (_is_int(body["n"]) and body["n"] == 1):
        out.add(f"{where}: field body.n: value {_show(body['n'])}: must be absent or 1 (one choice per request)")
    if body.get("stream") not in (None, False):
        out.add(f"{where}: field body.stream: value {_show(body['stream'])}: must be absent or false (no "
                "streaming in a batch)")
    if url not in URLS:
        return  # which fields a body needs depends on the endpoint
    chat = url == CHAT_URL
    if chat and not (isinstance(body.get("messages"), list) and body["messages"]):
        out.add(f"{where}: field body.messages: must be a non-empty list (a chat request)")
    if not chat and not (isinstance(body.get("prompt"), (str, list)) and body["prompt"]):
        out.add(f"{where}: field body.prompt: must be a non-empty string or list (a completions request)")
    _check_budget(where, body, chat, context_tokens, out)


def _check_custom_id(where: str, value, seen: dict[str, int], line_no: int, out: _Problems) -> bool:
    if not isinstance(value, str) or not value:
        out.add(f"{where}: field custom_id: value {_show(value)}: must be a non-empty string")
        return False
    if len(value) > MAX_CUSTOM_ID_CHARS or _CONTROL.search(value):
        out.add(f"{where}: field custom_id: must be at most {MAX_CUSTOM_ID_CHARS} characters with no control "
                "characters (it is printed in the summary)")
        return False
    if value in seen:
        out.add(f"{where}: field custom_id: value {_show(value)} repeats line {seen[value]}: custom_ids must "
                "be unique")
        return False
    seen[value] = line_no
    return True


def _check_line(line_no: int, raw: bytes, ctx: dict, seen: dict, out: _Problems) -> RequestLine | None:
    """Validate one line; add its problems to `out`; the request when it has none."""
    where = f"line {line_no}"
    before = out.total
    if len(raw) > MAX_LINE_BYTES:
        out.add(f"{where}: {len(raw)} bytes: a line may hold at most {MAX_LINE_BYTES} bytes (16 MiB)")
        return None
    if not raw.strip(b" \t\r"):
        out.add(f"{where}: blank line: every line must be one request (remove blank lines)")
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        out.add(f"{where}: byte {exc.start + 1}: not UTF-8 ({exc.reason}); a request file is UTF-8 text")
        return None
    if text.startswith("\ufeff"):
        out.add(f"{where}: starts with a byte-order mark (U+FEFF): save the file as UTF-8 without it")
        return None
    try:
        obj = strict_json.loads(text)
    except strict_json.StrictJSONError as exc:
        out.add(f"{where}: {_json_problem(exc)}")
        return None
    if not isinstance(obj, dict):
        out.add(f"{where}: must be a JSON object with {', '.join(LINE_FIELDS)}")
        return None
    for key in obj:
        if key not in LINE_FIELDS:
            out.add(f"{where}: field {key}: unknown: an OpenAI batch line has only {', '.join(LINE_FIELDS)}")
    for key in LINE_FIELDS:
        if key not in obj:
            out.add(f"{where}: field {key}: missing: required in every OpenAI batch line")
    ok_id = "custom_id" in obj and _check_custom_id(where, obj["custom_id"], seen, line_no, out)
    if "method" in obj and obj["method"] != "POST":
        out.add(f"{where}: field method: value {_show(obj['method'])}: must be POST")
    if "url" in obj and obj["url"] not in URLS:
        out.add(f"{where}: field url: value {_show(obj['url'])}: must be {CHAT_URL} or {COMPLETIONS_URL}")
    if "body" in obj:
        _check_body(where, obj["body"], ctx["model_id"], obj.get("url"), ctx["context_tokens"], out)
    if out.total != before or not ok_id:
        return None
    return RequestLine(line=line_no, custom_id=obj["custom_id"], url=obj["url"], body=body_bytes(raw, text))


def parse_request_bytes(data: bytes, *, path: str, model_id: str, context_tokens: int,
                        max_requests: int) -> RequestFile:
    """Validate a request file's bytes; raises RequestFileError listing every problem (line, field, rule)."""
    if len(data) > MAX_FILE_BYTES:
        raise RequestFileError(path, [f"file: {len(data)} bytes: a request file may hold at most "
                                      f"{MAX_FILE_BYTES} bytes (256 MiB)"])
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line is not a blank line
    out = _Problems()
    if not lines:
        out.add("file: holds no requests")
    if len(lines) > max_requests:
        out.add(f"file: {len(lines)} request lines: more than max_requests {max_requests} in the settings")
    ctx = {"model_id": model_id, "context_tokens": context_tokens}
    seen: dict[str, int] = {}
    requests = [_check_line(n, raw, ctx, seen, out) for n, raw in enumerate(lines, start=1)]
    if out.total:
        raise RequestFileError(path, out.kept, out.total)
    return RequestFile(path=path, sha256=hashlib.sha256(data).hexdigest(), size_bytes=len(data),
                       requests=tuple(r for r in requests if r is not None))  # all of them: no line failed


def load_request_file(path: Path, *, model_id: str, context_tokens: int, max_requests: int) -> RequestFile:
    """Read and validate a request file (size checked before reading); raises RequestFileError."""
    shown = str(path)
    try:
        size = Path(path).stat().st_size
        if not Path(path).is_file():
            raise RequestFileError(shown, ["file: not a regular file"])
        if size > MAX_FILE_BYTES:
            raise RequestFileError(shown, [f"file: {size} bytes: a request file may hold at most "
                                           f"{MAX_FILE_BYTES} bytes (256 MiB)"])
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise RequestFileError(shown, ["file: no such file"]) from None
    except OSError as exc:
        raise RequestFileError(shown, [f"file: cannot read ({exc.strerror})"]) from None
    return parse_request_bytes(data, path=shown, model_id=model_id, context_tokens=context_tokens,
                               max_requests=max_requests)


def describe(requests: RequestFile) -> str:
    """One line for the terminal: how many requests, of which kind, and the file's SHA-256."""
    chat = sum(1 for r in requests.requests if r.url == CHAT_URL)
    return (f"request file {requests.path}: {len(requests.requests)} requests ({chat} chat, "
            f"{len(requests.requests) - chat} completions), {requests.size_bytes} bytes, "
            f"SHA-256 {requests.sha256}")
