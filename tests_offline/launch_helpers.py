"""The launch tests' shared pieces: settings of the kit's own schema, a spec from the real builder, and the docker
command-line client (required under CI)."""
from __future__ import annotations

import shutil

from onegpu.engine.launch import Owner, build_launch_spec
from onegpu.plan.settings import parse_settings
from tests_offline.docker_required import skip_unless_ci

UUID = "GPU-5d0c1f2e-8a7b-4c3d-9e8f-0a1b2c3d4e5f"
IMAGE = "sha256:" + "ab" * 32
OWNER = Owner(pid=4242, start_ticks=123456, boot_id="b00t-1d", pidns="pid:[4026531836]", uid=1000, gid=1000)


def settings(**over):
    data = {"schema": "onegpu/settings@1", "model_id": "XiaomiMiMo/MiMo-V2.5-Pro", "model_revision": "a" * 40,
            "model_path": "/srv/models/mimo", "image": "vllm/vllm-openai:v0.11.0", "gpu": 0,
            "context_tokens": 131072, "prefill_chunk_tokens": 8192, "cpu_offload_gib": 600,
            "container_ram_gib": 900, "host_headroom_gib": 32, "deadline_s": 7200, **over}
    return parse_settings(data, "s.json", "0" * 64)


def spec_for(s=None, **kw):
    return build_launch_spec(s or settings(), UUID, IMAGE, "20261202T111658Z-approve", "/runs/r1/sock", OWNER, **kw)


def docker_cli() -> str:
    cli = shutil.which("docker")
    if cli is None:
        skip_unless_ci("the docker command-line client is not installed (needed to run the printed docker run "
                       "line)")
    return cli
