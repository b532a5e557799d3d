"""Session fixtures of the custody phase: the manifest (approve_load) and the re-check right before launch."""
from __future__ import annotations

import hashlib
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest

from .custody import Custody, CustodyRequest, Reuse, fact_lines, summary, take_custody
from .glue import blocked_as_xfail
from .hf_cache_auth import PublisherHashes, PublisherHashesError, parse_publisher_hashes
from .manifest import ManifestError, default_workers, load_manifest, recheck
from .outcomes import Blocked
from .receipt import now_iso


@dataclass(frozen=True)
class CustodyOptions:
    publisher: PublisherHashes | None
    reuse: Reuse | None
    workers: int | None


CUSTODY_KEY = pytest.StashKey[CustodyOptions]()
CI_INTERVAL_S = 10.0  # without a terminal, one plain progress line per this many seconds


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


class TerminalProgress:
    """The live hashing line: rewritten in place on a terminal; a plain line every CI_INTERVAL_S in CI logs."""

    def __init__(self, config):
        self.reporter = config.pluginmanager.get_plugin("terminalreporter")
        self.capture = config.pluginmanager.get_plugin("capturemanager")
        self.tty = bool(self.reporter is not None and self.reporter.isatty)
        self.last: float | None = None

    def __call__(self, line: str, final: bool) -> None:
        if self.reporter is None:
            return
        now = time.monotonic()
        if not self.tty and not final and self.last is not None and now - self.last < CI_INTERVAL_S:
            return
        first, self.last = self.last is None, now
        # Fixture setup runs under output capture: the line must reach the real terminal.
        with self.capture.global_and_fixture_disabled() if self.capture else nullcontext():
            if first:
                self.reporter.ensure_newline()
            if self.tty:
                self.reporter.rewrite(f"onegpu {line}", erase=True)
                if final:
                    self.reporter.write_line("")
            else:
                self.reporter.write_line(f"onegpu {line}")


def _optional_fixture(request, name: str):
    """The value of fixture `name`, or None when no such fixture is defined (another part may not exist)."""
    try:
        return request.getfixturevalue(name)
    except pytest.FixtureLookupError as exc:
        if exc.argname != name:
            raise
        return None


@pytest.fixture(scope="session")
def manifest(request, live_hardware, settings, kit) -> Custody:
    """The SHA-256 manifest of every checkpoint file, after the runtime probe; hashing timed on its own."""
    _optional_fixture(request, "runtime_probe")  # a wrong image must cost seconds, not hours of hashing
    checkpoint = _optional_fixture(request, "checkpoint")
    options = request.config.stash[CUSTODY_KEY]
    workers = options.workers or default_workers(live_hardware.host.cpus_usable)
    planned = list(checkpoint.files) if checkpoint is not None else None
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
