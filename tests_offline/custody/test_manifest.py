"""Custody: walk, parallel SHA-256, page-cache hygiene, cache content addresses, publisher hashes, re-check, reuse.

Everything here runs on real files in a temporary folder: real symlinks in a Hugging Face cache layout, real
`git hash-object` and `sha256sum` as independent references, the kernel's own page-cache residency (mincore)
to see the effect of posix_fadvise.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from devkit.page_cache import resident_bytes
from onegpu.checkpoint.hf_cache_auth import (
    CONTENT_ADDRESS_STATEMENT,
    PublisherHashesError,
    detect_layout,
    parse_publisher_hashes,
)
from onegpu.core.outcomes import Blocked
from onegpu.core.units import MIB
from onegpu.custody.flow import CustodyRequest, Reuse, covers_every_file, take_custody
from onegpu.custody.manifest import (
    DROP_STEP_BYTES,
    FileStat,
    ManifestError,
    buffer_bytes_for,
    default_workers,
    hash_file,
    hash_files,
    load_manifest,
    progress_line,
    recheck,
    walk_checkpoint,
)
from onegpu.custody.page_cache import cachestat_bytes, mincore_bytes, plan_page_cache
from onegpu.custody.page_cache import resident_bytes as engine_resident_bytes
from tests_offline.custody_helpers import REV, _settings, plain_checkpoint, sha256sum_lines
from tests_offline.docker_required import skip_unless_ci

pytest_plugins = ["pytester"]

OTHER_REV = "fedcba9876543210fedcba9876543210fedcba98"


# ---------------------------------------------------------------- builders

def git_blob_sha1(data: bytes, where: Path) -> str:
    """The git blob name of `data`, from git itself (an independent reference for the kit's own SHA-1)."""
    tmp = where / ".git-object"
    tmp.write_bytes(data)
    try:
        return subprocess.run(["git", "hash-object", str(tmp)], capture_output=True, text=True,
                              check=True).stdout.strip()
    finally:
        tmp.unlink()


def hf_cache(base: Path, files: dict[str, bytes], lfs: set[str], revision: str = REV) -> Path:
    """A Hugging Face cache repo: blobs named by SHA-256 (LFS) or git SHA-1, snapshot symlinks into them."""
    repo = base / "hub" / "models--o--n"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    snapshot = repo / "snapshots" / revision
    for rel, data in files.items():
        name = hashlib.sha256(data).hexdigest() if rel in lfs else git_blob_sha1(data, base)
        (blobs / name).write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blobs / name, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return snapshot


HF_FILES = {"model.safetensors": os.urandom(2 * MIB + 7), "config.json": b'{"model_type": "demo"}\n',
            "tokenizer.json": b'{"version": "1.0"}\n', "sub/extra.bin": os.urandom(70_000)}
HF_LFS = {"model.safetensors", "sub/extra.bin"}


def custody(root: Path, run: Path, **kw):
    run.mkdir(parents=True, exist_ok=True)
    kw.setdefault("workers", 3)
    return take_custody(CustodyRequest(root, kw.pop("revision", REV), kw.pop("model_id", "o/n"), run, **kw))


def publisher(text: str | bytes, name: str = "hashes.txt"):
    raw = text.encode() if isinstance(text, str) else text
    return parse_publisher_hashes(raw, name, hashlib.sha256(raw).hexdigest())


# ---------------------------------------------------------------- walk

def test_walk_lists_every_file_with_its_stat(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    files = walk_checkpoint(detect_layout(root))
    assert [f.path for f in files] == ["config.json", "empty.txt", "model-00001-of-00002.safetensors",
                                       "model-00002-of-00002.safetensors", "original/params.json"]
    shard = files[2]
    st = os.stat(root / shard.path)
    assert (shard.size, shard.inode, shard.mtime_ns, shard.blob) == (st.st_size, st.st_ino, st.st_mtime_ns, None)


def test_walk_follows_snapshot_links_into_blobs(tmp_path):
    snapshot = hf_cache(tmp_path, HF_FILES, HF_LFS)
    layout = detect_layout(snapshot)
    assert (layout.revision, layout.repo_model_id) == (REV, "o/n")
    files = {f.path: f for f in walk_checkpoint(layout)}
    assert set(files) == set(HF_FILES)
    blob = files["model.safetensors"].blob
    assert blob == f"blobs/{hashlib.sha256(HF_FILES['model.safetensors']).hexdigest()}"
    assert files["model.safetensors"].inode == os.stat(layout.repo / blob).st_ino


def test_a_link_to_a_snapshot_is_still_a_cache_snapshot(tmp_path):
    snapshot = hf_cache(tmp_path, HF_FILES, HF_LFS)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "demo").symlink_to(snapshot)
    result = custody(tmp_path / "models" / "demo", tmp_path / "run")
    assert result.layout.revision == REV and result.statements[0].startswith(CONTENT_ADDRESS_STATEMENT)


@pytest.mark.parametrize("make, code, named", [
    (lambda r: (r / "outside").symlink_to("/etc/hostname"), "CHECKPOINT_CORRUPT", "outside: a link that leads"),
    (lambda r: (r / "dangling").symlink_to(r / "nowhere"), "CHECKPOINT_INCOMPLETE", "dangling (a link to nothing)"),
])
def test_walk_refuses_what_the_engine_could_not_read(tmp_path, make, code, named):
    root = plain_checkpoint(tmp_path / "ckpt")
    make(root)
    with pytest.raises(Blocked) as err:
        walk_checkpoint(detect_layout(root))
    assert err.value.code == code and named in err.value.message


def test_walk_follows_folder_links_inside_and_leaves_out_special_files(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    (root / "linked-dir").symlink_to(root / "original")
    os.mkfifo(root / "pipe")  # reading it would block: not a checkpoint file
    files = {f.path: f for f in walk_checkpoint(detect_layout(root))}
    assert "pipe" not in files
    assert {"linked-dir/params.json", "original/params.json"} & set(files)  # the folder is read once


def test_walk_of_missing_or_empty_folder_is_missing(tmp_path):
    for root in (tmp_path / "absent", tmp_path):
        with pytest.raises(Blocked) as err:
            walk_checkpoint(detect_layout(root))
        assert err.value.code == "CHECKPOINT_MISSING"


# ---------------------------------------------------------------- hashing engine

def test_parallel_hashing_gives_the_digests_of_a_single_thread(tmp_path):
    root = tmp_path / "many"
    root.mkdir()
    for i, size in enumerate([0, 1, MIB - 1, MIB, MIB + 1, 5 * MIB + 3, 123_457, 9 * MIB]):
        (root / f"f{i}.bin").write_bytes(os.urandom(size))
    files = walk_checkpoint(detect_layout(root))
    digests, seconds = hash_files(root, files, workers=4)
    expected = {f.path: hashlib.sha256((root / f.path).read_bytes()).hexdigest() for f in files}
    assert {p: d.sha256 for p, d in digests.items()} == expected
    assert seconds > 0


def test_git_blob_sha1_matches_git_itself(tmp_path):
    data = b"small file\n" * 100
    path = tmp_path / "small"
    path.write_bytes(data)
    entry = walk_checkpoint(detect_layout(tmp_path))[0]
    digest = hash_file(str(path), entry, bytearray(MIB), git_sha1=True)
    assert digest.git_sha1 == git_blob_sha1(data, tmp_path)
    assert digest.sha256 == hashlib.sha256(data).hexdigest()


def test_a_file_changed_after_the_walk_is_named(tmp_path):
    path = tmp_path / "shard"
    path.write_bytes(os.urandom(1000))
    entry = walk_checkpoint(detect_layout(tmp_path))[0]
    stale = FileStat(entry.path, entry.size + 1, entry.mtime_ns, entry.ctime_ns, entry.inode, None)
    assert "size changed" in hash_file(str(path), stale, bytearray(MIB)).changed
    with pytest.raises(Blocked) as err:
        hash_files(tmp_path, [stale], workers=1)
    assert err.value.code == "CHECKPOINT_CHANGED" and "shard" in err.value.message


def test_a_file_that_vanishes_before_hashing_blocks(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    files = walk_checkpoint(detect_layout(root))
    (root / "config.json").unlink()
    with pytest.raises(Blocked) as err:
        hash_files(root, files, workers=2)
    assert err.value.code == "CHECKPOINT_CHANGED" and "config.json" in err.value.message


def test_buffers_stay_within_budget_whatever_the_worker_count():
    # hashlib releases the GIL only for updates of 2048 bytes or more: every buffer must be well above it
    assert all(2048 < buffer_bytes_for(n) <= MIB for n in range(1, 33))
    assert all(buffer_bytes_for(n) * min(n, 32) <= 32 * MIB for n in range(1, 33))
    assert 1 <= default_workers() <= 32 and default_workers(3.5) == 3


def test_progress_line_shows_bytes_rate_eta_and_files():
    line = progress_line(2 * 2**30, 8 * 2**30, 2.0, 3, 12)
    assert line == ("hashing 2.00 GiB / 8.00 GiB ( 25.0%)  1,074 MB/s  ETA 0:00:06  files 3/12")
    assert "ETA 0:00:00" in progress_line(10, 10, 1.0, 1, 1)


def test_progress_is_reported_while_hashing_and_once_at_the_end(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    lines = []
    hash_files(root, walk_checkpoint(detect_layout(root)), 2, report=lambda line, final: lines.append((line, final)),
               interval_s=0.0)
    assert lines[-1][1] is True and "(100.0%)" in lines[-1][0] and "files 5/5" in lines[-1][0]
    assert sum(1 for _, final in lines if final) == 1


def test_the_calling_thread_waits_without_spinning_once_the_first_interval_passed(tmp_path):
    """Without a progress callback the waiting loop must still sleep between wake-ups: a spinning loop holds
    the interpreter lock the hashing threads need (it once halved hashing runs longer than the interval)."""
    import time

    root = tmp_path / "big"
    root.mkdir()
    block = os.urandom(MIB)
    for i in range(4):
        with open(root / f"part-{i}", "wb") as fh:
            for _ in range(48):
                fh.write(block)
    files = walk_checkpoint(detect_layout(root))
    wall, cpu = time.monotonic(), time.thread_time()
    hash_files(root, files, 2, report=None, interval_s=0.01, drop_cache=False)
    wall, cpu = time.monotonic() - wall, time.thread_time() - cpu
    assert wall > 0.05  # long enough for several intervals to pass
    assert cpu < 0.25 * wall, f"the calling thread used {cpu:.3f} s of CPU in {wall:.3f} s"


def _resident_fraction(path: Path) -> float:
    """Share of the file's pages in the page cache, as the kernel's mincore(2) reports it."""
    pages = (path.stat().st_size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    return resident_bytes(path) / mmap.PAGESIZE / pages


def test_hashing_drops_what_it_read_from_the_page_cache(disk_folder):
    path = disk_folder / "shard"
    with open(path, "wb") as fh:
        fh.write(os.urandom(DROP_STEP_BYTES + 5 * MIB))  # crosses one periodic drop and the final one
        fh.flush()
        os.fsync(fh.fileno())  # dirty pages cannot be dropped; clean ones can
    entry = walk_checkpoint(detect_layout(disk_folder))[0]
    path.read_bytes()
    assert _resident_fraction(path) > 0.95
    hash_file(str(path), entry, bytearray(MIB), drop_cache=False)
    assert _resident_fraction(path) > 0.95  # without the advice the cache keeps the file
    hash_file(str(path), entry, bytearray(MIB))
    assert _resident_fraction(path) < 0.05


def _cached_and_dropped(folder: Path, size: int = 9 * MIB) -> tuple[Path, Path, dict[str, str]]:
    """Two clean files (fsynced: dirty pages cannot be dropped): one read into the page cache, one dropped
    from it with POSIX_FADV_DONTNEED, both checked with mincore; and their SHA-256 by hashlib."""
    paths, expected = [], {}
    for name in ("cached.bin", "dropped.bin"):
        data = os.urandom(size)
        expected[name] = hashlib.sha256(data).hexdigest()
        with open(folder / name, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        paths.append(folder / name)
    cached, dropped = paths
    cached.read_bytes()
    fd = os.open(dropped, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    assert _resident_fraction(cached) > 0.95 and _resident_fraction(dropped) < 0.05
    return cached, dropped, expected


def test_engine_residency_agrees_with_fincore(disk_folder):
    """The engine's residency reading, and each of its two ways (cachestat, mincore), against util-linux
    fincore, an independent implementation."""
    if shutil.which("fincore") is None:
        skip_unless_ci("fincore (util-linux) is not installed")
    cached, dropped, _ = _cached_and_dropped(disk_folder)

    def fincore(path: Path) -> int:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[0])

    def each_way(path: Path) -> tuple[int | None, int | None]:
        fd = os.open(path, os.O_RDONLY)
        try:
            return cachestat_bytes(fd), mincore_bytes(fd, path.stat().st_size)
        finally:
            os.close(fd)

    for path in (cached, dropped):
        assert engine_resident_bytes(str(path), path.stat().st_size) == fincore(path)
        by_cachestat, by_mincore = each_way(path)
        assert by_mincore == fincore(path)
        assert by_cachestat in (None, fincore(path))  # None: a kernel before 6.5 or a filter refusing the call
    assert engine_resident_bytes(str(cached), cached.stat().st_size) >= 9 * MIB


def test_cachestat_is_used_where_the_kernel_answers_it():
    """Where this kernel answers cachestat(2) (Linux 6.5+, asked here directly: syscall 451 on x86_64 and
    aarch64), the engine must use it rather than map every file, and count what the kernel counts; where the
    kernel refuses it, the engine must fall back."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    counts, span = (ctypes.c_uint64 * 5)(), (ctypes.c_uint64 * 2)(0, 0)  # struct cachestat, cachestat_range
    fd = os.open(__file__, os.O_RDONLY)
    try:
        answered = os.uname().machine in ("x86_64", "aarch64") and libc.syscall(451, fd, span, counts, 0) == 0
        got = cachestat_bytes(fd)
    finally:
        os.close(fd)
    assert got == (counts[0] * mmap.PAGESIZE if answered else None), (os.uname().release, answered, got)


def test_rule_keeps_a_cached_file_and_drops_cold_files_only_beyond_the_cache_room(disk_folder):
    cached, dropped, _ = _cached_and_dropped(disk_folder)
    files = walk_checkpoint(detect_layout(disk_folder))
    roomy = plan_page_cache(disk_folder, files, available=1 << 40)
    assert roomy.cached == {"cached.bin"} and roomy.cold_bytes == 9 * MIB
    assert not roomy.drops("cached.bin") and not roomy.drops("dropped.bin")  # the cold file fits: kept
    tight = plan_page_cache(disk_folder, files, available=8 * MIB)  # room 4 MiB < 9 MiB cold
    assert tight.drops("dropped.bin") and not tight.drops("cached.bin")
    never = plan_page_cache(disk_folder, files, drop_cache=False, available=8 * MIB)
    assert not never.drops("dropped.bin")
    # The plan only maps the files: reading residency must not pull the cold file in.
    assert _resident_fraction(dropped) < 0.05


def test_hashing_beyond_the_room_keeps_the_cached_file_and_drops_the_cold_one(disk_folder):
    cached, dropped, expected = _cached_and_dropped(disk_folder)
    files = walk_checkpoint(detect_layout(disk_folder))
    digests, _ = hash_files(disk_folder, files, 2, plan=plan_page_cache(disk_folder, files, available=8 * MIB))
    assert {k: d.sha256 for k, d in digests.items()} == expected  # warm and cold alike
    assert _resident_fraction(cached) > 0.95  # in the cache before: left there for the engine's load
    assert _resident_fraction(dropped) < 0.05  # cold and over the room: dropped behind the reader


def test_hashing_within_the_room_leaves_cold_files_cached_for_the_load(disk_folder):
    cached, dropped, expected = _cached_and_dropped(disk_folder)
    files = walk_checkpoint(detect_layout(disk_folder))
    digests, _ = hash_files(disk_folder, files, 2, plan=plan_page_cache(disk_folder, files, available=1 << 40))
    assert {k: d.sha256 for k, d in digests.items()} == expected
    assert _resident_fraction(cached) > 0.95 and _resident_fraction(dropped) > 0.95


def test_hash_files_without_a_plan_applies_the_rule_itself(disk_folder):
    """Custody's call (no plan given): a file found in the page cache is never dropped, whatever the room."""
    cached, _, expected = _cached_and_dropped(disk_folder)
    digests, _ = hash_files(disk_folder, walk_checkpoint(detect_layout(disk_folder)), 2)
    assert {k: d.sha256 for k, d in digests.items()} == expected
    assert _resident_fraction(cached) > 0.95



def test_cold_files_are_read_by_both_threads_kept_or_dropped(disk_folder, monkeypatch):
    """Two cold streams at once hashed faster than one on a quiet machine, whether the files stay in the cache
    (room for them) or are dropped behind (no room): both threads read cold files together either way."""
    import threading

    import onegpu.custody.manifest as manifest

    for i in range(4):
        with open(disk_folder / f"cold-{i}", "wb") as fh:
            fh.write(os.urandom(MIB))
            fh.flush()
            os.fsync(fh.fileno())
            os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    files = walk_checkpoint(detect_layout(disk_folder))
    real = manifest.hash_file
    for available, drops in ((1 << 40, False), (0, True)):
        for f in files:  # cold before each pass (the kept pass leaves them cached)
            fd = os.open(disk_folder / f.path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        plan = plan_page_cache(disk_folder, files, available=available)
        assert not plan.cached and plan.drop_cold is drops
        together = threading.Barrier(2, timeout=10)  # broken (and the hashing fails) unless both read at once

        def meeting(*args, **kwargs):
            together.wait()
            return real(*args, **kwargs)

        monkeypatch.setattr(manifest, "hash_file", meeting)
        digests, _ = hash_files(disk_folder, files, 2, plan=plan)
        assert len(digests) == 4


# ---------------------------------------------------------------- authentication

def test_cache_snapshot_is_authenticated_by_content_address(tmp_path):
    snapshot = hf_cache(tmp_path, HF_FILES, HF_LFS)
    result = custody(snapshot, tmp_path / "run")
    assert result.blocked is None
    assert result.statements[0].startswith(CONTENT_ADDRESS_STATEMENT) and REV in result.statements[0]
    rows = {r["path"]: r for r in result.manifest["files"]}
    assert rows["config.json"]["git_sha1"] == rows["config.json"]["blob"].split("/")[1]
    assert rows["model.safetensors"]["sha256"] == hashlib.sha256(HF_FILES["model.safetensors"]).hexdigest()


def test_tampered_lfs_blob_blocks_naming_the_file(tmp_path):
    snapshot = hf_cache(tmp_path, HF_FILES, HF_LFS)
    blob = snapshot / "model.safetensors"
    with open(blob, "r+b") as fh:  # writes through the link into the blob
        fh.seek(1000)
        fh.write(b"X")
    result = custody(snapshot, tmp_path / "run")
    assert result.blocked.code == "CHECKPOINT_AUTH_FAILED"
    assert "model.safetensors: blob" in result.blocked.message and "config.json" not in result.blocked.message
    assert not any(s.startswith("AUTHENTICATED") for s in result.statements)
    written = json.loads((tmp_path / "run" / "manifest.json").read_text())  # evidence kept even when blocked
    assert written["authentication"]["failures"]


def test_tampered_small_git_file_blocks_naming_the_file(tmp_path):
    snapshot = hf_cache(tmp_path, HF_FILES, HF_LFS)
    target = os.path.realpath(snapshot / "config.json")
    Path(target).write_bytes(b'{"model_type": "evil"}\n')
    result = custody(snapshot, tmp_path / "run")
    assert result.blocked.code == "CHECKPOINT_AUTH_FAILED"
    assert "config.json: blob" in result.blocked.message and "git-sha1" in result.blocked.message


def test_file_without_content_address_is_said_to_rest_on_the_operator(tmp_path):
    snapshot = hf_cache(tmp_path, HF_FILES, HF_LFS)
    (snapshot / "notes.txt").write_text("copied in by hand\n")
    result = custody(snapshot, tmp_path / "run")
    assert result.blocked is None
    assert "CONTENT ADDRESS CHECKED FOR 4 OF 5 FILES" in result.statements[0]
    assert "notes.txt" in result.statements[0]


def test_snapshot_of_another_revision_blocks_before_hashing(tmp_path):
    snapshot = hf_cache(tmp_path, HF_FILES, HF_LFS, revision=OTHER_REV)
    with pytest.raises(Blocked) as err:
        custody(snapshot, tmp_path / "run")
    assert err.value.code == "REVISION_MISMATCH" and OTHER_REV in err.value.message and REV in err.value.message
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_plain_folder_revision_is_the_operators_assertion(tmp_path):
    result = custody(plain_checkpoint(tmp_path / "ckpt"), tmp_path / "run")
    assert result.statements == [f"REVISION IS THE OPERATOR'S ASSERTION: the checkpoint is a plain folder, so "
                                 f"nothing local ties its bytes to revision {REV}"]


def test_served_name_other_than_the_cache_repo_is_a_warning(tmp_path):
    result = custody(hf_cache(tmp_path, HF_FILES, HF_LFS), tmp_path / "run", model_id="alias/name")
    assert result.blocked is None and "o/n" in result.warnings[0]


# ---------------------------------------------------------------- publisher hashes

def test_publisher_hashes_from_sha256sum_authenticate_every_file(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    hashes = publisher(sha256sum_lines(root))
    result = custody(root, tmp_path / "run", publisher=hashes)
    line = next(s for s in result.statements if s.startswith("AUTHENTICATED AGAINST PUBLISHER HASHES"))
    assert "5 of 5 files match hashes.txt" in line and hashes.sha256 in line
    assert result.manifest["authentication"]["publisher_hashes"]["file_sha256"] == hashes.sha256


def test_publisher_hashes_as_json_object(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    table = {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in root.rglob("*") if p.is_file()}
    result = custody(root, tmp_path / "run", publisher=publisher(json.dumps(table), "hashes.json"))
    assert result.blocked is None and any("5 of 5 files match hashes.json" in s for s in result.statements)


def test_publisher_mismatch_blocks_naming_the_file(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    hashes = publisher(sha256sum_lines(root))
    (root / "config.json").write_text('{"model_type": "other"}\n')
    result = custody(root, tmp_path / "run", publisher=hashes)
    assert result.blocked.code == "CHECKPOINT_AUTH_FAILED"
    assert "publisher hash: config.json: ours" in result.blocked.message
    assert not any("AUTHENTICATED AGAINST" in s for s in result.statements)


def test_publisher_hashes_matching_no_file_authenticate_nothing(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    result = custody(root, tmp_path / "run", publisher=publisher(f"{'ab' * 32}  elsewhere.bin\n"))
    line = next(s for s in result.statements if "PUBLISHER HASHES" in s)
    assert line.startswith("PARTLY CHECKED AGAINST PUBLISHER HASHES, NOT AUTHENTICATED: 0 of 5 files match")


def test_publisher_missing_entries_are_named_both_ways(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    lines = [ln for ln in sha256sum_lines(root).splitlines() if "params.json" not in ln]
    lines.append(f"{'ab' * 32}  README.md")
    result = custody(root, tmp_path / "run", publisher=publisher("\n".join(lines) + "\n"))
    assert result.blocked is None
    line = next(s for s in result.statements if "PUBLISHER HASHES" in s)
    assert line.startswith("PARTLY CHECKED AGAINST PUBLISHER HASHES, NOT AUTHENTICATED: 4 of 5 files match")
    assert "files without a publisher hash: original/params.json" in line
    assert "publisher hashes without a file: README.md" in line


@pytest.mark.parametrize("text, named", [
    (f"{'a' * 64}  ok.bin\nnot a hash line\n", "line 2: 'not a hash line'"),
    (f"{'a' * 63}  short.bin\n", "line 1:"),
    (f"{'a' * 64}  ../escape.bin\n", "line 1: path '../escape.bin'"),
    (f"{'a' * 64}  /abs.bin\n", "line 1: path '/abs.bin'"),
    (f"{'a' * 64}  x.bin\n{'b' * 64}  ./x.bin\n", "line 2: path 'x.bin': already listed on line 1"),
    (b"\xff\xfe garbage\n", "line 1: not UTF-8"),
    ("# only a comment\n\n", "no hashes found"),
    ('{"x.bin": "nothex"}', "key 'x.bin'"),
    ('{"x.bin": "' + "a" * 64 + '", "x.bin": "' + "b" * 64 + '"}', "duplicate key"),
    ('["not", "an", "object"]', "must be an object"),
])
def test_malformed_publisher_file_names_the_line(text, named):
    with pytest.raises(PublisherHashesError) as err:
        publisher(text)
    assert named in str(err.value) and str(err.value).startswith("hashes.txt: ")


def test_sha256sum_binary_and_tag_formats_are_read():
    hashes = publisher(f"{'A' * 64} *bin.dat\nSHA256 (tag.dat) = {'b' * 64}\n")
    assert hashes.entries == {"bin.dat": "a" * 64, "tag.dat": "b" * 64}


# ---------------------------------------------------------------- re-check right before launch

@pytest.fixture
def hashed(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    return root, custody(root, tmp_path / "run")


def test_recheck_passes_when_nothing_changed(hashed):
    root, result = hashed
    assert "5 checkpoint files unchanged" in recheck(result.manifest, result.layout)
    assert covers_every_file(result).startswith("the manifest covers all 5 files")


def _touch(root):
    st = os.stat(root / "config.json")
    os.utime(root / "config.json", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _replace(root):
    (root / "new").write_bytes((root / "config.json").read_bytes())
    shutil.copystat(root / "config.json", root / "new")  # same size and mtime: only the inode tells
    os.replace(root / "new", root / "config.json")


def _resize(root):
    os.truncate(root / "config.json", 3)


@pytest.mark.parametrize("change, expected", [
    (_touch, "config.json: mtime changed"),
    (_replace, "config.json: inode"),
    (_resize, "config.json: size 23 -> 3"),
    (lambda r: (r / "added.bin").write_bytes(b"x"), "added.bin: new file"),
    (lambda r: (r / "empty.txt").unlink(), "empty.txt: gone"),
])
def test_recheck_names_each_kind_of_change(hashed, change, expected):
    root, result = hashed
    change(root)
    with pytest.raises(Blocked) as err:
        recheck(result.manifest, result.layout)
    assert err.value.code == "CHECKPOINT_CHANGED" and expected in err.value.message


def test_planned_file_gone_before_hashing_blocks(tmp_path):
    root = plain_checkpoint(tmp_path / "ckpt")
    with pytest.raises(Blocked) as err:
        custody(root, tmp_path / "run", planned_files=["config.json", "model-00003-of-00003.safetensors"])
    assert err.value.code == "CHECKPOINT_CHANGED" and "model-00003" in err.value.message


# ---------------------------------------------------------------- reuse of an earlier manifest

def test_reuse_stat_matches_and_says_so(hashed, tmp_path):
    root, first = hashed
    data, digest = load_manifest(first.manifest_path)
    second = custody(root, tmp_path / "run2", reuse=Reuse(str(first.manifest_path), digest, data))
    assert second.hashing_s is None
    assert second.statements[0].startswith("STAT-MATCHED, NOT RE-HASHED: the 5 files")
    assert second.statements[1].startswith("(digests of the reused manifest) REVISION IS THE OPERATOR'S")
    assert second.manifest["source"]["manifest_sha256"] == digest
    assert [r["sha256"] for r in second.manifest["files"]] == [r["sha256"] for r in first.manifest["files"]]


def test_reuse_after_a_change_refuses_instead_of_rehashing(hashed, tmp_path):
    root, first = hashed
    data, digest = load_manifest(first.manifest_path)
    _touch(root)
    with pytest.raises(Blocked) as err:
        custody(root, tmp_path / "run2", reuse=Reuse(str(first.manifest_path), digest, data))
    assert err.value.code == "CHECKPOINT_CHANGED"
    assert "config.json: mtime changed" in err.value.message and "drop --reuse-manifest" in err.value.message
    assert not (tmp_path / "run2" / "manifest.json").exists()


def test_reuse_of_another_checkpoints_manifest_refuses(hashed, tmp_path):
    _, first = hashed
    data, digest = load_manifest(first.manifest_path)
    other = plain_checkpoint(tmp_path / "other")
    with pytest.raises(Blocked) as err:
        custody(other, tmp_path / "run2", reuse=Reuse(str(first.manifest_path), digest, data))
    assert err.value.code == "CHECKPOINT_CHANGED" and "was taken of" in err.value.message


@pytest.mark.parametrize("content, named", [
    ("{", "not valid JSON"),
    ('{"schema": "other"}', "field 'schema'"),
    ('{"schema": "onegpu/manifest@1", "root": "/x", "files": [{"path": "a", "size": true, "mtime_ns": 1, '
     '"inode": 1, "sha256": "' + "a" * 64 + '"}]}', "files[0].size"),
])
def test_malformed_earlier_manifest_is_refused_by_name(tmp_path, content, named):
    path = tmp_path / "manifest.json"
    path.write_text(content)
    with pytest.raises(ManifestError) as err:
        load_manifest(path)
    assert named in str(err.value)


def test_manifest_file_is_private_and_complete(hashed):
    _, result = hashed
    assert stat.S_IMODE(result.manifest_path.stat().st_mode) == 0o600
    data = json.loads(result.manifest_path.read_text())
    assert data["totals"] == {"files": 5, "bytes": sum(r["size"] for r in data["files"])}
    assert data["hashing"]["seconds"] > 0 and data["hashing"]["bytes_per_s"] > 0
    assert set(data["files"][0]) >= {"path", "size", "mtime_ns", "inode", "sha256"}


# ---------------------------------------------------------------- the fixtures, through pytest itself

def test_custody_phase_runs_through_pytest(kit_dir):
    root = hf_cache(kit_dir.path, HF_FILES, HF_LFS)
    out = kit_dir.path / "runs" / "one"
    result = kit_dir.runpytest_subprocess("-m", "approve_load", "--settings",
                                          str(_settings(kit_dir.path / "s.json", root)), "--out", str(out))
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*onegpu hashing*(100.0%)*files 4/4*"])
    receipt = json.loads((out / "receipt.json").read_text())
    assert receipt["custody"]["authentication"]["statements"][0].startswith(CONTENT_ADDRESS_STATEMENT)
    assert receipt["custody"]["recheck"]["unchanged"] is True and "hashing" in receipt["timings_s"]
    manifest = out / "manifest.json"
    assert stat.S_IMODE(manifest.stat().st_mode) == 0o600
    assert float((out / "probe-ran").read_text()) < manifest.stat().st_mtime  # the probe ran before hashing


def test_custody_blocks_through_pytest_on_a_tampered_blob(kit_dir):
    root = hf_cache(kit_dir.path, HF_FILES, HF_LFS)
    with open(root / "sub" / "extra.bin", "r+b") as fh:
        fh.write(b"tampered")
    out = kit_dir.path / "runs" / "two"
    result = kit_dir.runpytest_subprocess("-m", "approve_load", "--settings",
                                          str(_settings(kit_dir.path / "s.json", root)), "--out", str(out))
    result.assert_outcomes(xfailed=4)
    tests = json.loads((out / "receipt.json").read_text())["tests"]
    assert {t["code"] for t in tests.values()} == {"CHECKPOINT_AUTH_FAILED"}
    assert all("sub/extra.bin" in t["message"] for t in tests.values())


def test_malformed_publisher_file_is_a_usage_error_without_traceback(kit_dir):
    bad = kit_dir.path / "hashes.txt"
    bad.write_text(f"{'a' * 64}  ok.bin\nthis line is wrong\n")
    result = kit_dir.runpytest_subprocess("-m", "approve_load", "--publisher-hashes", str(bad),
                                          "--settings", str(_settings(kit_dir.path / "s.json", kit_dir.path)))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--publisher-hashes*hashes.txt: line 2: 'this line is wrong'*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()



def test_reuse_manifest_option_stat_matches_through_pytest(kit_dir):
    root = plain_checkpoint(kit_dir.path / "ckpt")
    settings = str(_settings(kit_dir.path / "s.json", root))
    first = kit_dir.path / "runs" / "first"
    kit_dir.runpytest_subprocess("-m", "approve_load", "--settings", settings, "--out", str(first)) \
        .assert_outcomes(passed=4)
    second = kit_dir.path / "runs" / "second"
    result = kit_dir.runpytest_subprocess("-m", "approve_load", "--settings", settings, "--out", str(second),
                                          "--reuse-manifest", str(first / "manifest.json"))
    result.assert_outcomes(passed=4)
    receipt = json.loads((second / "receipt.json").read_text())
    assert receipt["custody"]["source"]["kind"] == "stat-matched" and "hashing" not in receipt["timings_s"]
    assert receipt["custody"]["authentication"]["statements"][0].startswith("STAT-MATCHED, NOT RE-HASHED")
