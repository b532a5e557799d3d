"""Pure reading of a vLLM engine's boot log: the numbers it states, and why a failed boot failed.

Driven by logs recorded from the real engine (tests_offline/data/engine_logs/, vLLM 0.32.0's CPU build)
and, for what only a GPU prints, by vLLM 0.32.0's own format strings (file and line in that folder's
README). Read are: the KV line of any device ("GPU KV cache size", "CPU KV cache size", "GPU + host KV
cache size": N tokens, with "Maximum concurrency for N tokens per request: Xx" on the same line or the
next), the KV memory ("Available KV cache memory: X GiB" on a GPU, or "reserved X GiB memory for KV
Cache" where --kv-cache-memory-bytes set it; "Explicitly set (X/Y) GiB for KV cache" / "Auto set (X/Y)
GiB ..." on a CPU), "Model loading took X GiB [memory] and Y seconds" (GPU) and "Loading weights took Y
seconds" (every device), the version (banner, "vLLM server version X, serving model Y", older "vLLM API
server version X", the engine's "(vX)"); numbers with or without thousands separators, lines with or
without a `(EngineCore pid=N)` / `(Worker pid=N)` prefix, ANSI colours stripped.
"""
from __future__ import annotations

import re

from msgspec import Struct

from onegpu.core.shown import cut
from onegpu.engine.failure_table import FAILURES, FailureRow

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
STARTED = re.compile(r"Application startup complete\.?")
NUM = r"-?\d[\d,]*(?:\.\d+)?"
QUOTE_LIMIT = 500  # characters of the engine's own line kept in a failure's quote

# The pool's device as vLLM names it: "GPU" for CUDA, else the device type upper-cased ("CPU", "XPU");
# " + host" when a host-memory tier (hisparse) adds to it (v1/core/kv_cache_utils.py).
_KV_TOKENS = re.compile(rf"\b([A-Z]{{2,}}(?: \+ host)?) KV cache size:\s*({NUM})\s*tokens")
_KV_GIB = re.compile(rf"Available KV cache memory:\s*({NUM})\s*GiB")
# --kv-cache-memory-bytes: the engine skips memory profiling and logs the KV memory it reserved instead
# (v1/worker/gpu_worker.py:Worker.determine_available_memory).
_KV_GIB_RESERVED = re.compile(rf"reserved\s*({NUM})\s*GiB memory for KV Cache")
_KV_GIB_CPU = re.compile(rf"(?:Explicitly|Auto) set \(({NUM})/{NUM}\) GiB for KV cache")
_CONCURRENCY = re.compile(rf"Maximum concurrency for\s*({NUM})\s*tokens per request:\s*({NUM})\s*x")
# "GB" in older vLLM was already bytes / 2**30, so both units are read as GiB.
_LOAD = re.compile(rf"Model loading took\s*({NUM})\s*(?:GiB|GB)(?:\s+memory)?\s+and\s+({NUM})\s*s")
_LOAD_OLD = re.compile(rf"Loading model weights took\s*({NUM})\s*(?:GiB|GB)")
_WEIGHTS = re.compile(rf"Loading weights took\s*({NUM})\s*s")
# The V0 engine: its memory profiling summary ("model weights take X GiB; ... the rest of the memory reserved for
# KV Cache is Y GiB", or "Memory profiling results: ... kv_cache_size=Y GiB") and its block count ("# GPU blocks: N"
# on a GPU, "# cuda blocks: N" in some releases), vllm/worker/worker.py and vllm/executor/executor_base.py.
_V0_WEIGHTS = re.compile(rf"model weights take\s*({NUM})\s*GiB")
_V0_KV_GIB = re.compile(rf"the rest of the memory reserved for KV Cache is\s*({NUM})\s*GiB|kv_cache_size=({NUM})GiB")
_V0_BLOCKS = re.compile(rf"(?:^|# )(?:GPU|cuda) blocks:\s*({NUM})", re.M)
_OFFLOAD = re.compile(rf"Total CPU offloaded parameters:\s*({NUM})")
# vLLM 0.34's extensible KV cache (v1/worker/extensible_kv_cache.py: measure_kv_cache_blocks, extend_kv_cache): the
# memory measured after warmup, and the blocks committed then. Numbers are format_gib's round(x, 2) printed by %s.
_AFTER_WARMUP = re.compile(
    rf"Memory after warmup:\s*({NUM}) GiB free,\s*({NUM}) GiB committed to the KV cache,\s*({NUM}) GiB kept for "
    rf"transient activations \(({NUM}) GiB allocated at peak,\s*({NUM}) GiB of torch reservation growth\);\s*"
    rf"({NUM}) KV cache blocks \(({NUM}) GiB\) fit within the requested ({NUM}) GiB\.\s*Torch may reserve up to "
    rf"({NUM}) GiB")
