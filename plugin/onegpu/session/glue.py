"""The thin seam between the core and pytest: Blocked becomes an xfail with its code and numbers."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.plan.settings import Settings, SettingsError, read_settings_bytes, settings_of_bytes


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


# The session's settings, read and judged once: (path, bytes, settings or the error).
_SETTINGS_KEY = pytest.StashKey[tuple[Path, bytes, Settings | SettingsError]]()


def session_settings(config) -> tuple[bytes, Settings]:
    """The bytes of the settings file the session names and what they validate to, read once per session (every
    reader, and the run folder's copy, see the same bytes); raises SettingsError, the same one each time. Callers
    check settings_path first: with no settings file this raises SettingsError too."""
    path = settings_path(config)
    if path is None:
        raise SettingsError("--settings", ["no settings file given"])
    cached = config.stash.get(_SETTINGS_KEY, None)
    if cached is None or cached[0] != path:
        outcome: Settings | SettingsError
        try:
            raw = read_settings_bytes(path)
        except SettingsError as exc:
            raw, outcome = b"", exc
        else:
            try:
                outcome = settings_of_bytes(raw, str(path))
            except SettingsError as exc:
                outcome = exc
        cached = config.stash[_SETTINGS_KEY] = (path, raw, outcome)
    _, raw, outcome = cached
    if isinstance(outcome, SettingsError):
        raise outcome
    return raw, outcome
