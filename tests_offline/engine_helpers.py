"""Helpers for the engine tests on the real Docker engine: launch specs built by the real `build_launch_spec`
for a throwaway checkpoint and run folder, adjusted only where this machine differs (the stub image itself is
the `stub_image` fixture of conftest.py).

What is adjusted, and why: no GPU exists here, so the spec carries no GPU device request (the stub's torch
answers the device count from STUB_CUDA_DEVICES); the stub's behaviour knobs go in the container
environment; every container gets `onegpu.test=1` and a per-test `onegpu.test_case` label. The engine runs
as uid 1000 (not root, which would hide permission bugs) with its run folder 0700 owned by that uid.
"""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from msgspec import structs

from onegpu.checkpoint.scan import read_config
from onegpu.checkpoint.towers import has_towers
from onegpu.engine.launch import LaunchSpec, Owner, build_launch_spec
from onegpu.engine.leftovers import current_owner
from onegpu.plan.settings import OWN_SCHEMA, Settings, parse_settings

ENGINE_UID = 1000 if os.getuid() == 0 else os.getuid()
ENGINE_GID = 1000 if os.getuid() == 0 else os.getgid()
MODEL_ID = "stub-org/stub-model"


def settings_for(model_path: Path, **overrides) -> Settings:
    data = {"schema": OWN_SCHEMA, "model_id": MODEL_ID, "model_revision": "0" * 40, "model_path": str(model_path),
            "image": "onegpu-stub-engine:test", "gpu": 0, "context_tokens": 8192, "prefill_chunk_tokens": 2048,
            "cpu_offload_gib": 12, "container_ram_gib": 2, "host_headroom_gib": 1, "deadline_s": 600,
            "boot_deadline_s": 60, "shm_gib": 0.25, "pids_limit": 256, **overrides}
    return parse_settings(data, "test-settings.json", "0" * 64)


def private_folder(path: Path, uid: int = ENGINE_UID, gid: int = ENGINE_GID) -> Path:
    """A 0700 folder owned by the engine's uid, as a non-root operator's run folder is."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    if os.getuid() == 0:
        os.chown(path, uid, gid)
    return path


def checkpoint_folder(root: Path, config: dict | None = None) -> Path:
    folder = root / "ckpt"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or {"architectures": ["LlamaForCausalLM"]}))
    os.chmod(folder, 0o755)
    return folder


def make_spec(root: Path, image_id: str, knobs: dict | None = None, config: dict | None = None,
              **settings_overrides) -> LaunchSpec:
    """A spec for the stub: the real builder (towers read from the checkpoint's config.json, as the launch_spec
    fixture reads them), then no GPU request, stub knobs and test labels."""
    ckpt = checkpoint_folder(root, config)
    settings = settings_for(ckpt, **settings_overrides)
    run = private_folder(root / "run")
    sock = private_folder(run / "sock")
    me = current_owner()
    owner = Owner(me.pid, me.start_ticks, me.boot_id, me.pidns, ENGINE_UID, ENGINE_GID)
    spec = build_launch_spec(settings, None, image_id, f"test-{uuid.uuid4().hex[:8]}", str(sock), owner,
                             towers=has_towers(read_config(ckpt)))
    return structs.replace(
        spec, environment={**spec.environment, **(knobs or {})},
        labels={**spec.labels, "onegpu.test": "1", "onegpu.test_case": uuid.uuid4().hex})


def run_folder_of(spec: LaunchSpec) -> Path:
    return Path(spec.socket_dir).parent
