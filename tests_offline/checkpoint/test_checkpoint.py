"""Checkpoint facts from real (sparse) checkpoint folders: totals, roles, quantization, cache links, the corpus."""
from __future__ import annotations

import gc
import json
import os
import random
import re

import pytest

from devkit.synth import SYNTHETIC_METADATA, moe_tensors, nbytes, write_checkpoint, write_shard
from onegpu.checkpoint.quant_config import quant_facts
from onegpu.checkpoint.scan import read_checkpoint
from onegpu.checkpoint.tensor_roles import is_packed, layer_index, packed_rows, tensor_role, tensor_roles
from onegpu.core.outcomes import Blocked
from tests_offline.checkpoint_corpus import CASES, REVISION, base

MOE_CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
              "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                      "weight_block_size": [128, 128]}}
# The synthetic layouts carry one expert number per name (`...experts.<N>.<proj>.weight`).
EXPERT_NUMBER = re.compile(r"\.experts\.\d+\.")


def test_corpus_is_large_and_distinct():
    assert len(CASES) >= 15
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_broken_checkpoint_is_a_clear_blocked(tmp_path, case):
    root = case.build(tmp_path)
    with pytest.raises(Blocked) as blocked:
        read_checkpoint(root)
    assert blocked.value.code == case.code, blocked.value.message
    for words in case.mentions:
        assert words in blocked.value.message
    assert len(blocked.value.message) < 1000  # a hostile file cannot flood the receipt
    assert gc.isenabled()


def test_moe_checkpoint_facts(tmp_path):
    tensors = moe_tensors(layers=3, experts=4, expert_dtype="F8_E4M3", expert_scales=True)
    root = write_checkpoint(tmp_path / "m", MOE_CONFIG, tensors, shards=4)
    facts = read_checkpoint(root)
    expected_bytes = sum(nbytes(d, s) for d, s in tensors.values())
    assert facts.weight_bytes == expected_bytes == facts.index_total_size
    assert sum(facts.bytes_by_role.values()) == expected_bytes == sum(facts.bytes_by_dtype.values())
    assert facts.bytes_by_role["routed_experts"] == sum(
        nbytes(d, s) for n, (d, s) in tensors.items() if ".experts." in n)
    assert facts.bytes_by_role["embeddings_head"] == 2 * nbytes("BF16", [1024, 256])
    assert facts.bytes_by_dtype["F32"] == sum(nbytes(d, s) for d, s in tensors.values() if d == "F32")
    assert facts.params_by_dtype["F8_E4M3"] == 2 * 4 * 3 * 128 * 256
    assert facts.packed_bytes_by_dtype == {}
    assert [t.name for t in facts.tensors] == list(tensors)
    assert [s.name for s in facts.shards] == [f"model-0000{i}-of-00004.safetensors" for i in range(1, 5)]
    assert sum(s.tensors for s in facts.shards) == len(tensors)
    assert all(s.size_bytes == os.path.getsize(root / s.name) for s in facts.shards)
    assert facts.quant.method == "fp8" and facts.quant.recognised
    assert facts.architectures == ["DeepseekV3ForCausalLM"] and facts.model_type == "deepseek_v3"
    assert facts.tokenizer_files == ["tokenizer.json", "tokenizer_config.json"]
    assert facts.files == sorted(os.listdir(root))
    assert facts.synthetic is False and facts.hf_cache_repo is None
    assert facts.disk_free_bytes and facts.disk_free_bytes > 0


def test_tensor_rows_carry_shard_role_and_layer(tmp_path):
    root = write_checkpoint(tmp_path / "m", MOE_CONFIG, moe_tensors(layers=2, experts=2), shards=2)
    rows = {t.name: t for t in read_checkpoint(root).tensors}
    expert = rows["model.layers.1.mlp.experts.1.down_proj.weight"]
    assert (expert.role, expert.layer, expert.shard) == ("routed_experts", 1, "model-00002-of-00002.safetensors")
    assert rows["model.layers.1.mlp.shared_experts.up_proj.weight"].role == "shared_dense"
    assert rows["model.embed_tokens.weight"].role == "embeddings_head"
    assert rows["model.embed_tokens.weight"].layer is None
    assert rows["lm_head.weight"].nbytes == nbytes("BF16", [1024, 256])


