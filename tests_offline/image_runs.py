"""Commands in throwaway containers of an image, with no network (run_in_image, run_ok), for the real-engine tests."""
from __future__ import annotations

CONTAINER_TIMEOUT_S = 300


def run_in_image(client, image_id: str, command: list[str], entrypoint: list[str] | None = None,
                 timeout_s: int = CONTAINER_TIMEOUT_S, **create):
    """(exit status, stdout, stderr) of `command` in a fresh container with no network, removed after; `create`
    adds docker create arguments (volumes, environment)."""
    container = client.containers.create(image_id, command=command, entrypoint=entrypoint, network_mode="none",
                                         labels={"onegpu.test": "1"}, **create)
    try:
        container.start()
        status = container.wait(timeout=timeout_s)["StatusCode"]
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
    finally:
        container.remove(force=True)
    return status, stdout, stderr


def run_ok(client, image_id: str, command: list[str], entrypoint: list[str] | None = None, **create) -> str:
    """stdout of a command that must exit 0 (the assertion shows its output otherwise); `create` as run_in_image."""
    status, stdout, stderr = run_in_image(client, image_id, command, entrypoint, **create)
    assert status == 0, f"{entrypoint or ['vllm']} {command} exited {status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    return stdout
