"""Pure: what the runtime probe container printed -> the facts and the verdict (KIT.md 3.3).

The probe prints one JSON line after PROBE_MARKER; its help texts are read here, not in the container, so the
reading is unit-tested with real `vllm serve --help` excerpts.
"""
from __future__ import annotations

import json
import re

from msgspec import Struct, field

from onegpu.core.outcomes import Blocked
from onegpu.engine.probe_script import MARKER as PROBE_MARKER  # the in-image script's own words
from onegpu.engine.probe_script import NO_DEVICE

# argparse's refusals, as vLLM's `vllm` command prints them (recorded: tests_offline/data/engine_logs/
# fail-unknown-flag.log; a public log: tests_offline/data/gpu_logs/fail-bad-flag-invalid-choice-load-format.log).
_UNRECOGNIZED = re.compile(r"error: unrecognized arguments: (.*)$", re.M)
_INVALID = re.compile(r"error: argument [^\n]*$", re.M)

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
    parser_judged: bool = False  # the launch argv was parsed by the release's own `vllm serve` parser
    parser_note: str | None = None  # how it was built (VLLM_TARGET_DEVICE=cpu where no device was there), or why not
    cuda_init_error: str | None = None  # torch's reason for seeing no CUDA device, in its words
    h2d: dict | None = None  # pinned host-to-device copies measured on the first device: bytes, repeats, gbps
    h2d_error: str | None = None  # why nothing was measured where a device was there


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


def _parser_verdict(parser: dict | None, wanted: list[str]) -> tuple[bool, str | None, list[str], str | None]:
    """(judged, note, refused flags, argparse's own error line) of the in-image parse of the launch argv."""
    if not parser:
        return False, "the release's own parser was not run (the image has no importable vllm)", [], None
    stderr, code = parser.get("stderr_tail") or "", parser.get("exit_code")
    device = (" (built with VLLM_TARGET_DEVICE=cpu: without a GPU the CUDA build cannot infer its device, "
              f"'{NO_DEVICE}')" if parser.get("target_device") == "cpu" else "")
    if code == 0:
        return True, f"every flag parsed by vLLM's own `vllm serve` parser{device}", [], None
    refused = _UNRECOGNIZED.search(stderr)
    if code == 2 and refused:
        flags = [f for f in refused.group(1).split() if f.startswith("-")]
        return True, f"refused by vLLM's own `vllm serve` parser{device}", [f for f in wanted if f in flags] or flags, \
            refused.group(0).strip()
    invalid = _INVALID.search(stderr)
    if code == 2 and invalid:
        return True, f"refused by vLLM's own `vllm serve` parser{device}", [], invalid.group(0).strip()
    last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit code {code}"
    return False, f"the release's own parser could not be built here ({last[-300:]}); flags judged from its help", \
        [], None


def judge_probe(result: dict, flags_used: list[str], expected_platform: str = "cuda",
                expected_devices: int = 1) -> ProbeFacts:
    """Probe facts from the parsed result; raises Blocked naming what is wrong.

    Flags: the release's own `vllm serve` parser decides where it could be built in the image (an unknown flag,
    RUNTIME_INCOMPATIBLE, named with argparse's words; a value it refuses, INVALID_ENGINE_ARGUMENT); else the
    help texts. expected_platform "cuda" (the product) demands exactly `expected_devices` CUDA devices (1, or the
    multi-GPU protocol's set), NO_GPU_IN_CONTAINERS where torch says no driver reached the container; "cpu"
    (vLLM's CPU build, the kit's real-engine double) demands vLLM's CPU platform and no CUDA device.
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
    judged, note, refused, words = _parser_verdict(result.get("parser"), wanted)
    missing = refused if judged else [f for f in wanted if f not in known]
    facts = ProbeFacts(
        vllm_version=result.get("vllm_version"), torch_version=result.get("torch_version"),
        cuda_device_count=result.get("cuda_device_count"), help_modes=modes, flags_known=len(known),
        flags_checked=wanted, missing_flags=missing, errors=errors, platform=result.get("platform"),
        expected_platform=expected_platform, parser_judged=judged, parser_note=note,
        cuda_init_error=result.get("cuda_init_error"),
        h2d=result.get("h2d") if isinstance(result.get("h2d"), dict) else None, h2d_error=result.get("h2d_error"),
    )
    numbers = {"vllm_version": facts.vllm_version, "torch_version": facts.torch_version,
               "cuda_device_count": facts.cuda_device_count, "flags_checked": len(wanted), "flags_judged_by": note}
    if facts.vllm_version is None:
        raise Blocked("RUNTIME_INCOMPATIBLE", "the image has no importable vllm package"
                      + (f" ({'; '.join(errors)})" if errors else ""), numbers)
    if judged and words and not missing:
        raise Blocked("INVALID_ENGINE_ARGUMENT", f"vLLM {facts.vllm_version}'s own parser refuses a value of the "
                      f"launch: {words}", {**numbers, "parser_error": words})
    if not judged and not known:
        raise Blocked("RUNTIME_INCOMPATIBLE", f"`vllm serve --help` answered no flag list (vLLM "
                      f"{facts.vllm_version}; exit codes {modes})" + (f"; {'; '.join(errors)}" if errors else "")
                      + (f"; {note}" if note else ""), numbers)
    if missing:
        said = f"; its parser says: {words}" if words else ""
        raise Blocked("RUNTIME_INCOMPATIBLE", f"vLLM {facts.vllm_version} does not know the flag(s) "
                      f"{', '.join(missing)} the launch uses" + (" (--uds needs vLLM >= 0.10.1)"
                                                                 if "--uds" in missing else "") + said,
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
        image_said = "; ".join(filter(None, [
            f"torch: {facts.cuda_init_error}" if facts.cuda_init_error else None,
            f"vLLM detects platform {facts.platform!r}" if facts.platform is not None else
            (f"vLLM's platform detection: {result.get('platform_error')}" if result.get("platform_error") else None),
            f"`vllm serve` without a device: '{NO_DEVICE}'" if NO_DEVICE in str(result.get("parser") or {}) else None]))
        message = (f"torch {facts.torch_version} in the container sees {facts.cuda_device_count} CUDA devices; "
                   f"exactly {expected_devices} ({which}) is required" + (f" (the image says: {image_said})"
                                                                          if image_said else ""))
        no_driver = facts.cuda_device_count == 0 and "no NVIDIA driver" in (facts.cuda_init_error or "")
        raise Blocked("NO_GPU_IN_CONTAINERS" if no_driver else "RUNTIME_INCOMPATIBLE", message,
                      {**numbers, "cuda_init_error": facts.cuda_init_error})
    return facts


def describe(facts: ProbeFacts) -> str:
    """One line for the terminal and the receipt."""
    devices = (f"vLLM's CPU platform, {facts.cuda_device_count} CUDA devices" if facts.expected_platform == "cpu"
               else f"{facts.cuda_device_count} CUDA device" + ("s" if facts.cuda_device_count != 1 else ""))
    how = (facts.parser_note if facts.parser_judged else f"{facts.flags_known} flags listed in its help")
    return (f"vLLM {facts.vllm_version}, torch {facts.torch_version}, {devices}; "
            f"all {len(facts.flags_checked)} launch flags known to `vllm serve` ({how})")
