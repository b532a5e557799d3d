"""Session fixtures of the custody phase: the manifest (approve_load) and the re-check right before launch."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import pytest

from .custody import Custody, CustodyRequest, Reuse, fact_lines, summary, take_custody
from .glue import blocked_as_xfail
from .hf_cache_auth import PublisherHashes, PublisherHashesError, parse_publisher_hashes
from .manifest import ManifestError, default_workers, load_manifest, recheck
from .outcomes import Blocked
from .progress import TerminalProgress
from .receipt import now_iso


@dataclass(frozen=True)
class CustodyOptions:
    publisher: PublisherHashes | None
    reuse: Reuse | None
    workers: int | None


CUSTODY_KEY = pytest.StashKey[CustodyOptions]()


def pytest_addoption(parser):
    group = parser.getgroup("onegpu")
    group.addoption("--publisher-hashes", metavar="FILE", help="per-file SHA-256 values saved from the "
                    "publisher (sha256sum lines or a JSON object {path: sha256}); custody compares every file")
    group.addoption("--reuse-manifest", metavar="MANIFEST", help="reuse runs/X/manifest.json when every file "
                    "still has its recorded size, mtime and inode (stat-matched, not re-hashed)")
    group.addoption("--hash-workers", type=int, metavar="N", help="hashing threads (default: usable CPUs, "
                    "at most 32)")


def _read_options(config) -> CustodyOptions:
    """Read the option files once, at start: a malformed file is a usage error naming the line."""
    publisher = reuse = None
    given = config.getoption("publisher_hashes")
    if given:
        try:
            raw = Path(given).read_bytes()
        except OSError as exc:
            raise pytest.UsageError(f"--publisher-hashes {given}: cannot read ({exc.strerror})") from None
        try:
            publisher = parse_publisher_hashes(raw, str(Path(given).absolute()), hashlib.sha256(raw).hexdigest())
        except PublisherHashesError as exc:
            raise pytest.UsageError(f"--publisher-hashes {exc}") from None
    given = config.getoption("reuse_manifest")
    if given:
        try:
            data, digest = load_manifest(Path(given))
        except ManifestError as exc:
            raise pytest.UsageError(f"--reuse-manifest {exc}") from None
        reuse = Reuse(str(Path(given).absolute()), digest, data)
    workers = config.getoption("hash_workers")
    if workers is not None and not 1 <= workers <= 256:
        raise pytest.UsageError(f"--hash-workers {workers}: must be from 1 to 256")
    return CustodyOptions(publisher, reuse, workers)


def pytest_configure(config):
    config.stash[CUSTODY_KEY] = _read_options(config)


@pytest.fixture(scope="session")
def manifest(request, live_hardware, settings, runtime_probe, checkpoint, kit) -> Custody:
    """The SHA-256 manifest of every checkpoint file, after the runtime probe (a wrong image must cost seconds,
    not hours of hashing); hashing timed on its own."""
    options = request.config.stash[CUSTODY_KEY]
    workers = options.workers or default_workers(live_hardware.host.cpus_usable)
    planned = list(checkpoint.files)
    request_ = CustodyRequest(Path(settings.model_path), settings.model_revision, settings.model_id,
                              kit.run_folder, workers, options.publisher, options.reuse, planned)
    with blocked_as_xfail():
        custody = take_custody(request_, TerminalProgress(request.config))
    kit.receipt.set("custody", summary(custody))
    if custody.hashing_s is not None:
        kit.receipt.timing("hashing", custody.hashing_s)
    for warning in custody.warnings:
        kit.receipt.warn(warning)
    for line in fact_lines(custody):
        kit.show("custody", line)
    if custody.blocked is not None:
        with blocked_as_xfail():
            raise custody.blocked
    return custody


@pytest.fixture(scope="session")
def checkpoint_unchanged(manifest, kit):
    """A callable for the engine to call right before it creates the container: every file re-stat'ed.

    The call returns the fact line, or xfails BLOCKED CHECKPOINT_CHANGED naming the changed files.
    """
    def check() -> str:
        with blocked_as_xfail():
            try:
                line = recheck(manifest.manifest, manifest.layout)
            except Blocked as exc:
                kit.receipt.update("custody", recheck={"at": now_iso(), "unchanged": False, **exc.as_json()})
                raise
        kit.receipt.update("custody", recheck={"at": now_iso(), "unchanged": True})
        kit.show("custody", line)
        return line

    return check