def test_tensor_table_rows_and_expert_groups(tmp_path):
    """Every row of the columnar table equals what each name, dtype and shape give one by one; the expert groups
    join exactly the names that differ in the expert number, numbered in order of first appearance."""
    tensors = moe_tensors(layers=3, experts=5, expert_dtype="F8_E4M3", expert_scales=True)
    tensors["model.layers.2.self_attn.q_proj.weight"] = ("F32", [3, 5, 7])  # a third dimension
    tensors["model.norm.weight"] = ("BF16", [256])  # one dimension
    root = write_checkpoint(tmp_path / "m", MOE_CONFIG, tensors, shards=3)
    facts = read_checkpoint(root)
    table = facts.tensors
    shard_of = json.loads((root / "model.safetensors.index.json").read_text())["weight_map"]
    rows = [(t.name, t.dtype, t.shape, t.nbytes, t.shard, t.role, t.layer) for t in table]
    assert sorted(rows) == sorted((n, d, list(s), nbytes(d, s), shard_of[n], tensor_role(n), layer_index(n))
                                  for n, (d, s) in tensors.items())
    assert len(table) == len(tensors) and table[len(table) - 1].name == rows[-1][0]
    without_expert = [EXPERT_NUMBER.sub(".experts.N.", n) for n in table.names]
    firsts = list(dict.fromkeys(without_expert))
    assert [without_expert.index(key) for key in firsts] == list(table.group_first)
    assert list(table.group_of) == [firsts.index(key) for key in without_expert]
    assert len(table.group_names) == len(firsts) < len(table)


def test_single_file_checkpoint(tmp_path):
    tensors = {"model.embed_tokens.weight": ("BF16", [64, 8]), "model.layers.0.mlp.up_proj.weight": ("F16", [8, 8])}
    root = write_checkpoint(tmp_path / "s", {"model_type": "llama"}, tensors, single_file=True)
    facts = read_checkpoint(root)
    assert facts.index_file is None and facts.index_total_size is None
    assert [s.name for s in facts.shards] == ["model.safetensors"]
    assert facts.params_by_dtype == {"BF16": 512, "F16": 64}
    assert facts.quant.method is None and facts.quant.recognised


def test_header_only_checkpoint_is_synthetic(tmp_path):
    root = write_checkpoint(tmp_path / "d", MOE_CONFIG, moe_tensors(layers=2, experts=2), shards=2,
                            metadata=SYNTHETIC_METADATA)
    assert read_checkpoint(root).synthetic is True


def test_mxfp4_blocks_are_counted_by_bytes(tmp_path):
    """gpt-oss layout: fused experts as U8 blocks and U8 scales; attention and router in BF16."""
    tensors = {"model.embed_tokens.weight": ("BF16", [512, 64]), "lm_head.weight": ("BF16", [512, 64])}
    for i in range(2):
        p = f"model.layers.{i}."
        tensors.update({
            p + "self_attn.q_proj.weight": ("BF16", [64, 64]), p + "mlp.router.weight": ("BF16", [4, 64]),
            p + "mlp.experts.gate_up_proj_blocks": ("U8", [4, 128, 2, 16]),
            p + "mlp.experts.gate_up_proj_scales": ("U8", [4, 128, 2]),
            p + "mlp.experts.gate_up_proj_bias": ("BF16", [4, 128]),
            p + "mlp.experts.down_proj_blocks": ("U8", [4, 64, 2, 16]),
            p + "mlp.experts.down_proj_scales": ("U8", [4, 64, 2])})
    config = {"model_type": "gpt_oss", "quantization_config": {
        "quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]}}
    facts = read_checkpoint(write_checkpoint(tmp_path / "g", config, tensors, shards=3))
    u8 = sum(nbytes(d, s) for d, s in tensors.values() if d == "U8")
    assert facts.packed_bytes_by_dtype == {"U8": u8} and "U8" not in facts.params_by_dtype
    assert facts.bytes_by_role["routed_experts"] == u8 + 2 * nbytes("BF16", [4, 128])
    assert facts.quant.method == "mxfp4" and facts.quant.ignored_layers == ["model.layers.*.self_attn", "lm_head"]
    assert "counted by bytes" in facts.quant.description


def test_modelopt_side_file_is_read(tmp_path):
    root = base(tmp_path)
    (root / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt", "version": "0.41.0"},
                                                           "quantization": {"quant_algo": "NVFP4", "group_size": 16,
                                                                            "exclude_modules": ["lm_head"]}}))
    quant = read_checkpoint(root).quant
    assert (quant.method, quant.store_dtype, quant.recognised, quant.ignored_layers) == (
        "modelopt", "nvfp4", True, ["lm_head"])


