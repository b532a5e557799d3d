"""Checkpoint consistency warnings: real safetensors headers written by devkit/synth.py and read by the kit's
own checkpoint reader, then judged; and a real scan showing them as warnings that never block."""
from __future__ import annotations

import json
import shutil

import pytest

from devkit.synth import SYNTHETIC_METADATA, write_checkpoint
from onegpu.checkpoint.consistency import (
    Check,
    check_ignored_layers,
    check_kv_dtype,
    check_layer_count,
    check_lines,
    check_mtp,
    check_tied_head,
    check_towers,
    consistency_checks,
)
from onegpu.checkpoint.scan import read_checkpoint
from tests_offline.paths import REPO_ROOT

BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "torch_dtype": "bfloat16"}


def decoder(layers=2, prefix="model.layers") -> dict:
    t = {}
    for i in range(layers):
        p = f"{prefix}.{i}."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
                     "mlp.up_proj", "mlp.down_proj"):
            t[p + name + ".weight"] = ("BF16", [64, 64])
        t[p + "input_layernorm.weight"] = ("BF16", [64])
    return t


def facts(tmp_path, config: dict, tensors: dict, head=True, embed=True):
    table = {**({"model.embed_tokens.weight": ("BF16", [128, 64])} if embed else {}), **tensors,
             "model.norm.weight": ("BF16", [64]), **({"lm_head.weight": ("BF16", [128, 64])} if head else {})}
    return read_checkpoint(write_checkpoint(tmp_path / "ckpt", {**BASE, **config}, table, metadata=SYNTHETIC_METADATA))


def names(ckpt) -> list[str]:
    return [t.name for t in ckpt.tensors]


def mtp_layer(prefix: str) -> dict:
    return {f"{prefix}.{n}.weight": ("BF16", [64, 128] if n == "eh_proj" else [64]) for n in ("eh_proj", "enorm",
                                                                                            "hnorm")}


# ---- draft (MTP) layers and the layer count -----------------------------------------------------------------

def test_declared_draft_layers_without_tensors_warn_of_uninitialised_weights(tmp_path):
    ckpt = facts(tmp_path, {"mtp_num_hidden_layers": 1}, decoder())
    row = check_mtp(ckpt.config, names(ckpt))
    assert row.status == "warning" and "mtp_num_hidden_layers=1" in row.message
    assert "speculative decoding (MTP / NEXTN) would start from uninitialised weights" in row.message


@pytest.mark.parametrize("prefix", ["model.mtp.layers.0", "model.mtp_layers.0", "mtp.layers.0"])
def test_draft_layers_under_their_own_name_satisfy_the_declaration(tmp_path, prefix):
    ckpt = facts(tmp_path, {"num_nextn_predict_layers": 1}, {**decoder(), **mtp_layer(prefix)})
    assert check_mtp(ckpt.config, names(ckpt)).status == "ok"
    assert check_layer_count(ckpt.config, names(ckpt)).status == "ok"  # draft layers are not decoder layers


def test_deepseek_layout_draft_layer_after_the_decoder_layers_is_counted(tmp_path):
    # DeepSeek V3 puts its draft layer at model.layers.<num_hidden_layers>
    tensors = {**decoder(), **mtp_layer("model.layers.2"), "model.layers.2.self_attn.q_proj.weight": ("BF16", [64, 64])}
    ckpt = facts(tmp_path / "a", {"num_nextn_predict_layers": 1}, tensors)
    assert check_mtp(ckpt.config, names(ckpt)).status == "ok"
    assert check_layer_count(ckpt.config, names(ckpt)).status == "ok"
    undeclared = facts(tmp_path / "b", {}, tensors)
    row = check_mtp(undeclared.config, names(undeclared))
    assert row.status == "warning" and "layers.2" in row.message and "declares none" in row.message


def test_fewer_draft_layers_than_declared_warn(tmp_path):
    ckpt = facts(tmp_path, {"num_nextn_predict_layers": 3}, {**decoder(), **mtp_layer("model.mtp.layers.0")})
    row = check_mtp(ckpt.config, names(ckpt))
    assert row.status == "warning" and "tensors hold only 1" in row.message


def test_declared_layers_without_tensors_and_undeclared_layers_warn(tmp_path):
    short = facts(tmp_path / "a", {"num_hidden_layers": 3}, decoder(2))
    row = check_layer_count(short.config, names(short))
    assert row.status == "warning" and "no tensor holds layer(s) 2" in row.message
    extra = facts(tmp_path / "b", {"num_hidden_layers": 1}, decoder(2))
    row = check_layer_count(extra.config, names(extra))
    assert row.status == "warning" and "beyond num_hidden_layers=1 (1)" in row.message


