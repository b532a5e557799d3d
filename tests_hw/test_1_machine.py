"""Phase 1, the machine: what this host (or a replayed profile) offers the experiment. Read-only."""
import pytest

from onegpu.machine import checks as m

pytestmark = [pytest.mark.scan, pytest.mark.phase("machine")]


def test_nvidia_driver_answers(gpu_facts, fact):
    fact(m.require_driver, gpu_facts)


def test_gpus_are_listed_with_driver_reported_memory(gpu_facts, fact):
    fact(m.require_gpus, gpu_facts)


@pytest.mark.one_gpu
def test_selected_gpu_is_the_only_one_counted(selected_gpu, fact):
    fact(lambda d: f"selected GPU {d.index} ({d.uuid}); no other card is counted", selected_gpu)


def test_selected_gpu_is_a_whole_card(selected_gpu, fact):
    fact(m.require_whole_card, selected_gpu)


def test_selected_gpu_runs_no_other_compute(selected_gpu, fact):
    fact(m.require_idle, selected_gpu)


def test_host_ram_is_known(hardware, fact):
    fact(m.require_host_ram, hardware.host, hardware.replayed)


def test_cgroup_limits_are_read(host_facts, fact):
    fact(m.describe_cgroup, host_facts)


def test_memlock_and_hugepages_are_read(host_facts, fact):
    fact(m.describe_limits, host_facts)


def test_usable_cpus_are_counted(host_facts, fact):
    fact(m.describe_cpus, host_facts)


def test_run_folder_has_free_disk(host_facts, fact):
    fact(m.require_disk, host_facts, "run folder")


def test_docker_daemon_answers(docker_facts, fact):
    fact(m.require_docker, docker_facts)


def test_docker_daemon_is_local(docker_facts, fact):
    fact(m.require_local_docker, docker_facts)


def test_docker_enforces_swap_limits(docker_facts, fact):
    fact(m.require_swap_limits, docker_facts)


def test_docker_can_hand_gpus_to_containers(docker_facts, fact):
    fact(m.require_gpu_handoff, docker_facts)
