"""One declared receipt: the typed record (onegpu.record.receipt.ReceiptRecord and the Structs of onegpu.record)
declares every section and key. A writer's misspelt section or key, or a value of the wrong type, fails where it
writes (`check_write`, which the receipt runs on every change) and writes nothing; a renderer's misspelt read
fails where it reads (the record has no such attribute); every receipt a real session writes reads as a record,
and a receipt on disk holding a key no type declares is refused whole, with a message that names it."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from typing import Any, get_args, get_type_hints

import msgspec
import pytest

from onegpu.evidence.journal import JOURNAL, read_receipt
from onegpu.evidence.receipt import Receipt
from onegpu.evidence.rundir import create_run_folder
from onegpu.record.receipt import SECTIONS, ReceiptRecord, ReceiptShapeError, check_write, read_record, record_of
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


def record_types(kind: Any, seen: list[type]) -> list[type]:
    """Every Struct type `kind` reaches through its fields (unions, lists and mappings included)."""
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        if kind in seen:
            return seen
        seen.append(kind)
        for hint in get_type_hints(kind).values():
            record_types(hint, seen)
    for arg in get_args(kind):
        record_types(arg, seen)
    return seen


def held(value: Any) -> Any:
    """`value` without what reads as "not recorded" (None, and empty mappings and lists) at any depth."""
    if isinstance(value, dict):
        value = {k: held(v) for k, v in value.items()}
        return {k: v for k, v in value.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [held(v) for v in value]
    return value


def test_every_section_of_the_record_is_declared_with_its_type():
    hints = get_type_hints(ReceiptRecord)
    assert SECTIONS == set(hints) and "tests" in SECTIONS and "phases" in SECTIONS
    assert [name for name, kind in hints.items() if kind is Any or Any in get_args(kind)] == []
    empty = record_of({})  # every section left out: None, or an empty mapping or list where the record keeps one
    for name in SECTIONS:
        value = getattr(empty, name)
        assert value is None or value in ({}, []), name
        check_write(name, msgspec.to_builtins(value))  # each section is one the receipt may write
    # Every section's type, down to the last sub-object: frozen, refuses a key it does not declare, and reads a key
    # its writer left out as None.
    types = record_types(ReceiptRecord, [])
    assert len(types) > 50
    for kind in types:
        config = kind.__struct_config__
        assert config.frozen and config.forbid_unknown_fields, kind
        assert len(kind.__struct_defaults__) == len(kind.__struct_fields__), kind
        if kind is not ReceiptRecord:
            left_out = msgspec.convert({}, kind)
            assert all(getattr(left_out, name) is None for name in kind.__struct_fields__), kind


def test_a_misspelt_or_mistyped_write_fails_naming_it_and_writes_nothing(tmp_path):
    folder = create_run_folder(tmp_path, "scan")
    receipt = Receipt(folder, {"kind": "scan"}, check_write)
    with pytest.raises(ReceiptShapeError, match=r"receipt field bot is not declared in onegpu\.record\.receipt"):
        receipt.set("bot", {"ready": True})
    with pytest.raises(ReceiptShapeError, match=r"receipt\.boot: .*unknown field `raedy`"):
        receipt.update("boot", raedy=True)
    with pytest.raises(ReceiptShapeError, match=r"receipt\.boot: .*unknown field `raedy`"):
        receipt.set("boot", {"raedy": True})
    with pytest.raises(ReceiptShapeError, match=r"receipt\.tests: .*unknown field `outcom`"):
        receipt.record_test("tests_hw/t.py::t", {"phase": "machine", "outcom": "passed"})
    with pytest.raises(ReceiptShapeError, match=r"receipt field bot is not declared"):
        receipt.add(["bot", "plan"], "a line")
    # A declared key with a value of the wrong type: the path of the value, and what the record expects there.
    with pytest.raises(ReceiptShapeError, match=r"receipt\.boot: Expected `bool \| null`, got `str` - at `\$\.ready`"):
        receipt.update("boot", ready="yes")
    with pytest.raises(ReceiptShapeError, match=r"receipt\.tests: Expected `str \| null`, got `int` - at .*\.outcome`"):
        receipt.record_test("tests_hw/t.py::t", {"phase": "machine", "outcome": 1})
    with pytest.raises(ReceiptShapeError, match=r"receipt\.warnings: Expected `str`, got `int`"):
        receipt.add(["warnings"], 3)
    with pytest.raises(ReceiptShapeError, match=r"receipt\.shown: Expected `str`, got `int`"):
        receipt.add(["shown", "plan"], 3)
    with pytest.raises(ReceiptShapeError, match=r"receipt\.timings_s: .*got `str`"):
        receipt.update("timings_s", hashing="slow")
    assert not (folder / JOURNAL).exists()  # nothing refused reached the journal
    receipt.update("boot", ready=True)
    on_disk = read_receipt(folder)
    assert on_disk["boot"] == {"ready": True} and on_disk["tests"] == {} and on_disk["warnings"] == []
    assert "bot" not in json.dumps(on_disk) and "shown" not in on_disk
    record = read_record(folder)
    assert record.boot is not None and record.boot.ready is True


def test_a_misspelt_read_fails_and_a_declared_one_reads_the_value(scan_run):
    record = read_record(DATA / "runs/stub-ready-8k")
    assert record.boot is not None and record.boot.ready is True and record.serve is None  # declared, absent: None
    with pytest.raises(AttributeError, match="raedy"):
        getattr(record.boot, "raedy")
    with pytest.raises(AttributeError, match="bot"):
        getattr(record, "bot")
    with pytest.raises(AttributeError):  # read, never written: the record is frozen
        setattr(record.boot, "ready", False)
    data = read_receipt(DATA / "runs/stub-ready-8k")  # on disk and as read it stays plain JSON
    assert "boot" in data and json.loads(json.dumps(data))["boot"]["ready"] is True
    scanned = read_record(scan_run)
    entry = next(iter(scanned.tests.values()))
    assert entry.outcome in ("passed", "blocked", "deselected", "skipped")
    with pytest.raises(AttributeError, match="outcom"):
        getattr(entry, "outcom")
    with pytest.raises(AttributeError, match="verdcit"):
        getattr(scanned.phases["machine"], "verdcit")


def test_the_renderers_read_real_receipts_as_records(scan_run):
    """The report's sections and the public summary render real receipts read as records."""
    for folder in [scan_run, *(p.parent for p in RECORDED)]:
        record = read_record(folder)
        assert all(isinstance(s, str) for s in summary.sections(record))
        assert share_summary.share_text(record)


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.parent.name)
def test_recorded_receipts_read_as_records(path):
    data = json.loads(path.read_text())
    assert set(data) <= SECTIONS
    record = record_of(data)  # refuses a key (at any depth) that no type declares, and a value of the wrong type
    assert record.schema == "onegpu/receipt@1" and record.boot is not None and record.boot.ready is not None
    assert held(msgspec.to_builtins(record)) == held(data)  # every value the file holds, read as it is written


