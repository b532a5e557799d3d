"""Pure: two run folders' evidence -> the lines comparing them.

First what makes two runs comparable at all (same checkpoint manifest, same image ID, same protocol and
request hash, same settings), then what differs: verdicts, capacity, boot facts, memory peaks, timings and
request counts. The command is `python -m onegpu.report.compare RUN_A RUN_B` (onegpu.report.compare_cli reads the folders).
"""
from __future__ import annotations

import hashlib
from typing import Mapping

from msgspec import Struct, field

from onegpu.core.outcomes import PHASES
from onegpu.core.units import gib
from onegpu.plan.ceiling_record import percent
from onegpu.record.base import Section
from onegpu.record.entries import PhaseEntry
from onegpu.record.receipt import ReceiptRecord
from onegpu.record.sections_insight import Ceiling, CeilingLink
from onegpu.record.sections_plan import CapacityRow
from onegpu.record.verdicts import progress_words
from onegpu.report.parts import multi_gpu_protocol

TIMINGS = ("hashing", "probe", "load", "canary", "batch", "serve")
BOOT_FACTS = ("kv_cache_gib", "kv_cache_tokens", "max_concurrency", "concurrency_tokens", "load_gib", "load_s",
              "cpu_offload_gib", "server_started", "vllm_version")
PEAKS = ("gpu_used_bytes_max", "gpu_free_bytes_min", "host_available_bytes_min", "container_memory_bytes_max")
COUNTS = ("expected", "received", "answered_2xx", "missing", "length_limited", "empty_generations",
          "output_tokens_per_s", "median_elapsed_s", "median_ttfb_s")
LISTED = 20  # file names listed per kind of manifest difference


class RunEvidence(Struct, frozen=True):
    """What compare needs from one run folder (read by onegpu.report.compare_cli)."""

    label: str  # how the lines name the folder (its path)
    receipt: ReceiptRecord
    manifest: dict | None = None  # manifest.json, when custody ran
    settings: dict = field(default_factory=dict)  # the settings values the session read


def content_digest(files: list[dict]) -> str:
    """SHA-256 over (relative path, size, SHA-256) of every file: equal exactly when the contents are."""
    rows = sorted(f"{f['path']}\0{f['size']}\0{f['sha256']}\n" for f in files)
    return hashlib.sha256("".join(rows).encode()).hexdigest()


def _names(paths, total: int) -> str:
    shown = sorted(paths)[:LISTED]
    return ", ".join(shown) + (f", ... {total - len(shown)} more" if total > len(shown) else "")


def manifest_line(a: RunEvidence, b: RunEvidence) -> str:
    if a.manifest is None or b.manifest is None:
        missing = [r.label for r in (a, b) if r.manifest is None]
        ca, cb = a.receipt.checkpoint, b.receipt.checkpoint
        header = ""
        if ca is not None and cb is not None:
            same = ca.files == cb.files and ca.weight_bytes == cb.weight_bytes
            header = ("; by the headers only: same file list and header bytes (names and sizes, not contents)"
                      if same else "; by the headers only: the file lists or header bytes DIFFER")
        return (f"same checkpoint manifest?   UNKNOWN: no manifest.json in {' and '.join(missing)} (custody did "
                f"not run){header}")
    fa = {f["path"]: f for f in a.manifest["files"]}
    fb = {f["path"]: f for f in b.manifest["files"]}
    only_a, only_b = set(fa) - set(fb), set(fb) - set(fa)
    changed = {p for p in set(fa) & set(fb) if (fa[p]["sha256"], fa[p]["size"]) != (fb[p]["sha256"], fb[p]["size"])}
    if not (only_a or only_b or changed):
        total = sum(f["size"] for f in fa.values())
        return (f"same checkpoint manifest?   YES: {len(fa)} files, {total:,} bytes, every path, size and SHA-256 "
                f"equal (content digest {content_digest(list(fa.values()))})")
    parts = [f"{len(changed)} file(s) with other contents: {_names(changed, len(changed))}" if changed else "",
             f"only in A: {_names(only_a, len(only_a))}" if only_a else "",
             f"only in B: {_names(only_b, len(only_b))}" if only_b else ""]
    return "same checkpoint manifest?   NO: " + "; ".join(p for p in parts if p)


def _same(question: str, va, vb, what: str, la: str, lb: str) -> str:
    label = f"{question:<27} "
    if va is None or vb is None:
        where = " and ".join(name for name, v in ((la, va), (lb, vb)) if v is None)
        return f"{label}UNKNOWN: no {what} in {where}"
    return f"{label}YES: {va}" if va == vb else f"{label}NO: A {va}, B {vb}"


def _image_id(r: ReceiptRecord) -> str | None:
    return r.image.id if r.image is not None else None


