"""Phase 5, the load: where the engine landed at READY against the plan's projection and the free-memory floor;
and the KV-cache dtype against the vLLM version the runtime probe read."""
import pytest

from onegpu.checkpoint.consistency import check_lines
from onegpu.phases.load_landing import landing_lines_of

pytestmark = [pytest.mark.approve_load, pytest.mark.phase("load")]


def test_landing_is_measured_against_the_plan_and_the_floor(landing, fact):
    assert landing["errors"] and landing["floor"]["bytes"] >= 0
    fact(landing_lines_of, landing)


@pytest.mark.phase("probe")
def test_kv_cache_dtype_is_one_the_image_vllm_accepts(kv_dtype_support, fact):
    fact(check_lines, kv_dtype_support)
