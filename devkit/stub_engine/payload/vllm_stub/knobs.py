"""The stub's knobs: container environment variables STUB_* read once into a frozen `Knobs`."""
from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_VERSION = "0.34.0"  # the newest release; the stub speaks its words and knows its flags (voices.py, args.py)
# `vllm serve --uds` exists from vLLM 0.10.1 on (the kit's RUNTIME_INCOMPATIBLE check relies on it).
UDS_SINCE = (0, 10, 1)
# `--language-model-only` is in vLLM 0.32.0's parser (engine/arg_utils.py, the MultiModalConfig group), the
# oldest release whose source the kit has read; the stub knows it from there on and, being unverified before,
# refuses it on older versions as a release without it would.
LANGUAGE_MODEL_ONLY_SINCE = (0, 32, 0)
# `--help` prints only the argument groups and `--help=all` lists every flag from here on (the stub's
# cut-off; older stubs print plain argparse help and reject `--help=all` as argparse does).
HELP_GROUPS_SINCE = (0, 10, 0)
# vLLM 0.34.0's CacheConfig: --enable-extensible-kv-cache, and --gpu-memory-utilization unset by default.
EXTENSIBLE_KV_CACHE_SINCE = (0, 34, 0)

FAIL_KINDS = (
    "load_oom", "no_kv_memory", "unsupported_quant", "unsupported_arch", "trust_remote_code",
    "die_at_boot", "hang_at_boot", "crash_mid_stream", "die_after_requests", "alloc_past_cap",
    "needs_network", "gpu_memory_taken",
)


class KnobError(ValueError):
    """A STUB_* variable breaks its rule (the stub exits 64 with this message)."""


@dataclass(frozen=True)
class Knobs:
    """Behaviour switches of one stub run; delays in seconds."""

    version: str = DEFAULT_VERSION
    cuda_devices: int = 1
    log_format: str = "new"  # "new": one-line KV size + concurrency; "old": two lines
    boot_delay_s: float = 0.0
    token_delay_s: float = 0.0
    response_delay_s: float = 0.0
    fail: str | None = None
    fail_after_requests: int = 0  # N of die_after_requests:N
    alloc_limit_mib: int = 4096  # alloc_past_cap gives up (exit 3) past this, so no cap means no harm
    answer_tokens: int = 16  # tokens of an answer when max_tokens does not cut it shorter
    ignore_sigterm: bool = False  # to test the stop timeout -> SIGKILL path

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return version_tuple(self.version)

    @property
    def has_uds(self) -> bool:
        return self.version_tuple >= UDS_SINCE

    @property
    def has_language_model_only(self) -> bool:
        return self.version_tuple >= LANGUAGE_MODEL_ONLY_SINCE

    @property
    def help_groups(self) -> bool:
        return self.version_tuple >= HELP_GROUPS_SINCE

    @property
    def has_extensible_kv_cache(self) -> bool:
        return self.version_tuple >= EXTENSIBLE_KV_CACHE_SINCE


def version_tuple(text: str) -> tuple[int, ...]:
    """"0.10.1.1" -> (0, 10, 1, 1); a suffix such as "rc1" or "+cu128" ends the numeric part."""
    parts: list[int] = []
    for piece in text.split("+")[0].split("."):
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    if not parts:
        raise KnobError(f"STUB_VLLM_VERSION={text!r}: must start with a number such as 0.11.0")
    return tuple(parts)


def _number(env: dict, name: str, default: float, kind=float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise KnobError(f"{name}={raw!r}: must be a {kind.__name__}") from None
    if value < 0:
        raise KnobError(f"{name}={raw!r}: must not be negative")
    return value


def read_knobs(env: dict | None = None) -> Knobs:
    """Read the STUB_* variables (default: os.environ); raises KnobError naming the variable."""
    env = dict(os.environ if env is None else env)
    version = env.get("STUB_VLLM_VERSION") or DEFAULT_VERSION
    version_tuple(version)
    log_format = env.get("STUB_LOG_FORMAT") or "new"
    if log_format not in ("new", "old"):
        raise KnobError(f"STUB_LOG_FORMAT={log_format!r}: must be 'new' or 'old'")
    fail_raw = env.get("STUB_FAIL") or None
    fail, after = None, 0
    if fail_raw:
        fail, _, arg = fail_raw.partition(":")
        if fail not in FAIL_KINDS:
            raise KnobError(f"STUB_FAIL={fail_raw!r}: must be one of {', '.join(FAIL_KINDS)}")
        if fail == "die_after_requests":
            if not arg.isdigit():
                raise KnobError(f"STUB_FAIL={fail_raw!r}: die_after_requests needs :N (N >= 0)")
            after = int(arg)
        elif arg:
            raise KnobError(f"STUB_FAIL={fail_raw!r}: {fail} takes no argument")
    return Knobs(
        version=version,
        cuda_devices=int(_number(env, "STUB_CUDA_DEVICES", 1, int)),
        log_format=log_format,
        boot_delay_s=_number(env, "STUB_BOOT_DELAY_S", 0.0),
        token_delay_s=_number(env, "STUB_TOKEN_DELAY_S", 0.0),
        response_delay_s=_number(env, "STUB_RESPONSE_DELAY_S", 0.0),
        fail=fail,
        fail_after_requests=after,
        alloc_limit_mib=int(_number(env, "STUB_ALLOC_LIMIT_MIB", 4096, int)),
        answer_tokens=max(1, int(_number(env, "STUB_ANSWER_TOKENS", 16, int))),
        ignore_sigterm=(env.get("STUB_IGNORE_SIGTERM") or "0") not in ("0", "false", ""),
    )
