"""Which config.json sections are vision or audio towers (onegpu.checkpoint.towers), read from real files as the launch
plan reads them (onegpu.checkpoint.scan.read_config)."""
from __future__ import annotations

import json

import pytest

from onegpu.checkpoint.scan import read_config
from onegpu.checkpoint.towers import has_towers
from onegpu.core.outcomes import Blocked

# Configs of architectures vLLM 0.32.0 registers (model_executor/models/registry.py), cut to the sections that
# decide; the numbers inside the sections are placeholders.
MIMO_V2_OMNI = {"architectures": ["MiMoV2OmniForCausalLM"], "hidden_size": 4096,
                "vision_config": {"depth": 28, "hidden_size": 1280}, "audio_config": {"hidden_size": 1280}}
QWEN2_5_OMNI = {"architectures": ["Qwen2_5OmniModel"],
                "thinker_config": {"audio_config": {"d_model": 1280}, "vision_config": {"depth": 32},
                                   "text_config": {"hidden_size": 3584}},
                "talker_config": {"hidden_size": 896}}
QWEN2_5_VL = {"architectures": ["Qwen2_5_VLForConditionalGeneration"], "vision_config": {"depth": 32},
              "hidden_size": 3584}
OVIS = {"architectures": ["Ovis"], "llm_config": {"hidden_size": 3584},
        "visual_tokenizer_config": {"backbone_config": {"hidden_size": 1024}}}
MIMO_V2_FLASH = {"architectures": ["MiMoV2FlashForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 48}
QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "num_experts": 128}


@pytest.mark.parametrize("config, towers", [
    (MIMO_V2_OMNI, ["vision_config", "audio_config"]),
    (QWEN2_5_OMNI, ["thinker_config.vision_config", "thinker_config.audio_config"]),
    (QWEN2_5_VL, ["vision_config"]),
    (OVIS, ["visual_tokenizer_config"]),
    (MIMO_V2_FLASH, []),
    (QWEN3_MOE, []),
])
def test_towers_of_published_config_shapes(tmp_path, config, towers):
    (tmp_path / "config.json").write_text(json.dumps(config, indent=2))
    assert has_towers(read_config(tmp_path)) == towers


def test_a_null_section_is_no_tower_and_an_empty_object_is_one():
    # Some text-only configs carry "vision_config": null; MiMo-V2 Omni builds an audio tower from any
    # audio_config that is not null, so an empty object still counts.
    assert has_towers({"vision_config": None, "audio_config": None, "thinker_config": None}) == []
    assert has_towers({"audio_config": {}}) == ["audio_config"]
    assert has_towers({"vision_config": "siglip", "visual": {"layers": 48}}) == []  # not config sections


def test_an_unreadable_config_blocks_rather_than_reading_as_text_only(tmp_path):
    (tmp_path / "config.json").write_text('{"vision_config": {"depth": 1}, "vision_config": {"depth": 2}}')
    with pytest.raises(Blocked) as failed:
        read_config(tmp_path)
    assert failed.value.code == "CHECKPOINT_CORRUPT" and "config.json" in failed.value.message
    with pytest.raises(Blocked) as missing:
        read_config(tmp_path / "absent")
    assert missing.value.code == "CHECKPOINT_MISSING"
