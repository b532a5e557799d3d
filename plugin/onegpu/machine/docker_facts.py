"""Docker facts from the daemon's API (a local socket asked directly, any other endpoint through the docker SDK):
reachable, version, swap limits, GPU hand-off, remote/rootless."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from onegpu.machine.model import DockerFacts

CONNECT_TIMEOUT_S = 5


def endpoint_from_env() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def is_remote(endpoint: str) -> bool:
    """A tcp:// or ssh:// daemon runs on another machine (or behind a proxy): its RAM is not ours."""
    return endpoint.startswith(("tcp://", "ssh://", "http://", "https://"))


def cdi_devices_from_specs(spec_dirs: list[str]) -> list[str]:
    """NVIDIA GPU device names ("nvidia.com/gpu=0") declared in CDI spec files (JSON or YAML).

    YAML is read with a pattern, not a parser: CDI specs written by nvidia-ctk keep `kind:` and each
    device's `- name:` on their own lines, and a parser dependency for two keys is not worth it.
    """
    names: list[str] = []
    for folder in spec_dirs:
        for path in sorted(Path(folder).glob("*")):
            if path.suffix not in (".json", ".yaml", ".yml") or not path.is_file():
                continue
            text = path.read_text(errors="replace")
            if path.suffix == ".json":
                try:
                    spec = json.loads(text)
                except ValueError:
                    continue
                kind = spec.get("kind", "")
                devs = [d.get("name") for d in spec.get("devices", []) if isinstance(d, dict)]
            else:
                kind_m = re.search(r"^kind:\s*['\"]?([^'\"\s]+)", text, re.M)
                kind = kind_m.group(1) if kind_m else ""
                devs = re.findall(r"^\s*-\s*name:\s*['\"]?([^'\"\s]+)", text, re.M)
            if kind == "nvidia.com/gpu":
                names.extend(f"{kind}={d}" for d in devs if d)
    return names


def docker_facts_from_info(endpoint: str, info: dict, version: dict, hook_path: str | None,
                           cdi_from_files: list[str]) -> DockerFacts:
    """Pure conversion of `docker info` / `docker version` answers into DockerFacts."""
    security = info.get("SecurityOptions") or []
    discovered = [f"{d.get('ID')}" for d in (info.get("DiscoveredDevices") or [])
                  if str(d.get("ID", "")).startswith("nvidia.com/gpu")]
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    return DockerFacts(
        reachable=True, error=None, endpoint=endpoint, remote=is_remote(endpoint),
        rootless=any("rootless" in s for s in security),
        server_version=info.get("ServerVersion") or version.get("Version"),
        api_version=version.get("ApiVersion"),
        swap_limit=info.get("SwapLimit"), memory_limit=info.get("MemoryLimit"),
        cgroup_version=info.get("CgroupVersion"),
        runtimes=runtimes, nvidia_runtime="nvidia" in runtimes,
        nvidia_hook=hook_path is not None,
        cdi_gpu_devices=sorted(set(discovered + cdi_from_files)),
        daemon_mem_total_bytes=info.get("MemTotal"), daemon_name=info.get("Name"),
    )


def unreachable(endpoint: str, error: str) -> DockerFacts:
    return DockerFacts(reachable=False, error=error, endpoint=endpoint, remote=is_remote(endpoint),
                       rootless=False, server_version=None, api_version=None, swap_limit=None,
                       memory_limit=None, cgroup_version=None, runtimes=[], nvidia_runtime=False,
                       nvidia_hook=False, cdi_gpu_devices=[], daemon_mem_total_bytes=None, daemon_name=None)


def _ask_local(endpoint: str) -> tuple[dict, dict]:
    """`docker info` and `docker version` from a local socket without the docker SDK (onegpu.machine.docker_api);
    raises NotAnswered when the SDK must be asked."""
    from onegpu.machine.docker_api import LocalDaemon

    daemon = LocalDaemon(endpoint, CONNECT_TIMEOUT_S)
    return daemon.get_object("/info"), daemon.get_object("/version")


def read_docker_facts() -> DockerFacts:
    """Ask the daemon DOCKER_HOST names (or the default socket). Never raises for an absent daemon."""
    from onegpu.machine.docker_api import NotAnswered

    endpoint = endpoint_from_env()
    try:
        info, version = _ask_local(endpoint)
    except NotAnswered:
        # another kind of endpoint, or no clean answer: the SDK asks, and words any error
        import docker
        from docker.errors import DockerException

        try:
            client = docker.from_env(timeout=CONNECT_TIMEOUT_S)
            try:
                info, version = client.info(), client.version()
            finally:
                client.close()
        except (DockerException, OSError) as exc:
            return unreachable(endpoint, f"{type(exc).__name__}: {exc}")
    local = not is_remote(endpoint)
    # The --gpus path needs the hook beside the daemon; we can only look for it when the daemon is local.
    hook = shutil.which("nvidia-container-runtime-hook") if local else None
    cdi_files = cdi_devices_from_specs(info.get("CDISpecDirs") or ["/etc/cdi", "/var/run/cdi"]) if local else []
    return docker_facts_from_info(endpoint, info, version, hook, cdi_files)
