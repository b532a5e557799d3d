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
from onegpu.evidence.receipt_schema import PhaseEntry, ReceiptData
from onegpu.evidence.verdicts import progress_words
from onegpu.plan.ceiling_record import percent
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
    receipt: ReceiptData
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
        ca, cb = a.receipt.get("checkpoint") or {}, b.receipt.get("checkpoint") or {}
        header = ""
        if ca and cb:
            same = ca.get("files") == cb.get("files") and ca.get("weight_bytes") == cb.get("weight_bytes")
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


def identity_lines(a: RunEvidence, b: RunEvidence) -> list[str]:
    ra, rb = a.receipt, b.receipt

    def get(receipt, *keys):
        value = receipt
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    lines = [manifest_line(a, b),
             _same("same image ID?", get(ra, "image", "id"), get(rb, "image", "id"), "resolved image", "A", "B"),
             _same("same protocol?", get(ra, "batch", "protocol", "sha256"), get(rb, "batch", "protocol", "sha256"),
                   "batch protocol", "A", "B"),
             _same("same request hash?", get(ra, "batch", "request_file", "sha256"),
                   get(rb, "batch", "request_file", "sha256"), "batch request file", "A", "B"),
             _same("same canary requests?", get(ra, "canary", "request_file", "sha256"),
                   get(rb, "canary", "request_file", "sha256"), "canary", "A", "B"),
             _same("same settings file?", get(ra, "settings", "sha256"), get(rb, "settings", "sha256"),
                   "settings", "A", "B")]
    if a.settings and b.settings:
        keys = sorted(set(a.settings) | set(b.settings))
        diffs = [f"    {k} {a.settings.get(k)!r} -> {b.settings.get(k)!r}" for k in keys
                 if a.settings.get(k) != b.settings.get(k)]
        lines += ["  settings that differ:", *diffs] if diffs else ["  settings that differ: none"]
    return lines


def _phase_text(p: PhaseEntry | None) -> str:
    p = p or {}
    done = progress_words(p.get("progress")) if p.get("verdict") == "INTERRUPTED" else ""
    code = p.get("code")
    return f"{p.get('verdict', 'NOT RUN')}{' ' + code if code else ''}{f' ({done})' if done else ''}"


def verdict_lines(a: RunEvidence, b: RunEvidence) -> list[str]:
    pa, pb = a.receipt.get("phases") or {}, b.receipt.get("phases") or {}
    lines = ["verdicts", f"  A: {a.receipt.get('verdict') or 'no verdict (the session did not finish)'}",
             f"  B: {b.receipt.get('verdict') or 'no verdict (the session did not finish)'}"]
    diffs = [f"  {ph:<8} {_phase_text(pa.get(ph))} -> {_phase_text(pb.get(ph))}" for ph in PHASES
             if _phase_text(pa.get(ph)) != _phase_text(pb.get(ph))]
    lines += diffs or ["  every phase has the same verdict"]
    return lines + capacity_lines(a.receipt.get("capacity"), b.receipt.get("capacity"))


def _capacity_text(v: dict | None) -> str:
    if not v:
        return "not computed"
    status = f"BLOCKED {v.get('code')}" if v.get("status") == "BLOCKED" else str(v.get("status"))
    numbers = ", ".join(f"{k} {_value(k, n)}" for k, n in (v.get("numbers") or {}).items() if isinstance(n, (int, float)))
    return f"{status}{f' ({numbers})' if numbers else ''}"


def capacity_lines(ca: list | None, cb: list | None) -> list[str]:
    """Every capacity check of both runs: "!" rows differ and show both verdicts with all their numbers (bytes
    as GiB) side by side; "=" rows are the same in both."""
    ra = {v.get("check"): v for v in ca or [] if isinstance(v, dict)}
    rb = {v.get("check"): v for v in cb or [] if isinstance(v, dict)}
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


def _diff_block(title: str, keys, va: Mapping, vb: Mapping) -> list[str]:
    if bool(va) != bool(vb):
        return [title, f"  recorded in {'A' if va else 'B'} only"]
    rows = [f"  {k}: {_value(k, va.get(k))} -> {_value(k, vb.get(k))}" for k in keys if va.get(k) != vb.get(k)]
    return [title, *(rows or ["  the same"])]


