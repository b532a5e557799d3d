"""What ties a checkpoint's bytes to an identity — cache content addresses, publisher hashes, or nothing.

A Hugging Face cache keeps each file as a blob named by its content address: the SHA-256 the Hub announced
for LFS files, the git blob SHA-1 for small files. A file of SHA-256 values saved from the publisher is a
second, independent source. Without either, the revision is only the operator's assertion.
"""
from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from msgspec import Struct, field

from onegpu.checkpoint.files import cache_layout
from onegpu.core import strict_json

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_BLOB = re.compile(r"^blobs/([0-9a-f]{64}|[0-9a-f]{40})$")
_SUM_LINE = re.compile(r"^(\\?)([0-9a-fA-F]{64}) [ *](.+)$")  # sha256sum: "<hex>  path" or "<hex> *path"
_TAG_LINE = re.compile(r"^(\\?)SHA256 \((.+)\) = ([0-9a-fA-F]{64})$")  # sha256sum --tag / BSD style
MAX_PUBLISHER_FILE_BYTES = 50_000_000
MAX_ERRORS_SHOWN = 10

CONTENT_ADDRESS_STATEMENT = (
    "AUTHENTICATED BY CONTENT ADDRESS: the files match the content addresses recorded by the local cache "
    "(evidence that the bytes are what the Hub announced at download time, not a signature)")


class Layout(Struct, frozen=True):
    """Where the checkpoint sits: a plain folder, or a snapshot inside a Hugging Face cache repo folder."""

    root: Path  # the checkpoint folder as given (absolute)
    repo: Path | None  # the models--ORG--NAME folder for a cache snapshot
    revision: str | None  # the snapshot folder name (40 hex) for a cache snapshot
    repo_model_id: str | None  # ORG/NAME read back from the repo folder name

    @property
    def contained_in(self) -> Path:
        """The folder every symlink must resolve into (what the container mounts)."""
        return self.repo if self.repo is not None else self.root


def detect_layout(root: Path) -> Layout:
    """Recognise `.../models--ORG--NAME/snapshots/<40 hex>/` (as given or through links: reads the file system)."""
    given = Path(os.path.abspath(root))
    cache = cache_layout(given)  # the checkpoint reader's own recognition, so both agree
    if cache.hf_cache_repo is None:
        return Layout(given, None, None, None)
    repo = Path(cache.hf_cache_repo)
    return Layout(given, repo, cache.hf_revision, repo.name[len("models--"):].replace("--", "/"))


def revision_problem(layout: Layout, settings_revision: str) -> str | None:
    """Why a cache snapshot is not the revision the settings name, or None (plain folders cannot be checked)."""
    if layout.revision is None or layout.revision == settings_revision:
        return None
    return (f"the checkpoint is the cache snapshot of revision {layout.revision} but the settings name "
            f"model_revision {settings_revision}: point model_path at snapshots/{settings_revision} or fix "
            "the settings")


def git_blob_header(size: int) -> bytes:
    """The prefix git hashes before a blob's content (its SHA-1 is the blob's name)."""
    return b"blob %d\0" % size


def content_address(target: str | None) -> str | None:
    """The hex name of the blob a snapshot file links to ("blobs/<hex>" relative to the repo), or None."""
    match = _BLOB.match(target or "")
    return match.group(1) if match else None


class ContentCheck(Struct, frozen=True):
    matched: list[str]
    mismatched: list[str]  # "path: blob <name>, content sha256|git-sha1 <hex>"
    unaddressed: list[str]  # files with no content address in the cache


def check_content_addresses(files: list[dict]) -> ContentCheck:
    """Compare each file's digest with its blob name: 64 hex = SHA-256, 40 hex = git blob SHA-1.

    `files` are manifest entries (path, sha256, git_sha1 when the blob name is 40 hex, blob).
    """
    matched, mismatched, unaddressed = [], [], []
    for entry in files:
        name = content_address(entry.get("blob"))
        if name is None:
            unaddressed.append(entry["path"])
            continue
        kind, digest = ("sha256", entry["sha256"]) if len(name) == 64 else ("git-sha1", entry.get("git_sha1"))
        if digest == name:
            matched.append(entry["path"])
        else:
            mismatched.append(f"{entry['path']}: blob {name}, content {kind} {digest}")
    return ContentCheck(matched, mismatched, unaddressed)


