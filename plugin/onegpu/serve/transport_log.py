"""transport.jsonl: one durable line per call through the serve adapter, and the receipt's sums of it.

A transport record, not a grade: hashes, sizes, statuses and times as the adapter saw them. Figures read
from streams (time to first token, output tokens per second) are transport measurements on the adapter's
clock, never a model benchmark.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import threading
import time
from pathlib import Path

import msgspec

from onegpu.core.units import MIB
from onegpu.evidence.rundir import open_private_append
from onegpu.serve.http_rules import is_event_stream, path_of

TRANSPORT_LABEL = ("transport measurements on the adapter's clock (request head received -> bytes relayed); "
                   "not a model benchmark")
_KEEP_JSON_BYTES = 4 * MIB  # non-streamed bodies up to this size are parsed for their usage
GROUP_COMMIT_S = 0.05  # lines written within this long after one another share one fsync


def utc_iso(epoch_s: float) -> str:
    return _dt.datetime.fromtimestamp(epoch_s, _dt.timezone.utc).isoformat(timespec="milliseconds")


def _completion_tokens(obj) -> int | None:
    usage = obj.get("usage") if isinstance(obj, dict) else None
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else None


def _carries_text(obj) -> bool:
    """Whether an SSE chunk carries generated text (completions `text`, chat `delta.content`/reasoning)."""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    for choice in choices if isinstance(choices, list) else []:
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("reasoning_content")
                                        or delta.get("reasoning")):
            return True
    return False


class BodyMeter:
    """Hashes and counts one body as it passes; for SSE also reads token timing and the final usage."""

    def __init__(self, started_s: float, streamed: bool = False):
        self.started_s = started_s
        self.streamed = streamed
        self._sha = hashlib.sha256()
        self.bytes = 0
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.text_events = 0
        self.completion_tokens: int | None = None
        self.done_seen = False  # the stream's `data: [DONE]` passed: the answer is whole for the client
        self._pending = b""  # an SSE event not yet terminated by a blank line
        self._kept: list[bytes] | None = [] if not streamed else None

    def feed(self, chunk: bytes, now_s: float) -> None:
        self._sha.update(chunk)
        self.bytes += len(chunk)
        if self.streamed:
            self._feed_sse(chunk, now_s)
        elif self._kept is not None:
            self._kept.append(chunk)
            if self.bytes > _KEEP_JSON_BYTES:
                self._kept = None

    def _feed_sse(self, chunk: bytes, now_s: float) -> None:
        """Read the events completed by this chunk (all lines before the last blank line); keep the rest."""
        data = self._pending + chunk if self._pending else chunk
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0:
            self._pending = data
            return
        self._pending = data[end + 2:]
        for line in data[:end].split(b"\n"):
            if line[:5] != b"data:":
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done_seen = True
                continue
            try:  # msgspec: ~5x faster than json here, and this runs for every event of every stream
                obj = msgspec.json.decode(payload)
            except msgspec.DecodeError:
                continue
            if _carries_text(obj):
                self.first_token_s = self.first_token_s if self.first_token_s is not None else now_s
                self.last_token_s = now_s
                self.text_events += 1
            tokens = _completion_tokens(obj)
            if tokens is not None:
                self.completion_tokens = tokens

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    def finish(self) -> dict:
        """The body's fields for the transport line (hash, bytes, tokens; stream timing when streamed)."""
        if not self.streamed and self._kept is not None and self.bytes:
            try:
                self.completion_tokens = _completion_tokens(msgspec.json.decode(b"".join(self._kept)))
            except msgspec.DecodeError:
                pass
        out = {"sha256": self.sha256, "bytes": self.bytes, "completion_tokens": self.completion_tokens}
        if self.streamed:
            out["stream_ttft_s"] = (round(self.first_token_s - self.started_s, 6)
                                    if self.first_token_s is not None else None)
            out["stream_output_tokens_per_s"] = self._tokens_per_s()
        return out

    def _tokens_per_s(self) -> float | None:
        """Tokens after the first, over the time between first and last text chunk; None if unknowable. A stream
        counts its tokens only when the engine said so (usage, sent when the client asks with
        stream_options.include_usage): text events are not tokens, and a rate is never guessed from them."""
        if self.first_token_s is None or self.last_token_s is None or self.last_token_s <= self.first_token_s:
            return None
        tokens = self.completion_tokens
        if tokens is None or tokens < 2:
            return None
        return round((tokens - 1) / (self.last_token_s - self.first_token_s), 3)


NO_STREAM_USAGE = ("the stream carried no usage: token counts of a stream come only from the engine, when the "
                   "request asks with stream_options.include_usage; none is guessed")


