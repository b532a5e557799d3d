"""Pure: what the runtime probe container printed -> the facts and the verdict (KIT.md 3.3).

The probe prints one JSON line after PROBE_MARKER; its help texts are read here, not in the container, so the
reading is unit-tested with real `vllm serve --help` excerpts.
"""
from __future__ import annotations

import json
import re

from msgspec import Struct, field

from onegpu.core.outcomes import Blocked

PROBE_MARKER = "ONEGPU-PROBE-RESULT "

# An option line of argparse help: indented by a few spaces, starting with a dash. Descriptions (and any
# commentary) are indented further or start otherwise, so they never count as declaring a flag.
_OPTION_LINE = re.compile(r"^ {1,8}-")
_FLAG = re.compile(r"^(--?[A-Za-z0-9][A-Za-z0-9_.-]*)")


class ProbeFacts(Struct, frozen=True):
    vllm_version: str | None
    torch_version: str | None
    cuda_device_count: int | None
    help_modes: dict[str, int]  # "--help=all" / "--help" -> its exit code
    flags_known: int  # how many distinct flags the help texts declare
    flags_checked: list[str]
    missing_flags: list[str]
    errors: list[str] = field(default_factory=list)
    platform: str | None = None  # vLLM's own platform detection in the image ("cuda", "cpu"), where it says
    expected_platform: str = "cuda"


def flags_in_help(text: str) -> set[str]:
    """Every option string argparse help text declares (`--enforce-eager, --no-enforce-eager` -> both)."""
    found: set[str] = set()
    for line in text.splitlines():
        if not _OPTION_LINE.match(line):
            continue
        # The invocation part ends where two spaces start the description.
        invocation = re.split(r" {2,}", line.strip(), maxsplit=1)[0]
        for item in invocation.split(", "):
            match = _FLAG.match(item.strip())
            if match:
                found.add(match.group(1))
    return found


def parse_probe_output(stdout: str) -> dict:
    """The probe's JSON result from its output; raises ValueError when the marker line is missing."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(PROBE_MARKER):
            return json.loads(line[len(PROBE_MARKER):])
    raise ValueError("the probe printed no result line")


def judge_probe(result: dict, flags_used: list[str], expected_platform: str = "cuda",
                expected_devices: int = 1) -> ProbeFacts:
    """Probe facts from the parsed result; raises Blocked RUNTIME_INCOMPATIBLE naming what is wrong.

    expected_platform "cuda" (the product) demands exactly `expected_devices` CUDA devices (1, or the multi-GPU
    protocol's set); "cpu" (vLLM's CPU build, the kit's real-engine double) demands vLLM's CPU platform and no
    CUDA device.
    """
    errors = list(result.get("errors") or [])
    helps = result.get("help") or {}
    known: set[str] = set()
    modes: dict[str, int] = {}
    for mode, answer in helps.items():
        modes[mode] = answer.get("exit_code")
        # A refused `--help=all` (old argparse) exits 2 and lists nothing we may trust; a keyword-filter
        # reading of it (some releases) exits 0 with a subset: the union with plain --help covers both.
        if answer.get("exit_code") == 0:
            known |= flags_in_help(answer.get("text") or "")
    wanted = list(dict.fromkeys(flags_used))
    missing = [f for f in wanted if f not in known]
    facts = ProbeFacts(
        vllm_version=result.get("vllm_version"), torch_version=result.get("torch_version"),
        cuda_device_count=result.get("cuda_device_count"), help_modes=modes, flags_known=len(known),
        flags_checked=wanted, missing_flags=missing, errors=errors, platform=result.get("platform"),
        expected_platform=expected_platform,
    )
    numbers = {"vllm_version": facts.vllm_version, "torch_version": facts.torch_version,
               "cuda_device_count": facts.cuda_device_count}
    if facts.vllm_version is None:
        raise Blocked("RUNTIME_INCOMPATIBLE", "the image has no importable vllm package"
                      + (f" ({'; '.join(errors)})" if errors else ""), numbers)
    if not known:
        raise Blocked("RUNTIME_INCOMPATIBLE", f"`vllm serve --help` answered no flag list (vLLM "
                      f"{facts.vllm_version}; exit codes {modes})" + (f"; {'; '.join(errors)}" if errors else ""),
                      numbers)
    if missing:
        raise Blocked("RUNTIME_INCOMPATIBLE", f"vLLM {facts.vllm_version} does not know the flag(s) "
                      f"{', '.join(missing)} the launch uses" + (" (--uds needs vLLM >= 0.10.1)"
                                                                 if "--uds" in missing else ""),
                      {**numbers, "missing_flags": missing})
    if expected_platform == "cpu":
        if facts.platform != "cpu" or facts.cuda_device_count:
            raise Blocked("RUNTIME_INCOMPATIBLE", f"the launch asks for vLLM's CPU build, but vLLM in the image "
                          f"detects platform {facts.platform!r} and torch sees {facts.cuda_device_count} CUDA "
                          "device(s)", {**numbers, "platform": facts.platform})
        return facts
    if facts.cuda_device_count != expected_devices:
        which = ("the selected GPU" if expected_devices == 1
                 else "the GPUs of the multi-GPU protocol, one per rank")
        raise Blocked("RUNTIME_INCOMPATIBLE", f"torch {facts.torch_version} in the container sees "
                      f"{facts.cuda_device_count} CUDA devices; exactly {expected_devices} ({which}) is required",
                      numbers)
    return facts


def describe(facts: ProbeFacts) -> str:
    """One line for the terminal and the receipt."""
    devices = (f"vLLM's CPU platform, {facts.cuda_device_count} CUDA devices" if facts.expected_platform == "cpu"
               else f"{facts.cuda_device_count} CUDA device" + ("s" if facts.cuda_device_count != 1 else ""))
    return (f"vLLM {facts.vllm_version}, torch {facts.torch_version}, {devices}; "
            f"all {len(facts.flags_checked)} launch flags known to `vllm serve` ({facts.flags_known} flags listed)")
