"""The tiny random-weight checkpoints for the real engine, checked on the host without Docker: the files, the
index against the shards (parsed by the `safetensors` package), the weights, the tokenizer and chat template
through transformers, the configs through transformers' AutoConfig, and the kit's own checkpoint reader.

Whether vLLM itself loads the names and shapes is proven only by serving a folder in the real-engine image;
the shape checks here read the config the way vLLM's model classes do, as a first line.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from math import prod
from pathlib import Path

import numpy as np
import pytest
import safetensors
from safetensors import safe_open

from devkit.real_engine.tiny_models import MODELS, build
from onegpu.checkpoint.scan import read_checkpoint
from onegpu.checkpoint.tensor_roles import ROUTED_EXPERTS
from tests_offline.docker_required import skip_unless_ci
from tests_offline.paths import REPO_ROOT

REPO_ROOT = REPO_ROOT
MAX_FOLDER_BYTES = 20_000_000
# The classes vLLM's registry maps these architectures to: qwen3_moe.py and mimo_v2.py.
ARCHITECTURES = {"qwen3-moe": "Qwen3MoeForCausalLM", "mimo-v2-flash": "MiMoV2FlashForCausalLM"}
BYTES = {"BF16": 2, "F32": 4}
# Head sizes the CPU attention of vLLM's CPU build accepts (CPUAttentionBackend.get_supported_head_sizes).
CPU_HEAD_SIZES = {32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512}
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Count to 3"}]
CHAT_RENDERED = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                 "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nCount to 3<|im_end|>\n"
                 "<|im_start|>assistant\n")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    return build(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _json(folder: Path, name: str) -> dict:
    return json.loads((folder / name).read_text(encoding="utf-8"))


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _headers(folder: Path) -> dict[str, tuple[str, str, list[int]]]:
    """Every tensor in the folder's shards as the safetensors package reads it: name -> (shard, dtype, shape)."""
    found = {}
    for shard in sorted(folder.glob("*.safetensors")):
        with safe_open(shard, framework="numpy") as handle:
            assert handle.metadata() == {"format": "pt"}  # transformers refuses shards without it
            for name in handle.keys():
                piece = handle.get_slice(name)
                assert name not in found, f"{name} is in two shards"
                found[name] = (shard.name, piece.get_dtype(), piece.get_shape())
    return found