def fact_lines(a: RunEvidence, b: RunEvidence) -> list[str]:
    ra, rb = a.receipt, b.receipt
    ba, bb = ra.get("boot") or {}, rb.get("boot") or {}
    if not ba and not bb:
        boot = ["boot facts", "  no boot in either run"]
    else:
        ready = f"  ready: {ba.get('ready', 'not run')} -> {bb.get('ready', 'not run')}"
        boot = _diff_block("boot facts", BOOT_FACTS, ba.get("facts") or {}, bb.get("facts") or {})
        boot.insert(1, ready)
    lines = boot + _diff_block("memory peaks (samples)", PEAKS, ra.get("samples") or {}, rb.get("samples") or {})
    ta, tb = ra.get("timings_s") or {}, rb.get("timings_s") or {}
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
        sa = ((ra.get("canary") if what == "canary" else ra.get("batch")) or {}).get("summary") or {}
        sb = ((rb.get("canary") if what == "canary" else rb.get("batch")) or {}).get("summary") or {}
        if sa or sb:
            lines += _diff_block(f"{what} (UNSCORED counts and transport times)", COUNTS, sa, sb)
    return lines


def _ceiling_values(receipt) -> dict:
    """The link ceiling's figures and the measured shares, flat, for a side-by-side diff."""
    c = receipt.get("ceiling") or {}
    link = c.get("link") or {}
    values = {"link": f"{link.get('basis')} {link.get('gbps'):.1f} GB/s" if link.get("gbps") else link.get("basis"),
              "one_token_step_bytes": (c.get("step_bytes") or {}).get("1"),
              "decode upper bound, one sequence": _tps((c.get("decode_tps") or {}).get("1")),
              "prefill upper bound": _tps(c.get("prefill_tps"))}
    for row in receipt.get("rates_vs_ceiling") or []:
        if isinstance(row, dict) and row.get("fraction") is not None:
            values[f"measured {row.get('run')} {row.get('rate')}"] = (
                f"{row.get('measured_tps'):,.2f} tokens/s = {percent(row['fraction'])} of its bound"
                + (" (ABOVE THE CEILING)" if row["fraction"] > 1 else ""))
    return {k: v for k, v in values.items() if v is not None}


def _tps(value) -> str | None:
    return f"at most {value:,.2f} tokens/s" if isinstance(value, (int, float)) else None


def ceiling_lines(ra, rb) -> list[str]:
    """The link ceilings and the measured shares of A and B."""
    va, vb = _ceiling_values(ra), _ceiling_values(rb)
    return _diff_block("link ceiling (UPPER BOUNDS) and measured shares", list(dict.fromkeys([*va, *vb])), va, vb)


def gpu_protocol(receipt) -> str:
    """The run's GPU protocol: the multi-GPU protocol's label, else the one-GPU protocol."""
    return multi_gpu_protocol(receipt) or "one-GPU protocol"


def compare_runs(a: RunEvidence, b: RunEvidence) -> list[str]:
    """The comparison, one line each: identities first, then the differences."""
    head = [f"A: {a.label} ({a.receipt.get('kind')}, started {a.receipt.get('started_at')}, "
            f"{gpu_protocol(a.receipt)})",
            f"B: {b.label} ({b.receipt.get('kind')}, started {b.receipt.get('started_at')}, "
            f"{gpu_protocol(b.receipt)})", ""]
    if gpu_protocol(a.receipt) != gpu_protocol(b.receipt):
        head += [f"DIFFERENT PROTOCOLS: A is the {gpu_protocol(a.receipt)}, B the {gpu_protocol(b.receipt)}; the "
                 "differences below are between two separate protocols, never one result", ""]
    return head + identity_lines(a, b) + [""] + verdict_lines(a, b) + [""] + fact_lines(a, b)


if __name__ == "__main__":  # `python -m onegpu.report.compare RUN_A RUN_B`
    import sys

    from onegpu.report.compare_cli import main

    sys.exit(main(sys.argv[1:]))
