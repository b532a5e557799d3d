"""Pure: a receipt -> summary-share.md, the reduced summary safe to post publicly.

Built from an allow-list, never by scrubbing: each line takes named fields only, numbers only where numbers
belong, and identifiers only when they match their expected shape (a model ID, a 40-hex revision, a sha256
image ID, a version, a GPU model name: onegpu.report.share_shapes). Free text from the run (messages, banners, log
lines, paths, host names, UUIDs, keys, prompts, responses) is never copied; outcome codes are explained with
the kit's own sentences from onegpu.core.outcomes.CODES. The lines of the advice and measurements (proposal,
calibration, consistency, landing, operator-supplied score) are in onegpu.report.share_insight.
"""
from __future__ import annotations

import re

from onegpu.core.limitations import GPU_LOCK as GPU_LOCK_LIMITATION
from onegpu.core.outcomes import CODES, PHASES, consequence
from onegpu.plan.vllm_versions import accounting_from_record
from onegpu.record.entries import PhaseProgress
from onegpu.record.receipt import ReceiptRecord
from onegpu.record.sections_load import BootFailure
from onegpu.record.sections_machine import GpuDevice, Selection
from onegpu.record.sections_plan import SettingsValues
from onegpu.record.sections_requests import EngineEnd
from onegpu.record.verdicts import capacity_tally
from onegpu.report.boot_facts import share_line
from onegpu.report.parts import ONE_WORKER, RANK0_GPU, multi_gpu_protocol
from onegpu.report.share_ceiling import ceiling_share_lines
from onegpu.report.share_insight import calibration_lines, consistency_lines, landing_lines, proposal_lines, score_lines
from onegpu.report.share_shapes import SHAPES, WITHHELD, gib, number, shaped
from onegpu.report.share_shapes import finite as _n

# Limitations written by the kit's own modules, shared word for word; any other limitation is only counted.
KNOWN_LIMITATIONS = (GPU_LOCK_LIMITATION,)
STANDING = ("header bytes are not the loaded footprint: a capacity OK means no definite failure was found, never "
            "that the model fits",
            "request figures are UNSCORED: counts and transport times, not a score or a benchmark result")
ONE_CARD_COUNTED = "only the selected GPU is counted; any other card in the machine is ignored"
SET_COUNTED = "only the GPUs of the multi-GPU protocol's set are counted, each as its rank; any other card is ignored"
SIMULATED_PREFIX = "GPU SIMULATED:"
SHARED_VERDICTS = ("PASSED", "BLOCKED", "FAILED", "SKIPPED", "INTERRUPTED")
CUT_BY = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM", "timeout_backstop": "the timeout backstop"}
QUOTED = "reason quoted in the private report"


def quoted_codes(receipt: ReceiptRecord) -> set[str]:
    """The codes for which the receipt holds the engine's own words (boot failure, a death during the
    canary, batch or serve window); the words stay in the private report, only the fact is shared."""
    runs = [r.session_run for r in (receipt.canary, receipt.batch) if r is not None]
    ends: list[BootFailure | EngineEnd | None] = [
        receipt.boot.failure if receipt.boot is not None else None,
        *(run.engine_end for run in runs if run is not None),
        receipt.serve.engine_end if receipt.serve is not None else None]
    return {e.code for e in ends if e is not None and e.code is not None and e.code in CODES and e.quote}


def meaning(code: str, quoted: set[str]) -> str:
    """The kit's sentence for a code, and where the engine's own reason is, when it stated one."""
    return CODES.get(code, "") + (f"; {QUOTED}" if code in quoted else "")


