"""A kit session leaves its long-lived objects out of garbage collection while it runs, and gives them back when it
ends: a session run inside another process must not keep what was alive at its start for that process's life."""
import gc


def test_objects_are_frozen_during_the_session_and_given_back_at_its_end(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_frozen.py": """
        import gc
        import pytest

        @pytest.mark.scan
        def test_the_imported_modules_are_frozen():
            assert gc.get_freeze_count() > 10_000
    """})
    gc.unfreeze()
    result = kit_project.runpytest_inprocess("-m", "scan", "--out=run", "-q")
    result.assert_outcomes(passed=1)
    assert gc.get_freeze_count() == 0
