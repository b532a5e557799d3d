"""Phase 3, the runtime probe: before hours of hashing, seconds to learn whether the image can run the plan."""
import pytest

from onegpu.engine import leftovers
from onegpu.engine.probe_parse import describe

pytestmark = [pytest.mark.approve_load, pytest.mark.phase("probe")]


def test_this_session_holds_its_gpus_alone(gpu_lock, fact):
    fact(gpu_lock.describe)


def test_kit_containers_of_dead_sessions_are_removed_first(leftovers_removed, fact):
    fact(leftovers.summary, leftovers_removed)


def test_image_runtime_knows_every_launch_flag_and_sees_its_gpus(runtime_probe, fact):
    fact(describe, runtime_probe)