def verdict_lines(receipt: ReceiptRecord) -> list[str]:
    """The run's verdict rebuilt from phase codes (the receipt's verdict line holds free text)."""
    rows: list[tuple[str, str, str]] = []
    codes: list[str] = []
    done: dict[str, str] = {}
    for phase in PHASES:
        p = receipt.phases.get(phase)
        verdict = str(p.verdict) if p is not None and p.verdict in SHARED_VERDICTS else "NOT RUN"
        rows.append((phase, verdict, str(p.code) if p is not None and p.code in CODES else ""))
        codes += [c for c in (p.codes if p is not None else None) or [] if c in CODES and c not in codes]
        if verdict == "INTERRUPTED":
            done[phase] = _progress(p.progress if p is not None else None)
    cut = [r[0] for r in rows if r[1] == "INTERRUPTED"]
    failed = [r for r in rows if r[1] == "FAILED"]
    blocked = [r for r in rows if r[1] == "BLOCKED"]
    passed = [r[0] for r in rows if r[1] == "PASSED"]
    if cut:
        by = receipt.interrupted.by if receipt.interrupted is not None else None
        cut_by = CUT_BY.get(by) if by is not None else None
        head = (f"**Verdict: INTERRUPTED in phase {cut[0]}**{' (' + done[cut[0]] + ')' if done[cut[0]] else ''}: "
                f"the session was cut{' by ' + cut_by if cut_by else ''} before it finished"
                + (f"; also interrupted: {', '.join(cut[1:])}" if cut[1:] else "")
                + "; nothing of an interrupted phase is a result")
    elif failed:
        head = f"**Verdict: FAILED in phase {failed[0][0]}** (an unexpected error; see the private report)"
    elif blocked:
        phase, _, code = max(blocked, key=lambda r: consequence(r[2]))  # ties: the earliest phase
        head = f"**Verdict: BLOCKED {code} in phase {phase}**: {meaning(code, quoted_codes(receipt))}"
        tally = capacity_tally([c for c in receipt.capacity or [] if re.fullmatch(r"[a-z0-9_]{1,40}", str(c.check))])
        if consequence(code) == 0 and tally:
            head += f"; capacity: {tally}, but nothing could start here"
        others = [c for c in dict.fromkeys([*codes, *(c for _, _, c in blocked)]) if c and c != code]
        head += f" (also blocked: {', '.join(others)})" if others else ""
    elif passed:
        head = (f"**Verdict: NO DEFINITE FAILURE FOUND** in phases {', '.join(passed)} (not a claim that the model "
                "fits or runs)")
    else:
        head = "**Verdict: NOTHING RAN** (or the session did not finish)"
    return [head, "", "| phase | verdict | code |", "|---|---|---|",
            *(f"| {p} | {v}{' (' + done[p] + ')' if done.get(p) else ''} | {c} |" for p, v, c in rows)]


def _progress(p: PhaseProgress | None) -> str:
    """"10 of 50 answered" from numbers only (the unit is the kit's own word, checked)."""
    if p is not None and p.done is not None and p.of is not None and p.unit == "answered":
        return f"{p.done} of {p.of} answered"
    return ""


def _banners(receipt: ReceiptRecord) -> list[str]:
    out = []
    protocol = multi_gpu_protocol(receipt)
    if protocol:
        out.append(f"**MULTI-GPU: {shaped('protocol', protocol)}**: vLLM's own tensor and pipeline parallelism over "
                   "several GPUs, a separate protocol: nothing of this run is a one-GPU result or may be pooled "
                   "with one.")
    if receipt.hardware_source == "replayed":
        out.append("**HARDWARE FACTS REPLAYED** from a recorded profile: they describe that machine, not the one "
                   "this ran on; nothing was started.")
    if receipt.checkpoint is not None and receipt.checkpoint.synthetic is True:
        out.append("**CHECKPOINT IS SYNTHETIC**: header-only shards with no weights; the numbers are about its "
                   "layout, and nothing could be loaded from it.")
    if receipt.launch is not None and receipt.launch.engine_platform == "cpu":
        out.append("**CPU ENGINE DOUBLE**: the engine was vLLM's CPU build, a test of the kit against the real "
                   "engine on a tiny model; no figure of this run says anything of a GPU.")
    if any(b.startswith(SIMULATED_PREFIX) for b in receipt.banners):
        out.append("**GPU SIMULATED**: a test of the kit against a stub engine, not a model.")
    return out


def _one_card(receipt: ReceiptRecord) -> str:
    gpu = receipt.hardware.gpu if receipt.hardware is not None else None
    devices = (gpu.devices if gpu is not None else None) or []
    selection = receipt.selection
    if selection is not None and selection.protocol:
        return _gpu_set_line(selection, devices)
    index = selection.gpu_index if selection is not None else None
    chosen = next((d for d in devices if d.index == index), None)
    if chosen is None:
        return f"no GPU selected ({len(devices)} visible)"
    others = len(devices) - 1
    return (f"one GPU: {shaped('gpu_name', chosen.name)} {gib(chosen.total_bytes)}; "
            + (f"{others} other card(s) in the machine not counted" if others else "no second card counted"))


