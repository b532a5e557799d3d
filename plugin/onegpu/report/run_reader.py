"""The one reader of a run folder the kit wrote: the report (its own run), calibration (--calibrate-from an earlier
run) and compare (two runs) read receipt, manifest, settings and samples through it, with the same rules.

A receipt is strict JSON of the kit's schema, with the journal a killed session left folded in, read as one typed
record (onegpu.record.receipt.ReceiptRecord, which refuses a value it does not declare); the manifest is checked
for its digests (path, size, SHA-256 of every file; --reuse-manifest also needs mtimes and inodes); settings.json
is judged as --settings is (kept as its error when it does not hold); samples.jsonl skips a torn last line. A
folder that is not a run folder raises NotARunFolder, whose message names the file and the rule.
"""
from __future__ import annotations

import json
from pathlib import Path

from msgspec import Struct

from onegpu.core import strict_json
from onegpu.core.jsonable import to_json
from onegpu.custody.manifest import ManifestError, load_manifest
from onegpu.evidence.journal import JOURNAL, apply_journal
from onegpu.evidence.journal import SCHEMA as RECEIPT_SCHEMA
from onegpu.plan.settings import Settings, SettingsError, load_settings
from onegpu.record.receipt import ReceiptRecord, ReceiptShapeError, record_of

MAX_RECEIPT_BYTES = 200_000_000


class NotARunFolder(ValueError):
    """The path is not a run folder the kit wrote (named with what is missing or wrong)."""


class RunFolder(Struct, frozen=True):
    path: Path
    receipt: ReceiptRecord  # receipt.json with the journal folded in
    manifest: dict | None  # manifest.json, when custody ran
    settings: Settings | SettingsError  # settings.json as --settings judges it, or why it does not hold

    @property
    def shown_settings(self) -> dict | None:
        """The settings' values as the session read them; None when settings.json is absent or does not hold."""
        return shown_settings(to_json(self.settings)) if isinstance(self.settings, Settings) else None


def read_run(folder: Path) -> RunFolder:
    """The evidence of one run folder; raises NotARunFolder naming the file and the rule."""
    if not folder.is_dir():
        raise NotARunFolder(f"{folder}: not a folder" if folder.exists() else f"{folder}: no such folder")
    path = folder / "receipt.json"
    if not path.is_file():
        raise NotARunFolder(f"{folder}: not a run folder (no receipt.json in it)")
    try:
        receipt, _ = strict_json.load_file(path, MAX_RECEIPT_BYTES)
    except strict_json.JSONFileError as exc:
        problem = (f"{exc.size:,} bytes, more than a receipt holds ({MAX_RECEIPT_BYTES:,})" if exc.kind == "too_large"
                   else f"not a readable receipt ({exc})" if exc.kind == "not_json" else str(exc))
        raise NotARunFolder(f"{path}: {problem}") from None
    if not isinstance(receipt, dict) or receipt.get("schema") != RECEIPT_SCHEMA:
        raise NotARunFolder(f"{path}: field 'schema' must be {RECEIPT_SCHEMA!r} (a receipt the kit wrote)")
    try:
        receipt = apply_journal(receipt, folder)  # a session killed before its last whole write journalled the rest
    except (ValueError, TypeError, AttributeError) as exc:
        raise NotARunFolder(f"{folder / JOURNAL}: not a readable receipt journal ({exc})") from None
    try:
        record = record_of(receipt)
    except ReceiptShapeError as exc:  # a value the record does not declare: named with msgspec's path
        raise NotARunFolder(f"{path}: {str(exc).removeprefix('receipt.json: ')}") from None
    manifest = None
    if (folder / "manifest.json").is_file():
        try:
            manifest, _ = load_manifest(folder / "manifest.json", for_reuse=False)
        except ManifestError as exc:
            raise NotARunFolder(str(exc)) from None
    settings: Settings | SettingsError
    try:
        settings = load_settings(folder / "settings.json")
    except SettingsError as exc:
        settings = exc
    return RunFolder(folder, record, manifest, settings)


# Where the settings were read from, not what they say: the report and compare leave these out of the values.
_BOOKKEEPING = ("path", "sha256", "assumed", "source_schema")


