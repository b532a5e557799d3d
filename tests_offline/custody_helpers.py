"""Custody test helpers shared by the manifest and publisher-hash tests: a plain checkpoint, coreutils sha256sum
lines, the settings file and the conftest text (CONFTEST) of the kit project that the `kit_dir` fixture lays out."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from onegpu.core.units import MIB

REV = "0123456789abcdef0123456789abcdef01234567"


def plain_checkpoint(root: Path) -> Path:
    """A small plain checkpoint: two shards crossing buffer boundaries, config, a nested file, an empty one."""
    root.mkdir(parents=True)
    (root / "model-00001-of-00002.safetensors").write_bytes(os.urandom(3 * MIB + 12345))
    (root / "model-00002-of-00002.safetensors").write_bytes(os.urandom(MIB))
    (root / "config.json").write_text('{"model_type": "demo"}\n')
    (root / "original").mkdir()
    (root / "original" / "params.json").write_text("{}\n")
    (root / "empty.txt").write_bytes(b"")
    return root


def sha256sum_lines(root: Path) -> str:
    """Publisher-style hashes made by coreutils sha256sum (not by the kit)."""
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return subprocess.run(["sha256sum", *names], cwd=root, capture_output=True, text=True, check=True).stdout


CONFTEST = """
import time
from pathlib import Path
import pytest

@pytest.fixture(scope="session")
def runtime_probe(kit):
    # Stands in for the runtime probe (it needs the engine image): records when it ran.
    (kit.run_folder / "probe-ran").write_text(str(time.time()))

class _Planned:
    def __init__(self, files): self.files = files

@pytest.fixture(scope="session")
def checkpoint(settings):
    # Stands in for the checkpoint reader's file list (the plan phase).
    from onegpu.checkpoint.hf_cache_auth import detect_layout
    from onegpu.custody.manifest import walk_checkpoint
    return _Planned([f.path for f in walk_checkpoint(detect_layout(Path(settings.model_path)))])
"""


def _settings(path: Path, root: Path) -> Path:
    path.write_text(json.dumps({
        "schema": "onegpu/settings@1", "model_id": "o/n", "model_revision": REV, "model_path": str(root),
        "image": "example/engine:1", "gpu": 0, "context_tokens": 4096, "prefill_chunk_tokens": 1024,
        "cpu_offload_gib": 0, "container_ram_gib": 8, "host_headroom_gib": 1, "deadline_s": 60}))
    return path
