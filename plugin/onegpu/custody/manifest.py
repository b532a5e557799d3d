"""The custody engine: walk every file of the checkpoint, stat it, SHA-256 it in parallel with bounded memory.

Threads suffice because hashlib releases the GIL while it hashes a buffer of 2048 bytes or more (CPython's
HASHLIB_GIL_MINSIZE); every update here is a whole read buffer of 256 KiB. Each worker owns one fixed-size
buffer, so memory does not grow with the checkpoint. The kernel is told the reads are sequential.

Which files are dropped from the page cache behind the reader is the page cache rule's decision
(onegpu.custody.page_cache).
"""
from __future__ import annotations

import hashlib
import os
import queue
import re
import threading
import time
from pathlib import Path
from typing import Callable

from msgspec import Struct

from onegpu.checkpoint.files import cache_layout, list_files
from onegpu.checkpoint.hf_cache_auth import Layout, content_address, git_blob_header
from onegpu.core import strict_json
from onegpu.core.outcomes import Blocked
from onegpu.core.units import MIB, gib
from onegpu.custody.page_cache import CachePlan, plan_page_cache
from onegpu.evidence.receipt import now_iso
from onegpu.evidence.rundir import write_json

MANIFEST_SCHEMA = "onegpu/manifest@1"
MAX_MANIFEST_BYTES = 200_000_000  # a row is about 200 bytes: a million files
# One read buffer per worker. 256 KiB (hashlib.file_digest's own size) stays in the core's L2 cache between the
# copy out of the page cache and the hash; with two threads, 4 MiB buffers measured 1.2-1.4 GB/s against
# 1.6-1.7 GB/s for 256 KiB on page-cached files (benchmarks/RESULTS.md, chunk size). Still far above the 2048 bytes from
# which hashlib releases the GIL, so the threads hash in parallel.
BUFFER_BYTES = 256 * 1024
DROP_STEP_BYTES = 64 * MIB  # how much is read between two POSIX_FADV_DONTNEED calls
MAX_WORKERS = 32
_HEX64 = re.compile(r"^[0-9a-f]{64}$")

Report = Callable[[str, bool], None]  # (progress line, final?)


class FileStat(Struct, frozen=True):
    """One checkpoint file as stat() sees it (through a snapshot symlink, the blob it points to)."""

    path: str  # relative to the checkpoint root, '/'-separated
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    blob: str | None  # for a symlink: its target relative to the folder links must stay in ("blobs/<hex>")


def walk_checkpoint(layout: Layout) -> list[FileStat]:
    """Every file under the root, with its stat, sorted by path; the listing is the checkpoint reader's own
    (links followed and checked), so custody hashes exactly the files the plan counted.

    Raises Blocked CHECKPOINT_MISSING (no folder, no files), CHECKPOINT_INCOMPLETE (links to nothing,
    unreadable entries) or CHECKPOINT_CORRUPT (links leading out of what the engine will see).
    """
    root = str(layout.root)
    if not os.path.isdir(root):
        raise Blocked("CHECKPOINT_MISSING", f"{root}: no such folder")
    listing = list_files(layout.root, cache_layout(layout.root))
    real_root, contained = os.path.realpath(root), os.path.realpath(layout.contained_in)
    unreadable = [f"{p} (a link to nothing)" for p in listing.dangling]
    found: list[FileStat] = []
    for rel in listing.files:
        full = os.path.join(root, rel)
        try:
            st = os.stat(full)
        except OSError as exc:
            unreadable.append(f"{rel} ({exc.strerror})")
            continue
        real = os.path.realpath(full)
        # Reached through a link (a snapshot file -> blobs/<hex>): remember where it leads.
        blob = None if real == os.path.join(real_root, rel) else Path(os.path.relpath(real, contained)).as_posix()
        found.append(FileStat(rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, blob))
    if unreadable:
        raise Blocked("CHECKPOINT_INCOMPLETE", "files cannot be read: " + "; ".join(unreadable[:50]),
                      {"files": len(unreadable)})
    if not found:
        raise Blocked("CHECKPOINT_MISSING", f"{root}: the folder holds no files")
    return sorted(found, key=lambda f: f.path)


