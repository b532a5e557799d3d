"""Pure reading of a vLLM engine's boot log: the numbers it states, and why a failed boot failed.

Both log formats vLLM has used are read: "GPU KV cache size: N tokens" and "Maximum concurrency for N
tokens per request: Xx" on two lines or on one, "Model loading took X GiB [memory] and Y seconds",
numbers with or without thousands separators, lines with or without a `(EngineCore_DP0 pid=N)` /
`(Worker_TP0 pid=N)` prefix, ANSI colour codes stripped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
STARTED = re.compile(r"Application startup complete\.?")
NUM = r"-?\d[\d,]*(?:\.\d+)?"

_KV_GIB = re.compile(rf"Available KV cache memory:\s*({NUM})\s*GiB")
_KV_TOKENS = re.compile(rf"GPU KV cache size:\s*({NUM})\s*tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for\s*({NUM})\s*tokens per request:\s*({NUM})\s*x")
# "GB" in older vLLM was already bytes / 2**30, so both units are read as GiB.
_LOAD = re.compile(rf"Model loading took\s*({NUM})\s*(?:GiB|GB)(?:\s+memory)?\s+and\s+({NUM})\s*s")
_LOAD_OLD = re.compile(rf"Loading model weights took\s*({NUM})\s*(?:GiB|GB)")
_OFFLOAD = re.compile(rf"Total CPU offloaded parameters:\s*({NUM})")
_VERSIONS = [re.compile(r"vLLM API server version\s+(\S+)"),
             re.compile(r"Initializing an? (?:V\d )?LLM engine \(v([^)\s]+)\)"),
             re.compile(r"█.*\bversion\s+(\S+)")]

# Failure signatures, most specific first; each is vLLM's (or transformers') own error text, as printed
# in public bug reports (see tests_offline/test_bootlog.py for the excerpts and their sources).
FAILURE_PATTERNS: list[tuple[str, re.Pattern]] = [
    ("LOAD_OOM", re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUDA error: out of memory")),
    ("NO_KV_MEMORY", re.compile(r"No available memory for the cache blocks|KV cache is needed, which is larger "
                                r"than the available KV cache memory|insufficient\b.*\bKV cache", re.I)),
    ("GPU_BUSY", re.compile(r"Free memory on device \S+ \([^)]*\) on startup is less than desired GPU memory "
                            r"utilization")),
    ("UNSUPPORTED_QUANT", re.compile(r"Unknown quantization method|The quantization method \S+ is not supported "
                                     r"for the current GPU|Unsupported quantization")),
    ("UNSUPPORTED_ARCH", re.compile(r"Model architectures \[[^\]]*\] are not supported for now|does not recognize "
                                    r"this architecture")),
    ("TRUST_REMOTE_CODE_REQUIRED", re.compile(
        r"requires you to execute the configuration file|contains custom code which must be executed|"
        r"consider setting `trust_remote_code=True`|Please pass the argument `trust_remote_code=True`")),
    ("RUNTIME_NEEDS_NETWORK", re.compile(
        r"Network is unreachable|We couldn't connect to 'https://huggingface\.co'|Temporary failure in name "
        r"resolution|Name or service not known|Failed to establish a new connection|outgoing traffic has been "
        r"disabled")),
]


@dataclass(frozen=True)
class BootFacts:
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


def clean(text: str) -> str:
    """Log text without ANSI colour codes and carriage-return progress redraws."""
    return ANSI.sub("", text).replace("\r", "\n")


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
    kv_gib, kv_tokens = _last(_KV_GIB, text), _last(_KV_TOKENS, text)
    conc, load, offload = _last(_CONCURRENCY, text), _last(_LOAD, text), _last(_OFFLOAD, text)
    load_old = _last(_LOAD_OLD, text) if load is None else None
    version = None
    for pattern in _VERSIONS:
        found = pattern.search(text)
        if found:
            version = found.group(1)
            break
    return BootFacts(
        kv_cache_gib=_number(kv_gib.group(1)) if kv_gib else None,
        kv_cache_tokens=int(_number(kv_tokens.group(1))) if kv_tokens else None,
        max_concurrency=_number(conc.group(2)) if conc else None,
        concurrency_tokens=int(_number(conc.group(1))) if conc else None,
        load_gib=_number(load.group(1)) if load else (_number(load_old.group(1)) if load_old else None),
        load_s=_number(load.group(2)) if load else None,
        cpu_offload_gib=_number(offload.group(1)) if offload else None,
        server_started=bool(STARTED.search(text)),
        vllm_version=version,
    )


def failure_in_log(text: str) -> tuple[str, str] | None:
    """(code, the log line that shows it) for the first failure signature found before the server started."""
    text = clean(text)
    started = STARTED.search(text)
    boot = text[:started.start()] if started else text
    for code, pattern in FAILURE_PATTERNS:
        found = pattern.search(boot)
        if found:
            line_start = boot.rfind("\n", 0, found.start()) + 1
            line_end = boot.find("\n", found.end())
            return code, boot[line_start:line_end if line_end >= 0 else len(boot)].strip()
    return None


def classify_failure(log_text: str, exit_code: int | None, oom_killed: bool, oom_kill_count_rose: bool,
                     timed_out: bool) -> str | None:
    """The outcome code of an engine that did not come up (or died); None when nothing failed.

    Order: the RAM cap's kill first (OOMKilled, or exit 137 with the cgroup's oom_kill count up), then
    the error the log shows before the server started, then the boot deadline, then ENGINE_DIED.
    exit_code None means the container is still running.
    """
    if oom_killed or (exit_code == 137 and oom_kill_count_rose):
        return "HOST_OOM_KILLED"
    if exit_code is None and not timed_out:
        return None  # still running and within its deadline: nothing has failed (yet)
    found = failure_in_log(log_text)
    if found:
        return found[0]
    if timed_out:
        return "LOAD_TIMEOUT"
    if exit_code is not None:
        return "ENGINE_DIED"
    return None
