"""The approval gate: approve_load tests run only when the -m expression itself asks for them.

Rule: an approve_load test is kept only if the -m expression selects it AND would not select it were the
approve_load mark absent. So `-m approve_load`, `-m "scan or approve_load"` and `-m "approve_load and
serve"` approve; a bare `pytest`, `-k x`, `-m "not scan"`, `-m "not approve_load"` or a path do not.
"""
from __future__ import annotations

# pytest's own -m grammar and marker matcher, so the gate reads expressions exactly as pytest does.
from _pytest.mark import MarkMatcher
from _pytest.mark.expression import Expression

APPROVAL_MARK = "approve_load"
# Marks that must each be named by the expression itself: the approval, and the serve window (which a
# plain `-m approve_load` does not open).
NAMED_MARKS = (APPROVAL_MARK, "serve")


def _matcher_without(item, mark_name: str) -> MarkMatcher:
    return MarkMatcher.from_markers(m for m in item.iter_markers() if m.name != mark_name)


def named(item, markexpr: str, mark_name: str = APPROVAL_MARK) -> bool:
    """Whether the -m expression selects this item because of `mark_name` (named, un-negated)."""
    if not markexpr:
        return False
    expr = Expression.compile(markexpr)
    with_mark = expr.evaluate(MarkMatcher.from_markers(item.iter_markers()))
    without_mark = expr.evaluate(_matcher_without(item, mark_name))
    return with_mark and not without_mark


def approved(item, markexpr: str) -> bool:
    """Whether the -m expression names the approval (un-negated) for this approve_load item."""
    return named(item, markexpr, APPROVAL_MARK)


# Acting tests of these marks run only when the expression names them; the other acting tests (probe,
# custody, load: what every approved session does anyway through its fixtures) run whenever the session is
# approved, so their verdicts are recorded instead of reading NOT RUN.
OPTIONAL_ACTS = ("canary", "batch", "serve")
WIDENED = f"scan or (approve_load and not ({' or '.join(OPTIONAL_ACTS)}))"


def is_core_act(item) -> bool:
    return item.get_closest_marker(APPROVAL_MARK) is not None and not any(
        item.get_closest_marker(m) is not None for m in OPTIONAL_ACTS)


def split_unapproved(items: list, markexpr: str, session_approved: bool) -> tuple[list, list]:
    """(kept, held back) for the items pytest left after its own -m/-k selection."""
    kept: list = []
    held: list = []
    for item in items:
        if is_core_act(item):
            keep = session_approved
        else:
            needs = [m for m in NAMED_MARKS if item.get_closest_marker(m) is not None]
            keep = all(named(item, markexpr, m) for m in needs)
        (kept if keep else held).append(item)
    return kept, held
