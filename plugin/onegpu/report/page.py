"""report.html and summary-share.md: the two reports written into the run folder of every kit session.

report.html is pytest-html's self-contained report (its results table stays) with the kit's sections added
through pytest-html's hooks: the page title says to review it before sharing, the summary prefix carries the
sections of onegpu.report.summary. pytest-html only builds a report when --html is given at start-up, before we
know whether kit tests are selected (and so whether a run folder exists). So the kit builds the same report
object pytest-html would, once the run folder exists, and registers it then.

summary-share.md is onegpu.report.share_summary's allow-listed text, written at session end.
This module holds the effects (reading the run folder's samples, settings copy and file list); the rendering
is pure.
"""
from __future__ import annotations

from pathlib import Path

from pytest_html.report_data import ReportData
from pytest_html.selfcontained_report import SelfContainedReport
from pytest_html.util import _process_css, _read_template
from pytest_metadata.plugin import metadata_key

from onegpu.core.units import GIB
from onegpu.evidence.rundir import write_private
from onegpu.record.receipt import ReceiptRecord, record_of
from onegpu.report.run_reader import read_samples, receipt_settings
from onegpu.report.share_summary import share_text
from onegpu.report.summary import TITLE, sections
from onegpu.session.state import kit_of

REPORT_PLUGIN_NAME = "onegpu-html-report"
SECTIONS_PLUGIN_NAME = "onegpu-report-sections"
SHARE_NAME = "summary-share.md"


class PrivateReport(SelfContainedReport):
    """pytest-html's self-contained report, written 0600 and atomically like every run-folder file, and
    without its own terminal line (the kit's summary names the report last)."""

    def _write_report(self, rendered_report):
        write_private(self._report_path, rendered_report)

    def pytest_terminal_summary(self, terminalreporter):
        return None


class KitSections:
    """pytest-html hook implementations: the review title and the kit's summary sections."""

    def __init__(self, kit):
        self.kit = kit

    def pytest_html_report_title(self, report):
        report.title = TITLE

    def pytest_html_results_summary(self, prefix, summary, postfix, session):
        if self.kit.receipt is None:
            return
        folder = self.kit.run_folder
        receipt = record_of(self.kit.receipt.data)
        prefix.extend(sections(receipt, read_samples(folder), receipt_settings(receipt), run_files(folder)))


def run_files(folder: Path) -> list[tuple[str, int | None]]:
    """(name, bytes) of the run folder's files, sorted; report.html (being written) has no size yet."""
    names: dict[str, int | None] = {p.name: p.stat().st_size for p in folder.iterdir()
                                    if p.is_file() and not p.name.startswith(".")}
    names["report.html"] = None  # this report, being written
    return sorted(names.items())


def write_share_summary(folder: Path, receipt: ReceiptRecord) -> Path:
    """summary-share.md (0600) in the run folder, from the receipt only (the settings as the session read them)."""
    return write_private(folder / SHARE_NAME, share_text(receipt))


def attach_html_report(session, path: Path) -> None:
    """Register a self-contained pytest-html report writing to `path` (unless --html chose another); the kit's
    sections go into whichever report is written."""
    config = session.config
    if not config.pluginmanager.has_plugin(SECTIONS_PLUGIN_NAME):
        config.pluginmanager.register(KitSections(kit_of(config)), SECTIONS_PLUGIN_NAME)
    if config.getoption("htmlpath"):
        return
    import pytest_html

    resources = Path(pytest_html.__file__).parent / "resources"
    css = _process_css(resources / "style.css", [])
    report = PrivateReport(path, config, ReportData(config), _read_template([resources]), css)
    config.pluginmanager.register(report, REPORT_PLUGIN_NAME)
    # Registered after pytest's session start: give it the start it missed.
    report.pytest_sessionstart(session)


def environment_rows(receipt: ReceiptRecord) -> dict[str, str]:
    """GPU, driver, RAM and Docker lines for pytest-html's environment table (via pytest-metadata)."""
    hw = receipt.hardware
    rows: dict[str, str] = {"onegpu run": receipt.run_folder if receipt.run_folder is not None else ""}
    gpu = hw.gpu if hw is not None else None
    if gpu is not None and gpu.nvml_loaded:
        for d in gpu.devices or []:
            size = "unknown" if d.total_bytes is None else f"{d.total_bytes / GIB:.1f}"  # the writer always states it
            rows[f"GPU {d.index}"] = f"{d.name} {size} GiB"
        rows["NVIDIA driver"] = f"{gpu.driver_version} (CUDA {gpu.cuda_driver_version})"
    elif hw is not None:
        rows["GPU"] = f"none readable ({gpu.error if gpu is not None else None})"
    host = hw.host if hw is not None else None
    if host is not None:
        total = host.ram_total_bytes
        rows["Host RAM"] = "unknown (not stated)" if total is None else f"{total / GIB:.1f} GiB total"
    docker = hw.docker if hw is not None else None
    if docker is not None:
        rows["Docker"] = (f"{docker.server_version} at {docker.endpoint}" if docker.reachable
                          else f"unreachable ({docker.error})")
    if receipt.hardware_source == "replayed":
        rows["Hardware facts"] = "REPLAYED from a profile, not read from this machine"
    return rows


def refresh_environment(config, receipt: ReceiptRecord) -> None:
    """Put the session's facts into pytest-metadata, and the report's environment table, before it is written."""
    config.stash[metadata_key].update(environment_rows(receipt))
    report = config.pluginmanager.get_plugin(REPORT_PLUGIN_NAME)
    if report is not None:
        report._report.set_data("environment", report._generate_environment())