def test_a_scan_sessions_receipt_reads_as_a_record(scan_run):
    data = json.loads((scan_run / "receipt.json").read_text())
    assert set(data) <= SECTIONS
    record = record_of(data)
    assert record.verdict and record.verdict == data["verdict"] and record.phases["machine"].verdict
    with pytest.raises(ReceiptShapeError, match=r"unknown field `bot`"):
        record_of({**data, "bot": 1})
    with pytest.raises(ReceiptShapeError, match=r"unknown field `raedy` - at `\$\.boot`"):
        record_of({**data, "boot": {**(data.get("boot") or {}), "raedy": 1}})
    nodeid, entry = next(iter(data["tests"].items()))
    with pytest.raises(ReceiptShapeError, match=r"unknown field `outcom` - at `\$\.tests\[\.\.\.\]`"):
        record_of({**data, "tests": {nodeid: {**entry, "outcom": "passed"}}})


def test_an_unknown_key_in_a_receipt_on_disk_is_refused_with_a_clear_message(tmp_path):
    data = json.loads((DATA / "runs/stub-ready-8k/receipt.json").read_text())
    folder = tmp_path / "edited"
    folder.mkdir()
    (folder / "receipt.json").write_text(json.dumps({**data, "boot": {**data["boot"], "raedy": True}}))
    with pytest.raises(ReceiptShapeError) as refused:
        read_record(folder)
    assert str(refused.value) == "receipt.json: Object contains unknown field `raedy` - at `$.boot`"
    (folder / "receipt.json").write_text(json.dumps({**data, "bot": {}}))
    with pytest.raises(ReceiptShapeError, match=r"^receipt\.json: Object contains unknown field `bot`$"):
        read_record(folder)
    (folder / "receipt.json").write_text(json.dumps({**data, "boot": {**data["boot"], "ready": "yes"}}))
    with pytest.raises(ReceiptShapeError, match=r"^receipt\.json: Expected `bool \| null`, got `str` - at "
                                                r"`\$\.boot\.ready`$"):
        read_record(folder)
    # A key the journal of a killed session holds is refused the same way: the journal is part of the receipt.
    (folder / "receipt.json").write_text(json.dumps(data))
    assert read_record(folder).boot == record_of(data).boot
    (folder / JOURNAL).write_text(json.dumps(["update", "boot", {"raedy": True}]) + "\n")
    with pytest.raises(ReceiptShapeError, match=r"unknown field `raedy` - at `\$\.boot`"):
        read_record(folder)
