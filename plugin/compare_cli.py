"""`python -m plugin.compare RUN_A RUN_B`: read two run folders and print how they compare.

A plain command rather than a pytest option: it runs no test, opens no run folder and writes nothing, and it
takes two paths that pytest would otherwise read as test paths. Exit 0 after printing the comparison; exit 2
with one line naming the folder and the rule when a folder is not a run folder.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import strict_json
from .compare import RunEvidence, compare_runs
from .manifest import ManifestError, load_manifest
from .receipt import JOURNAL, SCHEMA as RECEIPT_SCHEMA, apply_journal
from .report_html import read_settings_values

MAX_RECEIPT_BYTES = 200_000_000


class NotARunFolder(ValueError):
    """The path is not a run folder the kit wrote (named with what is missing or wrong)."""


def load_run(folder: Path) -> RunEvidence:
    """The evidence of one run folder; raises NotARunFolder naming the folder and the rule."""
    if not folder.is_dir():
        raise NotARunFolder(f"{folder}: not a folder" if folder.exists() else f"{folder}: no such folder")
    path = folder / "receipt.json"
    if not path.is_file():
        raise NotARunFolder(f"{folder}: not a run folder (no receipt.json in it)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise NotARunFolder(f"{path}: cannot read ({exc.strerror})") from None
    if len(raw) > MAX_RECEIPT_BYTES:
        raise NotARunFolder(f"{path}: {len(raw):,} bytes, more than a receipt holds ({MAX_RECEIPT_BYTES:,})")
    try:
        receipt = strict_json.loads(raw)
    except (strict_json.StrictJSONError, UnicodeDecodeError) as exc:
        raise NotARunFolder(f"{path}: not a readable receipt ({exc})") from None
    if not isinstance(receipt, dict) or receipt.get("schema") != RECEIPT_SCHEMA:
        raise NotARunFolder(f"{path}: field 'schema' must be {RECEIPT_SCHEMA!r} (a receipt the kit wrote)")
    try:
        receipt = apply_journal(receipt, folder)  # a session killed before its last whole write journalled the rest
    except (ValueError, TypeError, AttributeError) as exc:
        raise NotARunFolder(f"{folder / JOURNAL}: not a readable receipt journal ({exc})") from None
    manifest = None
    if (folder / "manifest.json").is_file():
        try:
            manifest, _ = load_manifest(folder / "manifest.json")
        except ManifestError as exc:
            raise NotARunFolder(str(exc)) from None
    return RunEvidence(str(folder), receipt, manifest, read_settings_values(folder) or {})


def main(argv: list[str] | None = None, prog: str = "python -m plugin.compare") -> int:
    parser = argparse.ArgumentParser(prog=prog,
                                     description="Compare two onegpu run folders: same checkpoint manifest, image "
                                                 "ID, protocol and request hash? Then the differences in verdicts, "
                                                 "boot facts and timings.")
    parser.add_argument("run_a", type=Path, help="the first run folder (runs/<time>-<kind>)")
    parser.add_argument("run_b", type=Path, help="the second run folder")
    args = parser.parse_args(argv)
    try:
        a, b = load_run(args.run_a), load_run(args.run_b)
    except NotARunFolder as exc:
        print(f"onegpu compare: {exc}", file=sys.stderr)
        return 2
    print("\n".join(compare_runs(a, b)))
    return 0


def console() -> int:
    """The `onegpu-compare` console script (not `compare`: ImageMagick installs a command of that name)."""
    return main(prog="onegpu-compare")


if __name__ == "__main__":
    sys.exit(main())