def _protocol_sha256(r: ReceiptRecord) -> str | None:
    return r.batch.protocol.sha256 if r.batch is not None and r.batch.protocol is not None else None


def _batch_requests_sha256(r: ReceiptRecord) -> str | None:
    return r.batch.request_file.sha256 if r.batch is not None and r.batch.request_file is not None else None


def _canary_requests_sha256(r: ReceiptRecord) -> str | None:
    return r.canary.request_file.sha256 if r.canary is not None and r.canary.request_file is not None else None


def _settings_sha256(r: ReceiptRecord) -> str | None:
    return r.settings.sha256 if r.settings is not None else None


def identity_lines(a: RunEvidence, b: RunEvidence) -> list[str]:
    ra, rb = a.receipt, b.receipt
    lines = [manifest_line(a, b),
             _same("same image ID?", _image_id(ra), _image_id(rb), "resolved image", "A", "B"),
             _same("same protocol?", _protocol_sha256(ra), _protocol_sha256(rb), "batch protocol", "A", "B"),
             _same("same request hash?", _batch_requests_sha256(ra), _batch_requests_sha256(rb),
                   "batch request file", "A", "B"),
             _same("same canary requests?", _canary_requests_sha256(ra), _canary_requests_sha256(rb), "canary",
                   "A", "B"),
             _same("same settings file?", _settings_sha256(ra), _settings_sha256(rb), "settings", "A", "B")]
    if a.settings and b.settings:
        keys = sorted(set(a.settings) | set(b.settings))
        diffs = [f"    {k} {a.settings.get(k)!r} -> {b.settings.get(k)!r}" for k in keys
                 if a.settings.get(k) != b.settings.get(k)]
        lines += ["  settings that differ:", *diffs] if diffs else ["  settings that differ: none"]
    return lines


def _phase_text(p: PhaseEntry | None) -> str:
    verdict = p.verdict if p is not None and p.verdict is not None else "NOT RUN"
    done = progress_words(p.progress) if p is not None and verdict == "INTERRUPTED" else ""
    code = p.code if p is not None else None
    return f"{verdict}{' ' + code if code else ''}{f' ({done})' if done else ''}"


def verdict_lines(a: RunEvidence, b: RunEvidence) -> list[str]:
    pa, pb = a.receipt.phases, b.receipt.phases
    lines = ["verdicts", f"  A: {a.receipt.verdict or 'no verdict (the session did not finish)'}",
             f"  B: {b.receipt.verdict or 'no verdict (the session did not finish)'}"]
    diffs = [f"  {ph:<8} {_phase_text(pa.get(ph))} -> {_phase_text(pb.get(ph))}" for ph in PHASES
             if _phase_text(pa.get(ph)) != _phase_text(pb.get(ph))]
    lines += diffs or ["  every phase has the same verdict"]
    return lines + capacity_lines(a.receipt.capacity, b.receipt.capacity)


def _capacity_text(v: CapacityRow | None) -> str:
    if v is None:
        return "not computed"
    status = f"BLOCKED {v.code}" if v.status == "BLOCKED" else str(v.status)
    numbers = ", ".join(f"{k} {_value(k, n)}" for k, n in (v.numbers or {}).items() if isinstance(n, (int, float)))
    return f"{status}{f' ({numbers})' if numbers else ''}"


def capacity_lines(ca: list[CapacityRow] | None, cb: list[CapacityRow] | None) -> list[str]:
    """Every capacity check of both runs: "!" rows differ and show both verdicts with all their numbers (bytes
    as GiB) side by side; "=" rows are the same in both."""
    ra = {v.check: v for v in ca or []}
    rb = {v.check: v for v in cb or []}
    if not ra and not rb:
        return ["capacity (A | B)", "  computed in neither run"]
    out = ["capacity (A | B)"]
    for check in list(dict.fromkeys([*ra, *rb])):
        a, b = _capacity_text(ra.get(check)), _capacity_text(rb.get(check))
        if a == b:
            out.append(f"  = {check}: {a.split(' (')[0]} in both, same numbers")
        else:
            out.append(f"  ! {check}: A {a} | B {b}")
    return out


def _value(key: str, value) -> str:
    if value is None:
        return "none"
    return gib(value) if key.endswith(("_bytes", "_bytes_max", "_bytes_min")) else str(value)


def _picked(section: Section | None, keys: tuple[str, ...]) -> dict[str, object]:
    """The named fields of a recorded section ({} when the section was not recorded), for _diff_block."""
    return {} if section is None else {k: getattr(section, k) for k in keys}


def _diff_block(title: str, keys, va: Mapping, vb: Mapping) -> list[str]:
    if bool(va) != bool(vb):
        return [title, f"  recorded in {'A' if va else 'B'} only"]
    rows = [f"  {k}: {_value(k, va.get(k))} -> {_value(k, vb.get(k))}" for k in keys if va.get(k) != vb.get(k)]
    return [title, *(rows or ["  the same"])]


