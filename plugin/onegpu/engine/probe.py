"""The runtime probe: a short `--network none` container from the engine's image ID that reports vLLM and
torch versions, the CUDA devices it sees, and the flags `vllm serve` knows (KIT.md 3.3).

It runs before the checkpoint is hashed, so a wrong image costs seconds, not an hour.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import requests
from docker.errors import APIError, NotFound

from onegpu.core.jsonable import to_json
from onegpu.core.outcomes import Blocked
from onegpu.engine.launch import LABEL_ROLE, LaunchSpec
from onegpu.engine.probe_parse import ProbeFacts, judge_probe, parse_probe_output

PROBE_TIMEOUT_S = 300  # importing vLLM and building its parser takes seconds to a minute on real images

# Runs inside the image with its own python3 (vLLM images have it on PATH); it only reads, and the host judges
# what it printed (onegpu.engine.probe_parse).
PROBE_SCRIPT = (Path(__file__).parent / "probe_script.py").read_text(encoding="utf-8")


def probe_create_kwargs(spec: LaunchSpec) -> dict:
    """The engine's container settings (image ID, GPU, network none, caps, user) with the probe's command
    and no mounts: the probe needs neither the checkpoint nor the socket folder."""
    kwargs = spec.create_kwargs()
    kwargs.update(name=f"{spec.name}-probe", entrypoint=["python3"],
                  command=["-c", PROBE_SCRIPT, json.dumps(["serve", *spec.command[1:]])], mounts=[],
                  labels={**spec.labels, LABEL_ROLE: "probe"})
    return kwargs


def gpu_handoff_refused(exc) -> Blocked | None:
    """The daemon's refusal to hand a GPU over, as the outcome it is (else None)."""
    text = str(exc)
    if "could not select device driver" in text or "nvidia-container-cli" in text:
        return Blocked("NO_GPU_IN_CONTAINERS", f"the Docker daemon refused the GPU device request: {text}")
    return None


def run_probe(client, spec: LaunchSpec, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[ProbeFacts, float]:
    """Run the probe container, judge it, remove it; (facts, elapsed seconds).

    Raises Blocked RUNTIME_INCOMPATIBLE (missing flags, device count not 1, no vllm, no answer in time) or
    NO_GPU_IN_CONTAINERS; the container is removed in every case.
    """
    started = time.monotonic()
    container = None
    try:  # create is inside the try too: an interrupted probe never leaks its container
        container = client.containers.create(**probe_create_kwargs(spec))
        try:
            container.start()
        except APIError as exc:
            raise gpu_handoff_refused(exc) or exc
        try:
            status = container.wait(timeout=timeout_s)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            raise Blocked("RUNTIME_INCOMPATIBLE", f"the runtime probe did not finish within {timeout_s:g} s "
                          "(importing vLLM or building its argument parser hangs in this image)") from None
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        try:
            result = parse_probe_output(stdout)
        except ValueError:
            tail = container.logs(stdout=True, stderr=True, tail=20).decode("utf-8", "replace").strip()
            raise Blocked("RUNTIME_INCOMPATIBLE", f"the probe container (python3 in the image) exited "
                          f"{status.get('StatusCode')} without a result; last output: {tail[-800:]!r}",
                          {"exit_code": status.get("StatusCode")}) from None
        facts = judge_probe(result, spec.flags_used(), spec.engine_platform, max(1, len(spec.device_uuids)))
        return facts, time.monotonic() - started
    finally:
        _remove(client, container, f"{spec.name}-probe")


def _remove(client, container, name: str) -> None:
    """Remove the probe container; by its (session-unique) name when create was interrupted mid-call."""
    try:
        (container or client.containers.get(name)).remove(force=True)
    except NotFound:
        pass


def facts_json(facts: ProbeFacts, elapsed_s: float) -> dict:
    return {**to_json(facts), "elapsed_s": round(elapsed_s, 3)}
