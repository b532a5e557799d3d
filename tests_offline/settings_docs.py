"""Settings documents the settings tests share: the kit's own schema, minimal and full, and the earlier kit's
example filled in."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from onegpu.plan.settings import OWN_SCHEMA, SettingsError, load_settings
from tests_offline.paths import DATA

# The earlier kit's example, byte for byte as it ships (../shared/compat is not part of this repository).
LEGACY_EXAMPLE = DATA / "compat" / "settings.example.json"
REVISION = "0123456789abcdef0123456789abcdef01234567"

OWN_MINIMAL = {
    "schema": OWN_SCHEMA,
    "model_id": "XiaomiMiMo/MiMo-V2.6-Pro-RL",
    "model_revision": REVISION,
    "model_path": "/srv/models/mimo-v2.6-pro",
    "image": "vllm/vllm-openai:mimov25-cu129",
    "gpu": 0,
    "context_tokens": 32768,
    "prefill_chunk_tokens": 2048,
    "cpu_offload_gib": 640,
    "container_ram_gib": 800,
    "host_headroom_gib": 64,
    "deadline_s": 7200,
}
OWN_FULL = {
    **OWN_MINIMAL,
    "gpu": "GPU-cb3dfa52-e2f3-9ca4-a399-7d16041c3732",
    "boot_deadline_s": 3600, "container_cpus": 16, "gpu_reserve_gib": 6.5, "kv_cache_dtype": "fp8",
    "trust_remote_code": True, "request_timeout_s": 900, "serve_window_s": 1800, "shm_gib": 32,
    "pids_limit": 8192, "free_floor_gib": 1.5, "max_requests": 500, "offload_pinning": "exact",
}


def write(tmp_path, doc, name="s.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def errors_of(path) -> list[str]:
    with pytest.raises(SettingsError) as failed:
        load_settings(path)
    return failed.value.errors


def legacy_filled(tmp_path) -> Path:
    text = LEGACY_EXAMPLE.read_text()
    text = text.replace("REPLACE_WITH_EXACT_40_HEX_REVISION", REVISION)
    text = text.replace("/choose/an/existing/local/checkpoint", "/srv/models/mimo-v2.6-pro")
    return write(tmp_path, text, "filled.json")
