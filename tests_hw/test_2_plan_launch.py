"""Phase 2, the plan: the exact engine launch a person approves, and any kit containers left behind. Read-only."""
import pytest

from onegpu.engine import launch_check, leftovers

pytestmark = [pytest.mark.scan, pytest.mark.phase("plan")]


def test_launch_plan_is_shown_as_a_docker_run_line(launch_spec, fact):
    assert launch_spec.docker_run_line().startswith("docker run --pull=never ")
    fact(launch_spec.summary_line)


def test_launch_plan_has_every_element_of_the_engine_container(launch_spec, settings, selected_gpu):
    assert launch_check.missing_elements(launch_spec, settings, selected_gpu.uuid) == []


def test_kit_leftover_containers_are_reported(kit_leftovers, fact):
    fact(leftovers.describe, kit_leftovers, False)
