"""Phase 2, the plan: how fast the engine could possibly answer, before anything is loaded. Upper bounds only."""
import pytest

pytestmark = [pytest.mark.scan, pytest.mark.phase("plan")]


def test_the_link_ceiling_is_shown_as_upper_bounds(ceiling, fact):
    fact(lambda record: record.get("lines") or [f"link ceiling {record['label']}: {record['why']}"], ceiling)