_EXTENDED = re.compile(rf"Extended KV cache to ({NUM}) blocks \(({NUM}) GiB\)")
_VERSIONS = [re.compile(r"vLLM (?:API )?server version\s+([^\s,]+)"),
             re.compile(r"Initializing an? (?:V\d )?LLM engine \(v([^)\s]+)\)"),
             re.compile(r"█.*\bversion\s+(\S+)")]

# What a log line says before its message, as vLLM and the tools around it print it; stripped one after another:
# a CI timestamp "[2026-01-28T23:59:42Z] ", a docker compose "vllm-1  | ", vllm-omni's "[Stage-0] ", the process
# "(EngineCore_DP0 pid=27) " / "(VllmWorker rank=3 pid=1090) " / "(LLMEngine pid=2, ip=10.0.0.1) ", then the level,
# time and source, bracketed ("ERROR 12-03 10:14:21 [core.py:1510] ") or not (the V0 engine's "ERROR 10-23
# 23:20:26 registry.py:272] ").
_DECORATION = re.compile(r"^(?:\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s+|[\w.-]+\s+\|\s|\[Stage-\d+\]\s+|"
                         r"\s*\([\w.: =-]+ pid=\d+(?:, ip=[\d.]+)?\)\s*|\[[\w.]+:\d+\]\s+)")
_LEVEL = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
                    r"(?:\[[^\]]*\]|[\w.]+:\d+\])\s?")
# A process of the engine that ended: the executor's "Worker proc VllmWorker-0 died unexpectedly (exit code:
# -9)" and the API server's "Failed core proc(s): {'EngineCore': -9}" (v1/engine/utils.py).
_PROC_DIED = re.compile(r"died unexpectedly \(exit code: [^)]*\)|Failed core proc\(s\): \{[^}]*\}")
_SIGKILLED = re.compile(r"died unexpectedly \(exit code: -9\)|Failed core proc\(s\): \{[^}]*: -9\b")
# A process that vanished without a traceback of its own: a worker that "died unexpectedly" with an exit
# code other than 0 (it reads None when the executor looks before the kernel has reaped it, as recorded in
# died-after-start.log; 0 is a worker that followed its engine core out), or a core proc that ended by a
# signal (a negative exit code).
_KILLED = re.compile(r"died unexpectedly \(exit code: (?!0\))[^)]*\)|Failed core proc\(s\): \{[^}]*: -\d+")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception)\b: \S")
# Wrappers that only point at a root cause printed elsewhere; quoted when the log holds nothing better.
_GENERIC = re.compile(r"Engine core initialization failed\. See root cause above|WorkerProc initialization "
                      r"failed due to an exception in a background process|EngineCore encountered an issue\. See "
                      r"stack trace|^RuntimeError: cancelled$|EngineCore encountered a fatal error|Error in chat "
                      r"completion stream generator")


class KvAfterWarmup(Struct, frozen=True):
    """vLLM 0.34's "Memory after warmup: ..." line: what its extensible KV cache was sized from (GiB)."""

    free_gib: float  # device memory free after warmup (torch's cache emptied)
    committed_gib: float  # KV blocks warmup had committed by then
    transient_gib: float  # kept free for transient activations: max(peak, torch reservation growth)
    peak_gib: float  # allocated at peak during warmup, beyond what stays allocated
    growth_gib: float  # torch's reservation growth over a sizing step
    blocks: int  # KV cache blocks that fit
    blocks_gib: float  # those blocks x the bytes of one block (not granule-rounded)
    requested_gib: float  # ceil(total x --gpu-memory-utilization)
    torch_limit_gib: float  # what torch's caching allocator may reserve from now on


