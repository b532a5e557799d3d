"""Shared fixtures for the kit's own tests: pytester, the real Docker daemon, a kit project in a temp dir."""
from __future__ import annotations

import shutil
from pathlib import Path

import docker  # noqa: F401
import pytest
import requests  # noqa: F401

from tests_offline.docker_required import docker_client  # noqa: F401  (a fixture for every offline test)

# docker and requests are imported up front on purpose: an in-process pytester run drops the modules first
# imported inside it, and a library half dropped (requests' CookieJar class imported twice) breaks later tests.

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILES = REPO_ROOT / "profiles"


@pytest.fixture
def kit_project(pytester):
    """A pytester folder laid out like the repo root: its pytest.ini, and the real plugin through its entry point.

    Tests write their own tiny kit tests into `tests_hw/` and run pytest there.
    """
    pytester.syspathinsert(REPO_ROOT)
    shutil.copy(REPO_ROOT / "pytest.ini", pytester.path / "pytest.ini")
    (pytester.path / "tests_hw").mkdir()
    return pytester


@pytest.fixture(scope="session")
def stub_tag(docker_client) -> str:
    """The stub engine image, built (or found) by content hash: its tag."""
    from tests_offline.stub_engine.build import ensure_stub_image, stub_tag

    ensure_stub_image(docker_client)
    return stub_tag()


@pytest.fixture(scope="session")
def real_engine_image(docker_client) -> str:
    """The real-engine image (vLLM's CPU build), built when its content-hash tag is missing: its ID. A failed
    build fails the test that needs it (never a skip: CI must run these)."""
    from tests_offline.real_engine.build import ensure_real_engine_image

    try:
        return ensure_real_engine_image(docker_client)
    except Exception as exc:  # noqa: BLE001  (any build failure is reported whole)
        pytest.fail(f"the real-engine image could not be built: {type(exc).__name__}: {exc}", pytrace=False)
