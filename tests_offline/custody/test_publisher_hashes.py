"""--publisher-hashes through pytest itself: a kit session's custody phase compares every checkpoint file with
the SHA-256 values saved from the publisher (made here by coreutils sha256sum, not by the kit).

The session is driven as tests_offline/custody/test_manifest.py drives it: the real custody tests and fixtures, with the
runtime probe (it needs the engine image) and the checkpoint reader's file list stood in by its conftest.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

from tests_offline.custody_helpers import _settings, plain_checkpoint, sha256sum_lines


def custody_session(kit_dir, hashes_text: Callable[[Path], str], change=None):
    """An approved custody session over a plain checkpoint with a publisher hash file; -> (result, receipt, file)."""
    root = plain_checkpoint(kit_dir.path / "ckpt")
    hashes = kit_dir.path / "publisher-sha256.txt"
    hashes.write_text(hashes_text(root))
    if change is not None:
        change(root)
    out = kit_dir.path / "runs" / "one"
    result = kit_dir.runpytest_subprocess("-m", "approve_load", "--settings", str(_settings(kit_dir.path / "s.json",
                                                                                           root)),
                                          "--publisher-hashes", str(hashes), "--out", str(out))
    return result, json.loads((out / "receipt.json").read_text()), hashes


def test_a_valid_publisher_hash_file_authenticates_every_file_with_its_own_sha256(kit_dir):
    result, receipt, hashes = custody_session(kit_dir, sha256sum_lines)
    result.assert_outcomes(passed=4)
    own = hashlib.sha256(hashes.read_bytes()).hexdigest()
    auth = receipt["custody"]["authentication"]
    statement = next(s for s in auth["statements"] if s.startswith("AUTHENTICATED AGAINST PUBLISHER HASHES"))
    assert statement == f"AUTHENTICATED AGAINST PUBLISHER HASHES: 5 of 5 files match {hashes} (sha256 {own})"
    assert auth["publisher_hashes"]["file_sha256"] == own and auth["publisher_hashes"]["mismatched"] == []
    result.stdout.fnmatch_lines([f"*AUTHENTICATED AGAINST PUBLISHER HASHES: 5 of 5 files match*{own}*"])


def test_a_file_that_differs_from_its_publisher_hash_blocks_naming_it(kit_dir):
    def tamper(root):
        (root / "config.json").write_text('{"model_type": "other"}\n')

    result, receipt, hashes = custody_session(kit_dir, sha256sum_lines, tamper)
    result.assert_outcomes(xfailed=4)
    tests = receipt["tests"].values()
    assert {t["code"] for t in tests} == {"CHECKPOINT_AUTH_FAILED"}
    ours = hashlib.sha256(b'{"model_type": "other"}\n').hexdigest()
    assert all(f"publisher hash: config.json: ours {ours}, publisher " in t["message"] for t in tests)
    auth = receipt["custody"]["authentication"]
    assert not any(s.startswith("AUTHENTICATED AGAINST PUBLISHER HASHES") for s in auth["statements"])
    assert auth["publisher_hashes"]["file"] == str(hashes) and auth["publisher_hashes"]["mismatched"][0].startswith(
        "config.json: ours")
    assert receipt["phases"]["custody"]["code"] == "CHECKPOINT_AUTH_FAILED"
