"""The demo's MiMo-V2.6 configs as the real-engine image reads them (vLLM's CPU build and its pinned transformers).

examples/configs/*.config.json, and the folders examples/make_mimo_checkpoint.py writes with them, must be read
by the image before any weight is: transformers parses config.json by its model_type without remote code (the
demo ships none), and vLLM resolves the architecture to its own model class. One throwaway container
(`--network none`, the folders bind-mounted read-only, removed after) runs PROBE over every folder and prints
what each layer read as JSON; the tests compare it with config.json and with the kit's own KV plan of the same
file, so the kit plans with the attention layout the engine builds.

What PROBE reads, per folder:
* transformers: AutoConfig.from_pretrained(folder) (trust_remote_code off): the class, the fields the kit plans
  with, and those MiMoV2FlashConfig derives itself (layer_types, rope_parameters, rms_norm_eps, dtype).
* vLLM: vllm.config.ModelConfig(model=folder) with the same parse, the architecture it settles on, the class
  its registry loads for it (with that class's packed_modules_mapping: whether qkv_proj is read fused, as the
  generator writes it), the quantization and dtype it accepts, and the config fields vLLM's mimo_v2.py reads
  (the names as that file spells them). No weights are read and no model is built.
A control folder holds the Flash config with the model_type the releases publish ("mimo_v2", a remote-code
type): the same transformers, and vLLM through it, refuse it, which is why the demo's configs say
"mimo_v2_flash".

A failed image build fails these tests (never a skip); a missing Docker daemon skips them, or fails them under
CI=true, like every real-engine test.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from devkit.real_engine.build import CONSTRAINTS
from devkit.real_engine.python_env import VLLM_VERSION, read_pins
from onegpu.plan.kvcache import kv_cache_estimate
from tests_offline.image_runs import run_in_image
from tests_offline.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples"
CONFIGS = {"flash": EXAMPLES / "configs" / "MiMo-V2.6-Flash.config.json",
           "pro": EXAMPLES / "configs" / "MiMo-V2.6-Pro.config.json"}
CONTAINER_TIMEOUT_S = 600
MOUNT_ROOT = "/onegpu-configs"
CONTROL = "control-published-model-type"
KV_DTYPE_BYTES = 2  # bfloat16: the demo settings' kv_cache_dtype and the configs' torch_dtype
# vLLM's class for the fused-qkv MiMo layout (vllm/model_executor/models/registry.py -> mimo_v2.py).
ARCHITECTURE = "MiMoV2ForCausalLM"
MODEL_CLASS = "vllm.model_executor.models.mimo_v2.MiMoV2ForCausalLM"
# The fields vLLM's mimo_v2.py reads from the text config (MiMoV2FlashDecoderLayer, MiMoV2Attention,
# MiMoV2MoE, MiMoV2Model); several are read as `config.<name>` with no default, so each must be present.
VLLM_FIELDS = ("hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
               "head_dim", "v_head_dim", "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim",
               "swa_v_head_dim", "sliding_window_size", "hybrid_layer_pattern", "moe_layer_freq", "rope_theta",
               "swa_rope_theta", "partial_rotary_factor", "attention_value_scale", "add_swa_attention_sink_bias",
               "attention_bias", "layernorm_epsilon", "max_position_embeddings", "hidden_act",
               "intermediate_size", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok",
               "norm_topk_prob", "n_group", "topk_group", "moe_router_dtype", "tie_word_embeddings")

PROBE = r"""
import json, sys, traceback

def error(exc):
    return {"error": f"{type(exc).__name__}: {exc}", "where": traceback.format_exc(limit=-3)}

def plain(value):
    return json.loads(json.dumps(value, default=str))

import transformers, vllm
from transformers import AutoConfig

facts = {"versions": {"transformers": transformers.__version__, "vllm": vllm.__version__}, "folders": {}}
HF_FIELDS = ("model_type", "architectures", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "v_head_dim", "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim",
             "swa_v_head_dim", "sliding_window", "sliding_window_size", "hybrid_layer_pattern", "layer_types",
             "mlp_layer_types", "moe_layer_freq", "max_position_embeddings", "rope_parameters", "rope_theta",
             "swa_rope_theta", "rms_norm_eps", "layernorm_epsilon", "quantization_config")
