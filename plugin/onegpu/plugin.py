"""The onegpu kit as a pytest plugin: options, markers, the approval gate, the run folder, the verdicts.

Hooks and the `kit` fixture; the options live in onegpu.options, the phases' fixtures in onegpu.phases (one module
per phase, registered below), and every decision lives in a pure module.
"""
from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

# The modules whose asserts pytest should rewrite: the fixture modules (pytest_plugins below) hold the asserts a
# test report shows. pytest marks the whole package instead (the pytest11 entry point names onegpu.plugin, and
# pytest marks a distribution's top-level package, onegpu), and where bytecode is not written (PYTHONDONTWRITEBYTECODE) it parses and compiles every module of
# it anew in every session: ~0.4 s of CPU for ~80 modules that hold no such assert. Narrowed here, before the
# imports below, and again at configure (a conftest naming onegpu.plugin marks the package again); the rest then
# import as plain modules, from the interpreter's own bytecode cache where it has one.
_REWRITTEN = ("onegpu.session.blocked_report", *(f"onegpu.phases.{name}" for name in (
    "machine", "plan", "plan_ceiling", "plan_launch", "plan_insight", "probe", "custody", "load", "load_landing",
    "canary", "batch", "serve")))
_PACKAGE = __name__.partition(".")[0]  # what pytest marks: the distribution's top-level package


def _rewrite_fixture_modules_only() -> None:
    for hook in sys.meta_path:
        marked = getattr(hook, "_must_rewrite", None)  # pytest's AssertionRewritingHook; left alone if it changes
        cache = getattr(hook, "_marked_for_rewrite_cache", None)
        if isinstance(marked, set) and isinstance(cache, dict) and _PACKAGE in marked:
            marked.discard(_PACKAGE)
            marked.update(_REWRITTEN)
            cache.clear()


_rewrite_fixture_modules_only()

from onegpu import __version__
from onegpu.core.outcomes import Blocked, parse_reason
from onegpu.engine.interrupts import GUARD
from onegpu.evidence.receipt import Receipt, now_iso
from onegpu.evidence.rundir import RunFolderError, create_run_folder, reopen_for_resume
from onegpu.options import add_options, deselect_tests_of_absent_options, read_options
from onegpu.plan.settings import SettingsError
from onegpu.record.receipt import check_write, record_of
from onegpu.record.verdicts import phase_verdicts, run_verdict
from onegpu.session import gating, terminal
from onegpu.session.backstop import backstop_s, checkpoint_bytes
from onegpu.session.glue import phase_of, session_settings, settings_path
from onegpu.session.interruption import Cut, phase_progress, timeout_detail, unreported
from onegpu.session.state import KIT_KEY, KitSession, kit_of


# The report's modules (pytest-html's report data with jinja2, the summary and insight sections with the plan
# modules they use) are imported when a session writes its report, not when pytest loads the plugin.
def attach_html_report(*args, **kwargs):
    from onegpu.report.page import attach_html_report as attach
    return attach(*args, **kwargs)


def refresh_environment(*args, **kwargs):
    from onegpu.report.page import refresh_environment as refresh
    return refresh(*args, **kwargs)


def write_share_summary(*args, **kwargs):
    from onegpu.report.page import write_share_summary as write
    return write(*args, **kwargs)

pytest_plugins = list(_REWRITTEN)

MARKERS = {
    "scan": "read-only kit test: reads the machine, settings, checkpoint headers and plan; starts nothing",
    "approve_load": "acts on the operator's approval: hashes, starts a container, sends requests; runs only "
                    "when -m names approve_load",
    "canary": "sends the canary requests (needs approve_load)",
    "batch": "sends a frozen benchmark request file (needs approve_load, --requests and --protocol)",
    "serve": "opens the native-harness serve window (needs -m \"approve_load and serve\")",
    "phase(name)": "the KIT.md phase a kit test belongs to: machine, plan, probe, custody, load, canary, "
                   "batch, serve",
    "one_gpu": "a claim of the one-GPU protocol only: left out when the settings declare multi_gpu",
    "multi_gpu": "a check of the multi-GPU protocol (settings multi_gpu): left out otherwise",
}
KIT_MARKS = ("scan", "approve_load")


