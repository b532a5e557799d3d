"""Docker facts: recorded `docker info` / `docker version` answers through the conversion the live path
uses, CDI spec files as nvidia-ctk writes them, and the real daemon of this machine."""
from __future__ import annotations

import json
import socket

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.machine import checks
from onegpu.machine.docker_facts import (
    cdi_devices_from_specs,
    docker_facts_from_info,
    endpoint_from_env,
    is_remote,
    read_docker_facts,
    unreachable,
)
from tests_offline.docker_required import require_docker

LOCAL = "unix:///var/run/docker.sock"
VERSION_28 = {"Version": "28.3.3", "ApiVersion": "1.51", "MinAPIVersion": "1.24", "Os": "linux", "Arch": "amd64"}
RUNC = {"io.containerd.runc.v2": {"path": "runc"}, "runc": {"path": "runc"}}

# A GPU workstation: Docker 28 on cgroup v2 with the NVIDIA runtime registered by nvidia-ctk.
INFO_NVIDIA_RUNTIME = {
    "Name": "tower", "ServerVersion": "28.3.3", "CgroupVersion": "2", "CgroupDriver": "systemd",
    "MemoryLimit": True, "SwapLimit": True, "MemTotal": 540_925_911_040, "NCPU": 64,
    "Runtimes": {**RUNC, "nvidia": {"path": "nvidia-container-runtime"}}, "DefaultRuntime": "runc",
    "SecurityOptions": ["name=apparmor", "name=seccomp,profile=builtin", "name=cgroupns"],
    "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"], "DiscoveredDevices": [],
}
# Docker 29 lists CDI devices itself; vendor prefixes other than nvidia.com/gpu are other device kinds.
INFO_CDI = {
    "Name": "gpu-node", "ServerVersion": "29.4.3", "CgroupVersion": "2", "MemoryLimit": True, "SwapLimit": True,
    "MemTotal": 2_164_112_805_888, "Runtimes": RUNC, "DefaultRuntime": "runc",
    "SecurityOptions": ["name=seccomp,profile=builtin", "name=cgroupns"], "CDISpecDirs": [],
    "DiscoveredDevices": [
        {"Source": "cdi", "ID": "k8s.device-plugin.nvidia.com/gpu=GPU-1ac8"},
        {"Source": "cdi", "ID": "management.nvidia.com/gpu=all"},
        {"Source": "cdi", "ID": "nvidia.com/gpu=1"},
        {"Source": "cdi", "ID": "nvidia.com/gpu=0"},
        {"Source": "cdi", "ID": "nvidia.com/gpu=all"},
    ],
}
# A rootless daemon (dockerd-rootless.sh) reports name=rootless among its security options.
INFO_ROOTLESS = {
    "Name": "laptop", "ServerVersion": "27.5.1", "CgroupVersion": "2", "MemoryLimit": True, "SwapLimit": True,
    "MemTotal": 33_324_482_560, "Runtimes": RUNC,
    "SecurityOptions": ["name=seccomp,profile=builtin", "name=rootless", "name=cgroupns"],
}
# Ubuntu on cgroup v1 without swapaccount=1: docker info warns "No swap limit support".
INFO_NO_SWAP_LIMIT = {
    "Name": "old-box", "ServerVersion": "20.10.21", "CgroupVersion": "1", "MemoryLimit": True, "SwapLimit": False,
    "MemTotal": 67_352_956_928, "Runtimes": RUNC, "SecurityOptions": ["name=apparmor", "name=seccomp,profile=default"],
}


def facts(info, endpoint=LOCAL, hook=None, cdi_files=(), version=VERSION_28):
    return docker_facts_from_info(endpoint, info, version, hook, list(cdi_files))


def blocked_code(check, *args) -> str:
    with pytest.raises(Blocked) as blocked:
        check(*args)
    return blocked.value.code


# --- recorded answers ----------------------------------------------------------------------------------