VLLM_FIELDS = json.loads(sys.argv[1])
for folder in sys.argv[2:]:
    seen = facts["folders"][folder] = {}
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
        seen["hf"] = {"class": f"{type(config).__module__}.{type(config).__qualname__}", "dtype": str(config.dtype),
                      **{k: plain(getattr(config, k, "<absent>")) for k in HF_FIELDS}}
    except Exception as exc:
        seen["hf"] = error(exc)
    try:
        from vllm.config import ModelConfig

        model = ModelConfig(model=folder, tokenizer=folder, trust_remote_code=False, dtype="auto", seed=0)
        cls, arch = model.registry.resolve_model_cls(model.architectures, model_config=model)
        text = model.hf_text_config
        seen["vllm"] = {
            "hf_config_class": f"{type(model.hf_config).__module__}.{type(model.hf_config).__qualname__}",
            "architecture": model.architecture, "resolved_arch": arch,
            "model_class": f"{cls.__module__}.{cls.__qualname__}",
            "packed_modules_mapping": plain(getattr(cls, "packed_modules_mapping", None)),
            "is_text_generation": model.registry.is_text_generation_model(model.architectures, model),
            "quantization": model.quantization, "dtype": str(model.dtype), "max_model_len": model.max_model_len,
            "fields": {k: plain(getattr(text, k, "<absent>")) for k in VLLM_FIELDS},
        }
    except Exception as exc:
        seen["vllm"] = error(exc)
print("ONEGPU-FACTS " + json.dumps(facts))
"""


def written_checkpoint(model: str, out: Path) -> Path:
    """The folder the generator's command line writes (config.json, header-only shards, placeholder tokenizer)."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "make_mimo_checkpoint.py"), "--model", model,
                           "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """name -> (host folder, the config it was made from): each config alone, each generator output, a control."""
    root = tmp_path_factory.mktemp("configs")
    made = {}
    for model, source in CONFIGS.items():
        alone = root / f"config-{model}"
        alone.mkdir()
        shutil.copyfile(source, alone / "config.json")  # byte for byte, as the generator copies it
        made[f"config-{model}"] = (alone, model)
        made[f"written-{model}"] = (written_checkpoint(model, root / f"written-{model}"), model)
    control = root / CONTROL
    control.mkdir()
    published = json.loads(CONFIGS["flash"].read_text())
    (control / "config.json").write_text(json.dumps({**published, "model_type": "mimo_v2"}, indent=2))
    made[CONTROL] = (control, "flash")
    return made


@pytest.fixture(scope="module")
def facts(docker_client, real_engine_image, folders) -> dict:
    """PROBE's JSON from one container over every folder, each mounted read-only; keyed by folder name."""
    volumes = {str(host): {"bind": f"{MOUNT_ROOT}/{name}", "mode": "ro"} for name, (host, _) in folders.items()}
    command = ["-c", PROBE, json.dumps(VLLM_FIELDS), *(f"{MOUNT_ROOT}/{name}" for name in folders)]
    status, stdout, stderr = run_in_image(docker_client, real_engine_image, command, ["python"], CONTAINER_TIMEOUT_S,
                                          volumes=volumes, environment={"HF_HUB_OFFLINE": "1"})
    lines = [line for line in stdout.splitlines() if line.startswith("ONEGPU-FACTS ")]
    assert status == 0 and lines, f"the probe exited {status}\nstdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-4000:]}"
    found = json.loads(lines[-1].removeprefix("ONEGPU-FACTS "))
    found["folders"] = {path.removeprefix(f"{MOUNT_ROOT}/"): seen for path, seen in found["folders"].items()}
    return found


def _read(facts: dict, name: str, layer: str) -> dict:
    seen = facts["folders"][name][layer]
    assert "error" not in seen, f"{layer} refused {name}: {seen['error']}\n{seen.get('where', '')}"
    return seen


DEMO_FOLDERS = ["config-flash", "config-pro", "written-flash", "written-pro"]


def test_the_image_is_the_pinned_vllm_and_transformers(facts):
    pins = read_pins(CONSTRAINTS)
    assert facts["versions"] == {"transformers": pins["transformers"], "vllm": VLLM_VERSION}


def test_the_published_model_type_is_refused_without_remote_code(facts):
    """The control: the releases' "mimo_v2" is no model_type this transformers knows, and vLLM parses config.json
    through it, so the engine stops at the config, before any weight."""
    for layer in ("hf", "vllm"):
        seen = facts["folders"][CONTROL][layer]
        assert "model type `mimo_v2`" in seen.get("error", ""), (layer, seen)
        assert "does not recognize this architecture" in seen["error"], (layer, seen)


