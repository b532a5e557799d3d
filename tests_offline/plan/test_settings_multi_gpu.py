"""Settings: the multi-GPU protocol block (multi_gpu), read strictly. Absent, the settings are the one-GPU
protocol exactly as before; present, every rule it breaks is named with its field and value."""
from __future__ import annotations

import json

import pytest

from onegpu.plan.settings import FIELD_NCCL_ENV, LEGACY_SCHEMA, load_settings
from tests_offline.settings_docs import OWN_MINIMAL, errors_of, legacy_filled, write

TWO_CARDS = {"gpus": [0, 1], "tensor_parallel_size": 2, "pipeline_parallel_size": 1}


def test_without_the_block_the_settings_are_the_one_gpu_protocol(tmp_path):
    s = load_settings(write(tmp_path, OWN_MINIMAL))
    assert s.multi_gpu is None and s.protocol == "one-GPU protocol" and s.gpu_selectors == (0,)
    assert not any(key.startswith("multi_gpu") for key in s.assumed)


def test_a_declared_set_is_labelled_and_its_nccl_environment_assumed_from_the_field_report(tmp_path):
    s = load_settings(write(tmp_path, {**OWN_MINIMAL, "multi_gpu": TWO_CARDS}))
    assert s.protocol == "2-GPU protocol (TP 2 x PP 1)"
    assert s.gpu_selectors == (0, 1)
    assert s.multi_gpu.nccl_env == FIELD_NCCL_ENV and FIELD_NCCL_ENV["NCCL_P2P_LEVEL"] == "SYS"
    assert "NCCL_CUMEM_ENABLE=0" in s.assumed["multi_gpu.nccl_env"]


def test_an_explicit_nccl_environment_is_taken_as_written_even_empty(tmp_path):
    s = load_settings(write(tmp_path, {**OWN_MINIMAL, "gpu": 1, "multi_gpu": {
        "gpus": [1, 0, 2, 3], "tensor_parallel_size": 2, "pipeline_parallel_size": 2,
        "nccl_env": {"NCCL_P2P_LEVEL": "PHB"}}}))
    assert s.protocol == "4-GPU protocol (TP 2 x PP 2)" and s.multi_gpu.gpus == (1, 0, 2, 3)
    assert s.multi_gpu.nccl_env == {"NCCL_P2P_LEVEL": "PHB"} and "multi_gpu.nccl_env" not in s.assumed
    empty = load_settings(write(tmp_path, {**OWN_MINIMAL, "multi_gpu": {**TWO_CARDS, "nccl_env": {}}}, "e.json"))
    assert empty.multi_gpu.nccl_env == {}


@pytest.mark.parametrize("block, expected", [
    ([0, 1], "field 'multi_gpu': value [0, 1]: must be an object"),
    ({**TWO_CARDS, "gpus": [0]}, "field 'multi_gpu.gpus': value [0]: must be a list of 2 to 16"),
    ({**TWO_CARDS, "gpus": [0, 0]}, "field 'multi_gpu.gpus': value [0, 0]: must name each GPU once"),
    ({**TWO_CARDS, "gpus": [0, "card-1"]}, "field 'multi_gpu.gpus[1]': value \"card-1\": must be a GPU index"),
    ({**TWO_CARDS, "tensor_parallel_size": 3},
     "field 'multi_gpu': tensor_parallel_size 3 x pipeline_parallel_size 1 = 3 ranks: must equal the 2 GPUs"),
    ({**TWO_CARDS, "tensor_parallel_size": True}, "field 'multi_gpu.tensor_parallel_size': value true: must be an "
                                                  "integer"),
    ({"gpus": [0, 1]}, "field 'multi_gpu.tensor_parallel_size': required"),
    ({**TWO_CARDS, "ray": True}, "field 'multi_gpu.ray': value true: unknown field"),
    ({**TWO_CARDS, "nccl_env": {"LD_PRELOAD": "/x.so"}}, "field 'multi_gpu.nccl_env.LD_PRELOAD': must be an NCCL_*"),
    ({**TWO_CARDS, "nccl_env": {"NCCL_DEBUG": "INFO\nNCCL_X=1"}},
     "field 'multi_gpu.nccl_env.NCCL_DEBUG': value \"INFO\\nNCCL_X=1\": must be a string of at most 256 printable"),
    ({**TWO_CARDS, "nccl_env": {"NCCL_DEBUG": 1}}, "field 'multi_gpu.nccl_env.NCCL_DEBUG': value 1: must be a "
                                                   "string"),
    ({**TWO_CARDS, "gpus": [1, 0]}, "field 'gpu': value 0: must be the first GPU of multi_gpu.gpus (1)"),
])
def test_each_broken_rule_of_the_block_is_named(tmp_path, block, expected):
    errors = errors_of(write(tmp_path, {**OWN_MINIMAL, "multi_gpu": block}))
    assert any(e.startswith(expected) for e in errors), errors


def test_the_earlier_schema_has_no_multi_gpu_block(tmp_path):
    doc = json.loads(legacy_filled(tmp_path).read_text())
    errors = errors_of(write(tmp_path, {**doc, "multi_gpu": TWO_CARDS}, "legacy.json"))
    assert any("'multi_gpu'" in e and f"unknown field (not in {LEGACY_SCHEMA})" in e for e in errors), errors
