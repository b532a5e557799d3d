"""`pytest -m scan` for the multi-GPU protocol, replayed: the two-card tower (peer access off, the driver's default
on those cards) and the three-card tower (peer access forced on), with a checkpoint whose heads, KV heads,
vocabulary and MLP split over two and three ranks. The same checkpoint under one-GPU settings shows that
protocol unchanged: none of the multi-GPU checks, no label, no GPU set in its plan."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from devkit.synth import SYNTHETIC_METADATA, write_checkpoint
from tests_offline.paths import PROFILES, REPO_ROOT

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, LAYERS = 768, 12, 6, 64, 1536, 6144, 3
CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": LAYERS,
          "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "hidden_size": HIDDEN,
          "intermediate_size": INTER, "vocab_size": VOCAB, "max_position_embeddings": 32768,
          "torch_dtype": "bfloat16"}


def tensors() -> dict:
    t = {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN]), "model.norm.weight": ("BF16", [HIDDEN]),
         "lm_head.weight": ("BF16", [VOCAB, HIDDEN])}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj", [HEADS * HEAD_DIM, HIDDEN]),
                            ("self_attn.k_proj", [KV_HEADS * HEAD_DIM, HIDDEN]),
                            ("self_attn.v_proj", [KV_HEADS * HEAD_DIM, HIDDEN]),
                            ("self_attn.o_proj", [HIDDEN, HEADS * HEAD_DIM]), ("mlp.gate_proj", [INTER, HIDDEN]),
                            ("mlp.up_proj", [INTER, HIDDEN]), ("mlp.down_proj", [HIDDEN, INTER])):
            t[p + name + ".weight"] = ("BF16", shape)
        t[p + "input_layernorm.weight"] = ("BF16", [HIDDEN])
        t[p + "post_attention_layernorm.weight"] = ("BF16", [HIDDEN])
    return t


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "m", CONFIG, tensors(), shards=2,
                            metadata=SYNTHETIC_METADATA)


def scan(tmp_path, checkpoint, profile: str, multi_gpu: dict | None) -> dict:
    tmp_path.mkdir(exist_ok=True)
    settings = {"schema": "onegpu/settings@1", "model_id": "test-org/tower-model", "model_revision": "c" * 40,
                "model_path": str(checkpoint), "image": "vllm/vllm-openai:latest", "gpu": 0,
                "context_tokens": 8192, "prefill_chunk_tokens": 2048, "cpu_offload_gib": 0,
                "container_ram_gib": 64, "host_headroom_gib": 16, "deadline_s": 3600,
                **({"multi_gpu": multi_gpu} if multi_gpu else {})}
    (tmp_path / "s.json").write_text(json.dumps(settings))
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", f"--settings={tmp_path / 's.json'}",
                           f"--hardware={PROFILES / profile}", "--host-ram-gib=256", f"--out={out}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    receipt = json.loads((out / "receipt.json").read_text())
    tests = {nodeid.split("::")[-1]: entry for nodeid, entry in receipt["tests"].items()}
    return {"done": done, "receipt": receipt, "tests": tests, "folder": out,
            "plan": json.loads((out / "plan.json").read_text()) if (out / "plan.json").exists() else None,
            "profile": json.loads((PROFILES / profile).read_text())}


def test_three_cards_with_peer_access_plan_a_tp3_protocol_labelled_as_such(tmp_path, checkpoint):
    run = scan(tmp_path, checkpoint, "three-card-tower-rtx-pro-6000-96gb.json",
               {"gpus": [0, 1, 2], "tensor_parallel_size": 3, "pipeline_parallel_size": 1})
    label, receipt, tests = "3-GPU protocol (TP 3 x PP 1)", run["receipt"], run["tests"]
    uuids = [d["uuid"] for d in run["profile"]["gpu"]["devices"]]
    for name in ("test_every_gpu_of_the_declared_set_is_found", "test_every_gpu_of_the_set_is_a_whole_card",
                 "test_every_gpu_of_the_set_runs_no_other_compute", "test_topology_between_the_gpus_is_shown",
                 "test_peer_access_is_enabled_between_the_gpus", "test_host_preconditions_of_peer_access_are_shown"):
        assert tests[name]["outcome"] == "passed", (name, tests[name], run["done"].stdout[-4000:])
    assert "test_selected_gpu_is_the_only_one_counted" not in tests
    assert receipt["selection"]["protocol"] == label
    assert [m["uuid"] for m in receipt["selection"]["gpu_set"]] == uuids
    assert any(b.startswith(f"MULTI-GPU: {label}") for b in receipt["banners"])
    assert "multi_gpu.nccl_env" in receipt["settings"]["assumed"]
    # The launch and the plan bind the set in rank order and vLLM's parallel sizes.
    launch = receipt["launch"]
    assert launch["gpu_uuids"] == uuids and launch["protocol"] == label
    assert launch["command"][launch["command"].index("--tensor-parallel-size") + 1] == "3"
    assert launch["environment"]["NCCL_P2P_LEVEL"] == "SYS"
    assert run["plan"]["identity"]["gpu_uuids"] == uuids and run["plan"]["identity"]["protocol"] == label
    # Capacity per rank: each of the three ranks judged on its own card.
    capacity = {v["check"]: v for v in receipt["capacity"]}
    assert [r["rank"] for r in capacity["gpu_weights"]["numbers"]["ranks"]] == [0, 1, 2]
    assert capacity["gpu_weights"]["status"] == "OK", capacity["gpu_weights"]
    # Every artefact says what this is.
    summary = (run["folder"] / "summary-share.md").read_text()
    assert f"{label}, not a one-GPU result" in summary and f"**MULTI-GPU: {label}**" in summary
    report = (run["folder"] / "report.html").read_text()
    assert f"MULTI-GPU: {label}" in report
    assert all(f"rank {r} of the {label}" in report for r in range(3))
    assert "SELECTED (the only card counted)" not in report and "only the selected GPU is counted" not in report
    assert "only the GPUs of the multi-GPU protocol's set are counted" in summary
    assert "only the selected GPU is counted" not in summary
    assert label in run["done"].stdout


def test_a_card_of_the_set_missing_still_reads_as_the_multi_gpu_protocol(tmp_path, checkpoint):
    run = scan(tmp_path, checkpoint, "two-card-tower-rtx-pro-6000-96gb.json",
               {"gpus": [0, 2], "tensor_parallel_size": 2, "pipeline_parallel_size": 1})
    found = run["tests"]["test_every_gpu_of_the_declared_set_is_found"]
    assert found["outcome"] == "blocked" and found["code"] == "GPU_NOT_FOUND", found
    label = "2-GPU protocol (TP 2 x PP 1)"
    assert run["receipt"]["selection"]["protocol"] == label
    summary = (run["folder"] / "summary-share.md").read_text()
    assert f"**MULTI-GPU: {label}**" in summary and f"{label}, not a one-GPU result" in summary
    assert "one GPU: " not in summary and "only the selected GPU is counted" not in summary


def test_two_cards_without_peer_access_block_with_the_pairs_and_their_status(tmp_path, checkpoint):
    run = scan(tmp_path, checkpoint, "two-card-tower-rtx-pro-6000-96gb.json",
               {"gpus": [0, 1], "tensor_parallel_size": 2, "pipeline_parallel_size": 1})
    peer = run["tests"]["test_peer_access_is_enabled_between_the_gpus"]
    assert peer["outcome"] == "blocked" and peer["code"] == "P2P_DISABLED", peer
    assert "DISABLED_BY_REGKEY" in peer["message"]
    assert run["receipt"]["selection"]["protocol"] == "2-GPU protocol (TP 2 x PP 1)"


def test_one_gpu_settings_on_a_three_card_tower_are_the_one_gpu_protocol_unchanged(tmp_path, checkpoint):
    run = scan(tmp_path, checkpoint, "three-card-tower-rtx-pro-6000-96gb.json", None)
    receipt, tests = run["receipt"], run["tests"]
    assert tests["test_selected_gpu_is_the_only_one_counted"]["outcome"] == "passed"
    assert not any(nodeid.startswith("tests_hw/test_1_machine_gpu_set.py") for nodeid in receipt["tests"])
    assert "protocol" not in receipt["selection"] and "gpu_set" not in receipt["selection"]
    assert not any(b.startswith("MULTI-GPU") for b in receipt["banners"])
    assert "gpu_uuids" not in receipt["launch"] and "gpu_uuids" not in run["plan"]["identity"]
    assert not any(k.startswith("NCCL_") for k in receipt["launch"]["environment"])
    summary, report = (run["folder"] / "summary-share.md").read_text(), (run["folder"] / "report.html").read_text()
    assert "one GPU: " in summary and "only the selected GPU is counted" in summary
    assert "SELECTED (the only card counted)" in report and "only the selected GPU is counted" in report
    # The one-GPU plan.json and receipt carry no multi_gpu key: they read as before the protocol existed.
    assert "multi_gpu" not in run["plan"]["settings"]["values"]
    assert "multi_gpu" not in receipt["settings"]["values"]


def test_compare_names_two_runs_of_different_protocols_as_such(tmp_path, checkpoint):
    multi = scan(tmp_path / "a", checkpoint, "three-card-tower-rtx-pro-6000-96gb.json",
                 {"gpus": [0, 1, 2], "tensor_parallel_size": 3, "pipeline_parallel_size": 1})
    one = scan(tmp_path / "b", checkpoint, "three-card-tower-rtx-pro-6000-96gb.json", None)
    done = subprocess.run([sys.executable, "-m", "onegpu.report.compare", str(multi["folder"]), str(one["folder"])],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].endswith(", 3-GPU protocol (TP 3 x PP 1))") and out[1].endswith(", one-GPU protocol)")
    assert out[3] == ("DIFFERENT PROTOCOLS: A is the 3-GPU protocol (TP 3 x PP 1), B the one-GPU protocol; the "
                      "differences below are between two separate protocols, never one result")
