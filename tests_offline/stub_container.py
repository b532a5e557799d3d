"""One stub engine container on the real Docker daemon (stub_engine), and its handle (StubEngine), shared by the
batch tests and the conftest text their kit projects run."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager

from devkit.request_corpus import CONTEXT, MODEL
from devkit.stub_engine.build import ensure_stub_image
from onegpu.core.uds_http import uds_request

SOCKET_IN_CONTAINER = "/run/onegpu/engine.sock"
BOOT_TIMEOUT_S = 30


class StubEngine:
    """A running stub container: socket_path, alive() and state() read from Docker, like the engine handle."""

    def __init__(self, container, socket_path: str):
        self.container, self.socket_path = container, socket_path

    def state(self) -> dict:
        self.container.reload()
        s = self.container.attrs["State"]
        return {"status": s["Status"], "exit_code": s["ExitCode"], "oom_killed": s["OOMKilled"]}

    def alive(self) -> bool:
        return self.state()["status"] == "running"

    def stats(self) -> dict:
        return json.loads(uds_request(self.socket_path, "GET", "/stub/stats", timeout=5).body)


def _wait_healthy(engine: StubEngine) -> None:
    end = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < end:
        if not engine.alive():
            raise AssertionError(f"stub engine exited at boot: {engine.container.logs()[-2000:]!r}")
        try:
            if uds_request(engine.socket_path, "GET", "/health", timeout=2).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError("stub engine not healthy within its boot timeout")


@contextmanager
def stub_engine(client, env: dict | None = None):
    """Create, start and finally remove one stub engine container; yields its StubEngine handle."""
    image_id = ensure_stub_image(client)
    uid = os.getuid() or 1000  # as root, run the engine as an unprivileged uid all the same
    gid = os.getgid() or 1000
    folder = tempfile.mkdtemp(prefix="ogb-", dir="/tmp")  # short: a socket path holds at most 107 bytes
    os.chown(folder, uid, gid)
    container = None
    try:
        container = client.containers.create(
            image_id, command=["serve", "/model", "--served-model-name", MODEL, "--uds", SOCKET_IN_CONTAINER,
                               "--max-model-len", str(CONTEXT)],
            environment=env or {}, network_mode="none", user=f"{uid}:{gid}", labels={"onegpu.test": "1"},
            volumes={folder: {"bind": "/run/onegpu", "mode": "rw"}}, detach=True)
        container.start()
        engine = StubEngine(container, os.path.join(folder, "engine.sock"))
        _wait_healthy(engine)
        yield engine
    finally:
        if container is not None:
            container.remove(force=True)
        shutil.rmtree(folder, ignore_errors=True)
