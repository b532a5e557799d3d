"""Shared fixtures for the kit's own tests: pytester, the real Docker daemon, a kit project in a temp dir, and the
fixtures that more than one test module uses (engine doubles, images, real kit sessions, folders)."""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import docker  # noqa: F401
import pytest
import requests  # noqa: F401

from tests_offline.docker_required import require_docker, skip_unless_ci
from tests_offline.paths import REPO_ROOT

if TYPE_CHECKING:
    from tests_offline.report_sessions import InsightRuns, RealRuns

# docker and requests are imported up front on purpose: an in-process pytester run drops the modules first
# imported inside it, and a library half dropped (requests' CookieJar class imported twice) breaks later tests.

pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def docker_client():
    """A session-wide docker SDK client of the local daemon (see require_docker)."""
    client = require_docker()
    try:
        yield client
    finally:
        client.close()


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
    from devkit.stub_engine.build import ensure_stub_image, stub_tag

    ensure_stub_image(docker_client)
    return stub_tag()


@pytest.fixture(scope="session")
def real_engine_image(docker_client) -> str:
    """The real-engine image (vLLM's CPU build), built when its content-hash tag is missing: its ID. A failed
    build fails the test that needs it (never a skip: CI must run these)."""
    from devkit.real_engine.build import ensure_real_engine_image

    try:
        return ensure_real_engine_image(docker_client)
    except Exception as exc:  # noqa: BLE001  (any build failure is reported whole)
        pytest.fail(f"the real-engine image could not be built: {type(exc).__name__}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def cuda_engine_image(docker_client) -> str:
    """The CUDA-build image (PyPI's vllm 0.34.0 with its CUDA torch, 0.33.0's wheel beside it), built when its
    content-hash tag is missing: its ID. It cannot serve without a GPU; the tests import and probe it. A failed
    build fails the test that needs it (never a skip)."""
    from devkit.cuda_engine.build import ensure_cuda_engine_image

    try:
        return ensure_cuda_engine_image(docker_client)
    except Exception as exc:  # noqa: BLE001  (any build failure is reported whole)
        pytest.fail(f"the CUDA engine image could not be built: {type(exc).__name__}: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def stub_image(docker_client) -> str:
    """The stub engine image's ID (built locally from this machine's Python; never pulled)."""
    from devkit.stub_engine.build import ensure_stub_image

    return ensure_stub_image(docker_client)


@pytest.fixture
def engine():
    from tests_offline.fake_engine import FakeEngine

    fake = FakeEngine(chunks=5)
    yield fake
    fake.close()


@pytest.fixture
def adapter(engine, tmp_path):
    from onegpu.serve.thread import AdapterThread
    from tests_offline.adapter_helpers import LIMITS
    from tests_offline.fake_engine import KEY

    running = AdapterThread(engine.socket_path, KEY, tmp_path / "transport.jsonl", LIMITS)
    yield running
    running.close(grace_s=0)


@pytest.fixture(scope="module")
def engine_images(docker_client):
    """Two tiny images imported locally (labelled onegpu.test=1): a tag on the first; removed at the end."""
    from tests_offline.tiny_image import tiny_rootfs

    repo, ids = f"onegpu-test-plan-{secrets.token_hex(4)}", []
    try:
        for n in range(2):
            docker_client.api.import_image_from_data(tiny_rootfs(b"onegpu plan test\n") + bytes(n), repository=repo,
                                                     tag=f"v{n}", changes=[f"LABEL onegpu.test=1 onegpu.n={n}"])
            ids.append(docker_client.images.get(f"{repo}:v{n}").id)
        yield f"{repo}:v0", ids
    finally:
        for image_id in ids:
            docker_client.images.remove(image_id, force=True)


@pytest.fixture(scope="session")
def real_runs(docker_client, tmp_path_factory) -> RealRuns:
    from devkit.stub_engine.build import ensure_stub_image
    from tests_offline.report_sessions import RealRuns

    ensure_stub_image(docker_client)
    return RealRuns(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def insight_runs(docker_client, tmp_path_factory) -> Iterator[InsightRuns]:
    """The sessions, with one tiny local image (labelled onegpu.test=1) that the plan and calibration resolve."""
    from tests_offline.report_sessions import InsightRuns
    from tests_offline.tiny_image import tiny_rootfs

    repo = f"onegpu-test-insight-{secrets.token_hex(4)}"
    docker_client.api.import_image_from_data(tiny_rootfs(b"onegpu plan test\n"), repository=repo, tag="v0",
                                             changes=["LABEL onegpu.test=1"])
    image_id = docker_client.images.get(f"{repo}:v0").id
    try:
        yield InsightRuns(tmp_path_factory.mktemp("insight-runs"), (f"{repo}:v0", image_id))
    finally:
        docker_client.images.remove(image_id, force=True)


@pytest.fixture
def disk_folder(tmp_path):
    """An empty folder on a disk-backed file system: tmp_path, else one under /var/tmp or the repository.

    On tmpfs the pages are the storage itself and POSIX_FADV_DONTNEED cannot drop them; the repository
    always lives on a disk, so CI (where /tmp may be tmpfs) always runs the test."""
    from devkit.page_cache import _fs_type

    if _fs_type(tmp_path) != "tmpfs":
        yield tmp_path
        return
    for parent in ("/var/tmp", str(REPO_ROOT)):
        if os.access(parent, os.W_OK) and _fs_type(parent) != "tmpfs":
            folder = Path(tempfile.mkdtemp(prefix="onegpu-fadvise-", dir=parent))
            try:
                yield folder
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            return
    skip_unless_ci("every candidate folder is on tmpfs, where POSIX_FADV_DONTNEED cannot drop pages")


@pytest.fixture
def kit_dir(pytester, monkeypatch):
    from tests_offline.custody_helpers import CONFTEST

    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    pytester.makeconftest(CONFTEST)
    shutil.copy(REPO_ROOT / "tests_hw" / "test_4_custody.py", pytester.path / "test_4_custody.py")
    return pytester
