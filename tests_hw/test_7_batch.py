"""Phase 7, the frozen batch: the request file goes through unchanged, one request at a time. UNSCORED."""
import pytest

from onegpu.phases.batch import BATCH_TITLE
from onegpu.requests import protocol as protocol_binding
from onegpu.requests import requests_file
from onegpu.requests.batch_summary import unaccounted

pytestmark = [pytest.mark.approve_load, pytest.mark.batch, pytest.mark.phase("batch")]


def test_request_file_is_valid(batch_requests, fact):
    fact(requests_file.describe, batch_requests)


def test_protocol_binds_the_request_file(protocol, fact):
    fact(protocol_binding.describe, protocol)


def test_every_request_is_answered_or_recorded_as_error(batch_results, fact):
    fact(lambda r: f"{r.run.sent} request(s) sent in this session, one at a time, in file order", batch_results)
    assert not unaccounted(batch_results.summary), unaccounted(batch_results.summary)


def test_batch_summary_is_shown_unscored(batch_results, kit):
    assert batch_results.lines[0].startswith("UNSCORED") and kit.tables[BATCH_TITLE] == batch_results.lines