class PublisherHashesError(ValueError):
    """A publisher hash file breaks its format; the message names the file, the line and the rule."""


class PublisherHashes(Struct, frozen=True):
    path: str
    sha256: str  # of the hash file itself, so the receipt pins which list was used
    entries: dict[str, str]  # relative path -> lowercase sha256


def _clean_path(text: str) -> str | None:
    """A relative path in posix form, or None when it is absolute, empty or climbs out with '..'."""
    path = PurePosixPath(text)
    if not text or path.is_absolute() or ".." in path.parts:
        return None
    parts = [p for p in path.parts if p != "."]
    return "/".join(parts) or None


def _unescape(text: str) -> str:
    # sha256sum escapes '\' and newline in names and marks such lines with a leading backslash.
    return text.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\")


def _parse_sum_lines(text: str) -> tuple[dict[str, str], list[str]]:
    entries: dict[str, str] = {}
    seen: dict[str, int] = {}
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        line = line.rstrip("\r")
        if m := _SUM_LINE.match(line):
            escaped, digest, name = m.groups()
        elif m := _TAG_LINE.match(line):
            escaped, name, digest = m.groups()
        else:
            shown = line if len(line) <= 120 else line[:117] + "..."
            errors.append(f"line {number}: {shown!r}: expected '<64 hex>  <relative path>' (sha256sum format)")
            continue
        path = _clean_path(_unescape(name) if escaped else name)
        if path is None:
            errors.append(f"line {number}: path {name!r}: must be relative to the checkpoint, without '..'")
        elif path in seen:
            errors.append(f"line {number}: path {path!r}: already listed on line {seen[path]}")
        else:
            seen[path], entries[path] = number, digest.lower()
    return entries, errors


def _parse_json_object(raw: bytes) -> tuple[dict[str, str], list[str]]:
    try:
        data = strict_json.loads(raw)
    except (strict_json.StrictJSONError, UnicodeDecodeError) as exc:
        return {}, [f"not valid JSON: {exc}"]
    if not isinstance(data, dict):
        return {}, [f"the JSON document must be an object {{path: sha256}}, found {type(data).__name__}"]
    entries, errors = {}, []
    for key, value in data.items():
        path = _clean_path(key)
        if path is None:
            errors.append(f"key {key!r}: must be a path relative to the checkpoint, without '..'")
        elif not (isinstance(value, str) and _HEX64.match(value.lower())):
            errors.append(f"key {key!r}: value {value!r}: must be a 64-hex SHA-256 string")
        elif path in entries:
            errors.append(f"key {key!r}: names {path!r} a second time")
        else:
            entries[path] = value.lower()
    return entries, errors


def parse_publisher_hashes(raw: bytes, shown: str, sha256: str) -> PublisherHashes:
    """Read sha256sum lines or a JSON object {path: sha256}; raises PublisherHashesError naming every bad line."""
    if len(raw) > MAX_PUBLISHER_FILE_BYTES:
        raise PublisherHashesError(f"{shown}: {len(raw)} bytes: a hash file must be under "
                                   f"{MAX_PUBLISHER_FILE_BYTES} bytes")
    if raw.lstrip()[:1] in (b"{", b"["):  # a sha256sum line starts with hex
        entries, errors = _parse_json_object(raw)
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[:exc.start].count(b"\n") + 1
            raise PublisherHashesError(f"{shown}: line {line}: not UTF-8 text ({exc.reason})") from None
        entries, errors = _parse_sum_lines(text)
    if not errors and not entries:
        errors = ["no hashes found: expected sha256sum lines or a JSON object {path: sha256}"]
    if errors:
        more = f"; and {len(errors) - MAX_ERRORS_SHOWN} more" if len(errors) > MAX_ERRORS_SHOWN else ""
        raise PublisherHashesError(f"{shown}: " + "; ".join(errors[:MAX_ERRORS_SHOWN]) + more)
    return PublisherHashes(shown, sha256, entries)