def shown_settings(values: dict) -> dict:
    """Settings values (the receipt's, or a settings file's as JSON) as the report and compare show them: every
    field of Settings in its order, none for a field the values leave out (the receipt omits an unset multi_gpu
    and vllm_version), without where they were read."""
    return {k: values.get(k) for k in Settings.__struct_fields__ if k not in _BOOKKEEPING}


def receipt_settings(receipt: ReceiptRecord) -> dict | None:
    """The session's settings as it read them once, from its receipt; None when they did not hold."""
    section = receipt.settings
    if section is None or section.values is None:
        return None
    return shown_settings(_as_written(section.values))


def _as_written(section: Struct) -> dict:
    """A receipt section as the JSON its writer wrote: the keys it wrote, nested sections likewise (a key read as
    None is left out: the writers of settings.values.multi_gpu and probe.h2d write no null in them)."""
    return {k: _as_written(v) if isinstance(v, Struct) else v for k in section.__struct_fields__
            if (v := getattr(section, k)) is not None}


def read_samples(folder: Path) -> list[dict]:
    """samples.jsonl's lines (a torn last line from a hard kill is skipped); [] when the engine never ran."""
    path = folder / "samples.jsonl"
    if not path.is_file():
        return []
    samples = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            samples.append(value)
    return samples


class RecordedVersion(Struct, frozen=True):
    """The vLLM version an earlier runtime probe read in an image, and the run folder that recorded it."""

    version: str
    folder: Path


def _recorded(folder: Path) -> ReceiptRecord | None:
    """An earlier session's receipt (its journal folded in) where it is one the kit wrote; None otherwise."""
    path = folder / "receipt.json"
    try:
        receipt = record_of(apply_journal(strict_json.load_file(path, MAX_RECEIPT_BYTES)[0], folder))
    except (OSError, ValueError, TypeError, AttributeError):  # JSONFileError and ReceiptShapeError are ValueErrors
        return None  # not a receipt the kit can read: it records nothing
    return receipt if receipt.schema == RECEIPT_SCHEMA else None


def _probe_of(folder: Path) -> tuple[str | None, str | None]:
    """(image ID, vLLM version) an earlier session's probe recorded; (None, None) when its receipt does not say."""
    receipt = _recorded(folder)
    if receipt is None or receipt.probe is None or receipt.launch is None:
        return None, None
    probe = receipt.probe
    blocked_read = probe.numbers.vllm_version if probe.numbers is not None else None
    return receipt.launch.image_id, probe.vllm_version or blocked_read


def _newest_folders(parent: Path, skip: Path | None, newest: int) -> list[Path]:
    try:
        return sorted((p for p in parent.iterdir() if p.is_dir() and p != skip), key=lambda p: p.name,
                      reverse=True)[:newest]
    except OSError:
        return []


class RecordedLink(Struct, frozen=True):
    """The host-to-device bandwidth an earlier runtime probe measured on a GPU, and the run folder that recorded it."""

    measurement: dict
    folder: Path


def recorded_link(parent: Path, gpu_uuid: str, skip: Path | None = None, newest: int = 200) -> RecordedLink | None:
    """The newest earlier probe's measurement of the link of the GPU `gpu_uuid` among the run folders in `parent`."""
    for folder in _newest_folders(parent, skip, newest):
        receipt = _recorded(folder)
        if receipt is None or receipt.probe is None or receipt.selection is None:
            continue
        if receipt.selection.gpu_uuid != gpu_uuid:
            continue
        h2d = receipt.probe.h2d
        if h2d is not None and h2d.gbps is not None:
            return RecordedLink(_as_written(h2d), folder)  # as the probe wrote it, for onegpu.plan.ceiling
    return None


def recorded_vllm_version(parent: Path, image_id: str, skip: Path | None = None,
                          newest: int = 200) -> RecordedVersion | None:
    """The vLLM version the newest earlier runtime probe of `image_id` recorded among the run folders in `parent`
    (the `newest` folders by name, which starts with their UTC time); None when none did."""
    for folder in _newest_folders(parent, skip, newest):
        probed_image, version = _probe_of(folder)
        if probed_image == image_id and version:
            return RecordedVersion(version, folder)
    return None
