"""Phase 1, the machine, for the multi-GPU protocol (settings multi_gpu): every GPU of the declared set, the
links between them and the host's preconditions for peer-to-peer traffic. Read-only; left out of a one-GPU
session."""
import pytest

from onegpu.machine import gpu_set as g

pytestmark = [pytest.mark.scan, pytest.mark.phase("machine"), pytest.mark.multi_gpu]


def test_every_gpu_of_the_declared_set_is_found(gpu_set, fact):
    fact(lambda devices: [f"rank {rank}: GPU {d.index} {d.name} ({d.uuid})" for rank, d in enumerate(devices)],
         gpu_set)


def test_every_gpu_of_the_set_is_a_whole_card(gpu_set, fact):
    fact(g.require_whole_cards, gpu_set)


def test_every_gpu_of_the_set_runs_no_other_compute(gpu_set, fact):
    fact(g.require_idle_set, gpu_set)


def test_topology_between_the_gpus_is_shown(gpu_facts, gpu_set, fact):
    fact(g.describe_links, gpu_facts, gpu_set)


def test_peer_access_is_enabled_between_the_gpus(gpu_facts, gpu_set, fact):
    fact(g.require_peer_access, gpu_facts, gpu_set)


def test_host_preconditions_of_peer_access_are_shown(host_facts, gpu_set, fact):
    fact(g.describe_p2p_preconditions, host_facts, gpu_set)