def pytest_addoption(parser):
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Refuse a session whose root folder pytest took from an option's value.

    pytest picks its root folder before it knows plugin options, so in `--settings /data/s.json` it reads
    /data/s.json as a test path, roots the session at /data and misses the kit's pytest.ini. Nothing of
    that session would be what the operator asked for.
    """
    here = early_config.invocation_params.dir
    if early_config.inipath is None and (here / "pytest.ini").is_file() and (here / "plugin").is_dir():
        raise pytest.UsageError(
            f"pytest took {early_config.rootpath} as its root folder from a path on the command line and missed "
            f"{here / 'pytest.ini'}; write path options with '=' (e.g. --settings=/data/s.json) so their values "
            "are not read as test paths")


def pytest_configure(config):
    _rewrite_fixture_modules_only()
    read_options(config)
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")
    config.stash[KIT_KEY] = KitSession(command_line=_command_line(config))
    _freeze_long_lived()
    # Everything frozen goes back to the collector when the session ends. A session run inside another
    # process (pytester's in-process runs) would otherwise keep whatever was alive at its start, cycles
    # included, for that process's life. Added now, the callback runs after pytest's own collections at exit.
    config.add_cleanup(gc.unfreeze)


def _freeze_long_lived() -> None:
    """Leave what exists now (imported modules, classes, functions; after collection the test items) out of
    every later garbage collection: those objects live as long as the session, and a session reading a large
    checkpoint allocates enough to trigger full collections, each of which would walk them all again (about 40 ms
    of a scan session's CPU at 72,622 tensors, pytest's collections at exit included; benchmarks/RESULTS.md)."""
    gc.freeze()


@pytest.fixture(scope="session")
def kit(pytestconfig) -> KitSession:
    """The session's run folder and receipt (created when kit tests were selected)."""
    state = kit_of(pytestconfig)
    assert state.receipt is not None, "kit fixtures are used only by tests marked scan or approve_load"
    return state


def pytest_collection_finish(session):
    _freeze_long_lived()


def _command_line(config) -> list[str]:
    """The exact command as typed: this process's argv when pytest was started from its own command line."""
    args = list(config.invocation_params.args)
    return list(sys.argv) if sys.argv[1:] == args else [sys.executable, "-m", "pytest", *args]


def _kit_items(items) -> list:
    return [i for i in items if any(i.get_closest_marker(m) for m in KIT_MARKS)]


def _git_commit(folder: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _session_kind(items) -> str:
    names = {m.name for i in items for m in i.iter_markers()}
    if "approve_load" not in names:
        return "scan"
    return "serve" if "serve" in names else "batch" if "batch" in names else "approve"


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session, config, items):
    """Around pytest's own -m selection. Before it: an approved session also runs the scan tests, first
    (KIT.md 10), so its receipt always carries the facts and the plan. After it: the approval gate."""
    kit = kit_of(config)
    kit.markexpr = config.option.markexpr or ""
    every_kit_test = _kit_items(items)
    acting = [i for i in items if i.get_closest_marker(gating.APPROVAL_MARK)]
    kit.approved = any(gating.approved(i, kit.markexpr) for i in acting)
    deselect_tests_of_absent_options(config, items)
    if kit.approved:
        config.option.markexpr = f"({kit.markexpr}) or {gating.WIDENED}"
    yield
    config.option.markexpr = kit.markexpr
    # Reading tests first, then acting ones, whatever the file order (a stable sort keeps phase order).
    items.sort(key=lambda i: i.get_closest_marker(gating.APPROVAL_MARK) is not None)
    kept, held = gating.split_unapproved(items, kit.markexpr, kit.approved)
    if not config.getoption("requests") and not config.getoption("resume_batch"):
        # The batch phase exists only when a request file is given.
        held += [i for i in kept if i.get_closest_marker("batch")]
        kept = [i for i in kept if not i.get_closest_marker("batch")]
    # One protocol per session: the multi-GPU checks exist only when the settings declare multi_gpu, and a
    # claim of the one-GPU protocol only when they do not.
    other_protocol = "one_gpu" if declares_multi_gpu(config) else "multi_gpu"
    not_this_protocol = [i for i in kept if i.get_closest_marker(other_protocol)]
    kit.held_for_protocol, kit.protocol_held = len(not_this_protocol), other_protocol
    held += not_this_protocol
    kept = [i for i in kept if not i.get_closest_marker(other_protocol)]
    if held:
        items[:] = kept
        config.hook.pytest_deselected(items=held)
    # Say how to approve whenever acting tests were left out, by this gate or by -m/-k themselves.
    still = {id(i) for i in items}
    other = {id(i) for i in not_this_protocol}  # not part of this session's question: not "left out"
    left_out = [i for i in acting if id(i) not in still and id(i) not in other]
    kit.held_back = len(left_out)
    selected = _kit_items(items)
    if not selected or config.option.collectonly:
        return  # e.g. `pytest tests_offline` or `--collect-only`: nothing runs, no run folder
    kit.kind = _session_kind(selected)
    kit.selected = {i.nodeid: phase_of(i) for i in selected}
    receipt = _open_run_folder(session, kit)
    _set_timeout_backstop(config, kit, [i for i in items if i.get_closest_marker(gating.APPROVAL_MARK)])
    for item in every_kit_test:
        if id(item) not in still and id(item) not in other:
            receipt.record_test(item.nodeid, {"phase": phase_of(item), "outcome": "deselected",
                                                  "message": _why_not_run(item)})