def _hf_cache(tmp_path, nested: bool = False):
    """A cache repo: the snapshot's files are relative links into ../../blobs/<sha256>, as the Hub client writes."""
    repo = tmp_path / "hub" / "models--org--name"
    staged = write_checkpoint(tmp_path / "staged", MOE_CONFIG, moe_tensors(layers=2, experts=2), shards=2)
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    (snapshot / "sub").mkdir(parents=True)
    for i, name in enumerate(sorted(os.listdir(staged))):
        blob = repo / "blobs" / f"{i:064x}"
        os.replace(staged / name, blob)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    if nested:
        (snapshot / "sub" / "note.txt").write_text("kept in the snapshot itself")
    return repo, snapshot


def test_hugging_face_cache_snapshot_links_into_its_blobs(tmp_path):
    repo, snapshot = _hf_cache(tmp_path, nested=True)
    facts = read_checkpoint(snapshot)
    assert facts.hf_cache_repo == str(repo) and facts.hf_revision == REVISION
    assert "model-00001-of-00002.safetensors" in facts.files and "sub/note.txt" in facts.files
    assert facts.files == sorted(facts.files)


def test_links_inside_the_root_are_followed(tmp_path):
    root = base(tmp_path)
    (root / "weights").mkdir()
    os.replace(root / "model-00002-of-00002.safetensors", root / "weights" / "b.safetensors")
    os.symlink("weights/b.safetensors", root / "model-00002-of-00002.safetensors")
    os.symlink(".", root / "weights" / "loop")  # a folder link back up must not loop forever
    facts = read_checkpoint(root)
    assert "weights/b.safetensors" in facts.files and "model-00002-of-00002.safetensors" in facts.files


def test_gc_state_is_restored_after_a_blocked_scan(tmp_path):
    broken = next(c for c in CASES if c.name == "offsets_gap").build(tmp_path)
    with pytest.raises(Blocked):
        read_checkpoint(broken)
    assert gc.isenabled()


@pytest.mark.parametrize("config, method, store, recognised, words", [
    ({}, None, None, True, "unquantized"),
    ({"torch_dtype": "bfloat16"}, None, None, True, "bfloat16"),
    ({"quantization_config": {"quant_method": "fp8", "store_dtype": "mxfp4", "ignored_layers": ["lm_head"]}},
     "fp8", "mxfp4", True, "stored as mxfp4"),
    ({"quantization_config": {"quant_method": "mxfp4"}}, "mxfp4", "mxfp4", True, "mxfp4"),
    ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}, "modelopt", "nvfp4", True, "NVFP4"),
    ({"quantization_config": {"quant_method": "modelopt", "quantization": {"quant_algo": "FP8"}}},
     "modelopt", "fp8", True, "FP8"),
    ({"quantization_config": {"quant_method": "modelopt", "quant_algo": "W4A16_AWQ"}},
     "modelopt", None, False, "W4A16_AWQ"),
    ({"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                              "ignore": ["lm_head"]}}, "compressed-tensors", "nvfp4-pack-quantized", True, "nvfp4"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4}}, "gptq", None, False, "'gptq'"),
    ({"quantization_config": {"bits": 4}}, None, None, False, "no quant_method"),
    ({"quantization_config": "fp8"}, None, None, False, "not an object"),
])
def test_quantization_configs(config, method, store, recognised, words):
    quant = quant_facts(config)
    assert (quant.method, quant.store_dtype, quant.recognised) == (method, store, recognised)
    assert words in quant.description


def test_ignored_layers_are_kept():
    assert quant_facts({"quantization_config": {"quant_method": "fp8", "ignored_layers": ["a", "b"]}}
                       ).ignored_layers == ["a", "b"]
    assert quant_facts({"quantization_config": {"quant_method": "compressed-tensors", "ignore": ["lm_head"]}}
                       ).ignored_layers == ["lm_head"]