def buffer_bytes_for(workers: int) -> int:
    """Read buffer per worker (bytes): BUFFER_BYTES whatever the count, so memory is workers x 256 KiB."""
    return BUFFER_BYTES


def default_workers(usable_cpus: float | None = None) -> int:
    """One hashing thread per usable CPU (affinity and quota applied when given), at most MAX_WORKERS."""
    cpus = int(usable_cpus) if usable_cpus else len(os.sched_getaffinity(0))
    return max(1, min(MAX_WORKERS, cpus))


class Digest(Struct, frozen=True):
    sha256: str
    git_sha1: str | None  # only for files stored under a 40-hex (git blob SHA-1) name
    changed: str | None  # why the file changed while it was read, or None


class _Stopped(Exception):
    """Another worker failed or the session was interrupted: stop reading."""


def hash_file(path: str, expected: FileStat, buffer: bytearray, *, git_sha1: bool = False,
              drop_cache: bool = True, on_bytes: Callable[[int], None] = lambda n: None,
              stop: threading.Event | None = None) -> Digest:
    """SHA-256 (and optionally the git blob SHA-1) of one file, read sequentially into `buffer`.

    Pages already hashed are dropped from the page cache every DROP_STEP_BYTES when drop_cache is set.
    Raises OSError from the file system, _Stopped when `stop` is set.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        before = os.fstat(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        sha = hashlib.sha256()
        git = hashlib.sha1(git_blob_header(expected.size)) if git_sha1 else None
        view = memoryview(buffer)
        done = dropped = 0
        while n := os.readv(fd, [buffer]):
            sha.update(view[:n])  # the GIL is released for the length of this call
            if git is not None:
                git.update(view[:n])
            done += n
            on_bytes(n)
            if drop_cache and done - dropped >= DROP_STEP_BYTES:
                os.posix_fadvise(fd, dropped, done - dropped, os.POSIX_FADV_DONTNEED)
                dropped = done
            if stop is not None and stop.is_set():
                raise _Stopped()
        if drop_cache and done > dropped:
            os.posix_fadvise(fd, dropped, 0, os.POSIX_FADV_DONTNEED)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    changed = None
    if before.st_ino != expected.inode:
        changed = f"replaced after the walk (inode {expected.inode} -> {before.st_ino})"
    elif done != expected.size or after.st_size != expected.size:
        changed = f"size changed while hashing ({expected.size} bytes listed, {done} read)"
    elif after.st_mtime_ns != expected.mtime_ns:
        changed = "modified while hashing (mtime changed)"
    return Digest(sha.hexdigest(), git.hexdigest() if git else None, changed)


def progress_line(done: int, total: int, elapsed_s: float, files_done: int, files_total: int) -> str:
    """One progress line: bytes done / total, rate in MB/s (10^6 bytes), ETA, files."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    pct = 100.0 * done / total if total else 100.0
    if rate > 0 and done < total:
        left = int((total - done) / rate)
        eta = f"{left // 3600}:{left % 3600 // 60:02d}:{left % 60:02d}"
    else:
        eta = "--:--:--" if done < total else "0:00:00"
    return (f"hashing {gib(done)} / {gib(total)} ({pct:5.1f}%)  {rate / 1e6:,.0f} MB/s  ETA {eta}  "
            f"files {files_done}/{files_total}")