def _gpu_set_line(selection: Selection, devices: list[GpuDevice]) -> str:
    """The multi-GPU protocol's cards, named as such: never "one GPU"."""
    by_index = {d.index: d for d in devices}
    cards = [by_index.get(member.index) for member in selection.gpu_set or []]
    shown = ", ".join(f"{shaped('gpu_name', d.name if d is not None else None)} "
                      f"{gib(d.total_bytes if d is not None else None)}" for d in cards)
    return (f"{shaped('protocol', selection.protocol)}, not a one-GPU result: "
            + (shown or "its GPUs were not found"))


def model_lines(receipt: ReceiptRecord, settings: SettingsValues) -> list[str]:
    """Model, revision, image ID, the engine in the image and the checkpoint's layout."""
    image, probe, ckpt = receipt.image, receipt.probe, receipt.checkpoint
    lines = [f"- model: `{shaped('model_id', settings.model_id)}` at revision "
             f"`{shaped('revision', settings.model_revision)}`",
             f"- image ID: `{shaped('image_id', image.id)}`" if image is not None else "- image ID: not resolved"]
    if probe is not None and probe.passed:
        lines.append(f"- engine in the image: vLLM {shaped('version', probe.vllm_version)}, torch "
                     f"{shaped('version', probe.torch_version)}, CUDA devices seen "
                     f"{number(probe.cuda_device_count)}")
    if ckpt is not None:
        quant = ckpt.quant
        store_dtype = quant.store_dtype if quant is not None else None
        dtypes = ", ".join(f"{shaped('word', k)} {gib(v)}" for k, v in (ckpt.bytes_by_dtype or {}).items())
        lines.append(f"- checkpoint: {', '.join(shaped('word', a) for a in ckpt.architectures or [])} "
                     f"({shaped('word', ckpt.model_type)}), quantization "
                     f"{shaped('word', quant.method if quant is not None else None)}"
                     + (f" stored as {shaped('word', store_dtype)}" if store_dtype else "")
                     + f"; {number(len(ckpt.shards or []))} shards, {number(ckpt.tensor_count)} "
                       f"tensors, header bytes {gib(ckpt.weight_bytes)} ({dtypes})")
    return lines


def machine_lines(receipt: ReceiptRecord) -> list[str]:
    """The one-card observation, driver, host RAM and Docker."""
    hw = receipt.hardware
    if hw is None:
        return ["- machine facts: not read"]
    gpu, host, docker = hw.gpu, hw.host, hw.docker
    lines = [f"- {_one_card(receipt)}"]
    if gpu is not None and gpu.nvml_loaded:
        lines.append(f"- NVIDIA driver {shaped('version', gpu.driver_version)}, CUDA driver API "
                     f"{shaped('version', gpu.cuda_driver_version)}")
    stated = " (stated by the operator)" if host is not None and host.ram_stated_by_operator is True else ""
    lines.append(f"- host RAM {gib(host.ram_total_bytes if host is not None else None)} total{stated}, CPUs usable "
                 f"{number(host.cpus_usable if host is not None else None)}; hardware facts "
                 f"{'REPLAYED' if receipt.hardware_source == 'replayed' else 'read live'}")
    if docker is not None and docker.reachable is True:
        lines.append(f"- Docker {shaped('version', docker.server_version)}, swap limits enforced: "
                     f"{'yes' if docker.swap_limit is True else 'no'}")
    return lines


def settings_lines(settings: SettingsValues | None) -> list[str]:
    """Context, offload, RAM cap and deadlines from the settings values."""
    if settings is None:
        return ["- settings: not read"]
    kv_dtype = settings.kv_cache_dtype
    return [f"- context {number(settings.context_tokens)} tokens, prefill chunk "
            f"{number(settings.prefill_chunk_tokens)} tokens, KV-cache dtype "
            f"{shaped('word', kv_dtype) if kv_dtype else 'the model dtype (assumed)'}",
            f"- CPU offload {number(settings.cpu_offload_gib, ' GiB')}, container RAM cap "
            f"{number(settings.container_ram_gib, ' GiB')} (swap cap equal to it), host headroom "
            f"{number(settings.host_headroom_gib, ' GiB')}, non-weight GPU reserve "
            f"{number(settings.gpu_reserve_gib, ' GiB')}",
            f"- deadlines: boot {number(settings.boot_deadline_s, ' s', 0)}; overall deadline_s "
            f"{number(settings.deadline_s, ' s', 0)} (counted from the first request phase); each request "
            f"request_timeout_s {number(settings.request_timeout_s, ' s', 0)}"]


