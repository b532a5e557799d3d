"""The approval gate, run through pytest itself: approve_load tests run only when -m names approve_load."""
from __future__ import annotations

import pytest

APPROVE_HINT = "approve with: pytest -m approve_load"

KIT_TESTS = {
    "tests_hw/test_0_plain": "def test_plain_check():\n    pass\n",
    "tests_hw/test_1_machine": (
        "import pytest\n"
        "pytestmark = [pytest.mark.scan, pytest.mark.phase('machine')]\n"
        "def test_reads_the_machine():\n    pass\n"),
    "tests_hw/test_5_load": (
        "import pytest\n"
        "pytestmark = [pytest.mark.approve_load, pytest.mark.phase('load')]\n"
        "def test_starts_the_engine():\n    pass\n"),
    "tests_hw/test_7_batch": (
        "import pytest\n"
        "pytestmark = [pytest.mark.approve_load, pytest.mark.batch, pytest.mark.phase('batch')]\n"
        "def test_sends_the_batch():\n    pass\n"),
    "tests_hw/test_8_serve": (
        "import pytest\n"
        "pytestmark = [pytest.mark.approve_load, pytest.mark.serve, pytest.mark.phase('serve')]\n"
        "def test_opens_the_window():\n    pass\n"),
}


@pytest.fixture
def project(kit_project):
    kit_project.makepyfile(**KIT_TESTS)
    return kit_project


def ran(result) -> list[str]:
    """Names of the tests whose call phase ran, in the order they ran."""
    return [r.nodeid.rsplit("::", 1)[1] for r in result.reprec.getreports("pytest_runtest_logreport")
            if r.when == "call"]


def run_folders(pytester) -> list:
    runs = pytester.path / "runs"
    return sorted(runs.iterdir()) if runs.exists() else []


@pytest.mark.parametrize("args", [[], ["tests_hw"], ["-m", "not approve_load"]],
                         ids=["bare", "tests-folder-as-path", "not-approve_load"])
def test_unapproved_sessions_deselect_every_acting_test_and_say_how_to_approve(project, args):
    result = project.runpytest(*args)
    result.assert_outcomes(passed=2, deselected=3)
    assert ran(result) == ["test_plain_check", "test_reads_the_machine"]
    assert sum(APPROVE_HINT in line for line in result.outlines) == 1
    assert len(run_folders(project)) == 1  # the scan test is a kit test


def test_keyword_selection_cannot_approve(project):
    result = project.runpytest("-k", "starts_the_engine")
    result.assert_outcomes(deselected=5)
    assert ran(result) == []
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines([f"*{APPROVE_HINT}*"])
    assert run_folders(project) == []  # no kit test selected: no run folder


def test_scan_selection_runs_only_scan_tests_and_says_how_to_approve(project):
    result = project.runpytest("-m", "scan")
    result.assert_outcomes(passed=1, deselected=4)
    assert ran(result) == ["test_reads_the_machine"]
    assert sum(APPROVE_HINT in line for line in result.outlines) == 1


def test_negated_scan_does_not_approve(project):
    result = project.runpytest("-m", "not scan")
    result.assert_outcomes(passed=1, deselected=4)
    assert ran(result) == ["test_plain_check"]
    result.stdout.fnmatch_lines([f"*{APPROVE_HINT}*"])


@pytest.mark.parametrize("expr", ["approve_load", "scan or approve_load"])
def test_approval_runs_the_scan_tests_first_then_the_acting_ones(project, expr):
    result = project.runpytest("-m", expr)
    # The batch needs --requests, the serve window needs "serve" named: both stay deselected.
    result.assert_outcomes(passed=2, deselected=3)
    assert ran(result) == ["test_reads_the_machine", "test_starts_the_engine"]


def test_serve_window_opens_only_when_serve_is_named(project):
    # The core acting phases (the engine's load here) run in every approved session: the window needs them.
    result = project.runpytest("-m", "approve_load and serve")
    result.assert_outcomes(passed=3, deselected=2)
    assert ran(result) == ["test_reads_the_machine", "test_starts_the_engine", "test_opens_the_window"]
    assert "approve with" not in result.stdout.str()  # the session is approved: no advice to approve it


def test_batch_runs_only_with_a_request_file_and_its_protocol(project):
    result = project.runpytest("-m", "approve_load", "--requests", "r.jsonl", "--protocol", "p.json")
    result.assert_outcomes(passed=3, deselected=2)
    assert ran(result) == ["test_reads_the_machine", "test_starts_the_engine", "test_sends_the_batch"]


def test_requests_without_protocol_is_a_usage_error(project):
    result = project.runpytest("-m", "approve_load", "--requests", "r.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--requests needs --protocol*"])
    assert run_folders(project) == []


def test_protocol_without_requests_is_a_usage_error(project):
    result = project.runpytest("--protocol", "p.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--protocol needs --requests*"])


def test_unknown_marker_is_an_error_not_a_silently_unselected_test(kit_project):
    kit_project.makepyfile(**{"tests_hw/test_typo": (
        "import pytest\n@pytest.mark.aprove_load\ndef test_typo():\n    pass\n")})
    result = kit_project.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*'aprove_load' not found in `markers` configuration option*"])


def test_markers_are_registered_with_help_text(kit_project):
    result = kit_project.runpytest("--markers")
    result.stdout.fnmatch_lines([
        "@pytest.mark.scan: read-only kit test*",
        "@pytest.mark.approve_load: acts on the operator's approval*",
        "@pytest.mark.canary: *", "@pytest.mark.batch: *", "@pytest.mark.serve: *",
    ], consecutive=False)


def test_options_live_in_one_group(kit_project):
    result = kit_project.runpytest("--help")
    text = result.stdout.str()
    group = text[text.index("onegpu kit:"):]
    group = group[:group.index("\n\n")]
    for option in ("--settings", "--hardware", "--host-ram-gib", "--out", "--runs-dir", "--requests",
                   "--protocol", "--resume-batch", "--fail-on-blocked"):
        assert option in group, option