# ---- towers ------------------------------------------------------------------------------------------------------

def tower(kind: str) -> dict:
    part = {"vision": "visual.blocks.0", "audio": "audio_tower.layers.0"}[kind]
    return {f"{part}.attn.qkv.weight": ("BF16", [96, 32]), f"{part}.norm1.weight": ("BF16", [32])}


@pytest.mark.parametrize("kind", ["vision", "audio"])
def test_a_tower_config_without_tower_tensors_warns(tmp_path, kind):
    ckpt = facts(tmp_path, {f"{kind}_config": {"hidden_size": 32}}, decoder())
    row = next(r for r in check_towers(ckpt.config, names(ckpt)) if r.check == f"{kind}_tower")
    assert row.status == "warning" and f"{kind}_config but no {kind} tower tensor exists" in row.message


@pytest.mark.parametrize("kind", ["vision", "audio"])
def test_tower_tensors_without_a_config_warn_and_with_one_are_fine(tmp_path, kind):
    bare = facts(tmp_path / "a", {}, {**decoder(), **tower(kind)})
    row = next(r for r in check_towers(bare.config, names(bare)) if r.check == f"{kind}_tower")
    assert row.status == "warning" and f"but config.json has no {kind}_config" in row.message
    assert check_layer_count(bare.config, names(bare)).status == "ok"  # tower layers are not decoder layers
    both = facts(tmp_path / "b", {f"{kind}_config": {"hidden_size": 32}}, {**decoder(), **tower(kind)})
    assert {r.status for r in check_towers(both.config, names(both))} == {"ok"}


# ---- quantization ignored layers ---------------------------------------------------------------------------------

def fp8_config(ignored: list[str]) -> dict:
    return {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                                    "ignored_layers": ignored}}


def test_ignored_layers_that_name_no_module_are_listed(tmp_path):
    ignored = ["model.layers.0.self_attn.o_proj", "model.decoder.self_attn.o_proj", "lm_head"]
    ckpt = facts(tmp_path, fp8_config(ignored), decoder())
    assert ckpt.quant.ignored_layers == ignored  # read by the kit's quantization reader
    row = check_ignored_layers(ckpt.quant.ignored_layers, names(ckpt))
    assert row.status == "warning" and row.message.startswith("1 of 3 quantization ignored-layer entries")
    assert "model.decoder.self_attn.o_proj" in row.message and "lm_head," not in row.message


def test_fused_regex_and_wildcard_entries_are_matched_as_the_engine_names_them(tmp_path):
    ckpt = facts(tmp_path, {}, decoder())
    ok = ["model.layers.1.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj", "re:.*lm_head", "model.layers.*.mlp"]
    assert check_ignored_layers(ok, names(ckpt)).status == "ok"
    row = check_ignored_layers(["model.layers.*.mlp.gate", "re:.*vision"], names(ckpt))
    assert row.status == "warning" and row.message.startswith("2 of 2")


def test_an_ignored_head_that_is_tied_away_is_named(tmp_path):
    ckpt = facts(tmp_path, fp8_config(["lm_head"]), decoder(), head=False)
    assert "lm_head" in check_ignored_layers(ckpt.quant.ignored_layers, names(ckpt)).message


# ---- tied embeddings ------------------------------------------------------------------------------------------------

def test_tied_embeddings_with_a_stored_head_warn(tmp_path):
    ckpt = facts(tmp_path, {"tie_word_embeddings": True}, decoder())
    row = check_tied_head(ckpt.config, names(ckpt))
    assert row.status == "warning" and "tie_word_embeddings is true but the checkpoint holds" in row.message


def test_untied_embeddings_without_a_head_warn_of_an_uninitialised_output_layer(tmp_path):
    ckpt = facts(tmp_path, {"tie_word_embeddings": False}, decoder(), head=False)
    row = check_tied_head(ckpt.config, names(ckpt))
    assert row.status == "warning" and "uninitialised" in row.message


def test_consistent_or_unstated_tying(tmp_path):
    tied = facts(tmp_path / "a", {"tie_word_embeddings": True}, decoder(), head=False)
    assert check_tied_head(tied.config, names(tied)).status == "ok"
    unstated = facts(tmp_path / "b", {}, decoder())
    assert check_tied_head(unstated.config, names(unstated)).status == "unknown"
    nested = facts(tmp_path / "c", {"text_config": {"tie_word_embeddings": False}}, decoder())
    assert check_tied_head(nested.config, names(nested)).status == "ok"  # a multimodal wrapper's text_config