def capacity_lines(receipt: ReceiptRecord) -> list[str]:
    """Each capacity check's status and code, and the KV-cache estimate."""
    rows = receipt.capacity or []
    if not rows:
        return ["- capacity: not computed"]
    out = ["| check | status | code |", "|---|---|---|"]
    for r in rows:
        status = r.status if r.status in ("OK", "BLOCKED", "UNKNOWN") else WITHHELD
        out.append(f"| {shaped('word', r.check)} | {status} | "
                   f"{r.code if r.code in CODES else ''} |")
    kv = receipt.kv_cache.bytes if receipt.kv_cache is not None else None
    # rebuilt from checked parts only (a known series, a basis word, a plain version): no receipt text goes out
    version = receipt.capacity_accounting.version if receipt.capacity_accounting is not None else None
    accounting = accounting_from_record(version.series, version.basis, version.version, version.confirmed) \
        if version is not None else None
    label = f" ({accounting.label})" if accounting is not None else ""
    out += ["", f"KV cache estimate for the context, one sequence: {gib(kv)}{label}"]
    if accounting is not None:
        out.append(f"Offload placement, pinned host bytes and KV sizing: {accounting.label} (the report names each "
                   "rule's vLLM source)")
    return out


def run_lines(receipt: ReceiptRecord) -> list[str]:
    """Custody, boot, timings and request counts: numbers and kit sentences only."""
    out = []
    c = receipt.custody
    if c is not None:
        totals, hashing, auth, source = c.totals, c.hashing, c.authentication, c.source
        heads = [shaped("headline", str(s).split(":", 1)[0])
                 for s in (auth.statements if auth is not None else None) or []]
        out.append(f"- custody: {number(totals.files if totals is not None else None)} files, "
                   f"{gib(totals.bytes if totals is not None else None)}; "
                   + (f"hashed in {number(hashing.seconds if hashing is not None else None, ' s')}"
                      if source is not None and source.kind == "hashed"
                      else "an earlier manifest stat-matched, not re-hashed")
                   + f"; authentication: {'; '.join(heads) or 'none'}; "
                     f"{len((auth.failures if auth is not None else None) or [])} file(s) contradicted")
    b = receipt.boot
    if b is not None and b.ready is True:
        out.append(f"- boot: {share_line(b.facts, number(b.elapsed_s, ' s'))}"
                   + (f" ({ONE_WORKER})" if multi_gpu_protocol(receipt) else ""))
    elif b is not None:
        fail = b.failure
        code = b.code if b.code is not None and b.code in CODES else WITHHELD
        out.append(f"- boot: failed, {code}; exit code {number(fail.exit_code if fail is not None else None)}, "
                   f"OOMKilled {fail is not None and fail.oom_killed is True}"
                   + (f"; {QUOTED}" if code in quoted_codes(receipt) else ""))
    s = receipt.samples
    if s is not None:
        scope = f" ({RANK0_GPU})" if multi_gpu_protocol(receipt) else ""
        out.append(f"- memory samples: {number(s.count)}; GPU used peak{scope} {gib(s.gpu_used_bytes_max)}, "
                   f"host available lowest {gib(s.host_available_bytes_min)}, container peak "
                   f"{gib(s.container_memory_bytes_max)}")
    timings = receipt.timings_s
    names = ("hashing", "probe", "load", "canary", "batch", "serve")
    out.append("- times (each phase's own, kept apart): " + ", ".join(
        f"{k} {number(timings[k], ' s')}" if k in timings else f"{k} not run" for k in names))
    for what, run in (("canary", receipt.canary), ("batch", receipt.batch)):
        summary = run.summary if run is not None else None
        if summary is not None:
            errors = ", ".join(f"{shaped('code', k)} {number(v)}" for k, v in (summary.errors or {}).items())
            out.append(f"- {what} (UNSCORED): expected {number(summary.expected)}, received "
                       f"{number(summary.received)}, HTTP 2xx {number(summary.answered_2xx)}, missing "
                       f"{number(summary.missing)}, errors {errors or 'none'}, length-limited "
                       f"{number(summary.length_limited)}, empty {number(summary.empty_generations)}; "
                       f"output tokens/s measured through the engine socket "
                       f"{number(summary.output_tokens_per_s)} over {number(summary.measured_requests)} "
                       "requests")
    batch = receipt.batch
    if batch is not None:
        request_file, protocol = batch.request_file, batch.protocol
        out.append(f"- batch request file SHA-256 "
                   f"`{shaped('sha256', request_file.sha256 if request_file is not None else None)}`"
                   f", protocol SHA-256 `{shaped('sha256', protocol.sha256 if protocol is not None else None)}`")
    if receipt.serve is not None:
        t = receipt.serve.transport
        lat = t.latency_forwarded_s if t is not None else None
        calls, forwarded, rejected, cut = ((t.calls, t.forwarded, t.rejected_429, t.cut) if t is not None
                                           else (None, None, None, None))
        p50, p95 = (lat.p50, lat.p95) if lat is not None else (None, None)
        out.append(f"- serve window (UNSCORED transport record): {number(calls)} calls, "
                   f"{number(forwarded)} forwarded, {number(rejected)} refused with 429, "
                   f"{number(cut)} cut; forwarded latency p50 {number(p50, ' s', 3)}, p95 "
                   f"{number(p95, ' s', 3)}")
    return out