def test_nvidia_runtime_can_hand_gpus():
    d = facts(INFO_NVIDIA_RUNTIME)
    assert d.reachable and not d.remote and not d.rootless
    assert (d.server_version, d.api_version, d.cgroup_version) == ("28.3.3", "1.51", "2")
    assert d.runtimes == ["io.containerd.runc.v2", "nvidia", "runc"] and d.nvidia_runtime
    assert d.can_hand_gpus and d.cdi_gpu_devices == []
    assert checks.require_gpu_handoff(d) == "the daemon can hand NVIDIA GPUs to containers via nvidia runtime"
    assert checks.require_swap_limits(d).startswith("the daemon enforces memory and swap limits")
    assert checks.require_local_docker(d) == "the Docker daemon is local and rootful (it reports 503.78 GiB RAM)"


def test_hook_beside_the_daemon_is_the_gpus_path():
    d = facts({**INFO_NVIDIA_RUNTIME, "Runtimes": RUNC}, hook="/usr/bin/nvidia-container-runtime-hook")
    assert not d.nvidia_runtime and d.nvidia_hook and d.can_hand_gpus
    assert checks.require_gpu_handoff(d).endswith("via --gpus hook")


def test_cdi_devices_the_daemon_discovered_count_and_other_kinds_do_not():
    d = facts(INFO_CDI, cdi_files=["nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1ac8"])
    assert d.cdi_gpu_devices == ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=GPU-1ac8",
                                 "nvidia.com/gpu=all"]
    assert not d.nvidia_runtime and not d.nvidia_hook and d.can_hand_gpus
    assert "CDI nvidia.com/gpu=0, nvidia.com/gpu=1" in checks.require_gpu_handoff(d)


def test_rootless_daemon_is_not_this_hosts_memory():
    d = facts(INFO_ROOTLESS)
    assert d.rootless and not d.remote
    assert blocked_code(checks.require_local_docker, d) == "REMOTE_DOCKER"
    with pytest.raises(Blocked) as blocked:
        checks.require_local_docker(d)
    assert "is rootless" in blocked.value.message and "31.04 GiB reported" in blocked.value.message


@pytest.mark.parametrize("endpoint", ["tcp://gpu-box.lan:2376", "ssh://operator@gpu-box", "https://dockerd:2376"])
def test_remote_endpoint_is_another_machine(endpoint):
    d = facts(INFO_NVIDIA_RUNTIME, endpoint=endpoint)
    assert d.remote and d.endpoint == endpoint
    with pytest.raises(Blocked) as blocked:
        checks.require_local_docker(d)
    assert blocked.value.code == "REMOTE_DOCKER" and f"at {endpoint} is remote" in blocked.value.message


@pytest.mark.parametrize("endpoint, remote", [("unix:///run/user/1000/docker.sock", False),
                                              ("npipe:////./pipe/docker_engine", False),
                                              ("tcp://127.0.0.1:2375", True)])
def test_which_endpoints_are_remote(endpoint, remote):
    assert is_remote(endpoint) is remote


def test_swap_limit_false_would_let_the_ram_cap_spill_into_swap():
    d = facts(INFO_NO_SWAP_LIMIT, version={"Version": "20.10.21", "ApiVersion": "1.41"})
    assert d.swap_limit is False and d.memory_limit is True
    assert blocked_code(checks.require_swap_limits, d) == "SWAP_LIMIT_UNENFORCED"
    assert blocked_code(checks.require_gpu_handoff, d) == "NO_GPU_IN_CONTAINERS"
    assert checks.require_docker(d).startswith("Docker daemon 20.10.21 (API 1.41)")


def test_unreachable_daemon_blocks_every_docker_fact_with_no_docker():
    d = unreachable(LOCAL, "FileNotFoundError: [Errno 2] No such file or directory")
    assert not d.can_hand_gpus
    for check in (checks.require_docker, checks.require_local_docker, checks.require_swap_limits,
                  checks.require_gpu_handoff):
        assert blocked_code(check, d) == "NO_DOCKER"


def test_docker_host_names_the_endpoint(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert endpoint_from_env() == LOCAL
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.7:2376")
    assert endpoint_from_env() == "tcp://10.0.0.7:2376"


# --- CDI spec files --------------------------------------------------------------------------------------

# The shape `nvidia-ctk cdi generate` writes (trimmed): device names first in each entry, quoted when numeric.
CDI_YAML = """\
---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidia-modeset
  - path: /dev/nvidia-uvm
  - path: /dev/nvidiactl
  hooks:
  - args:
    - nvidia-cdi-hook
    - update-ldcache
    hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
kind: nvidia.com/gpu
"""
CDI_JSON = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
            "devices": [{"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia1"}]}}],
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]}}
OTHER_KIND_YAML = "cdiVersion: 0.6.0\nkind: amd.com/gpu\ndevices:\n  - name: \"0\"\n"