def _set_timeout_backstop(config, kit: KitSession, acting: list) -> None:
    """pytest-timeout (signal method) above every deadline of the settings, for the acting tests only."""
    path = settings_path(config)
    if not acting or path is None or config.getoption("timeout", None) is not None:
        return  # nothing acts, or the operator chose a timeout themselves
    try:
        _, settings = session_settings(config)
    except SettingsError:
        return  # the settings test says why; nothing will start
    limit = backstop_s(settings, checkpoint_bytes(Path(settings.model_path)))
    for item in acting:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(limit, method="signal"))
    assert kit.receipt is not None, "collection ends after the run folder opened"
    kit.receipt.set("timeout_backstop_s", limit)


def declares_multi_gpu(config) -> bool:
    """Whether the session's settings declare the multi-GPU protocol (unreadable settings: they do not; the
    settings test says why)."""
    if settings_path(config) is None:
        return False
    try:
        return session_settings(config)[1].multi_gpu is not None
    except SettingsError:
        return False


def _why_not_run(item) -> str:
    if item.get_closest_marker(gating.APPROVAL_MARK) is None:
        return "not selected by this session's -m/-k/paths or options"
    if item.get_closest_marker("batch"):
        return "needs -m approve_load with --requests and --protocol"
    if item.get_closest_marker("serve"):
        return "needs -m \"approve_load and serve\""
    return "needs approval: -m approve_load"


def _open_run_folder(session, kit: KitSession) -> Receipt:
    config = session.config
    out = config.getoption("out")
    runs_dir = config.getoption("runs_dir") or config.getini("onegpu_runs_dir")
    parent = Path(runs_dir) if Path(runs_dir).is_absolute() else config.rootpath / runs_dir
    resume = config.getoption("resume_batch")
    try:
        if resume:
            kit.run_folder = reopen_for_resume(Path(resume))
        else:
            kit.run_folder = create_run_folder(parent, kit.kind, Path(out) if out else None)
    except RunFolderError as exc:
        raise pytest.UsageError(str(exc)) from None
    kit.replayed = bool(config.getoption("hardware"))
    kit.receipt = Receipt(kit.run_folder, {
        "kit": {"name": "onegpu", "version": __version__, "git_commit": _git_commit(Path(__file__).parent)},
        "command_line": kit.command_line,
        "working_folder": str(config.invocation_params.dir),
        "kind": kit.kind,
        "run_folder": str(kit.run_folder),
        "hardware_source": "replayed" if kit.replayed else "live",
    }, check_write)
    attach_html_report(session, kit.run_folder / "report.html")
    return kit.receipt


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Remember the kit test in progress: a KeyboardInterrupt leaves it set, naming the test it cut."""
    kit = kit_of(item.config)
    kit.running = item.nodeid if item.nodeid in kit.selected else None
    result = yield
    kit.running = None
    return result


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Record each kit test's outcome in the receipt as it lands (a hard kill keeps what landed)."""
    outcome = yield
    report = outcome.get_result()
    kit = kit_of(item.config)
    if kit.receipt is None or not _kit_items([item]):
        return
    # A Blocked raised in the core travels as the context of pytest's XFailed: keep its numbers.
    exc = call.excinfo.value if call.excinfo else None
    cause = getattr(exc, "__context__", None)
    if isinstance(cause, Blocked):
        kit.blocked[item.nodeid] = cause.as_json()
    entry = _entry(report, phase_of(item), kit)
    if entry is not None and entry["outcome"] == "interrupted":
        # The backstop fired: something hung past every deadline. The phases after it are not run against
        # whatever state it left; they read INTERRUPTED (never reached) instead.
        kit.cut = Cut("timeout_backstop", item.nodeid, phase_of(item), entry.pop("detail"))
        item.session.shouldstop = f"onegpu: {item.nodeid} was cut by the timeout backstop"
    if entry is not None:
        kit.receipt.record_test(item.nodeid, entry)