class BootFacts(Struct, frozen=True):
    """What a boot log states; None where the log does not say (GiB, tokens, seconds)."""

    kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_tokens: int | None = None  # the "N tokens per request" of the concurrency line
    load_gib: float | None = None
    load_s: float | None = None
    cpu_offload_gib: float | None = None
    server_started: bool = False
    vllm_version: str | None = None
    kv_cache_device: str | None = None  # "GPU", "CPU", "GPU + host": whose memory holds the KV pool
    weights_load_s: float | None = None  # "Loading weights took": reading the checkpoint, part of load_s
    kv_after_warmup: KvAfterWarmup | None = None  # vLLM 0.34's extensible KV cache: the memory it was sized from
    kv_extended_blocks: int | None = None  # 0.34: "Extended KV cache to N blocks (X GiB)": the blocks committed
    kv_extended_gib: float | None = None  # ... and their physical bytes (whole granules per segment)
    kv_gpu_blocks: int | None = None  # the V0 engine's "# GPU blocks: N": KV blocks of its block size


class Failure(Struct, frozen=True):
    """Why an engine did not come up: the outcome code, and the engine's own line that says so.

    `quote` is the message of that line (process prefix, level and time stripped, cut to QUOTE_LIMIT
    characters); None when the log states no reason (a process killed before it could print one).
    """

    code: str
    quote: str | None


# ANSI colour codes as a paste shows them in caret notation: "^[[0;36m".
CARET_ANSI = re.compile(r"\^\[\[[0-9;]*m")


def clean(text: str) -> str:
    """Log text without ANSI colour codes (raw or in caret notation) and carriage-return progress redraws."""
    return CARET_ANSI.sub("", ANSI.sub("", text)).replace("\r", "\n")


def _number(raw: str) -> float:
    return float(raw.replace(",", ""))


def _last(pattern: re.Pattern, text: str) -> re.Match | None:
    match = None
    for match in pattern.finditer(text):
        pass
    return match


def parse_boot_log(text: str) -> BootFacts:
    """The boot numbers of a vLLM log (last value wins where a line repeats, e.g. per worker)."""
    text = clean(text)
    kv_gib = (_last(_KV_GIB, text) or _last(_KV_GIB_RESERVED, text) or _last(_KV_GIB_CPU, text)
              or _last(_V0_KV_GIB, text))
    kv_tokens = _last(_KV_TOKENS, text)
    conc, load, offload = _last(_CONCURRENCY, text), _last(_LOAD, text), _last(_OFFLOAD, text)
    load_old = (_last(_LOAD_OLD, text) or _last(_V0_WEIGHTS, text)) if load is None else None
    v0_blocks = _last(_V0_BLOCKS, text)
    weights = _last(_WEIGHTS, text)
    warm, extended = _last(_AFTER_WARMUP, text), _last(_EXTENDED, text)
    version = None
    for pattern in _VERSIONS:
        found = pattern.search(text)
        if found:
            version = found.group(1)
            break
    return BootFacts(
        kv_cache_gib=_number(next(g for g in kv_gib.groups() if g is not None)) if kv_gib else None,
        kv_cache_tokens=int(_number(kv_tokens.group(2))) if kv_tokens else None,
        max_concurrency=_number(conc.group(2)) if conc else None,
        concurrency_tokens=int(_number(conc.group(1))) if conc else None,
        load_gib=_number(load.group(1)) if load else (_number(load_old.group(1)) if load_old else None),
        load_s=_number(load.group(2)) if load else None,
        cpu_offload_gib=_number(offload.group(1)) if offload else None,
        server_started=bool(STARTED.search(text)),
        vllm_version=version,
        kv_cache_device=kv_tokens.group(1) if kv_tokens else None,
        weights_load_s=_number(weights.group(1)) if weights else None,
        kv_after_warmup=_after_warmup(warm) if warm else None,
        kv_extended_blocks=int(_number(extended.group(1))) if extended else None,
        kv_extended_gib=_number(extended.group(2)) if extended else None,
        kv_gpu_blocks=int(_number(v0_blocks.group(1))) if v0_blocks else None,
    )


def _after_warmup(match: re.Match) -> KvAfterWarmup:
    n = [_number(g) for g in match.groups()]
    return KvAfterWarmup(free_gib=n[0], committed_gib=n[1], transient_gib=n[2], peak_gib=n[3], growth_gib=n[4],
                         blocks=int(n[5]), blocks_gib=n[6], requested_gib=n[7], torch_limit_gib=n[8])


def _message(line: str) -> str:
    """A log line's message: without the decorations, process prefix, level, time and source location."""
    line = line.rstrip()
    while True:
        stripped = _DECORATION.sub("", line, count=1)
        if stripped == line:
            break
        line = stripped
    return _LEVEL.sub("", line, count=1)


def _quote(line: str) -> str:
    return cut(_message(line).strip(), QUOTE_LIMIT)