@pytest.mark.parametrize("name", DEMO_FOLDERS)
def test_transformers_parses_the_config_into_its_mimo_class_with_the_same_layout(facts, folders, name):
    config = json.loads((folders[name][0] / "config.json").read_text())
    hf = _read(facts, name, "hf")
    assert hf["class"] == "transformers.models.mimo_v2_flash.configuration_mimo_v2_flash.MiMoV2FlashConfig"
    assert hf["model_type"] == config["model_type"] == "mimo_v2_flash"
    assert hf["architectures"] == config["architectures"] == [ARCHITECTURE]
    for key in ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "v_head_dim",
                "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim", "swa_v_head_dim",
                "sliding_window", "sliding_window_size", "hybrid_layer_pattern", "moe_layer_freq",
                "max_position_embeddings", "quantization_config", "layer_types"):
        assert hf[key] == config[key], (key, hf[key], config[key])
    # transformers derives these itself when config.json leaves them out (full attention at 0 and every 6th
    # layer, its own rope thetas, rms_norm_eps 1e-5): the explicit fields keep its reading equal to the file's.
    assert hf["layer_types"] == ["sliding_attention" if p else "full_attention" for p in config["hybrid_layer_pattern"]]
    assert hf["mlp_layer_types"] == ["sparse" if m else "dense" for m in config["moe_layer_freq"]]
    assert hf["rope_parameters"] == {
        "full_attention": {"rope_type": "default", "rope_theta": config["rope_theta"],
                           "partial_rotary_factor": config["partial_rotary_factor"]},
        "sliding_attention": {"rope_type": "default", "rope_theta": config["swa_rope_theta"],
                              "partial_rotary_factor": config["partial_rotary_factor"]}}
    assert hf["rms_norm_eps"] == hf["layernorm_epsilon"] == config["layernorm_epsilon"]
    assert hf["dtype"] == f"torch.{config['torch_dtype']}" == "torch.bfloat16"


@pytest.mark.parametrize("name", DEMO_FOLDERS)
def test_vllm_resolves_the_architecture_to_its_fused_qkv_mimo_class(facts, name):
    seen = _read(facts, name, "vllm")
    assert seen["hf_config_class"].endswith(".MiMoV2FlashConfig")
    assert seen["architecture"] == seen["resolved_arch"] == ARCHITECTURE
    # vLLM's own model class, not its Transformers fallback; it reads qkv_proj fused, as the generator writes it.
    assert seen["model_class"] == MODEL_CLASS
    assert seen["packed_modules_mapping"]["qkv_proj"] == ["qkv_proj"]
    assert seen["is_text_generation"] is True


@pytest.mark.parametrize("name", DEMO_FOLDERS)
def test_vllm_accepts_the_quantization_dtype_and_context_of_the_file(facts, folders, name):
    config = json.loads((folders[name][0] / "config.json").read_text())
    seen = _read(facts, name, "vllm")
    assert seen["quantization"] == config["quantization_config"]["quant_method"] == "fp8"
    assert seen["dtype"] == "torch.bfloat16"
    assert seen["max_model_len"] == config["max_position_embeddings"]


@pytest.mark.parametrize("name", DEMO_FOLDERS)
def test_vllm_reads_every_field_its_mimo_model_uses_as_the_file_states_it(facts, folders, name):
    config = json.loads((folders[name][0] / "config.json").read_text())
    fields = _read(facts, name, "vllm")["fields"]
    assert [k for k, v in fields.items() if v == "<absent>"] == []
    assert fields == {k: config[k] for k in VLLM_FIELDS}


@pytest.mark.parametrize("name", DEMO_FOLDERS)
def test_the_kits_kv_plan_has_the_layout_the_image_reads(facts, folders, name):
    """Layer counts, bytes per token and window of the kit's estimate, recomputed from the image's reading."""
    config = json.loads((folders[name][0] / "config.json").read_text())
    hf, fields = _read(facts, name, "hf"), _read(facts, name, "vllm")["fields"]
    settings = json.loads((EXAMPLES / ("demo-settings.json" if folders[name][1] == "flash"
                                       else "demo-settings-pro.json")).read_text())
    kv = kv_cache_estimate(config, settings["context_tokens"], settings["kv_cache_dtype"],
                           settings["prefill_chunk_tokens"])
    assert kv.bytes is not None, kv.unknown_reason
    rows = {row.kind: row for row in kv.layers}
    assert set(rows) == {"full_attention", "sliding_attention"}
    full, sliding = rows["full_attention"], rows["sliding_attention"]
    # transformers' per-layer kinds and vLLM's (mimo_v2.py: hybrid_layer_pattern[i] == 1 is sliding)
    assert full.layers == hf["layer_types"].count("full_attention") == fields["hybrid_layer_pattern"].count(0)
    assert sliding.layers == hf["layer_types"].count("sliding_attention") == fields["hybrid_layer_pattern"].count(1)
    assert full.bytes_per_token == hf["num_key_value_heads"] * (hf["head_dim"] + hf["v_head_dim"]) * KV_DTYPE_BYTES
    assert sliding.bytes_per_token == (hf["swa_num_key_value_heads"] * (hf["swa_head_dim"] + hf["swa_v_head_dim"])
                                       * KV_DTYPE_BYTES)
    assert full.bytes_per_token == (fields["num_key_value_heads"] * (fields["head_dim"] + fields["v_head_dim"])
                                    * KV_DTYPE_BYTES)
    assert sliding.bytes_per_token == (fields["swa_num_key_value_heads"]
                                       * (fields["swa_head_dim"] + fields["swa_v_head_dim"]) * KV_DTYPE_BYTES)
    # The window vLLM gives its sliding layers (sliding_window_size) and the one this transformers reads.
    assert sliding.window == fields["sliding_window_size"] == hf["sliding_window"] == 128
