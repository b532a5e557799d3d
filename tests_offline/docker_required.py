"""The real Docker daemon for offline tests: skip with the reason when none answers, fail under CI=true.

CI sets CI=true, so a CI run can never pass by skipping the Docker tests. Use the `docker_client` fixture
(conftest.py), or call `require_docker()` where a fixture does not fit.
"""
from __future__ import annotations

import os
from typing import NoReturn

import pytest

PING_TIMEOUT_S = 10


def ci_demands_docker() -> bool:
    """True when the environment says this is CI (CI=true): a missing daemon is then a failure."""
    return os.environ.get("CI", "").strip().lower() == "true"


def skip_unless_ci(reason: str, needs: str = "it") -> NoReturn:
    """Skip for want of something CI installs (a daemon, a tool, a library); under CI=true that is a failure, so
    a CI run never passes by skipping."""
    if ci_demands_docker():
        pytest.fail(f"CI=true requires {needs}; {reason}", pytrace=False)
    pytest.skip(reason)


def require_docker():
    """A docker SDK client whose daemon answered a ping; skips (or fails under CI=true) otherwise."""
    import docker
    from docker.errors import DockerException

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env(timeout=PING_TIMEOUT_S)
        client.ping()
    except (DockerException, OSError) as exc:
        skip_unless_ci(f"no Docker daemon answers at {where}: {type(exc).__name__}: {exc}", "a Docker daemon")
    return client