class PublisherCheck(Struct, frozen=True):
    matched: list[str]
    mismatched: list[str]  # "path: ours <hex>, publisher <hex>"
    unlisted: list[str]  # files with no publisher hash
    absent: list[str]  # publisher hashes with no file


def check_publisher_hashes(digests: dict[str, str], publisher: PublisherHashes) -> PublisherCheck:
    """Compare every file's SHA-256 with the publisher's list, both ways."""
    matched: list[str] = []
    mismatched: list[str] = []
    for path, ours in sorted(digests.items()):
        theirs = publisher.entries.get(path)
        if theirs is None:
            continue
        (matched if theirs == ours else mismatched).append(
            path if theirs == ours else f"{path}: ours {ours}, publisher {theirs}")
    unlisted = sorted(p for p in digests if p not in publisher.entries)
    absent = sorted(p for p in publisher.entries if p not in digests)
    return PublisherCheck(matched, mismatched, unlisted, absent)


def _names(items: list[str], limit: int = 20) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


class Authentication(Struct):
    statements: list[str] = field(default_factory=list)  # what the receipt says, one line each
    failures: list[str] = field(default_factory=list)  # files whose bytes contradict a source: blocks
    details: dict = field(default_factory=dict)


def authenticate(files: list[dict], layout: Layout, settings_revision: str,
                 publisher: PublisherHashes | None) -> Authentication:
    """Every statement the digests support, and every contradiction (which blocks with CHECKPOINT_AUTH_FAILED)."""
    auth = Authentication()
    if layout.repo is not None:
        content = check_content_addresses(files)
        auth.details["content_address"] = {"matched": len(content.matched), "mismatched": content.mismatched,
                                           "unaddressed": content.unaddressed}
        auth.failures += [f"content address: {m}" for m in content.mismatched]
        if not content.mismatched and not content.unaddressed:
            auth.statements.append(f"{CONTENT_ADDRESS_STATEMENT}; revision {layout.revision} is the snapshot "
                                   "folder the cache recorded")
        elif not content.mismatched:
            auth.statements.append(
                f"CONTENT ADDRESS CHECKED FOR {len(content.matched)} OF {len(files)} FILES: those match the "
                f"content addresses recorded by the local cache (not a signature); {len(content.unaddressed)} "
                f"file(s) have no content address and rest on the operator's assertion: "
                f"{_names(content.unaddressed)}")
    else:
        auth.statements.append(f"REVISION IS THE OPERATOR'S ASSERTION: the checkpoint is a plain folder, so "
                               f"nothing local ties its bytes to revision {settings_revision}")
    if publisher is not None:
        check = check_publisher_hashes({f["path"]: f["sha256"] for f in files}, publisher)
        auth.details["publisher_hashes"] = {"file": publisher.path, "file_sha256": publisher.sha256,
                                            "matched": len(check.matched), "mismatched": check.mismatched,
                                            "files_without_publisher_hash": check.unlisted,
                                            "publisher_hashes_without_file": check.absent}
        auth.failures += [f"publisher hash: {m}" for m in check.mismatched]
        if not check.mismatched:
            # Only a complete match authenticates; a partial one says exactly what it covers.
            complete = check.matched and not check.unlisted and not check.absent
            head = ("AUTHENTICATED AGAINST PUBLISHER HASHES" if complete
                    else "PARTLY CHECKED AGAINST PUBLISHER HASHES, NOT AUTHENTICATED")
            line = (f"{head}: {len(check.matched)} of {len(files)} files match {publisher.path} "
                    f"(sha256 {publisher.sha256})")
            if check.unlisted:
                line += f"; files without a publisher hash: {_names(check.unlisted)}"
            if check.absent:
                line += f"; publisher hashes without a file: {_names(check.absent)}"
            auth.statements.append(line)
    return auth