def test_cdi_specs_in_json_and_yaml(tmp_path):
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    etc.mkdir()
    run.mkdir()
    (etc / "nvidia.yaml").write_text(CDI_YAML)
    (run / "nvidia-1.json").write_text(json.dumps(CDI_JSON))
    (run / "amd.yml").write_text(OTHER_KIND_YAML)
    (run / "broken.json").write_text("{not json")
    (run / "README").write_text("kind: nvidia.com/gpu\n- name: ignored\n")  # not a spec file name
    assert cdi_devices_from_specs([str(etc), str(run), str(tmp_path / "absent")]) == [
        "nvidia.com/gpu=0", "nvidia.com/gpu=GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732", "nvidia.com/gpu=all",
        "nvidia.com/gpu=1"]


def test_no_cdi_folders_means_no_cdi_devices(tmp_path):
    assert cdi_devices_from_specs([str(tmp_path / "etc-cdi"), str(tmp_path / "run-cdi")]) == []


# --- the daemon of this machine --------------------------------------------------------------------------

def test_live_daemon_answers_enforces_swap_and_has_no_gpu_hand_off(docker_client, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    d = read_docker_facts()
    info, version = docker_client.info(), docker_client.version()
    assert d.reachable and d.error is None and d.endpoint == LOCAL
    assert not d.remote and not d.rootless
    assert d.server_version == version["Version"] and d.api_version == version["ApiVersion"]
    assert d.cgroup_version == info["CgroupVersion"] and d.daemon_mem_total_bytes == info["MemTotal"]
    assert d.swap_limit is True
    assert checks.require_docker(d).startswith(f"Docker daemon {version['Version']}")
    assert checks.require_swap_limits(d)
    # No NVIDIA runtime, hook or CDI device here: reachable and NO_GPU_IN_CONTAINERS are both right at once.
    assert not d.can_hand_gpus
    assert blocked_code(checks.require_gpu_handoff, d) == "NO_GPU_IN_CONTAINERS"


def test_the_direct_socket_path_reads_what_the_sdk_reads(docker_client, monkeypatch):
    # read_docker_facts asks a local socket without the docker SDK: the same /version and /info answers
    from onegpu.machine.docker_facts import _ask_local

    info, version = _ask_local(LOCAL)
    sdk_info, sdk_version = docker_client.info(), docker_client.version()
    assert version == sdk_version and set(info) == set(sdk_info)
    moving = {"NFd", "NGoroutines", "SystemTime", "NEventsListener", "Containers", "ContainersRunning",
              "ContainersPaused", "ContainersStopped", "Images"}
    assert {k: v for k, v in info.items() if k not in moving} == {k: v for k, v in sdk_info.items() if k not in moving}


def test_a_socket_nobody_listens_on_is_no_docker_not_an_exception(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    d = read_docker_facts()
    assert not d.reachable and not d.remote
    assert "No such file or directory" in d.error
    assert blocked_code(checks.require_docker, d) == "NO_DOCKER"


def test_a_closed_tcp_port_on_loopback_is_no_docker_and_remote(monkeypatch):
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{port}")
    d = read_docker_facts()
    assert not d.reachable and d.remote
    assert "Connection refused" in d.error


# --- the helper other Docker tests use -------------------------------------------------------------------

def test_no_daemon_skips_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"no Docker daemon answers at unix://{tmp_path}"):
        require_docker()


def test_no_daemon_fails_under_ci(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true requires a Docker daemon; no Docker daemon answers"):
        require_docker()


def test_a_daemon_that_answers_is_handed_over(docker_client, monkeypatch):
    monkeypatch.setenv("CI", "true")  # the daemon answers (docker_client), so CI=true changes nothing
    client = require_docker()
    try:
        assert client.ping() is True
    finally:
        client.close()
