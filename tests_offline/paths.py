"""Where the repository and its hardware profiles lie, for the kit's own tests."""
from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PROFILES = REPO_ROOT / "profiles"
DATA = Path(__file__).resolve().parent / "data"  # recorded logs, runs, NVML answers and the earlier kit's files
