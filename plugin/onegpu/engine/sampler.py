"""Background sampling while the engine lives (KIT.md 8): selected GPU memory, utilization and power (NVML),
host available RAM (psutil), the container's memory (its cgroup, else the docker stats API).

One JSON line per sample in samples.jsonl; the peaks go to the receipt. A sampling error is recorded in
the sample and never stops the run.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil

from onegpu.engine.cgroup import CgroupDir, find_container_cgroup, memory_bytes
from onegpu.evidence.rundir import append_line, open_private_append

INTERVAL_S = 2.0


def _nvml_error(exc) -> bool:
    return type(exc).__name__.startswith("NVMLError")


def read_gpu_raw(nvml, uuid: str) -> dict:
    """NVML's answers for one GPU as plain values (the raw half, as in onegpu.machine.nvml)."""
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    raw: dict = {"uuid": uuid, "memory": {"total": int(mem.total), "free": int(mem.free), "used": int(mem.used)},
           "utilization": None, "power_mw": None}
    try:
        util = nvml.nvmlDeviceGetUtilizationRates(handle)
        raw["utilization"] = {"gpu": int(util.gpu), "memory": int(util.memory)}
    except Exception as exc:
        if not _nvml_error(exc):
            raise
    try:
        raw["power_mw"] = int(nvml.nvmlDeviceGetPowerUsage(handle))
    except Exception as exc:
        if not _nvml_error(exc):
            raise
    return raw


def gpu_sample_from_raw(raw: dict) -> dict:
    """The converted half: bytes, percent and watts with units in the names."""
    util = raw.get("utilization") or {}
    return {"gpu_used_bytes": raw["memory"]["used"], "gpu_free_bytes": raw["memory"]["free"],
            "gpu_total_bytes": raw["memory"]["total"], "gpu_util_percent": util.get("gpu"),
            "gpu_power_w": None if raw.get("power_mw") is None else raw["power_mw"] / 1000}


def peaks(samples: list[dict]) -> dict:
    """Pure: the receipt's summary of a sample series (maxima of use, minima of what is left)."""
    def pick(key, fn):
        values = [s[key] for s in samples if s.get(key) is not None]
        return fn(values) if values else None

    return {
        "count": len(samples),
        "errors": sum(1 for s in samples if s.get("errors")),
        "gpu_used_bytes_max": pick("gpu_used_bytes", max),
        "gpu_free_bytes_min": pick("gpu_free_bytes", min),
        "gpu_util_percent_max": pick("gpu_util_percent", max),
        "gpu_power_w_max": pick("gpu_power_w", max),
        "host_available_bytes_min": pick("host_available_bytes", min),
        "container_memory_bytes_max": pick("container_memory_bytes", max),
    }


class Sampler:
    """A daemon thread appending one sample every `interval_s` to `path` until `stop()`."""

    def __init__(self, path: Path, gpu_uuid: str | None, container=None, interval_s: float = INTERVAL_S,
                 nvml=None):
        self.path, self.gpu_uuid, self.container, self.interval_s = path, gpu_uuid, container, interval_s
        self._nvml = nvml  # the pynvml module; None: imported on start
        self._nvml_ready = False
        self._cgroup: CgroupDir | bool | None = None  # None: not looked for yet; False: not found
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples: list[dict] = []
        self.latest: dict = {}
        self._t0 = time.monotonic()

    def start(self) -> "Sampler":
        self._open_nvml()
        self._fh = open_private_append(self.path)
        self._thread = threading.Thread(target=self._run, name="onegpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stop sampling (one last sample first) and return the peaks."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=self.interval_s + 10)
            self._thread = None
            self._fh.close()
            if self._nvml_ready:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # shutting NVML down is best effort; the samples are already written
                    pass
        return peaks(self.samples)

    def _open_nvml(self) -> None:
        if self.gpu_uuid is None:
            return
        try:
            if self._nvml is None:
                import pynvml
                self._nvml = pynvml
            self._nvml.nvmlInit()
            self._nvml_ready = True
        except Exception as exc:  # no driver: GPU fields stay empty, with the reason once
            self._nvml_error = f"NVML unavailable: {type(exc).__name__}: {exc}"

    def _run(self) -> None:
        while True:
            self.sample_once()
            if self._stop.wait(self.interval_s):
                self.sample_once()
                return

    def sample_once(self) -> dict:
        """Take one sample, append it, return it; errors are recorded in it, never raised."""
        sample: dict = {"t": round(time.time(), 3), "elapsed_s": round(time.monotonic() - self._t0, 3)}
        errors = []
        if self.gpu_uuid is not None:
            if self._nvml_ready:
                try:
                    sample.update(gpu_sample_from_raw(read_gpu_raw(self._nvml, self.gpu_uuid)))
                except Exception as exc:  # one failed reading must not end sampling
                    errors.append(f"gpu: {type(exc).__name__}: {exc}")
            else:
                errors.append(getattr(self, "_nvml_error", "NVML not initialised"))
        try:
            sample["host_available_bytes"] = int(psutil.virtual_memory().available)
        except Exception as exc:
            errors.append(f"host: {type(exc).__name__}: {exc}")
        if self.container is not None:
            try:
                sample["container_memory_bytes"], sample["container_memory_source"] = self._container_memory()
            except Exception as exc:
                errors.append(f"container: {type(exc).__name__}: {exc}")
        if errors:
            sample["errors"] = errors
        self.samples.append(sample)
        self.latest = sample
        try:
            append_line(self._fh, sample)
        except Exception:  # a full disk must not break the run; the in-memory series keeps the peaks
            pass
        return sample

    def _container_memory(self) -> tuple[int | None, str]:
        if self._cgroup is None:
            self.container.reload()
            pid = (self.container.attrs.get("State") or {}).get("Pid")
            self._cgroup = find_container_cgroup(self.container.id, pid) or False
        cgroup = self._cgroup
        if isinstance(cgroup, CgroupDir):
            value = memory_bytes(cgroup)
            if value is not None:
                return value, f"cgroup v{cgroup.version}"
        stats = self.container.stats(stream=False, one_shot=True)
        usage = (stats.get("memory_stats") or {}).get("usage")
        return (int(usage) if usage is not None else None), "docker stats"