class CallRecord:
    """What the transport log records about one call, filled in as the call proceeds."""

    def __init__(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], started_s: float,
                 forwarded: bool = True):
        self.epoch_s = time.time()  # formatted when the line is written, after the answer is out
        self.started_s = started_s
        self.method, self.target, self.headers = method, target, headers
        self.forwarded = forwarded
        self.status: int | None = None
        self.adapter_error: str | None = None  # set when the adapter answered with an error of its own
        self.outcome = "complete"
        self.ttfb_s: float | None = None
        self.finished_s: float | None = None  # when the adapter's own answer was sent
        self.request = BodyMeter(started_s)
        self.response = BodyMeter(started_s)

    def respond(self, status: int, headers, adapter_error: str | None = None) -> None:
        self.status, self.adapter_error = status, adapter_error
        if adapter_error:
            self.outcome = "adapter answered"
        self.response = BodyMeter(self.started_s, streamed=is_event_stream(headers))

    def ttfb(self, now_s: float) -> None:
        if self.ttfb_s is None:
            self.ttfb_s = round(now_s - self.started_s, 6)

    def entry(self, now_s: float) -> dict:
        req, resp = self.request.finish(), self.response.finish()
        line = {
            "time": utc_iso(self.epoch_s), "method": self.method.decode("latin-1") or None,
            "path": path_of(self.target).decode("latin-1") or None, "status": self.status,
            "forwarded": self.forwarded and self.adapter_error is None, "adapter_error": self.adapter_error,
            "outcome": self.outcome, "request_sha256": req["sha256"], "request_bytes": req["bytes"],
            "response_sha256": resp["sha256"], "response_bytes": resp["bytes"], "ttfb_s": self.ttfb_s,
            "elapsed_s": round((self.finished_s or now_s) - self.started_s, 6), "streamed": self.response.streamed,
            "completion_tokens": resp["completion_tokens"],
        }
        if self.response.streamed:
            line["stream_ttft_s"] = resp["stream_ttft_s"]
            line["stream_output_tokens_per_s"] = resp["stream_output_tokens_per_s"]
            if resp["completion_tokens"] is None:
                line["completion_tokens_missing"] = NO_STREAM_USAGE
        return line


class TransportLog:
    """A 0600 JSONL file of call lines; each line is written whole at once and fsynced soon after.

    The line is appended from the caller (one O_APPEND write of a few hundred bytes to the page cache);
    fsync runs on a helper thread that syncs whatever has accumulated over GROUP_COMMIT_S (group commit),
    so the adapter's event loop never waits for the disk, and a burst of calls costs one fsync and one
    wake-up of the helper, not one each (each wake-up takes the interpreter lock from the event loop).
    """

    def __init__(self, path: Path):
        self.path = path
        self._fh = open_private_append(path)
        self._fd = self._fh.fileno()
        self.count = 0  # lines written
        self.lost = 0  # lines that could not be written
        self.last_error: str | None = None
        self._synced = 0  # lines known to be on disk
        self._wake = threading.Event()
        self._now = threading.Event()  # flush or close: sync without waiting for the group to fill
        self._done = threading.Condition()
        self._closing = False
        self._syncer = threading.Thread(target=self._sync_loop, name="transport-log-fsync", daemon=True)
        self._syncer.start()

    def record(self, entry: dict) -> None:
        """Append one line now; it is on disk soon after (before `flush`/`close` return at the latest)."""
        try:
            os.write(self._fd, msgspec.json.encode(entry, enc_hook=str) + b"\n")
        except OSError as exc:  # e.g. a full disk: counted and reported, the call itself is not failed
            self.lost += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            return
        self.count += 1
        self._wake.set()

    def _sync_loop(self) -> None:
        while True:
            self._wake.wait()
            self._now.wait(GROUP_COMMIT_S)
            self._wake.clear()
            self._now.clear()
            written = self.count
            os.fsync(self._fd)
            with self._done:
                self._synced = written
                self._done.notify_all()
            if self._closing and self._synced == self.count:
                return

    def flush(self, timeout_s: float = 10.0) -> None:
        """Return once every line written so far is on disk; raises TimeoutError past timeout_s."""
        target = self.count
        self._now.set()
        self._wake.set()
        with self._done:
            if not self._done.wait_for(lambda: self._synced >= target, timeout_s):
                raise TimeoutError(f"{self.path}: lines not on disk within {timeout_s:g} s")

    def close(self) -> None:
        """Put every line on disk, stop the helper thread, close the file."""
        self._closing = True
        self._now.set()
        self._wake.set()
        self._syncer.join()
        self._fh.close()


def read_entries(path: Path) -> list[dict]:
    """The lines of a transport log (a torn last line from a hard kill is skipped)."""
    entries: list[dict] = []
    if not path.exists():
        return entries
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile (the value at or above pct% of the sorted values); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(entries: list[dict]) -> dict:
    """The receipt's sums: calls, statuses, bytes, latency of forwarded calls, 429s, stream timing."""
    statuses: dict[str, int] = {}
    for e in entries:
        statuses[str(e.get("status"))] = statuses.get(str(e.get("status")), 0) + 1
    forwarded = [e for e in entries if e.get("forwarded")]
    elapsed = [e["elapsed_s"] for e in forwarded if isinstance(e.get("elapsed_s"), (int, float))]
    streams = [e for e in forwarded if e.get("streamed")]
    ttft = [e["stream_ttft_s"] for e in streams if isinstance(e.get("stream_ttft_s"), (int, float))]
    rates = [e["stream_output_tokens_per_s"] for e in streams
             if isinstance(e.get("stream_output_tokens_per_s"), (int, float))]
    return {
        "calls": len(entries),
        "forwarded": len(forwarded),
        "statuses": dict(sorted(statuses.items())),
        "rejected_429": statuses.get("429", 0),
        "cut": sum(1 for e in entries if str(e.get("outcome", "")).startswith("cut")),
        "request_bytes": sum(int(e.get("request_bytes") or 0) for e in entries),
        "response_bytes": sum(int(e.get("response_bytes") or 0) for e in entries),
        "completion_tokens": sum(int(e.get("completion_tokens") or 0) for e in entries),
        "streams_without_token_count": sum(1 for e in streams if e.get("completion_tokens") is None),
        "latency_forwarded_s": {"p50": percentile(elapsed, 50), "p95": percentile(elapsed, 95)},
        "streams": {
            "label": TRANSPORT_LABEL,
            "count": len(streams),
            "ttft_s": {"p50": percentile(ttft, 50), "p95": percentile(ttft, 95)},
            "output_tokens_per_s": {"p50": percentile(rates, 50), "min": min(rates) if rates else None},
        },
    }