def failure_lines(receipt: ReceiptRecord) -> list[str]:
    """Blocked codes with their meaning and numeric numbers; failed tests by function name."""
    blocked: dict[str, dict] = {}
    failed: list[str] = []
    for nodeid, t in receipt.tests.items():
        if t.outcome == "blocked" and t.code is not None and t.code in CODES:
            entry = blocked.setdefault(t.code, {"n": 0, "numbers": {}})
            entry["n"] += 1
            entry["numbers"].update({k: v for k, v in (t.numbers or {}).items()
                                     if SHAPES["word"].match(str(k)) and _n(v) is not None})
        elif t.outcome in ("failed", "error"):
            failed.append(shaped("test", str(nodeid).rsplit("::", 1)[-1].split("[", 1)[0]))
    out = []
    quoted = quoted_codes(receipt)
    for code, entry in blocked.items():
        nums = ", ".join(f"{k} {number(v)}" for k, v in entry["numbers"].items())
        out.append(f"- BLOCKED {code} ({entry['n']} test(s)): {meaning(code, quoted)}"
                   + (f"; numbers: {nums}" if nums else ""))
    out += [f"- FAILED: {name}" for name in failed]
    return out or ["- none"]


def limitation_lines(receipt: ReceiptRecord) -> list[str]:
    """Standing limitations, the kit's own recorded ones word for word, and counts of the rest."""
    recorded = receipt.limitations
    known = [x for x in recorded if x in KNOWN_LIMITATIONS]
    other = len(recorded) - len(known)
    warnings = len(receipt.warnings)
    counted = SET_COUNTED if multi_gpu_protocol(receipt) else ONE_CARD_COUNTED
    return ([f"- {x}" for x in (*STANDING, counted, *known)]
            + ([f"- {other} further limitation(s) recorded in the private report"] if other else [])
            + ([f"- {warnings} warning(s) recorded in the private report"] if warnings else []))


def share_text(receipt: ReceiptRecord) -> str:
    """summary-share.md's text (the settings as the session read them: the receipt's settings values)."""
    settings = receipt.settings.values if receipt.settings is not None else None
    kit = receipt.kit
    kind = receipt.kind if receipt.kind in ("scan", "approve", "batch", "serve") else WITHHELD
    git_commit = kit.git_commit if kit is not None else None
    parts = [
        "# onegpu run summary (safe to share)", "",
        "Made from an allow-list of receipt fields: it holds no local paths, GPU UUIDs, host names, keys, prompts "
        "or responses. The full private evidence is report.html in the run folder: review it before sharing it.", "",
        *[f"{b}\n" for b in _banners(receipt)],
        *verdict_lines(receipt), "",
        f"Session: {kind}, kit {shaped('version', kit.version if kit is not None else None)}"
        + (f" (commit {shaped('revision', git_commit)})" if git_commit else ""), "",
        "## Model and image", *model_lines(receipt, settings or SettingsValues()), "",
        "## Machine", *machine_lines(receipt), "",
        "## Settings", *settings_lines(settings), "",
        "## Capacity (header bytes are not the loaded footprint)", *capacity_lines(receipt),
        *calibration_lines(receipt), *consistency_lines(receipt), "",
        "## Link ceiling (UPPER BOUNDS, never predictions)", *ceiling_share_lines(receipt), "",
        "## Proposed settings", *proposal_lines(receipt), "",
        "## Run", *run_lines(receipt), "",
        "## Landing at READY (measured against the plan)", *landing_lines(receipt), "",
        "## Operator-supplied score (not computed by the kit)", *score_lines(receipt), "",
        "## Failures", *failure_lines(receipt), "",
        "## Limitations", *limitation_lines(receipt), "",
    ]
    return "\n".join(parts)