def _ready(r: ReceiptRecord) -> object:
    return r.boot.ready if r.boot is not None and r.boot.ready is not None else "not run"


def fact_lines(a: RunEvidence, b: RunEvidence) -> list[str]:
    ra, rb = a.receipt, b.receipt
    if ra.boot is None and rb.boot is None:
        boot = ["boot facts", "  no boot in either run"]
    else:
        ready = f"  ready: {_ready(ra)} -> {_ready(rb)}"
        boot = _diff_block("boot facts", BOOT_FACTS, _picked(ra.boot.facts if ra.boot else None, BOOT_FACTS),
                           _picked(rb.boot.facts if rb.boot else None, BOOT_FACTS))
        boot.insert(1, ready)
    lines = boot + _diff_block("memory peaks (samples)", PEAKS, _picked(ra.samples, PEAKS), _picked(rb.samples, PEAKS))
    ta, tb = ra.timings_s, rb.timings_s
    timing = ["timings (s, each phase's own)"]
    for key in TIMINGS:
        x, y = ta.get(key), tb.get(key)
        if x is None and y is None:
            continue
        delta = f" ({y - x:+.3f})" if x is not None and y is not None else ""
        timing.append(f"  {key}: {'not run' if x is None else x} -> {'not run' if y is None else y}{delta}")
    lines += timing if len(timing) > 1 else [timing[0], "  no timed phase in either run"]
    lines += ceiling_lines(ra, rb)
    for what in ("canary", "batch"):
        run_a, run_b = (ra.canary, rb.canary) if what == "canary" else (ra.batch, rb.batch)
        sa = _picked(run_a.summary if run_a is not None else None, COUNTS)
        sb = _picked(run_b.summary if run_b is not None else None, COUNTS)
        if sa or sb:
            lines += _diff_block(f"{what} (UNSCORED counts and transport times)", COUNTS, sa, sb)
    return lines


def _ceiling_values(receipt: ReceiptRecord) -> dict[str, object]:
    """The link ceiling's figures and the measured shares, flat, for a side-by-side diff."""
    c = receipt.ceiling if receipt.ceiling is not None else Ceiling()
    link = c.link if c.link is not None else CeilingLink()
    steps, decode = c.step_bytes or {}, c.decode_tps or {}
    values: dict[str, object] = {"link": f"{link.basis} {link.gbps:.1f} GB/s" if link.gbps else link.basis,
                                 "one_token_step_bytes": steps.get("1"),
                                 "decode upper bound, one sequence": _tps(decode.get("1")),
                                 "prefill upper bound": _tps(c.prefill_tps)}
    for row in receipt.rates_vs_ceiling or []:
        if row.fraction is not None:
            values[f"measured {row.run} {row.rate}"] = (
                f"{row.measured_tps:,.2f} tokens/s = {percent(row.fraction)} of its bound"
                + (" (ABOVE THE CEILING)" if row.fraction > 1 else ""))
    return {k: v for k, v in values.items() if v is not None}


def _tps(value: int | float | None) -> str | None:
    return f"at most {value:,.2f} tokens/s" if value is not None else None


def ceiling_lines(ra: ReceiptRecord, rb: ReceiptRecord) -> list[str]:
    """The link ceilings and the measured shares of A and B."""
    va, vb = _ceiling_values(ra), _ceiling_values(rb)
    return _diff_block("link ceiling (UPPER BOUNDS) and measured shares", list(dict.fromkeys([*va, *vb])), va, vb)


def gpu_protocol(receipt: ReceiptRecord) -> str:
    """The run's GPU protocol: the multi-GPU protocol's label, else the one-GPU protocol."""
    return multi_gpu_protocol(receipt) or "one-GPU protocol"


def compare_runs(a: RunEvidence, b: RunEvidence) -> list[str]:
    """The comparison, one line each: identities first, then the differences."""
    head = [f"A: {a.label} ({a.receipt.kind}, started {a.receipt.started_at}, {gpu_protocol(a.receipt)})",
            f"B: {b.label} ({b.receipt.kind}, started {b.receipt.started_at}, {gpu_protocol(b.receipt)})", ""]
    if gpu_protocol(a.receipt) != gpu_protocol(b.receipt):
        head += [f"DIFFERENT PROTOCOLS: A is the {gpu_protocol(a.receipt)}, B the {gpu_protocol(b.receipt)}; the "
                 "differences below are between two separate protocols, never one result", ""]
    return head + identity_lines(a, b) + [""] + verdict_lines(a, b) + [""] + fact_lines(a, b)


if __name__ == "__main__":  # `python -m onegpu.report.compare RUN_A RUN_B`
    import sys

    from onegpu.report.compare_cli import main

    sys.exit(main(sys.argv[1:]))
