"""The report of a blocked kit test: its reason and where it was raised, not a traceback.

A plugin module of its own (listed in plugin.pytest_plugins, imported by nothing else) so that pytest loads it
as a plugin before anything else imports it.
"""
from __future__ import annotations

import pytest

from onegpu.core.outcomes import Blocked


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_makereport(item, call):
    """A blocked test's report, with its reason and where it was raised instead of a traceback.

    pytest would format the whole traceback of the XFailed (reading and parsing the source of every frame to
    find statement ranges) only for the xfail to hide it: in a scan of a GPU-less machine most kit tests are
    blocked, and that formatting was the largest share of the session's own CPU. pytest's xfail handling
    (a hook wrapper around this one) still turns the report into an xfail with the same reason, so the
    terminal, junit and the receipt read as before. --runxfail keeps pytest's own report.
    """
    exc = call.excinfo.value if call.excinfo else None
    if not isinstance(exc, pytest.xfail.Exception) or item.config.option.runxfail:
        return None
    blocked = exc.__context__
    if not isinstance(blocked, Blocked):
        return None
    return pytest.TestReport(
        item.nodeid, item.location, dict.fromkeys(item.keywords, 1), "failed",
        f"{_raised_at(blocked)}: {exc.msg}", call.when,
        [(f"Captured {key} {when}", content) for when, key, content in item._report_sections],
        call.duration, call.start, call.stop, user_properties=item.user_properties)


def _raised_at(exc: BaseException) -> str:
    """file:line of the innermost frame that raised `exc` (read from its traceback, no source parsed)."""
    tb = exc.__traceback__
    if tb is None:
        return "?"
    while tb.tb_next is not None:
        tb = tb.tb_next
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