def _values(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor's values as float32 (BF16 widened bit for bit), parsed by safetensors.deserialize."""
    values = {}
    for shard in sorted(folder.glob("*.safetensors")):
        for name, tensor in safetensors.deserialize(shard.read_bytes()):
            raw = bytes(tensor["data"])
            if tensor["dtype"] == "BF16":
                array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                array = np.frombuffer(raw, dtype="<f4")
            values[name] = array.reshape(tensor["shape"])
    return values


def test_the_command_line_writes_the_same_bytes_every_time(tiny, tmp_path):
    for run in ("a", "b"):
        done = subprocess.run([sys.executable, "-m", "devkit.real_engine.tiny_models", str(tmp_path / run)],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in (tmp_path / run).iterdir()) == sorted(MODELS)
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b") == _digests(next(iter(tiny.values())).parent)


def test_the_command_line_writes_one_model_and_refuses_an_unknown_one(tmp_path):
    command = [sys.executable, "-m", "devkit.real_engine.tiny_models", str(tmp_path)]
    one = subprocess.run([*command, "--model", "qwen3-moe"], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert one.returncode == 0, one.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["qwen3-moe"]
    bad = subprocess.run([*command, "--model", "llama"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "--model" in bad.stderr and "'llama'" in bad.stderr and "mimo-v2-flash" in bad.stderr


@pytest.mark.parametrize("model", MODELS)
def test_each_folder_is_a_complete_small_checkpoint(tiny, model):
    folder = tiny[model]
    names = {p.name for p in folder.iterdir()}
    shards = sorted(n for n in names if n.endswith(".safetensors"))
    assert len(shards) >= 2
    assert names == {"config.json", "generation_config.json", "model.safetensors.index.json", "tokenizer.json",
                     "tokenizer_config.json", *shards}
    assert sum((folder / n).stat().st_size for n in names) < MAX_FOLDER_BYTES
    assert _json(folder, "config.json")["architectures"] == [ARCHITECTURES[model]]


@pytest.mark.parametrize("model", MODELS)
def test_the_index_names_every_tensor_and_only_existing_ones(tiny, model):
    folder = tiny[model]
    index = _json(folder, "model.safetensors.index.json")
    headers = _headers(folder)
    assert index["weight_map"] == {name: shard for name, (shard, _, _) in headers.items()}
    assert set(index["weight_map"].values()) == {p.name for p in folder.glob("*.safetensors")}
    assert index["metadata"]["total_size"] == sum(BYTES[d] * prod(s) for _, d, s in headers.values())


@pytest.mark.parametrize("model", MODELS)
def test_weights_are_small_random_values_and_norms_are_ones(tiny, model):
    values = _values(tiny[model])
    shapes = {name: tuple(shape) for name, (_, _, shape) in _headers(tiny[model]).items()}
    assert {name: array.shape for name, array in values.items()} == shapes
    for name, array in values.items():
        if name.endswith("norm.weight"):
            assert np.all(array == 1.0), name
        elif name.endswith("e_score_correction_bias"):
            assert np.all(array == 0.0), name
        elif array.size >= 4096:
            assert 0.018 < array.std() < 0.022 and abs(array.mean()) < 0.002, name
    # Seeded per tensor: two tensors of one shape never share their values.
    assert not np.array_equal(values["model.layers.0.self_attn.q_proj.weight"],
                              values["model.layers.1.self_attn.q_proj.weight"])


def test_qwen3_moe_tensors_are_what_the_config_tells_vllm_to_build(tiny):
    folder = tiny["qwen3-moe"]
    c, headers = _json(folder, "config.json"), _headers(folder)
    shapes = {name: shape for name, (_, _, shape) in headers.items()}
    hidden, head, inter = c["hidden_size"], c["head_dim"], c["moe_intermediate_size"]
    assert head in CPU_HEAD_SIZES and c["num_experts"] == 4 and c["num_experts_per_tok"] == 2
    assert c["num_hidden_layers"] == 2 and c["mlp_only_layers"] == [] and c["decoder_sparse_step"] == 1
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        assert shapes[p + "self_attn.q_proj.weight"] == [c["num_attention_heads"] * head, hidden]
        assert shapes[p + "self_attn.k_proj.weight"] == shapes[p + "self_attn.v_proj.weight"] == [
            c["num_key_value_heads"] * head, hidden]
        assert shapes[p + "self_attn.o_proj.weight"] == [hidden, c["num_attention_heads"] * head]
        assert shapes[p + "self_attn.q_norm.weight"] == shapes[p + "self_attn.k_norm.weight"] == [head]
        assert shapes[p + "mlp.gate.weight"] == [c["num_experts"], hidden]
        experts = {n.split(".")[5] for n in shapes if n.startswith(p + "mlp.experts.")}
        assert experts == {str(e) for e in range(c["num_experts"])}
        for e in range(c["num_experts"]):
            q = f"{p}mlp.experts.{e}."
            assert shapes[q + "gate_proj.weight"] == shapes[q + "up_proj.weight"] == [inter, hidden]
            assert shapes[q + "down_proj.weight"] == [hidden, inter]
    assert shapes["lm_head.weight"] == shapes["model.embed_tokens.weight"] == [c["vocab_size"], hidden]
    assert {d for _, d, _ in headers.values()} == {"BF16"}


def test_mimo_v2_flash_tensors_are_what_the_config_tells_vllm_to_build(tiny):
    folder = tiny["mimo-v2-flash"]
    c, headers = _json(folder, "config.json"), _headers(folder)
    shapes = {name: shape for name, (_, _, shape) in headers.items()}
    hidden, inter = c["hidden_size"], c["moe_intermediate_size"]
    pattern, moe = c["hybrid_layer_pattern"], c["moe_layer_freq"]
    assert len(pattern) == len(moe) == c["num_hidden_layers"]
    assert 0 in pattern and 1 in pattern and moe[0] == 0 and all(moe[1:])
    for layer, swa in enumerate(pattern):
        p, kind = f"model.layers.{layer}.", "swa_" if swa else ""
        heads, kv = c[kind + "num_attention_heads"], c[kind + "num_key_value_heads"]
        k_head, v_head = c[kind + "head_dim"], c[kind + "v_head_dim"]
        assert k_head != v_head and {k_head, v_head} <= CPU_HEAD_SIZES
        assert shapes[p + "self_attn.q_proj.weight"] == [heads * k_head, hidden]
        assert shapes[p + "self_attn.k_proj.weight"] == [kv * k_head, hidden]
        assert shapes[p + "self_attn.v_proj.weight"] == [kv * v_head, hidden]
        assert shapes[p + "self_attn.o_proj.weight"] == [hidden, heads * v_head]
        # vLLM builds a sink bias only on sliding-window layers (add_swa_attention_sink_bias).
        assert shapes.get(p + "self_attn.attention_sink_bias") == ([heads] if swa else None)
        if moe[layer]:
            assert headers[p + "mlp.gate.weight"][1:] == ("F32", [c["n_routed_experts"], hidden])
            assert headers[p + "mlp.gate.e_score_correction_bias"][1:] == ("F32", [c["n_routed_experts"]])
            experts = {n.split(".")[5] for n in shapes if n.startswith(p + "mlp.experts.")}
            assert experts == {str(e) for e in range(c["n_routed_experts"])}
            q = f"{p}mlp.experts.0."
            assert shapes[q + "gate_proj.weight"] == shapes[q + "up_proj.weight"] == [inter, hidden]
            assert shapes[q + "down_proj.weight"] == [hidden, inter]
            assert p + "mlp.gate_proj.weight" not in shapes
        else:
            assert shapes[p + "mlp.gate_proj.weight"] == [c["intermediate_size"], hidden]
            assert shapes[p + "mlp.down_proj.weight"] == [hidden, c["intermediate_size"]]
            assert not any(n.startswith(p + "mlp.experts.") or n.startswith(p + "mlp.gate.") for n in shapes)
    # Fields vLLM's mimo_v2.py reads without a default: a missing one is an AttributeError at engine start.
    for field in ("layernorm_epsilon", "sliding_window_size", "swa_num_attention_heads", "swa_num_key_value_heads",
                  "swa_head_dim", "attention_bias", "n_group", "topk_group", "norm_topk_prob"):
        assert field in c, field


@pytest.mark.parametrize("model", MODELS)
def test_the_tokenizer_round_trips_text_and_renders_the_chat_template(tiny, model):
    from transformers import AutoTokenizer

    folder = tiny[model]
    config, generation = _json(folder, "config.json"), _json(folder, "generation_config.json")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert 256 < len(tokenizer) == config["vocab_size"] <= 1024
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (
        config["bos_token_id"], config["eos_token_id"], config["pad_token_id"])
    assert generation["eos_token_id"] == [tokenizer.eos_token_id, tokenizer.pad_token_id]
    for text in ("The capital of France is Paris.", "  spaces,\ttabs\nand lines  ", "Zürich → 東京 🙂 ±1e-6",
                 "never seen: xylophone quizzically"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert max(ids) < config["vocab_size"]
        assert tokenizer.decode(ids) == text
    assert len(tokenizer("the model")["input_ids"]) < len("the model")  # merges were learnt
    rendered = tokenizer.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert rendered == CHAT_RENDERED
    ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 5
    assert ids.count(tokenizer.eos_token_id) == 4


def test_transformers_parses_the_qwen3_moe_config(tiny):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny["qwen3-moe"], local_files_only=True)
    assert type(config).__name__ == "Qwen3MoeConfig"
    assert (config.num_experts, config.num_experts_per_tok, config.head_dim) == (4, 2, 64)
    assert config.rope_parameters["rope_theta"] == 1000000.0


def test_transformers_reads_the_mimo_v2_flash_layout_as_vllm_does(tiny):
    """transformers derives layer and MLP kinds from the layer count and its own rules (twice the KV heads on
    sliding layers, window = sliding_window_size + 1); vLLM reads the explicit fields. They must agree."""
    import transformers
    from transformers import CONFIG_MAPPING, AutoConfig

    if "mimo_v2_flash" not in CONFIG_MAPPING:
        reason = (f"transformers {transformers.__version__} does not know model_type mimo_v2_flash "
                  "(requirements-dev.txt pins a version that does)")
        skip_unless_ci(reason)
    raw = _json(tiny["mimo-v2-flash"], "config.json")
    config = AutoConfig.from_pretrained(tiny["mimo-v2-flash"], local_files_only=True)
    assert type(config).__name__ == "MiMoV2FlashConfig"
    assert config.layer_types == ["sliding_attention" if p else "full_attention" for p in raw["hybrid_layer_pattern"]]
    assert config.mlp_layer_types == ["sparse" if f else "dense" for f in raw["moe_layer_freq"]]
    assert raw["swa_num_key_value_heads"] == 2 * config.num_key_value_heads
    assert raw["swa_num_attention_heads"] == config.num_attention_heads
    assert (raw["swa_head_dim"], raw["swa_v_head_dim"]) == (config.head_dim, config.v_head_dim)
    # transformers 5.24 reads the window as sliding_window_size + 1 (the query too); 5.19, in the real-engine
    # image, keeps sliding_window as written. vLLM's model passes sliding_window_size per layer.
    assert config.sliding_window == raw["sliding_window_size"] + 1
    # transformers builds its rope from its own defaults, not from rope_theta / swa_rope_theta: they must match.
    rope = config.rope_parameters
    assert rope["full_attention"]["rope_theta"] == raw["rope_theta"]
    assert rope["sliding_attention"]["rope_theta"] == raw["swa_rope_theta"]
    assert rope["full_attention"]["partial_rotary_factor"] == raw["partial_rotary_factor"]
    assert config.num_local_experts == raw["n_routed_experts"]
    # Read by vLLM through getattr: transformers keeps the published spellings as attributes.
    assert (config.layernorm_epsilon, config.swa_rope_theta, config.rope_theta) == (1e-05, 10000, 5000000)


@pytest.mark.parametrize("model", MODELS)
def test_the_kits_checkpoint_reader_reads_each_folder(tiny, model):
    folder = tiny[model]
    facts = read_checkpoint(folder)
    headers = _headers(folder)
    assert facts.weight_bytes == facts.index_total_size == sum(BYTES[d] * prod(s) for _, d, s in headers.values())
    assert [t.name for t in facts.tensors] == list(_json(folder, "model.safetensors.index.json")["weight_map"])
    assert facts.bytes_by_role[ROUTED_EXPERTS] == sum(
        BYTES[d] * prod(s) for name, (_, d, s) in headers.items() if ".experts." in name)
    assert facts.architectures == _json(folder, "config.json")["architectures"]
    assert facts.tokenizer_files == ["tokenizer.json", "tokenizer_config.json"]
    assert facts.quant.method is None and facts.quant.recognised
    assert facts.synthetic is False