def hash_files(root: Path, files: list[FileStat], workers: int, *, git_sha1_for: frozenset[str] = frozenset(),
               drop_cache: bool = True, report: Report | None = None, interval_s: float = 1.0,
               plan: CachePlan | None = None) -> tuple[dict[str, Digest], float]:
    """Digests of all files (path -> Digest) and the wall seconds it took, largest files first across threads.

    Which files are dropped behind the reader follows `plan` (plan_page_cache's, made here when not given;
    drop_cache=False drops nothing). Raises Blocked CHECKPOINT_CHANGED when a file vanishes, CHECKPOINT_INCOMPLETE when one cannot be read.
    """
    if plan is None:
        plan = plan_page_cache(root, files, drop_cache=drop_cache)
    jobs: queue.Queue[FileStat] = queue.Queue()
    for entry in sorted(files, key=lambda f: -f.size):  # largest first keeps the threads busy to the end
        jobs.put(entry)
    workers = max(1, min(workers, len(files)))
    buffer_bytes = buffer_bytes_for(workers)
    total = sum(f.size for f in files)
    done_bytes, done_files = [0] * workers, [0] * workers  # one slot per worker: no lock needed
    results: dict[str, Digest] = {}
    unreadable: list[tuple[str, OSError]] = []
    bugs: list[BaseException] = []
    stop = threading.Event()

    def work(slot: int) -> None:
        buffer = bytearray(buffer_bytes)

        def count(n: int) -> None:
            done_bytes[slot] += n

        while not stop.is_set():
            try:
                entry = jobs.get_nowait()
            except queue.Empty:
                return
            drops = drop_cache and plan.drops(entry.path)
            try:
                results[entry.path] = hash_file(str(root / entry.path), entry, buffer, drop_cache=drops,
                                                git_sha1=entry.path in git_sha1_for, on_bytes=count, stop=stop)
            except _Stopped:
                return
            except OSError as exc:
                unreadable.append((entry.path, exc))
                stop.set()
                return
            except BaseException as exc:  # a bug: stop the others, re-raised in the calling thread
                bugs.append(exc)
                stop.set()
                return
            done_files[slot] += 1

    threads = [threading.Thread(target=work, args=(i,), name=f"onegpu-hash-{i}", daemon=True)
               for i in range(workers)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        next_report = start + interval_s
        while alive := [t for t in threads if t.is_alive()]:
            alive[0].join(timeout=max(0.0, next_report - time.monotonic()))
            if time.monotonic() >= next_report:
                # Always move the next wake-up on, report or not: a deadline left in the past would make
                # join(timeout=0) spin here and take the interpreter lock from the hashing threads.
                if report is not None:
                    report(progress_line(sum(done_bytes), total, time.monotonic() - start, sum(done_files),
                                         len(files)), False)
                next_report = time.monotonic() + interval_s
    except BaseException:
        stop.set()  # Ctrl-C: the workers stop within one buffer
        for thread in threads:
            thread.join()
        raise
    seconds = time.monotonic() - start
    if bugs:
        raise bugs[0]
    if unreadable:
        vanished = any(isinstance(exc, FileNotFoundError) for _, exc in unreadable)
        raise Blocked("CHECKPOINT_CHANGED" if vanished else "CHECKPOINT_INCOMPLETE", "hashing stopped: " + "; ".join(
            f"{path}: {exc.strerror or exc}" for path, exc in unreadable), {"files": len(unreadable)})
    if report is not None:
        report(progress_line(total, total, seconds, len(files), len(files)), True)
    changed = [f"{path}: {d.changed}" for path, d in sorted(results.items()) if d.changed]
    if changed:
        raise Blocked("CHECKPOINT_CHANGED", "files changed while they were hashed: " + "; ".join(changed),
                      {"files": len(changed)})
    return results, seconds


def manifest_entries(stats: list[FileStat], digests: dict[str, Digest]) -> list[dict]:
    """The per-file rows of manifest.json."""
    rows = []
    for f in stats:
        row = {"path": f.path, "size": f.size, "mtime_ns": f.mtime_ns, "ctime_ns": f.ctime_ns, "inode": f.inode,
               "sha256": digests[f.path].sha256}
        if digests[f.path].git_sha1:
            row["git_sha1"] = digests[f.path].git_sha1
        if f.blob:
            row["blob"] = f.blob
        rows.append(row)
    return rows


def git_sha1_wanted(stats: list[FileStat]) -> frozenset[str]:
    """Files stored under a 40-hex blob name: their content address is a git blob SHA-1."""
    return frozenset(f.path for f in stats if len(content_address(f.blob) or "") == 40)


def build_manifest(layout: Layout, entries: list[dict], hashing: dict, source: dict) -> dict:
    """manifest.json as a plain dict: files, totals, how they were hashed (or stat-matched)."""
    total = sum(e["size"] for e in entries)
    return {"schema": MANIFEST_SCHEMA, "created_at": now_iso(), "root": str(layout.root),
            "hf_cache_repo": str(layout.repo) if layout.repo else None, "revision": layout.revision,
            "totals": {"files": len(entries), "bytes": total}, "hashing": hashing, "source": source,
            "files": entries}


def write_manifest(path: Path, manifest: dict) -> Path:
    return write_json(path, manifest)


class ManifestError(ValueError):
    """An earlier manifest.json cannot be used; the message names the file and the rule."""


_ROW_FIELDS = {"path": str, "size": int, "sha256": str}
_STAT_FIELDS = {"mtime_ns": int, "inode": int}  # what reusing a manifest compares besides the size


def load_manifest(path: Path, for_reuse: bool = True) -> tuple[dict, str]:
    """An earlier manifest.json and its own SHA-256; raises ManifestError naming what is wrong. Read only for its
    digests (for_reuse False: compare, calibration), a row needs no mtime or inode: a manifest shared as evidence
    may have had them removed."""
    try:
        data, raw = strict_json.load_file(Path(path), MAX_MANIFEST_BYTES)
    except strict_json.JSONFileError as exc:
        raise ManifestError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
        raise ManifestError(f"{path}: field 'schema' must be {MANIFEST_SCHEMA!r} (a manifest.json of a run folder)")
    if not isinstance(data.get("root"), str) or not isinstance(data.get("files"), list) or not data["files"]:
        raise ManifestError(f"{path}: needs 'root' (a path) and 'files' (a non-empty list)")
    for n, row in enumerate(data["files"]):
        for name, kind in ({**_ROW_FIELDS, **_STAT_FIELDS} if for_reuse else _ROW_FIELDS).items():
            value = row.get(name) if isinstance(row, dict) else None
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ManifestError(f"{path}: files[{n}].{name}: must be a {kind.__name__}")
        if not _HEX64.match(row["sha256"]):
            raise ManifestError(f"{path}: files[{n}].sha256: must be 64 lowercase hex")
    return data, hashlib.sha256(raw).hexdigest()


def stat_differences(recorded: list[dict], now: list[FileStat], *, ctime: bool = False) -> list[str]:
    """What differs between recorded rows and the files now: gone, new, size, mtime, inode (and ctime)."""
    before = {row["path"]: row for row in recorded}
    current = {f.path: f for f in now}
    problems = [f"{p}: gone" for p in sorted(before) if p not in current]
    problems += [f"{p}: new file" for p in sorted(current) if p not in before]
    for path in sorted(set(before) & set(current)):
        row, f = before[path], current[path]
        what = [f"size {row['size']} -> {f.size}"] if row["size"] != f.size else []
        if row["inode"] != f.inode:
            what.append(f"inode {row['inode']} -> {f.inode} (replaced)")
        if row["mtime_ns"] != f.mtime_ns:
            what.append("mtime changed")
        if ctime and row.get("ctime_ns") is not None and row["ctime_ns"] != f.ctime_ns:
            what.append("ctime changed (written or re-linked in place)")
        if what:
            problems.append(f"{path}: " + ", ".join(what))
    return problems


def recheck(manifest: dict, layout: Layout) -> str:
    """Right before launch: every file still has the size, mtime, inode (and ctime) it was hashed with.

    Returns a fact line; raises Blocked CHECKPOINT_CHANGED naming the changed files.
    """
    try:
        now = walk_checkpoint(layout)
    except Blocked as exc:
        raise Blocked("CHECKPOINT_CHANGED", f"the checkpoint no longer reads as it did when hashed: {exc.message}",
                      exc.numbers) from None
    problems = stat_differences(manifest["files"], now, ctime=True)
    if problems:
        raise Blocked("CHECKPOINT_CHANGED", f"{len(problems)} file(s) differ from the manifest taken before: "
                      + "; ".join(problems[:50]) + ("; ..." if len(problems) > 50 else ""),
                      {"files_changed": len(problems)})
    return (f"{len(now)} checkpoint files unchanged since the manifest (size, mtime, inode and ctime "
            "re-checked right before launch)")
