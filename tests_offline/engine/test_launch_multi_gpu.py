"""The launch of the multi-GPU protocol: every GPU of the set by UUID in rank order, vLLM's own parallel sizes,
the NCCL environment shown, the label on every line a person reads; the one-GPU launch is unchanged."""
from __future__ import annotations

import subprocess

from msgspec import structs

from onegpu.engine.launch import build_launch_spec
from onegpu.engine.launch_check import missing_elements
from onegpu.plan.settings import FIELD_NCCL_ENV
from tests_offline.launch_helpers import IMAGE, OWNER, UUID, docker_cli, settings, spec_for

UUIDS = (UUID, "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9")
TWO_CARDS = {"gpus": [0, 1], "tensor_parallel_size": 2, "pipeline_parallel_size": 1}


def multi_spec(**block):
    s = settings(multi_gpu={**TWO_CARDS, **block})
    return s, build_launch_spec(s, UUIDS[0], IMAGE, "20261204T120000Z-approve", "/runs/r1/sock", OWNER,
                                gpu_uuids=UUIDS)


def flag(spec, name):
    return spec.command[spec.command.index(name) + 1]


def test_the_set_is_handed_over_by_uuid_in_rank_order_with_vllms_parallel_sizes():
    s, spec = multi_spec()
    assert spec.device_requests() == [{"driver": "nvidia", "device_ids": list(UUIDS), "capabilities": [["gpu"]]}]
    assert (flag(spec, "--tensor-parallel-size"), flag(spec, "--pipeline-parallel-size")) == ("2", "1")
    assert flag(spec, "--distributed-executor-backend") == "mp" and "--disable-custom-all-reduce" in spec.command
    assert missing_elements(spec, s, UUIDS[0]) == []


def test_the_nccl_environment_is_explicit_and_shown():
    s, spec = multi_spec()
    assert {k: spec.environment[k] for k in FIELD_NCCL_ENV} == FIELD_NCCL_ENV
    shown = "\n".join(spec.plan_lines())
    assert "NCCL_P2P_LEVEL=SYS" in shown and "NCCL_CUMEM_ENABLE=0" in shown
    s2, own = multi_spec(nccl_env={"NCCL_P2P_LEVEL": "PHB"})
    assert own.environment["NCCL_P2P_LEVEL"] == "PHB" and "NCCL_CUMEM_ENABLE" not in own.environment


def test_cuda_numbers_the_set_by_pci_bus_so_rank_r_is_the_r_th_card_listed():
    s, spec = multi_spec()
    assert spec.environment["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "--env CUDA_DEVICE_ORDER=PCI_BUS_ID" in " ".join(spec.docker_run_argv())
    assert any("listed in PCI bus order" in note for note in spec.notes)
    assert missing_elements(structs.replace(spec, environment={
        k: v for k, v in spec.environment.items() if k != "CUDA_DEVICE_ORDER"}), s, UUIDS[0]) == [
        "environment CUDA_DEVICE_ORDER must be 'PCI_BUS_ID'"]


def test_every_line_a_person_reads_names_the_protocol():
    _, spec = multi_spec(pipeline_parallel_size=1)
    assert spec.protocol == "2-GPU protocol (TP 2 x PP 1)"
    lines = spec.plan_lines()
    assert lines[1] == "protocol   2-GPU protocol (TP 2 x PP 1): not a one-GPU result"
    assert f"gpu        {UUIDS[0]}, {UUIDS[1]} (rank order)" in lines
    assert "2-GPU protocol (TP 2 x PP 1) on GPUs" in spec.summary_line()
    assert spec.to_json()["protocol"] == "2-GPU protocol (TP 2 x PP 1)"
    assert f'"device={UUIDS[0]},{UUIDS[1]}"' in spec.docker_run_argv()


def test_the_one_gpu_launch_carries_nothing_of_the_set():
    spec = spec_for()
    data = spec.to_json()
    assert "gpu_uuids" not in data and "protocol" not in data  # a one-GPU plan's digest is what it was
    assert "--distributed-executor-backend" not in spec.command
    assert not any(k.startswith("NCCL_") for k in spec.environment) and "CUDA_DEVICE_ORDER" not in spec.environment
    assert spec.device_uuids == [UUID]


def test_missing_elements_catches_a_set_handed_over_short_or_without_the_parallel_flags():
    s, spec = multi_spec()
    short = structs.replace(spec, gpu_uuids=UUIDS[:1])
    assert any("hands over 2 GPUs by UUID, the spec has 1" in p for p in missing_elements(short, s, UUIDS[0]))
    bare = structs.replace(spec, command=[a for a in spec.command if a != "--disable-custom-all-reduce"])
    assert any("--disable-custom-all-reduce" in p for p in missing_elements(bare, s, UUIDS[0]))
    one = structs.replace(spec, command=["1" if a == "2" else a for a in spec.command])
    assert "--tensor-parallel-size must be '2', is '1'" in missing_elements(one, s, UUIDS[0])


def test_the_printed_gpus_flag_gives_docker_the_same_device_list_as_the_sdk(docker_client, tmp_path, stub_image):
    """Docker reads --gpus as CSV: the printed line must quote the list so both GPUs reach the daemon."""
    cli = docker_cli()
    _, spec = multi_spec()
    value = spec.docker_run_argv()[spec.docker_run_argv().index("--gpus") + 1]
    name = f"onegpu-test-gpus-{tmp_path.name[-12:]}".replace("_", "-")
    out = subprocess.run([cli, "create", "--name", name, "--label", "onegpu.test=1", "--gpus", value, stub_image,
                          "true"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    try:
        requests = docker_client.containers.get(name).attrs["HostConfig"]["DeviceRequests"]
        assert [r["DeviceIDs"] for r in requests] == [list(UUIDS)]
        assert requests[0]["Capabilities"] == [["gpu"]]
    finally:
        docker_client.containers.get(name).remove(force=True)