@pytest.mark.parametrize("name, role", [
    ("model.layers.3.mlp.experts.17.down_proj.weight", "routed_experts"),
    ("model.layers.3.mlp.experts.17.down_proj.weight_scale_inv", "routed_experts"),
    ("model.layers.0.block_sparse_moe.experts.7.w1.weight", "routed_experts"),
    ("model.layers.5.mlp.experts.gate_up_proj_blocks", "routed_experts"),
    ("language_model.model.layers.2.feed_forward.experts.down_proj", "routed_experts"),
    ("model.layers.3.mlp.shared_experts.down_proj.weight", "shared_dense"),
    ("model.layers.3.mlp.shared_expert.up_proj.weight", "shared_dense"),
    ("model.layers.3.mlp.gate.weight", "shared_dense"),
    ("model.layers.3.self_attn.kv_a_proj_with_mqa.weight", "shared_dense"),
    ("model.embed_tokens.weight", "embeddings_head"),
    ("lm_head.weight", "embeddings_head"),
    ("transformer.wte.weight", "embeddings_head"),
    ("tok_embeddings.weight", "embeddings_head"),
    ("output.weight", "embeddings_head"),
    ("model.layers.61.shared_head.head.weight", "embeddings_head"),
    ("model.layers.0.attention.output.dense.weight", "shared_dense"),
    ("model.norm.weight", "shared_dense"),
])
def test_tensor_roles(name, role):
    assert tensor_role(name) == role
    assert tensor_roles([name, "experts.0.w1", "x.experts", name]) == [role, "routed_experts", "routed_experts", role]


@pytest.mark.parametrize("name, layer", [
    ("model.layers.12.mlp.gate.weight", 12), ("transformer.h.3.attn.c_attn.weight", 3),
    ("blocks.0.norm.weight", 0), ("model.embed_tokens.weight", None), ("model.layers.x.y", None),
    ("model.layers.12", None), ("model.layers.012.a", 12), ("model.layers.12345.a", 12345),
    ("model.layers..h.4.a", 4),
])
def test_layer_index(name, layer):
    assert layer_index(name) == layer


def test_packed_dtypes():
    assert is_packed("model.layers.0.mlp.experts.down_proj_blocks", "U8")
    assert is_packed("model.layers.0.mlp.down_proj.weight_packed", "I32")
    assert not is_packed("model.layers.0.mlp.down_proj.weight", "F4")
    assert not is_packed("model.layers.0.mlp.down_proj.weight", "I32")
    names = ["a.weight_packed", "a.qweight", "a.weight"]
    for dtype in ("U8", "I32", "F4", "BF16"):
        assert packed_rows(names, dtype) == [is_packed(n, dtype) for n in names]


def test_random_damage_is_always_a_blocked_never_a_crash(tmp_path):
    """Bytes flipped, cut or inserted in config.json, the index or a shard header: Blocked or a clean read."""
    rng = random.Random(3)
    root = base(tmp_path)
    targets = ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"]
    heads = {name: (root / name).read_bytes()[:4096] for name in targets}
    sizes = {name: (root / name).stat().st_size for name in targets}
    outcomes = set()
    for _ in range(200):
        name = rng.choice(targets)
        raw = bytearray(heads[name])  # all of a JSON file, the header region of a shard
        at = rng.randrange(len(raw))
        how = rng.randrange(3)
        if how == 0:
            raw[at] = rng.randrange(256)
        elif how == 1:
            del raw[at:at + rng.randint(1, 16)]
        else:
            raw[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        _rewrite_head(root / name, bytes(raw), sizes[name] - len(heads[name]))
        try:
            read_checkpoint(root)
            outcomes.add("read")
        except Blocked as blocked:
            outcomes.add(blocked.code)
        _rewrite_head(root / name, heads[name], sizes[name] - len(heads[name]))
    assert "CHECKPOINT_CORRUPT" in outcomes


def _rewrite_head(path, head: bytes, rest: int) -> None:
    """Replace a file's first bytes; the rest (a shard's data region, zeros) stays sparse."""
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(len(head) + rest)


def test_extra_files_that_hold_no_weights_are_allowed(tmp_path):
    root = base(tmp_path)
    write_shard(root / "consolidated.safetensors", {"tok_embeddings.weight": ("BF16", [8, 8])})
    write_shard(root / "empty.safetensors", {})
    (root / "README.md").write_text("notes")
    facts = read_checkpoint(root)
    assert {"consolidated.safetensors", "empty.safetensors", "README.md"} <= set(facts.files)
    assert [s.name for s in facts.shards] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def test_single_file_with_a_stray_shard_beside_it_is_refused(tmp_path):
    root = write_checkpoint(tmp_path / "s", {"model_type": "llama"}, {"a.weight": ("BF16", [4, 4])}, single_file=True)
    write_shard(root / "model-00001-of-00002.safetensors", {"b.weight": ("BF16", [4, 4])})
    with pytest.raises(Blocked, match="there is no index and it is not model.safetensors") as blocked:
        read_checkpoint(root)
    assert blocked.value.code == "CHECKPOINT_CORRUPT"
