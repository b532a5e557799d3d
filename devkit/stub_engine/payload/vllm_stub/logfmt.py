"""Log lines shaped like vLLM's, in the two formats the kit must parse.

new: `(EngineCore pid=N) INFO MM-DD hh:mm:ss [file.py:line] ...` with the process prefix coloured
     by ANSI codes (the processes as vLLM 0.32.0 names them: APIServer, EngineCore, Worker),
     thousands separators, the one-line "GPU KV cache size: ..., Maximum concurrency ..."
     and "Model loading took X GiB memory and Y seconds".
old: no process prefix, "GPU KV cache size: N tokens" and "Maximum concurrency for N tokens per
     request: Xx" on two lines, "Model loading took X GiB and Y seconds".
The numbers are derived from the arguments by `boot_numbers`, so a test can predict every value.
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass

CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"
KV_BYTES_PER_TOKEN = 131072  # what the stub pretends one token of KV cache costs
DEFAULT_MAX_MODEL_LEN = 32768


@dataclass(frozen=True)
class BootNumbers:
    """The values the stub's boot lines state (GiB, tokens, seconds)."""

    max_model_len: int
    kv_cache_tokens: int
    kv_cache_gib: float
    max_concurrency: float
    load_gib: float
    load_s: float
    cpu_offload_gib: float

    @property
    def kv_bytes_per_token(self) -> int:
        return KV_BYTES_PER_TOKEN


def boot_numbers(max_model_len: int | None, cpu_offload_gb: float, boot_delay_s: float) -> BootNumbers:
    """Deterministic boot values from the serve arguments."""
    mml = max_model_len or DEFAULT_MAX_MODEL_LEN
    kv_tokens = 3 * mml + 1024
    return BootNumbers(
        max_model_len=mml,
        kv_cache_tokens=kv_tokens,
        kv_cache_gib=round(kv_tokens * KV_BYTES_PER_TOKEN / 2**30, 2),
        max_concurrency=round(kv_tokens / mml, 2),
        load_gib=round(max(0.25, 4.0 - cpu_offload_gb), 4),
        load_s=round(0.5 + boot_delay_s / 2, 6),
        cpu_offload_gib=round(cpu_offload_gb, 2),
    )


class VllmLog:
    """Writes vLLM-shaped lines to a stream (stdout), flushing each so `docker logs` sees it at once."""

    def __init__(self, fmt: str, api_pid: int, stream=None, clock=time.time):
        self.fmt = fmt
        self.api_pid = api_pid
        # Separate processes in real vLLM (recorded: APIServer pid=1, EngineCore pid=27, Worker pid=41); numbers here.
        self.pids = {"APIServer": api_pid, "EngineCore": api_pid + 26, "Worker": api_pid + 40}
        self.stream = stream or sys.stdout
        self.clock = clock

    def prefix(self, proc: str) -> str:
        if self.fmt == "old":
            return ""
        return f"{CYAN}({proc} pid={self.pids.get(proc, self.pids['EngineCore'])}){RESET} "

    def format(self, proc: str, level: str, where: str, msg: str) -> str:
        """One line; `proc` "" for the launcher process, which vLLM prints without a prefix."""
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime(self.clock()))
        prefix = self.prefix(proc) if proc else ""
        return f"{prefix}{level} {stamp} [{where}] {msg}"

    def raw(self, proc: str, text: str) -> None:
        """A line without level/time (tracebacks, uvicorn's own lines, progress bars)."""
        self.write(f"{self.prefix(proc)}{text}")

    def write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def info(self, proc: str, where: str, msg: str) -> None:
        self.write(self.format(proc, "INFO", where, msg))

    def warning(self, proc: str, where: str, msg: str) -> None:
        self.write(self.format(proc, "WARNING", where, msg))

    def error(self, proc: str, where: str, msg: str) -> None:
        self.write(self.format(proc, "ERROR", where, msg))


def kv_lines(fmt: str, n: BootNumbers) -> list[tuple[str, str]]:
    """(where, message) of the KV cache report in the chosen format."""
    if fmt == "old":
        return [("kv_cache_utils.py:634", f"GPU KV cache size: {n.kv_cache_tokens} tokens"),
                ("kv_cache_utils.py:637",
                 f"Maximum concurrency for {n.max_model_len} tokens per request: {n.max_concurrency:.2f}x")]
    return [("kv_cache_utils.py:1087",
             f"GPU KV cache size: {n.kv_cache_tokens:,} tokens, Maximum concurrency for "
             f"{n.max_model_len:,} tokens per request: {n.max_concurrency:.2f}x")]


def load_line(fmt: str, n: BootNumbers) -> tuple[str, str]:
    """(where, message) of the model-loading report."""
    memory = "" if fmt == "old" else " memory"
    return ("gpu_model_runner.py:2653", f"Model loading took {n.load_gib:.4f} GiB{memory} and {n.load_s:.6f} seconds")


def offload_line(n: BootNumbers) -> tuple[str, str]:
    """(where, message) of the CPU-offload report: vLLM's UVA offloader prints format_gib's round(x, 2) with
    %s, so 2 GiB reads "2.0" (vllm/model_executor/offloader/uva.py:69)."""
    return ("uva.py:69", f"Total CPU offloaded parameters: {round(n.cpu_offload_gib, 2)}")


def traceback_lines(frames: list[tuple[str, int, str, str]], final: str) -> list[str]:
    """A Python traceback as vLLM's engine logs it: frames (file, line, function, code), then the error."""
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out.append(f'  File "{path}", line {line}, in {func}')
        out.append(f"    {code}")
    out.append(final)
    return out
