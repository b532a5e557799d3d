"""Phase 6, the canary: a LOAD SMOKE CHECK through the engine, one request at a time. UNSCORED, never a benchmark."""
import pytest

from onegpu.phases.canary import CANARY_TITLE
from onegpu.requests import requests_file
from onegpu.requests.batch_summary import not_answered

pytestmark = [pytest.mark.approve_load, pytest.mark.canary, pytest.mark.phase("canary")]


def test_canary_file_is_filled_from_the_settings_and_hashed(canary_requests, fact):
    fact(requests_file.describe, canary_requests.file)


def test_canary_requests_are_answered_one_at_a_time(canary_results, fact):
    fact(lambda r: f"{r.run.sent} canary request(s) sent one at a time, in file order", canary_results)
    assert not not_answered(canary_results.summary), not_answered(canary_results.summary)


def test_canary_summary_is_shown_unscored(canary_results, kit):
    assert canary_results.lines[0].startswith("UNSCORED") and kit.tables[CANARY_TITLE] == canary_results.lines


def test_needle_check_result_is_shown_when_asked(canary_results, fact):
    fact(lambda r: r.lines[-1] if r.needle_result else "needle: not asked for (--needle-chars N adds one)",
         canary_results)
