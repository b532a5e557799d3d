"""A serving stub engine container for the adapter's client, abuse and benchmark runs (real Docker engine).

Created (never run: `containers.run` pulls on a miss) from the locally built stub image, network `none`,
labelled onegpu.test=1, its Unix socket in a short private folder bind-mounted at /run/onegpu; always
removed on exit.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from docker.types import Mount

from devkit.stub_engine.build import ensure_stub_image
from onegpu.core.uds_http import uds_request

MODEL_ID = "stub-org/stub-model"
SOCKET_IN_CONTAINER = "/run/onegpu/engine.sock"


@dataclass
class StubServing:
    socket_path: str
    container: object
    model_id: str

    def stats(self) -> dict:
        """The stub's own counters, read on its socket directly (not through the adapter)."""
        import json

        return json.loads(uds_request(self.socket_path, "GET", "/stub/stats", timeout=10).body)


@contextmanager
def stub_serving(client, env: dict | None = None, boot_timeout_s: float = 60.0) -> Iterator[StubServing]:
    """Start a stub engine serving on a Unix socket; yields once GET /health answers 200 on that socket."""
    image = ensure_stub_image(client)
    folder = Path(tempfile.mkdtemp(prefix="ogs-", dir="/tmp"))  # short: socket paths are limited to 107 bytes
    os.chmod(folder, 0o700)
    container = client.containers.create(
        image, command=["serve", "/model", "--served-model-name", MODEL_ID, "--uds", SOCKET_IN_CONTAINER],
        environment={k: str(v) for k, v in (env or {}).items()}, labels={"onegpu.test": "1"},
        network_mode="none", user=f"{os.getuid()}:{os.getgid()}", detach=True,
        mounts=[Mount("/run/onegpu", str(folder), type="bind")])
    try:
        container.start()
        socket_path = str(folder / "engine.sock")
        end = time.monotonic() + boot_timeout_s
        while True:
            try:
                if uds_request(socket_path, "GET", "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            container.reload()
            if container.status != "running" or time.monotonic() > end:
                logs = container.logs().decode(errors="replace")[-2000:]
                raise RuntimeError(f"stub engine did not serve (status {container.status}):\n{logs}")
            time.sleep(0.1)
        yield StubServing(socket_path, container, MODEL_ID)
    finally:
        container.remove(force=True)
        shutil.rmtree(folder, ignore_errors=True)
