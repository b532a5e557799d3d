"""The sampler: NVML answers converted (a stand-in NVML, because no NVIDIA driver exists here; its errors
are pynvml's real exception classes), host RAM from psutil, the container's memory from its real cgroup on
the real Docker engine, errors recorded without stopping, samples.jsonl private, peaks."""
from __future__ import annotations

import json
import stat
import time
from types import SimpleNamespace

import pynvml
import pytest

from onegpu.engine.cgroup import CgroupDir, cgroup_from_proc, find_container_cgroup, memory_bytes, parse_oom_kill
from onegpu.engine.sampler import Sampler, gpu_sample_from_raw, peaks, read_gpu_raw
from tests_offline.engine_helpers import make_spec

UUID = "GPU-5d0c1f2e-8a7b-4c3d-9e8f-0a1b2c3d4e5f"
GiB = 2**30


class StandInNvml:
    """Answers like pynvml for one card (values recorded from an RTX PRO 6000 Blackwell at idle)."""

    def __init__(self, fail_memory_after: int | None = None, power_supported: bool = True):
        self.calls = 0
        self.fail_memory_after, self.power_supported = fail_memory_after, power_supported
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid != UUID:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return "handle"

    def nvmlDeviceGetMemoryInfo(self, handle):
        self.calls += 1
        if self.fail_memory_after is not None and self.calls > self.fail_memory_after:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(total=97_887_010_816, free=97_332_314_112, used=554_696_704)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=3, memory=1)

    def nvmlDeviceGetPowerUsage(self, handle):
        if not self.power_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 22_431


def test_raw_answers_convert_to_units():
    raw = read_gpu_raw(StandInNvml(), UUID)
    assert raw == {"uuid": UUID, "memory": {"total": 97_887_010_816, "free": 97_332_314_112, "used": 554_696_704},
                   "utilization": {"gpu": 3, "memory": 1}, "power_mw": 22_431}
    assert gpu_sample_from_raw(raw) == {"gpu_used_bytes": 554_696_704, "gpu_free_bytes": 97_332_314_112,
                                        "gpu_total_bytes": 97_887_010_816, "gpu_util_percent": 3,
                                        "gpu_power_w": pytest.approx(22.431)}


def test_unsupported_power_reading_is_unknown_not_an_error():
    raw = read_gpu_raw(StandInNvml(power_supported=False), UUID)
    assert raw["power_mw"] is None and gpu_sample_from_raw(raw)["gpu_power_w"] is None


def test_peaks_take_maxima_of_use_and_minima_of_what_is_left():
    samples = [{"gpu_used_bytes": 5, "gpu_free_bytes": 9, "host_available_bytes": 70, "container_memory_bytes": 1},
               {"gpu_used_bytes": 8, "gpu_free_bytes": 6, "host_available_bytes": 60, "errors": ["x"]},
               {"gpu_used_bytes": None, "host_available_bytes": 65, "container_memory_bytes": 4}]
    p = peaks(samples)
    assert p["count"] == 3 and p["errors"] == 1
    assert p["gpu_used_bytes_max"] == 8 and p["gpu_free_bytes_min"] == 6
    assert p["host_available_bytes_min"] == 60 and p["container_memory_bytes_max"] == 4
    assert p["gpu_power_w_max"] is None


def test_a_failing_reading_is_recorded_and_sampling_goes_on(tmp_path):
    nvml = StandInNvml(fail_memory_after=2)
    sampler = Sampler(tmp_path / "samples.jsonl", UUID, interval_s=0.05, nvml=nvml).start()
    time.sleep(0.5)
    result = sampler.stop()
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == result["count"] >= 5
    assert lines[0]["gpu_used_bytes"] == 554_696_704 and "errors" not in lines[0]
    assert any("GpuIsLost" in e or "GPU is lost" in e for e in lines[-1]["errors"])
    assert all(line["host_available_bytes"] > 0 for line in lines)
    assert result["errors"] == len(lines) - 2 and nvml.shut
    assert stat.S_IMODE((tmp_path / "samples.jsonl").stat().st_mode) == 0o600


def test_with_the_real_nvml_an_unreadable_gpu_is_said_and_the_rest_sampled(tmp_path):
    # The real pynvml: without a driver nvmlInit fails; with one, the made-up UUID is not found.
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        expected = "gpu: NVMLError_NotFound"
    except pynvml.NVMLError:
        expected = "NVML unavailable"
    sampler = Sampler(tmp_path / "samples.jsonl", UUID, interval_s=0.05).start()
    time.sleep(0.15)
    sampler.stop()
    first = json.loads((tmp_path / "samples.jsonl").read_text().splitlines()[0])
    assert first["errors"][0].startswith(expected) and "gpu_used_bytes" not in first
    assert first["host_available_bytes"] > 0


def test_cgroup_paths_and_oom_counts_are_read_from_both_layouts(tmp_path):
    v1 = "12:pids:/docker/abc\n4:memory:/docker/abc\n0::/docker/abc\n"
    v2 = "0::/system.slice/docker-abc.scope\n"
    assert cgroup_from_proc(v1, tmp_path) == CgroupDir(1, tmp_path / "memory" / "docker" / "abc")
    assert cgroup_from_proc(v2, tmp_path) == CgroupDir(2, tmp_path / "system.slice" / "docker-abc.scope")
    assert parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n") == 3
    assert parse_oom_kill("low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n") == 1
    folder = tmp_path / "cg"
    folder.mkdir()
    (folder / "memory.current").write_text("123456\n")
    assert memory_bytes(CgroupDir(2, folder)) == 123456
    assert memory_bytes(CgroupDir(1, folder)) is None  # no such file: gone, not zero


def test_container_memory_comes_from_its_cgroup(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    kwargs = spec.create_kwargs()
    # A container that holds 64 MiB so its cgroup shows real use.
    kwargs.update(name=spec.name + "-mem", entrypoint=["python3"],
                  command=["-c", "import time; x = bytearray(64 << 20); x[::4096] = b'1' * len(x[::4096]); "
                                 "print('held', flush=True); time.sleep(60)"])
    container = docker_client.containers.create(**kwargs)
    try:
        container.start()
        for _ in range(100):
            if b"held" in container.logs():
                break
            time.sleep(0.1)
        container.reload()
        found = find_container_cgroup(container.id, container.attrs["State"]["Pid"])
        assert found is not None and memory_bytes(found) >= 64 << 20
        sampler = Sampler(tmp_path / "samples.jsonl", None, container, interval_s=0.1).start()
        time.sleep(0.35)
        result = sampler.stop()
        assert sampler.samples[0]["container_memory_source"] == f"cgroup v{found.version}"
        assert result["container_memory_bytes_max"] >= 64 << 20
        assert result["container_memory_bytes_max"] < spec.mem_limit_bytes
    finally:
        container.remove(force=True)
