"""The thin seam between the core and pytest: Blocked becomes an xfail with its code and numbers."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from .outcomes import Blocked


@contextmanager
def blocked_as_xfail():
    """Turn a Blocked raised inside into `pytest.xfail("BLOCKED CODE: message")`; anything else propagates."""
    try:
        yield
    except Blocked as blocked:
        pytest.xfail(blocked.reason)


def phase_of(node) -> str:
    mark = node.get_closest_marker("phase")
    return mark.args[0] if mark and mark.args else "machine"


def settings_path(config) -> Path | None:
    """The settings file the session names (--settings, else the onegpu_settings ini key), or None."""
    given = config.getoption("settings") or config.getini("onegpu_settings")
    return Path(given) if given else None
