"""The one reader of receipt data: receipt.json (with the journal a killed session left folded in) as one
typed record, `ReceiptRecord`, read by attribute everywhere else in the kit.

receipt.json stays plain JSON (schema onegpu/receipt@1); a key a section's writer left out reads None, and a key
no type here declares is refused (the kit writes only declared keys), so a receipt written by an earlier session
of the same schema reads exactly as one written now.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, get_type_hints

import msgspec

from onegpu.evidence.journal import read_receipt
from onegpu.record.base import Section
from onegpu.record.entries import PhaseEntry, TestEntry
from onegpu.record.sections_insight import Calibration, Ceiling, OperatorScore, Proposal, RateRow
from onegpu.record.sections_load import Boot, Engine, Image, Landing, Launch, Probe, Samples
from onegpu.record.sections_machine import GpuLock, Hardware, Leftovers, Replay, Selection
from onegpu.record.sections_plan import (
    CapacityAccounting,
    CapacityRow,
    Checkpoint,
    Consistency,
    KvCache,
    Plan,
    Settings,
)
from onegpu.record.sections_requests import Batch, Canary, Custody, Deadlines, Interrupted, Reaper, Serve


class Kit(Section, frozen=True):
    name: str | None = None
    version: str | None = None
    git_commit: str | None = None


class ReceiptRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """receipt.json. Header and session bookkeeping first, then the sections in the order the phases write them."""
    schema: str | None = None
    kit: Kit | None = None
    command_line: list[str] | None = None
    working_folder: str | None = None
    kind: str | None = None
    run_folder: str | None = None
    hardware_source: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    tests: dict[str, TestEntry] = {}
    phases: dict[str, PhaseEntry] = {}
    timings_s: dict[str, int | float] = {}
    timeline: dict[str, list[int | float]] = {}  # each timed phase's [start, end], seconds since the epoch
    warnings: list[str] = []
    limitations: list[str] = []
    banners: list[str] = []
    shown: dict[str, list[str]] = {}
    tables: dict[str, list[str]] = {}
    earlier_sessions: list[ReceiptRecord] = []  # what a resumed run folder's earlier sessions recorded
    timeout_backstop_s: int | float | None = None
    interrupted: Interrupted | None = None
    reaper: Reaper | None = None
    verdict: str | None = None
    exit_status: int | None = None
    # machine (onegpu.phases.machine)
    hardware: Hardware | None = None
    replay: Replay | None = None
    selection: Selection | None = None
    # plan (onegpu.phases.plan, plan_ceiling, plan_launch, plan_insight)
    settings: Settings | None = None
    settings_errors: list[str] | None = None
    checkpoint: Checkpoint | None = None
    kv_cache: KvCache | None = None
    capacity: list[CapacityRow] | None = None
    capacity_accounting: CapacityAccounting | None = None
    ceiling: Ceiling | None = None
    rates_vs_ceiling: list[RateRow] | None = None  # measured rates as fractions of the ceilings
    image: Image | None = None
    launch: Launch | None = None
    plan: Plan | None = None
    consistency: Consistency | None = None
    calibration: Calibration | None = None
    proposal: Proposal | None = None
    operator_score: OperatorScore | None = None
    # probe and load (onegpu.phases.probe, load, load_landing)
    leftovers: Leftovers | None = None
    gpu_lock: GpuLock | None = None
    probe: Probe | None = None
    engine: Engine | None = None
    boot: Boot | None = None
    samples: Samples | None = None  # the peaks and counts of samples.jsonl (onegpu.engine.sampler)
    landing: Landing | None = None
    # custody, canary, batch, serve (onegpu.phases.custody, canary, batch, serve)
    custody: Custody | None = None
    request_errors: dict[str, list[str]] | None = None
    deadlines: Deadlines | None = None
    canary: Canary | None = None
    batch: Batch | None = None
    serve: Serve | None = None


SECTIONS = frozenset(ReceiptRecord.__struct_fields__)
_TYPES: dict[str, Any] = {}  # section -> its declared type, resolved on first use


class ReceiptShapeError(ValueError):
    """A receipt holds, or a writer was about to record, a value this record does not declare (the message names
    the path and the rule)."""


# A section's state only moves forward: a serve window once CLOSED is never written READY again, whoever writes.
STATE_ORDER = {"serve": ("STARTING", "READY", "CLOSED")}


def check_write(section: str, value: object, current: object = None) -> None:
    """Raise ReceiptShapeError unless `value` is what the record declares for `section` (for an update, the keys
    written) and, where the section has a state, moves it forward from `current` (the section as recorded so
    far): the receipt checks every write with it, so a writer that drifts from the record fails the test that
    writes, not a later reader."""
    if not _TYPES:
        _TYPES.update(get_type_hints(ReceiptRecord))
    kind = _TYPES.get(section)
    if kind is None:
        raise ReceiptShapeError(f"receipt field {section} is not declared in onegpu.record.receipt")
    order = STATE_ORDER.get(section)
    try:
        new = msgspec.convert(value, kind)
        # the section so far is read only where a state must move forward (not on every update of every section)
        old = msgspec.convert(current, kind) if order and current is not None else None
    except msgspec.ValidationError as exc:
        raise ReceiptShapeError(f"receipt.{section}: {exc}") from None
    if order and old is not None and new is not None and new.state is not None and old.state is not None \
            and order.index(new.state) < order.index(old.state):
        raise ReceiptShapeError(f"receipt.{section}.state: {old.state} cannot move back to {new.state} (a state only "
                                f"moves forward: {' -> '.join(order)})")


def record_of(data: dict) -> ReceiptRecord:
    """The typed record of receipt data as read from disk (or kept in memory by the session)."""
    try:
        return msgspec.convert(data, ReceiptRecord)
    except msgspec.ValidationError as exc:
        raise ReceiptShapeError(f"receipt.json: {exc}") from None


def read_record(folder: Path) -> ReceiptRecord:
    """The receipt of a run folder as its session last recorded it, finished or not."""
    return record_of(read_receipt(folder))