def _entry(report, phase: str, kit: KitSession) -> dict | None:
    base = {"phase": phase, "duration_s": round(report.duration, 3)}
    if hasattr(report, "wasxfail"):
        parsed = parse_reason(report.wasxfail)
        if parsed:
            code, message = parsed
            return {**base, "outcome": "blocked", "code": code, "message": message,
                    "numbers": kit.blocked.get(report.nodeid, {}).get("numbers", {})}
        return {**base, "outcome": "failed", "message": f"unexpected xfail: {report.wasxfail}"}
    if report.failed:
        what = "failed" if report.when == "call" else "error"
        crash = getattr(report.longrepr, "reprcrash", None)
        message = crash.message if crash is not None else (report.longreprtext.strip().splitlines() or [""])[-1]
        detail = timeout_detail(message)
        if detail is not None:
            return {**base, "outcome": "interrupted", "when": report.when, "detail": detail,
                    "message": f"cut by the timeout backstop {detail} while this test ran"}
        return {**base, "outcome": what, "when": report.when, "message": message}
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return {**base, "outcome": "skipped", "message": reason}
    if report.when == "call" and report.passed:
        return {**base, "outcome": "passed"}
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    kit = kit_of(session.config)
    if kit.receipt is None:
        return
    cut = _cut(kit, exitstatus)
    if cut is not None:
        for nodeid, entry in unreported(kit.selected, record_of(kit.receipt.data).tests, cut).items():
            kit.receipt.data["tests"][nodeid] = entry
        kit.receipt.data["interrupted"] = cut.as_json()
    assert kit.run_folder is not None  # opened with the receipt
    record = record_of(kit.receipt.data)
    kit.receipt.data["phases"] = phase_verdicts(record.tests, phase_progress(record, kit.run_folder))
    record = record_of(kit.receipt.data)
    verdict = run_verdict(record.phases, record.capacity)
    if exitstatus == pytest.ExitCode.INTERRUPTED and not verdict.startswith("INTERRUPTED"):
        verdict = f"INTERRUPTED after every kit test had reported (Ctrl-C or SIGTERM); {verdict}"
    kit.receipt.data["verdict"] = verdict
    kit.receipt.data["finished_at"] = now_iso()
    kit.receipt.data["exit_status"] = int(exitstatus)
    fail_on_blocked = session.config.getoption("fail_on_blocked")
    if fail_on_blocked is None:
        fail_on_blocked = session.config.getini("onegpu_fail_on_blocked")
    if fail_on_blocked and any(p.verdict == "BLOCKED" for p in record.phases.values()) and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        kit.receipt.data["exit_status"] = int(session.exitstatus)
    kit.receipt.save()
    record = record_of(kit.receipt.data)
    refresh_environment(session.config, record)
    write_share_summary(kit.run_folder, record)


def _cut(kit: KitSession, exitstatus) -> Cut | None:
    """What cut this session, if anything: the backstop (recorded when it fired), or a KeyboardInterrupt."""
    if kit.cut is not None:
        return kit.cut
    if exitstatus != pytest.ExitCode.INTERRUPTED:
        return None
    running = kit.running
    return Cut("SIGTERM" if GUARD.received else "SIGINT", running, kit.selected.get(running) if running else None)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter, config):
    """The kit's lines come last, after pytest's own short summary: the verdicts, the run folder, the report."""
    result = yield
    kit = kit_of(config)
    if kit.held_back or kit.held_for_options_count or kit.held_for_protocol:
        terminalreporter.write_line(terminal.deselected_line(kit))
    if kit.receipt is not None:
        for line in terminal.summary_lines(kit):
            terminalreporter.write_line(line)
    return result
