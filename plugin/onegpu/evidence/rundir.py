"""The private run folder: created once (never reused), 0700; every file in it 0600, written atomically."""
from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

import msgspec

FOLDER_MODE = 0o700
FILE_MODE = 0o600


class RunFolderError(Exception):
    """The run folder cannot be created as asked (it exists, or its parent is not writable)."""


def utc_stamp(now: _dt.datetime | None = None) -> str:
    """A sortable UTC time for folder names, e.g. 20261202T111658Z."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%dT%H%M%SZ")


def create_run_folder(parent: Path, kind: str, explicit: Path | None = None) -> Path:
    """Create a fresh 0700 run folder and return it.

    `explicit` (from --out) must not exist yet: an existing folder is refused, never overwritten.
    Without it, the folder is `parent/<UTC time>-<kind>`, with a numeric suffix if two sessions start
    in the same second.
    """
    if explicit is not None:
        explicit = explicit.absolute()
        try:
            explicit.parent.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
            os.mkdir(explicit, FOLDER_MODE)
        except FileExistsError:
            raise RunFolderError(f"--out {explicit}: the folder already exists; run folders are never "
                                 "overwritten, choose a new name") from None
        except OSError as exc:
            raise RunFolderError(f"--out {explicit}: cannot create the folder ({exc.strerror})") from None
        os.chmod(explicit, FOLDER_MODE)
        return explicit
    parent = parent.absolute()
    parent.mkdir(parents=True, exist_ok=True, mode=FOLDER_MODE)
    base = f"{utc_stamp()}-{kind}"
    for n in range(1, 1000):
        path = parent / (base if n == 1 else f"{base}-{n}")
        try:
            os.mkdir(path, FOLDER_MODE)
        except FileExistsError:
            continue
        os.chmod(path, FOLDER_MODE)  # mkdir's mode is masked by umask
        return path
    raise RunFolderError(f"{parent}: could not find a free run folder name for {base}")


def reopen_for_resume(folder: Path) -> Path:
    """The one exception to "never reused": an interrupted batch resumes in its own run folder."""
    folder = folder.absolute()
    if not (folder / "receipt.json").is_file() or not (folder / "responses.jsonl").is_file():
        raise RunFolderError(f"--resume-batch {folder}: not a batch run folder (it needs receipt.json and "
                             "responses.jsonl)")
    return folder


def write_private(path: Path, data: bytes | str) -> Path:
    """Write a 0600 file atomically (temp file in the same folder, fsync, rename).

    A reader, or a hard kill at any moment, sees either the old complete file or the new one.
    """
    if isinstance(data, str):
        data = data.encode()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


# Objects JSON has no form for are written as their str(), as json.dumps(default=str) does; msgspec itself writes
# sets as arrays and Structs and dataclasses as objects (json.dumps would write their str()).
_INDENTED_ENCODER = msgspec.json.Encoder(enc_hook=str)


def write_json(path: Path, obj) -> Path:
    """Atomic 0600 JSON file, indented for people, keys in their insertion order.

    Encoded in C by msgspec, then indented: json.dumps with indent= leaves its C encoder for the pure-Python one,
    which took most of the receipt's writing in a 1,000-shard scan session (0.015 s of CPU before, 0.009 s
    after: benchmarks/RESULTS.md).
    The values are json.dumps(indent=2, default=str)'s; only spellings differ: non-ASCII text as UTF-8 instead of
    \\u escapes, floats in their shortest form (1e16 for 1e+16), and NaN or an infinity as null (json.dumps
    writes NaN, which strict readers refuse).
    """
    return write_private(path, msgspec.json.format(_INDENTED_ENCODER.encode(obj), indent=2) + b"\n")


def open_private_append(path: Path):
    """Open a 0600 file for appending lines (responses, samples, transport log)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
    return os.fdopen(fd, "a", encoding="utf-8")


def append_line(fh, obj) -> None:
    """Append one JSON line and make it durable before returning (a kill loses nothing written)."""
    fh.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
    fh.flush()
    os.fsync(fh.fileno())
