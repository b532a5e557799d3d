"""A stand-in for NVML where there is no NVIDIA driver (FakeNvml, nvml_sample), and the conftest text of a kit
project whose engine is simulated and samples that stand-in at READY (ENGINE_CONFTEST)."""
from __future__ import annotations

from types import SimpleNamespace

from onegpu.engine.sampler import Sampler


class FakeNvml:
    """Stands in for the NVIDIA driver's NVML (absent here): fixed memory figures for one GPU UUID."""

    def __init__(self, total: int, used: int):
        self.total, self.used = total, used

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return uuid

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=self.total, used=self.used, free=self.total - self.used)

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=97, memory=40)

    def nvmlDeviceGetPowerUsage(self, handle):
        return 412_000


def nvml_sample(tmp_path, total: int, used: int) -> dict:
    """One sample through the kit's real Sampler over the stand-in NVML."""
    sampler = Sampler(tmp_path / "samples.jsonl", "GPU-test", nvml=FakeNvml(total, used), interval_s=60).start()
    try:
        return sampler.sample_once()
    finally:
        sampler.stop()


ENGINE_CONFTEST = '''
"""WHAT IS SIMULATED: the engine (no container) and NVML (no NVIDIA driver here). The kit's own Sampler takes
the sample at READY through a stand-in NVML whose card has FREE_BYTES free; record_landing is the kit's own."""
import pytest
from types import SimpleNamespace

from onegpu.engine.bootlog import BootFacts
from onegpu.phases.load_landing import record_landing
from onegpu.engine.sampler import Sampler
from tests_offline.nvml_double import FakeNvml

TOTAL, FREE = {total}, {free}


@pytest.fixture(scope="session")
def engine(request, kit, capacity):
    boot = BootFacts(kv_cache_gib=30.0, kv_cache_tokens=15_000_000, load_gib=41.25, load_s=9.0, server_started=True)
    sampler = Sampler(kit.run_folder / "samples.jsonl", "GPU-sim", nvml=FakeNvml(TOTAL, TOTAL - FREE),
                      interval_s=60).start()
    record_landing(request, kit, boot, sampler)
    yield SimpleNamespace(boot=boot)
    sampler.stop()
'''
