"""One declared receipt (onegpu.evidence.receipt_schema): a writer's misspelt section or key fails where it writes,
a renderer's misspelt read fails where it reads, and every receipt a real session writes is within the schema."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from onegpu.evidence.receipt import Receipt, read_receipt
from onegpu.evidence.receipt_check import UndeclaredReceiptField, undeclared_fields
from onegpu.evidence.receipt_schema import SECTIONS
from onegpu.evidence.rundir import create_run_folder
from onegpu.report import share_summary, summary
from tests_offline.paths import DATA, REPO_ROOT

RECORDED = sorted((DATA / "runs").glob("*/receipt.json"))


@pytest.fixture(scope="module")
def scan_run(tmp_path_factory):
    """The run folder of a real `pytest -m scan` session on this machine."""
    project = tmp_path_factory.mktemp("project")
    shutil.copytree(REPO_ROOT / "tests_hw", project / "tests_hw", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pytest.ini", project / "pytest.ini")
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", "-q", "--out=runs/scan"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return project / "runs/scan"


def test_a_misspelt_write_fails_and_writes_nothing(tmp_path):
    folder = create_run_folder(tmp_path, "scan")
    receipt = Receipt(folder, {"kind": "scan"})
    with pytest.raises(UndeclaredReceiptField, match=r"receipt\.bot "):
        receipt.set("bot", {"ready": True})
    with pytest.raises(UndeclaredReceiptField, match=r"boot\.raedy "):
        receipt.update("boot", raedy=True)
    with pytest.raises(UndeclaredReceiptField, match=r"boot\.raedy "):
        receipt.set("boot", {"raedy": True})
    with pytest.raises(UndeclaredReceiptField, match=r"tests\[\]\.outcom "):
        receipt.record_test("tests_hw/t.py::t", {"phase": "machine", "outcom": "passed"})
    receipt.update("boot", ready=True)
    assert read_receipt(folder)["boot"] == {"ready": True} and "bot" not in json.dumps(read_receipt(folder))


def test_a_misspelt_read_fails_and_a_declared_one_reads_the_value(scan_run):
    receipt = read_receipt(DATA / "runs/stub-ready-8k")
    assert receipt["boot"].get("ready") is True and receipt.get("serve") is None  # declared, absent: None
    with pytest.raises(UndeclaredReceiptField, match=r"receipt\.boot\.raedy "):
        receipt["boot"].get("raedy")
    with pytest.raises(UndeclaredReceiptField, match=r"receipt\.bot "):
        receipt.get("bot")
    assert "boot" in receipt and json.loads(json.dumps(receipt))["boot"]["ready"] is True  # still plain JSON
    scanned = read_receipt(scan_run)
    entry = next(iter(scanned["tests"].values()))
    assert entry["outcome"] in ("passed", "blocked", "deselected", "skipped")
    with pytest.raises(UndeclaredReceiptField, match=r"receipt\.tests\[.*\]\.outcom "):
        entry.get("outcom")
    with pytest.raises(UndeclaredReceiptField, match=r"receipt\.phases\['machine'\]\.verdcit "):
        scanned["phases"]["machine"]["verdcit"]


def test_the_renderers_read_only_declared_fields(scan_run):
    """The report's sections and the public summary render real receipts through the checked view."""
    for folder in [scan_run, *(p.parent for p in RECORDED)]:
        receipt = read_receipt(folder)
        assert all(isinstance(s, str) for s in summary.sections(receipt))
        assert share_summary.share_text(receipt, None)


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.parent.name)
def test_recorded_receipts_are_within_the_schema(path):
    data = json.loads(path.read_text())
    assert set(data) <= SECTIONS and undeclared_fields(data) == []


def test_a_scan_sessions_receipt_is_within_the_schema(scan_run):
    data = json.loads((scan_run / "receipt.json").read_text())
    assert data["verdict"] and undeclared_fields(data) == []
    assert undeclared_fields({**data, "bot": 1, "boot": {"raedy": 1}}) == ["receipt.bot", "receipt.boot.raedy"]