def _is_code_line(message: str) -> bool:
    """A traceback's source line (`    raise ValueError("No available memory ...`), not the error itself."""
    return message.startswith("    ") or message.lstrip().startswith("File \"")


def _boot_part(text: str) -> str:
    started = STARTED.search(text)
    return text[:started.start()] if started else text


def failure_in_log(text: str) -> tuple[str, str] | None:
    """(code, the engine's line that shows it): the first row of the failure table (onegpu.engine.failure_table)
    that matches a line, before the server started or, for the rows of every phase, anywhere."""
    found = classify_lines(clean(text))
    return (found[0].code, found[1]) if found else None


def classify_lines(text: str) -> tuple[FailureRow, str] | None:
    """(the row, its quote) of the first table row that matches a line of the cleaned log."""
    every = text.splitlines()
    boot = _boot_part(text).splitlines()
    messages = {i: _message(line) for i, line in enumerate(every)}
    for row in FAILURES:
        pattern, after = row.compiled(), row.compiled_after()
        lines = every if row.phase == "any" else boot
        since = None if after is None else next((i for i, line in enumerate(lines) if after.search(line)), None)
        if after is not None and since is None:
            continue
        for i, line in enumerate(lines):
            if since is not None and i <= since:
                continue
            message = messages[i]
            if pattern.search(message) and not _is_code_line(message):
                return row, cut(message.strip(), QUOTE_LIMIT)
    return None


def death_in_log(text: str) -> str | None:
    """The engine's own words for why it ended, where no failure signature matched.

    The first line that reports a process of the engine ending (a worker that "died unexpectedly", a
    "Failed core proc(s)" with a signal) or an exception, past wrappers that only point at a root cause
    printed above them; a wrapper when nothing else is there; else the last ERROR line; else None.
    """
    generic = None
    last_error = None
    for line in clean(text).splitlines():
        raw = _message(line)
        message = raw.strip()
        if not message:
            continue
        if (" ERROR " in line[:80] or line.startswith("ERROR")) and not _is_code_line(raw):
            last_error = line
        if _GENERIC.search(message) and not (_PROC_DIED.search(message) or _EXCEPTION.search(message)):
            generic = generic or line
            continue
        if _SIGKILLED.search(message):
            return _quote(line)
        if not (_PROC_DIED.search(message) or _EXCEPTION.search(message)):
            continue
        if _GENERIC.search(message) and not _KILLED.search(message):
            generic = generic or line
            continue
        return _quote(line)
    if generic is not None:
        return _quote(generic)
    return _quote(last_error) if last_error is not None else None


def _killed_line(text: str) -> str | None:
    """The first line that shows one of the engine's processes killed, a SIGKILL preferred."""
    lines = clean(text).splitlines()
    for pattern in (_SIGKILLED, _KILLED):
        for line in lines:
            if pattern.search(line):
                return _quote(line)
    return None


def explain_failure(log_text: str, exit_code: int | None, oom_killed: bool, oom_kill_count_rose: bool,
                    timed_out: bool) -> Failure | None:
    """The outcome of an engine that did not come up (or died), with its quoted reason; None when nothing failed.

    Order: the RAM cap's kill first (Docker's OOMKilled; or the cgroup's oom_kill count up while the
    container exited 137 or the log shows one of the engine's processes killed), then the error the
    log shows before the server started, then the boot deadline, then ENGINE_DIED with the engine's own
    words. exit_code None means the container is still running. Exit code 0 is no clean stop here: the
    API server exits 0 after its engine core died while serving, so the reason comes from the log.
    """
    killed = _killed_line(log_text)
    if oom_killed or (oom_kill_count_rose and (exit_code == 137 or killed is not None)):
        return Failure("HOST_OOM_KILLED", killed)
    if exit_code is None and not timed_out:
        return None  # still running and within its deadline: nothing has failed (yet)
    found = failure_in_log(log_text)
    if found:
        return Failure(*found)
    if timed_out:
        return Failure("LOAD_TIMEOUT", None)
    return Failure("ENGINE_DIED", death_in_log(log_text))


def classify_failure(log_text: str, exit_code: int | None, oom_killed: bool, oom_kill_count_rose: bool,
                     timed_out: bool) -> str | None:
    """The outcome code alone (see explain_failure for the code with the engine's quoted reason)."""
    failure = explain_failure(log_text, exit_code, oom_killed, oom_kill_count_rose, timed_out)
    return failure.code if failure else None
