"""Phase 2, the plan: advice from the facts. Proposed budgets (--propose), the non-weight reserve (assumed, or
calibrated from an earlier run), checkpoint consistency, and an operator-supplied score. Read-only."""
import pytest

from onegpu.checkpoint.consistency import check_lines
from onegpu.plan import calibrate, propose_text
from onegpu.plan import operator_score as score

pytestmark = [pytest.mark.scan, pytest.mark.phase("plan")]


def test_budgets_are_proposed_from_the_facts(proposal, fact):
    fact(propose_text.outcome_lines, proposal["proposal"], proposal["path"])


def test_non_weight_reserve_is_measured_or_shown_as_assumed(settings, calibration, fact):
    fact(calibrate.describe, calibration, calibrate.settings_reserve_text(settings))


def test_checkpoint_holds_what_its_config_promises(consistency, fact):
    fact(check_lines, consistency)


def test_operator_supplied_score_is_recorded_as_operator_supplied(operator_score, fact):
    assert operator_score["label"] == score.LABEL and operator_score["computed_by_kit"] is False
    fact(score.describe, operator_score)