# ---- KV dtype against the image's vLLM ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, version, status", [
    ("float16", "0.17.0", "warning"), ("float16", "0.11.0", "warning"), ("float16", "0.18.1", "unknown"),
    ("float16", "0.19.0", "ok"), ("float16", "0.20.1rc1.dev12+g0123abc", "ok"),
    ("bfloat16", "0.10.1.1", "unknown"), ("bfloat16", "0.11.0", "ok"),
    ("fp8", "0.10.1", "ok"), ("fp8_e5m2", "0.11.0", "ok"), ("fp8_e4m3", "0.4.0", "unknown"),
    (None, "0.10.1", "ok"), ("auto", None, "ok"),
    ("fp8", None, "unknown"), ("fp8", "custom-build", "unknown"),
])
def test_kv_dtype_is_judged_against_the_vllm_version_or_unknown(dtype, version, status):
    row = check_kv_dtype(dtype, version, "the probe", {"torch_dtype": "float16" if dtype == "float16" else
                                                        "bfloat16"})[0]
    assert row.status == status, row.message
    if status == "warning":
        assert "needs vLLM >= 0.19.0" in row.message
    if version is None and dtype not in (None, "auto"):
        assert "not known in a scan" in row.message


def test_a_16_bit_kv_dtype_other_than_the_models_warns_of_reinterpreted_bits():
    rows = check_kv_dtype("float16", "0.19.0", "the probe", {"torch_dtype": "bfloat16"})
    assert [r.check for r in rows] == ["kv_dtype_version", "kv_dtype_model"]
    assert rows[1].status == "warning" and "vllm-project/vllm#54338" in rows[1].message
    assert len(check_kv_dtype("bfloat16", "0.19.0", "p", {"torch_dtype": "bfloat16"})) == 1


def test_every_check_has_one_line():
    rows = consistency_checks(BASE, ["model.layers.0.a.weight", "model.layers.1.a.weight"], [], "fp8", None)
    assert [r.check for r in rows] == ["layers", "mtp", "vision_tower", "audio_tower", "ignored_layers",
                                       "tied_embeddings", "kv_dtype_version"]
    lines = check_lines(rows + [Check("x", "warning", "m")])
    assert lines[-1] == "consistency x: WARNING: m" and lines[0].startswith("consistency layers: OK:")


# ---- a real scan: warnings are visible and never block --------------------------------------------------------------

def test_a_scan_shows_consistency_warnings_without_blocking(kit_project):
    shutil.copy(REPO_ROOT / "tests_hw" / "test_2_plan_insight.py", kit_project.path / "tests_hw")
    tensors = {"model.embed_tokens.weight": ("BF16", [128, 64]), **decoder(), "lm_head.weight": ("BF16", [128, 64])}
    ckpt = write_checkpoint(kit_project.path / "ckpt", {**BASE, "num_nextn_predict_layers": 1}, tensors,
                            metadata=SYNTHETIC_METADATA)
    (kit_project.path / "s.json").write_text(json.dumps({
        "schema": "onegpu/settings@1", "model_id": "org/m", "model_revision": "a" * 40, "model_path": str(ckpt),
        "image": "img:1", "gpu": 0, "context_tokens": 4096, "prefill_chunk_tokens": 1024, "cpu_offload_gib": 0,
        "container_ram_gib": 16, "host_headroom_gib": 4, "deadline_s": 600, "kv_cache_dtype": "float16"}))
    result = kit_project.runpytest("-m", "scan", "--settings", "s.json", "--out", "runs/c")
    receipt = json.loads((kit_project.path / "runs/c/receipt.json").read_text())
    entry = next(e for n, e in receipt["tests"].items() if n.endswith("test_checkpoint_holds_what_its_config_promises"))
    assert entry["outcome"] == "passed"
    warnings = [w for w in receipt["warnings"] if w.startswith("consistency")]
    assert [w.split(":")[0] for w in warnings] == ["consistency mtp", "consistency kv_dtype_model"]
    checks = {c["check"]: c["status"] for c in receipt["consistency"]["checks"]}
    assert checks["kv_dtype_version"] == "unknown" and receipt["consistency"]["vllm_version"] is None
    result.stdout.fnmatch_lines(["*consistency mtp: WARNING: config.json declares num_nextn_predict_layers=1*",
                                 "WARNING: consistency kv_dtype_model*"])
