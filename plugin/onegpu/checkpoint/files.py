"""The files of a checkpoint folder: which exist, where links lead, and the Hugging Face cache layout.

Effects (directory scans, link resolution) kept apart from the header logic. A link may point anywhere inside
the checkpoint root, or into the blobs/ folder of the same Hugging Face cache repo when the root is a snapshot
(`models--ORG--NAME/snapshots/<40 hex>/`); anything else is refused, because the engine container sees only
that folder and because custody must hash the files the engine will read.
"""
from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path, PurePosixPath

from msgspec import Struct, field

from onegpu.core.outcomes import Blocked

_REVISION = re.compile(r"[0-9a-f]{40}")


class CacheLayout(Struct, frozen=True):
    """Where links may lead: the root itself, plus the repo's blobs/ folder for a cache snapshot."""

    allowed: tuple[str, ...]  # real (resolved) folder paths
    hf_cache_repo: str | None = None
    hf_revision: str | None = None


class FileListing(Struct):
    files: list[str] = field(default_factory=list)  # regular files, relative, "/"-separated
    dangling: list[str] = field(default_factory=list)  # links whose target does not exist


def cache_layout(root: Path) -> CacheLayout:
    """The allowed link targets for `root`; recognises a Hugging Face cache snapshot as given or resolved."""
    real_root = os.path.realpath(root)
    for candidate in (Path(os.path.abspath(root)), Path(real_root)):
        snapshots, repo = candidate.parent, candidate.parent.parent
        if (snapshots.name == "snapshots" and repo.name.startswith("models--")
                and _REVISION.fullmatch(candidate.name)):
            blobs = os.path.realpath(repo / "blobs")
            return CacheLayout((real_root, blobs), str(repo), candidate.name)
    return CacheLayout((real_root,))


def hf_cache_layout(model_path: str) -> tuple[str, str] | None:
    """(repo folder, snapshot path relative to it) for a Hugging Face cache snapshot path, else None: the path
    alone, as the engine's mounts need it (the launch plan may be made for another machine's path).

    A snapshot's files are symlinks into ../../blobs, so the whole repo folder must be visible in the
    container for them to resolve.
    """
    path = PurePosixPath(model_path)
    if len(path.parts) >= 3 and path.parent.name == "snapshots" and path.parent.parent.name.startswith("models--"):
        return str(path.parent.parent), f"snapshots/{path.name}"
    return None


def inside(path: str, folders: tuple[str, ...]) -> bool:
    """True when the real path `path` is one of `folders` or lies below one."""
    return any(path == f or path.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def list_files(root: Path, layout: CacheLayout) -> FileListing:
    """Every regular file under root (links followed, each checked), sorted.

    Raises Blocked CHECKPOINT_CORRUPT for a link leading outside the allowed folders,
    CHECKPOINT_INCOMPLETE when a folder cannot be read.
    """
    listing = FileListing()
    seen = {os.path.realpath(root)}
    _walk(str(root), "", layout, seen, listing)
    listing.files.sort()
    listing.dangling.sort()
    return listing


def _walk(folder: str, prefix: str, layout: CacheLayout, seen: set, listing: FileListing) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        raise Blocked("CHECKPOINT_INCOMPLETE", f"{prefix or '.'}: the folder cannot be read ({exc.strerror})") from None
    for entry in entries:
        rel = prefix + entry.name
        if entry.is_symlink():
            target = os.path.realpath(entry.path)
            if not inside(target, layout.allowed):
                where = "the checkpoint root" + (" or its cache repo's blobs/" if layout.hf_cache_repo else "")
                raise Blocked("CHECKPOINT_CORRUPT", f"{rel}: a link that leads outside {where} (to {target}); "
                              "the engine would not see it and custody could not vouch for it")
            if not os.path.exists(target):
                listing.dangling.append(rel)
                continue
        try:
            is_dir = entry.is_dir()
            is_file = not is_dir and entry.is_file()
        except OSError:
            continue
        if is_dir:
            real = os.path.realpath(entry.path)
            # Only a folder already on the current path is skipped (a link back up the tree would loop
            # forever); a folder reachable under two names is listed under both, as the engine sees it.
            if real not in seen:
                _walk(entry.path, rel + "/", layout, seen | {real}, listing)
        elif is_file:
            listing.files.append(rel)
        # sockets, FIFOs and devices are not checkpoint files: reading one could block, so they are left out


def shard_name_problem(name) -> str | None:
    """Why a shard name from the index may not be used (absolute, `..`, empty, not a string); None if fine."""
    if not isinstance(name, str) or not name:
        return "a shard name must be a non-empty string"
    if "\x00" in name:
        return "a shard name may not contain a NUL byte"
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "a shard name may not be an absolute path"
    if ".." in re.split(r"[/\\]", name):
        return "a shard name may not contain '..'"
    return None


def normal_name(name: str) -> str:
    """A relative shard name in the form list_files uses ("a/./b" -> "a/b")."""
    return posixpath.normpath(name)
