"""Pure: the vision and audio towers a checkpoint's config.json declares.

vLLM builds a multimodal model's towers (vision transformer, audio encoder) inside `_mark_tower_model`, and skips
their weights when every modality they serve has a per-prompt limit of 0, which `--language-model-only` sets.
The kit's runs are text-only, so a checkpoint with towers is launched with that flag (onegpu.engine.launch), and the
capacity code counts the same towers by the same rule.

The keys are the config sections vLLM's multimodal models build their towers from: `vision_config` (most
vision-language models, MiMo-V2 Omni), `audio_config` (MiMo-V2 Omni, the Qwen Omni thinkers), `vit_config`
(Bagel, Molmo2, Ovis2.5), `audio_encoder_config` (MiDashengLM), `visual_tokenizer_config` (Ovis); the Qwen Omni
models keep theirs one level down, in `thinker_config`.
"""
from __future__ import annotations

TOWER_KEYS = ("vision_config", "audio_config", "vit_config", "audio_encoder_config", "visual_tokenizer_config")
NESTING_KEYS = ("thinker_config",)


def has_towers(config: dict) -> list[str]:
    """The tower sections `config` declares, in TOWER_KEYS order ("thinker_config.audio_config" when nested);
    empty for a text-only model.

    A section counts when it is a JSON object, as onegpu.checkpoint.consistency reads it; `"vision_config": null` (which
    some text-only configs carry) does not. An empty object counts: MiMo-V2 Omni builds its audio tower from
    any audio_config that is not null."""
    found = [key for key in TOWER_KEYS if isinstance(config.get(key), dict)]
    for outer in NESTING_KEYS:
        inner = config.get(outer)
        if isinstance(inner, dict):
            found += [f"{outer}.{key}" for key in TOWER_KEYS if isinstance(inner.get(key), dict)]
    return found
