"""Copied as tests_hw/conftest.py into a throwaway kit project by tests_offline/sessions/test_approve_e2e.py.

WHAT IS SIMULATED, AND WHY: the machine running the kit's own tests has no NVIDIA GPU and its Docker engine
cannot hand GPUs to containers. Everything else is real: the plugin, its phase tests, the live host facts,
the real Docker engine, the run folder, the stub engine image started by the kit's own engine fixture.

* `hardware`: the live facts of this machine, with the GPU part replaced by facts that
  onegpu.machine.nvml.gpu_facts_from_raw produces from RECORDED NVML answers of an H200
  (tests_offline/data/nvml/h200-nvidia-smi-q.json), and the Docker facts marked as able to hand GPUs over.
* `launch_spec`: the real plan, rebuilt WITHOUT the GPU device request (no NVIDIA runtime here), with the
  stub image's behaviour knobs in its environment (JSON in ONEGPU_E2E_STUB_ENV) and the test label.
  The stub's `torch.cuda.device_count()` answers 1 for the probe.

The receipt carries a banner and a limitation saying so.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from msgspec import structs

from onegpu.evidence.rundir import write_json
from onegpu.machine.model import facts_to_json
from onegpu.machine.nvml import gpu_facts_from_raw

RECORDED_NVML = Path(os.environ["ONEGPU_E2E_NVML_RECORD"])
BANNER = ("GPU SIMULATED: GPU facts come from recorded NVML answers of an H200 and the engine container gets no "
          "GPU device request; this run tests the kit's control flow against the stub engine, not a model")


@pytest.fixture(scope="session")
def hardware(hardware, kit):
    return simulate_gpu(hardware, kit, BANNER)


def simulate_gpu(hardware, kit, banner: str):
    """The live facts with the recorded H200 as the GPU, written to the run folder and receipt with `banner`."""
    recorded = json.loads(RECORDED_NVML.read_text())["raw"]
    docker = structs.replace(hardware.docker, cdi_gpu_devices=["nvidia.com/gpu=0 (simulated)"])
    simulated = structs.replace(hardware, gpu=gpu_facts_from_raw(recorded), docker=docker,
                                    notes=[*hardware.notes, banner])
    data = facts_to_json(simulated)
    write_json(kit.run_folder / "hardware.json", data)
    kit.receipt.set("hardware", data)
    kit.receipt.set("banners", [*kit.receipt.data.get("banners", []), banner])
    kit.receipt.limitation(banner)
    return simulated


@pytest.fixture(scope="session")
def launch_spec(launch_spec, kit):
    knobs = json.loads(os.environ.get("ONEGPU_E2E_STUB_ENV") or "{}")
    spec = structs.replace(launch_spec, gpu_uuid=None, environment={**launch_spec.environment, **knobs},
                               labels={**launch_spec.labels, "onegpu.test": "1"},
                               notes=[*launch_spec.notes, "SIMULATED: no GPU device request (no NVIDIA runtime on "
                                                          "this machine); stub knobs " + json.dumps(knobs)])
    kit.table("onegpu launch plan", spec.plan_lines())
    kit.receipt.set("launch", spec.to_json())
    return spec
