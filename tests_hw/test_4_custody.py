"""Phase 4, custody: the full SHA-256 manifest of the checkpoint, what ties it to its revision, re-checked at launch."""
import pytest

from onegpu.custody import flow as c

pytestmark = [pytest.mark.approve_load, pytest.mark.phase("custody")]


def test_manifest_covers_every_file_of_the_checkpoint(manifest, fact):
    fact(c.covers_every_file, manifest)


def test_what_ties_the_files_to_the_revision_is_stated(manifest, fact):
    statements = fact(lambda m: m.statements, manifest)
    assert statements, "custody must say how the files' identity is known"


def test_hashing_time_is_recorded_apart(manifest, kit, fact):
    fact(c.hashing_time_line, manifest, kit.receipt.data["timings_s"])


def test_files_are_unchanged_since_they_were_hashed(checkpoint_unchanged):
    checkpoint_unchanged()
