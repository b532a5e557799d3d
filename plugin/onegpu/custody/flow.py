"""Custody from start to end: revision, walk, hash (or stat-match an earlier manifest), authenticate, write.

The revision is checked before a single byte is hashed, so a wrong snapshot costs seconds, not hours.
"""
from __future__ import annotations

from pathlib import Path

from msgspec import Struct

from onegpu.checkpoint.hf_cache_auth import Layout, PublisherHashes, authenticate, detect_layout, revision_problem
from onegpu.core.outcomes import Blocked
from onegpu.core.units import gib
from onegpu.custody.manifest import (
    Digest,
    Report,
    buffer_bytes_for,
    build_manifest,
    git_sha1_wanted,
    hash_files,
    manifest_entries,
    stat_differences,
    walk_checkpoint,
    write_manifest,
)
from onegpu.custody.page_cache import PAGE_CACHE_RULE, plan_page_cache

REUSE_STATEMENT = "STAT-MATCHED, NOT RE-HASHED"


class Reuse(Struct, frozen=True):
    """An earlier manifest the operator asked to reuse (--reuse-manifest)."""

    path: str
    sha256: str  # of that manifest.json
    manifest: dict


class CustodyRequest(Struct, frozen=True):
    root: Path  # the checkpoint folder (settings.model_path)
    revision: str  # settings.model_revision
    model_id: str  # settings.model_id
    run_folder: Path
    workers: int
    publisher: PublisherHashes | None = None
    reuse: Reuse | None = None
    planned_files: list[str] | None = None  # the plan's file list, when the checkpoint reader ran
    drop_cache: bool = True


class Custody(Struct):
    layout: Layout
    manifest_path: Path
    manifest: dict
    statements: list[str]  # what the receipt says about the files' identity
    warnings: list[str]
    hashing_s: float | None  # None when an earlier manifest was stat-matched instead
    blocked: Blocked | None  # CHECKPOINT_AUTH_FAILED, raised by the caller after recording the evidence


def _stat_match(reuse: Reuse, layout: Layout, stats) -> dict[str, Digest]:
    """The reused manifest's digests, once every file matches its recorded stat; Blocked otherwise."""
    earlier = reuse.manifest
    if earlier["root"] != str(layout.root):
        raise Blocked("CHECKPOINT_CHANGED", f"--reuse-manifest {reuse.path} was taken of {earlier['root']}, "
                      f"the settings name {layout.root}; drop --reuse-manifest to hash afresh")
    problems = stat_differences(earlier["files"], stats)
    if problems:
        raise Blocked("CHECKPOINT_CHANGED", f"--reuse-manifest {reuse.path}: {len(problems)} file(s) differ "
                      "from it: " + "; ".join(problems[:50]) + ("; ..." if len(problems) > 50 else "")
                      + "; drop --reuse-manifest to hash afresh", {"files_changed": len(problems)})
    return {row["path"]: Digest(row["sha256"], row.get("git_sha1"), None) for row in earlier["files"]}


def _failure_message(failures: list[str], details: dict) -> str:
    text = f"{len(failures)} file(s) contradict their expected digest: " + "; ".join(failures[:50])
    publisher = details.get("publisher_hashes") or {}
    if publisher.get("files_without_publisher_hash"):
        text += "; files without a publisher hash: " + ", ".join(publisher["files_without_publisher_hash"][:20])
    if publisher.get("publisher_hashes_without_file"):
        text += "; publisher hashes without a file: " + ", ".join(publisher["publisher_hashes_without_file"][:20])
    return text


