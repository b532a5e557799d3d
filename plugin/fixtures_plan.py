"""Session fixtures of the plan phase: settings first; checkpoint, image, capacity and launch build on it."""
from __future__ import annotations

from pathlib import Path

import pytest

from .glue import blocked_as_xfail
from .outcomes import Blocked
from .rundir import write_private
from .settings import Settings, SettingsError, load_settings


def settings_path(config) -> Path | None:
    given = config.getoption("settings") or config.getini("onegpu_settings")
    return Path(given) if given else None


@pytest.fixture(scope="session")
def settings(pytestconfig, kit) -> Settings:
    """The validated settings; NO_SETTINGS or SETTINGS_INVALID (every broken rule listed) otherwise."""
    path = settings_path(pytestconfig)
    with blocked_as_xfail():
        if path is None:
            raise Blocked("NO_SETTINGS", "no --settings file given: the machine facts stand alone; give "
                                         "--settings s.json to read the checkpoint and see the plan")
        try:
            loaded = load_settings(path)
        except SettingsError as exc:
            kit.receipt.set("settings_errors", exc.errors)
            raise Blocked("SETTINGS_INVALID", f"{exc.path}: " + "; ".join(exc.errors),
                          {"errors": len(exc.errors)}) from None
    write_private(kit.run_folder / "settings.json", path.read_bytes())
    kit.receipt.set("settings", {"path": str(path.absolute()), "sha256": loaded.sha256,
                                 "schema": loaded.source_schema, "assumed": loaded.assumed})
    return loaded