def take_custody(req: CustodyRequest, report: Report | None = None) -> Custody:
    """Establish custody and write manifest.json (0600) into the run folder, also when authentication fails.

    Raises Blocked REVISION_MISMATCH, CHECKPOINT_MISSING/INCOMPLETE/CORRUPT/CHANGED; an authentication
    failure comes back in Custody.blocked so the evidence is recorded before the caller blocks.
    """
    layout = detect_layout(req.root)
    problem = revision_problem(layout, req.revision)
    if problem:
        raise Blocked("REVISION_MISMATCH", problem, {"snapshot": layout.revision, "settings": req.revision})
    warnings = []
    if layout.repo_model_id and layout.repo_model_id != req.model_id:
        warnings.append(f"the cache repo folder names model {layout.repo_model_id}, the settings' model_id is "
                        f"{req.model_id}: the served name is not the repository's name")
    stats = walk_checkpoint(layout)
    names = {f.path for f in stats}
    if req.planned_files is not None:
        gone = sorted(set(req.planned_files) - names)
        if gone:
            raise Blocked("CHECKPOINT_CHANGED", "files the plan listed are gone: " + ", ".join(gone[:50]),
                          {"files": len(gone)})
        extra = sorted(names - set(req.planned_files))
        if extra:
            warnings.append("files outside the plan's list were hashed too: " + ", ".join(extra[:20]))
    statements: list[str] = []
    if req.reuse is not None:
        digests, hashing_s = _stat_match(req.reuse, layout, stats), None
        earlier = req.reuse.manifest
        hashing: dict[str, object] = {"seconds": None, "bytes_per_s": None,
                                      "note": "not re-hashed: " + REUSE_STATEMENT.lower()}
        source = {"kind": "stat-matched", "manifest": req.reuse.path, "manifest_sha256": req.reuse.sha256,
                  "hashed_at": earlier.get("created_at"), "earlier_hashing": earlier.get("hashing")}
        statements.append(f"{REUSE_STATEMENT}: the {len(stats)} files have the size, mtime and inode recorded by "
                          f"{req.reuse.path} (sha256 {req.reuse.sha256}, taken {earlier.get('created_at')}); "
                          "no claim about their content beyond that manifest's digests")
    else:
        plan = plan_page_cache(layout.root, stats, drop_cache=req.drop_cache)
        digests, hashing_s = hash_files(layout.root, stats, req.workers, git_sha1_for=git_sha1_wanted(stats),
                                        drop_cache=req.drop_cache, report=report, plan=plan)
        total = sum(f.size for f in stats)
        workers = max(1, min(req.workers, len(stats)))
        hashing = {"seconds": round(hashing_s, 3), "bytes_per_s": round(total / hashing_s) if hashing_s else None,
                   "workers": workers, "buffer_bytes_per_worker": buffer_bytes_for(workers),
                   "page_cache": (f"POSIX_FADV_SEQUENTIAL while reading; {PAGE_CACHE_RULE}: {plan.describe()}"
                                  if req.drop_cache else "left as read")}
        source = {"kind": "hashed"}
    entries = manifest_entries(stats, digests)
    auth = authenticate(entries, layout, req.revision, req.publisher)
    prefix = "(digests of the reused manifest) " if req.reuse is not None else ""
    statements += [prefix + s for s in auth.statements]
    manifest = build_manifest(layout, entries, hashing, source)
    manifest["authentication"] = {"statements": statements, "failures": auth.failures, **auth.details}
    path = write_manifest(req.run_folder / "manifest.json", manifest)
    blocked = None
    if auth.failures:
        blocked = Blocked("CHECKPOINT_AUTH_FAILED", _failure_message(auth.failures, auth.details),
                          {"files_failed": len(auth.failures)})
    return Custody(layout, path, manifest, statements, warnings, hashing_s, blocked)


def summary(custody: Custody) -> dict:
    """The receipt's custody section: everything but the per-file rows."""
    data = {k: v for k, v in custody.manifest.items() if k != "files"}
    data["manifest"] = str(custody.manifest_path)
    data["warnings"] = custody.warnings
    return data


def fact_lines(custody: Custody) -> list[str]:
    """What the terminal and the receipt show: the manifest in one line, then each identity statement."""
    totals, hashing = custody.manifest["totals"], custody.manifest["hashing"]
    how = (f"hashed in {hashing['seconds']:.2f} s ({(hashing['bytes_per_s'] or 0) / 1e6:,.0f} MB/s, "
           f"{hashing['workers']} threads)" if custody.hashing_s is not None else "stat-matched, not re-hashed")
    return [f"manifest of {totals['files']} files, {gib(totals['bytes'])}: {how} -> manifest.json",
            *custody.statements]


def covers_every_file(custody: Custody) -> str:
    """The manifest lists exactly the files under the root now, each with a digest; Blocked otherwise."""
    now = {f.path for f in walk_checkpoint(custody.layout)}
    listed = {row["path"] for row in custody.manifest["files"]}
    if now != listed:
        raise Blocked("CHECKPOINT_CHANGED", "the manifest and the checkpoint disagree: "
                      f"not in the manifest: {sorted(now - listed)[:20]}; gone: {sorted(listed - now)[:20]}")
    undigested = [row["path"] for row in custody.manifest["files"] if len(row.get("sha256") or "") != 64]
    if undigested:
        raise ValueError(f"manifest rows without a SHA-256: {undigested[:20]}")
    return f"the manifest covers all {len(now)} files under {custody.layout.root}"


def hashing_time_line(custody: Custody, timings_s: dict) -> str:
    """How long hashing took, as recorded apart from load, batch and serve (or that nothing was re-hashed)."""
    if custody.hashing_s is None:
        return f"no hashing time: {custody.manifest['source']['manifest']} was stat-matched, not re-hashed"
    if "hashing" not in timings_s:
        raise ValueError("the hashing time is missing from the receipt's timings")
    return f"hashing took {timings_s['hashing']:.1f} s, recorded apart from every other phase"
