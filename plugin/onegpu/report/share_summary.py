"""Pure: a receipt (and the settings values) -> summary-share.md, the reduced summary safe to post publicly.

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
from onegpu.evidence.receipt_schema import ReceiptData
from onegpu.evidence.verdicts import capacity_tally
from onegpu.plan.vllm_versions import accounting_from_record
from onegpu.report.parts import ONE_WORKER, RANK0_GPU, multi_gpu_protocol
from onegpu.report.share_ceiling import ceiling_share_lines
from onegpu.report.share_insight import calibration_lines, consistency_lines, landing_lines, proposal_lines, score_lines
from onegpu.report.share_shapes import SHAPES, WITHHELD, gib, number, shaped
from onegpu.report.share_shapes import as_dict as _dict
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


def quoted_codes(receipt: ReceiptData) -> set[str]:
    """The codes for which the receipt holds the engine's own words (boot failure, a death during the
    canary, batch or serve window); the words stay in the private report, only the fact is shared."""
    ends = [_dict(_dict(receipt.get("boot")).get("failure")),
            *(_dict(_dict(_dict(receipt.get(w)).get("session_run")).get("engine_end")) for w in ("canary", "batch")),
            _dict(_dict(receipt.get("serve")).get("engine_end"))]
    return {e["code"] for e in ends if e.get("code") in CODES and isinstance(e.get("quote"), str) and e["quote"]}


def meaning(code: str, quoted: set[str]) -> str:
    """The kit's sentence for a code, and where the engine's own reason is, when it stated one."""
    return CODES.get(code, "") + (f"; {QUOTED}" if code in quoted else "")


def verdict_lines(receipt: ReceiptData) -> list[str]:
    """The run's verdict rebuilt from phase codes (the receipt's verdict line holds free text)."""
    phases = _dict(receipt.get("phases"))
    rows: list[tuple[str, str, str]] = []
    codes: list[str] = []
    done: dict[str, str] = {}
    for phase in PHASES:
        p = _dict(phases.get(phase))
        verdict = str(p.get("verdict")) if p.get("verdict") in SHARED_VERDICTS else "NOT RUN"
        rows.append((phase, verdict, str(p.get("code")) if p.get("code") in CODES else ""))
        codes += [c for c in p.get("codes") or [] if c in CODES and c not in codes]
        if verdict == "INTERRUPTED":
            done[phase] = _progress(p.get("progress"))
    cut = [r[0] for r in rows if r[1] == "INTERRUPTED"]
    failed = [r for r in rows if r[1] == "FAILED"]
    blocked = [r for r in rows if r[1] == "BLOCKED"]
    passed = [r[0] for r in rows if r[1] == "PASSED"]
    if cut:
        by = _dict(receipt.get("interrupted")).get("by")
        head = (f"**Verdict: INTERRUPTED in phase {cut[0]}**{' (' + done[cut[0]] + ')' if done[cut[0]] else ''}: "
                f"the session was cut{' by ' + CUT_BY[by] if by in CUT_BY else ''} before it finished"
                + (f"; also interrupted: {', '.join(cut[1:])}" if cut[1:] else "")
                + "; nothing of an interrupted phase is a result")
    elif failed:
        head = f"**Verdict: FAILED in phase {failed[0][0]}** (an unexpected error; see the private report)"
    elif blocked:
        phase, _, code = max(blocked, key=lambda r: consequence(r[2]))  # ties: the earliest phase
        head = f"**Verdict: BLOCKED {code} in phase {phase}**: {meaning(code, quoted_codes(receipt))}"
        tally = capacity_tally([c for c in receipt.get("capacity") or [] if isinstance(c, dict)
                                and re.fullmatch(r"[a-z0-9_]{1,40}", str(c.get("check")))])
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


def _progress(p) -> str:
    """"10 of 50 answered" from numbers only (the unit is the kit's own word, checked)."""
    p = _dict(p)
    if isinstance(p.get("done"), int) and isinstance(p.get("of"), int) and p.get("unit") == "answered":
        return f"{p['done']} of {p['of']} answered"
    return ""


def _banners(receipt: ReceiptData) -> list[str]:
    out = []
    protocol = multi_gpu_protocol(receipt)
    if protocol:
        out.append(f"**MULTI-GPU: {shaped('protocol', protocol)}**: vLLM's own tensor and pipeline parallelism over "
                   "several GPUs, a separate protocol: nothing of this run is a one-GPU result or may be pooled "
                   "with one.")
    if receipt.get("hardware_source") == "replayed":
        out.append("**HARDWARE FACTS REPLAYED** from a recorded profile: they describe that machine, not the one "
                   "this ran on; nothing was started.")
    if _dict(receipt.get("checkpoint")).get("synthetic") is True:
        out.append("**CHECKPOINT IS SYNTHETIC**: header-only shards with no weights; the numbers are about its "
                   "layout, and nothing could be loaded from it.")
    if _dict(receipt.get("launch")).get("engine_platform") == "cpu":
        out.append("**CPU ENGINE DOUBLE**: the engine was vLLM's CPU build, a test of the kit against the real "
                   "engine on a tiny model; no figure of this run says anything of a GPU.")
    if any(isinstance(b, str) and b.startswith(SIMULATED_PREFIX) for b in receipt.get("banners") or []):
        out.append("**GPU SIMULATED**: a test of the kit against a stub engine, not a model.")
    return out


def _one_card(receipt: ReceiptData) -> str:
    gpu = _dict(_dict(receipt.get("hardware")).get("gpu"))
    devices = [d for d in gpu.get("devices") or [] if isinstance(d, dict)]
    selection = _dict(receipt.get("selection"))
    if selection.get("protocol"):
        return _gpu_set_line(selection, devices)
    index = selection.get("gpu_index")
    chosen = next((d for d in devices if d.get("index") == index), None)
    if chosen is None:
        return f"no GPU selected ({len(devices)} visible)"
    others = len(devices) - 1
    return (f"one GPU: {shaped('gpu_name', chosen.get('name'))} {gib(chosen.get('total_bytes'))}; "
            + (f"{others} other card(s) in the machine not counted" if others else "no second card counted"))


def _gpu_set_line(selection: dict, devices: list[dict]) -> str:
    """The multi-GPU protocol's cards, named as such: never "one GPU"."""
    by_index = {d.get("index"): d for d in devices}
    cards = [by_index.get(member.get("index")) or {} for member in selection.get("gpu_set") or []
             if isinstance(member, dict)]
    shown = ", ".join(f"{shaped('gpu_name', d.get('name'))} {gib(d.get('total_bytes'))}" for d in cards)
    return (f"{shaped('protocol', selection.get('protocol'))}, not a one-GPU result: "
            + (shown or "its GPUs were not found"))


def model_lines(receipt: ReceiptData, settings: dict) -> list[str]:
    """Model, revision, image ID, the engine in the image and the checkpoint's layout."""
    image = _dict(receipt.get("image"))
    probe = _dict(receipt.get("probe"))
    ckpt = _dict(receipt.get("checkpoint"))
    quant = _dict(ckpt.get("quant"))
    lines = [f"- model: `{shaped('model_id', settings.get('model_id'))}` at revision "
             f"`{shaped('revision', settings.get('model_revision'))}`",
             f"- image ID: `{shaped('image_id', image.get('id'))}`" if image else "- image ID: not resolved"]
    if probe.get("passed"):
        lines.append(f"- engine in the image: vLLM {shaped('version', probe.get('vllm_version'))}, torch "
                     f"{shaped('version', probe.get('torch_version'))}, CUDA devices seen "
                     f"{number(probe.get('cuda_device_count'))}")
    if ckpt:
        dtypes = ", ".join(f"{shaped('word', k)} {gib(v)}" for k, v in _dict(ckpt.get("bytes_by_dtype")).items())
        lines.append(f"- checkpoint: {', '.join(shaped('word', a) for a in ckpt.get('architectures') or [])} "
                     f"({shaped('word', ckpt.get('model_type'))}), quantization {shaped('word', quant.get('method'))}"
                     + (f" stored as {shaped('word', quant.get('store_dtype'))}" if quant.get("store_dtype") else "")
                     + f"; {number(len(ckpt.get('shards') or []))} shards, {number(ckpt.get('tensor_count'))} "
                       f"tensors, header bytes {gib(ckpt.get('weight_bytes'))} ({dtypes})")
    return lines


def machine_lines(receipt: ReceiptData) -> list[str]:
    """The one-card observation, driver, host RAM and Docker."""
    hw = _dict(receipt.get("hardware"))
    gpu, host, docker = _dict(hw.get("gpu")), _dict(hw.get("host")), _dict(hw.get("docker"))
    if not hw:
        return ["- machine facts: not read"]
    lines = [f"- {_one_card(receipt)}"]
    if gpu.get("nvml_loaded"):
        lines.append(f"- NVIDIA driver {shaped('version', gpu.get('driver_version'))}, CUDA driver API "
                     f"{shaped('version', gpu.get('cuda_driver_version'))}")
    stated = " (stated by the operator)" if host.get("ram_stated_by_operator") is True else ""
    lines.append(f"- host RAM {gib(host.get('ram_total_bytes'))} total{stated}, CPUs usable "
                 f"{number(host.get('cpus_usable'))}; hardware facts "
                 f"{'REPLAYED' if receipt.get('hardware_source') == 'replayed' else 'read live'}")
    if docker.get("reachable") is True:
        lines.append(f"- Docker {shaped('version', docker.get('server_version'))}, swap limits enforced: "
                     f"{'yes' if docker.get('swap_limit') is True else 'no'}")
    return lines


def settings_lines(settings: dict) -> list[str]:
    """Context, offload, RAM cap and deadlines from the settings values."""
    if not settings:
        return ["- settings: not read"]
    kv_dtype = settings.get("kv_cache_dtype")
    return [f"- context {number(settings.get('context_tokens'))} tokens, prefill chunk "
            f"{number(settings.get('prefill_chunk_tokens'))} tokens, KV-cache dtype "
            f"{shaped('word', kv_dtype) if kv_dtype else 'the model dtype (assumed)'}",
            f"- CPU offload {number(settings.get('cpu_offload_gib'), ' GiB')}, container RAM cap "
            f"{number(settings.get('container_ram_gib'), ' GiB')} (swap cap equal to it), host headroom "
            f"{number(settings.get('host_headroom_gib'), ' GiB')}, non-weight GPU reserve "
            f"{number(settings.get('gpu_reserve_gib'), ' GiB')}",
            f"- deadlines: boot {number(settings.get('boot_deadline_s'), ' s', 0)}; overall deadline_s "
            f"{number(settings.get('deadline_s'), ' s', 0)} (counted from the first request phase); each request "
            f"request_timeout_s {number(settings.get('request_timeout_s'), ' s', 0)}"]


def capacity_lines(receipt: ReceiptData) -> list[str]:
    """Each capacity check's status and code, and the KV-cache estimate."""
    rows = [r for r in receipt.get("capacity") or [] if isinstance(r, dict)]
    if not rows:
        return ["- capacity: not computed"]
    out = ["| check | status | code |", "|---|---|---|"]
    for r in rows:
        status = r.get("status") if r.get("status") in ("OK", "BLOCKED", "UNKNOWN") else WITHHELD
        out.append(f"| {shaped('word', r.get('check'))} | {status} | "
                   f"{r.get('code') if r.get('code') in CODES else ''} |")
    kv = _dict(receipt.get("kv_cache")).get("bytes")
    # rebuilt from checked parts only (a known series, a basis word, a plain version): no receipt text goes out
    accounting = accounting_from_record(_dict(receipt.get("capacity_accounting")).get("version"))
    label = f" ({accounting.label})" if accounting is not None else ""
    out += ["", f"KV cache estimate for the context, one sequence: {gib(kv)}{label}"]
    if accounting is not None:
        out.append(f"Offload placement, pinned host bytes and KV sizing: {accounting.label} (the report names each "
                   "rule's vLLM source)")
    return out


def run_lines(receipt: ReceiptData) -> list[str]:
    """Custody, boot, timings and request counts: numbers and kit sentences only."""
    out = []
    c = _dict(receipt.get("custody"))
    if c:
        totals, hashing = _dict(c.get("totals")), _dict(c.get("hashing"))
        heads = [shaped("headline", str(s).split(":", 1)[0]) for s in _dict(c.get("authentication")).get(
            "statements") or []]
        out.append(f"- custody: {number(totals.get('files'))} files, {gib(totals.get('bytes'))}; "
                   + (f"hashed in {number(hashing.get('seconds'), ' s')}" if _dict(c.get("source")).get("kind")
                      == "hashed" else "an earlier manifest stat-matched, not re-hashed")
                   + f"; authentication: {'; '.join(heads) or 'none'}; "
                     f"{len(_dict(c.get('authentication')).get('failures') or [])} file(s) contradicted")
    b = _dict(receipt.get("boot"))
    if b.get("ready") is True:
        f = _dict(b.get("facts"))
        out.append(f"- boot: ready after {number(b.get('elapsed_s'), ' s')}; weights "
                   f"{number(f.get('load_gib'), ' GiB')}"
                   f" loaded in {number(f.get('load_s'), ' s')}; KV cache pool {number(f.get('kv_cache_gib'), ' GiB')}"
                   f" = {number(f.get('kv_cache_tokens'))} tokens; max concurrency "
                   f"{number(f.get('max_concurrency'))}x at {number(f.get('concurrency_tokens'))} tokens; CPU "
                   f"offloaded " + ("not reported in the log" if f.get("cpu_offload_gib") is None
                                    else number(f.get("cpu_offload_gib"), " GiB"))
                   + (f" ({ONE_WORKER})" if multi_gpu_protocol(receipt) else ""))
    elif b:
        fail = _dict(b.get("failure"))
        code = b.get("code") if b.get("code") in CODES else WITHHELD
        out.append(f"- boot: failed, {code}; exit code {number(fail.get('exit_code'))}, OOMKilled "
                   f"{fail.get('oom_killed') is True}" + (f"; {QUOTED}" if code in quoted_codes(receipt) else ""))
    s = _dict(receipt.get("samples"))
    if s:
        scope = f" ({RANK0_GPU})" if multi_gpu_protocol(receipt) else ""
        out.append(f"- memory samples: {number(s.get('count'))}; GPU used peak{scope} {gib(s.get('gpu_used_bytes_max'))}, "
                   f"host available lowest {gib(s.get('host_available_bytes_min'))}, container peak "
                   f"{gib(s.get('container_memory_bytes_max'))}")
    timings = _dict(receipt.get("timings_s"))
    names = ("hashing", "probe", "load", "canary", "batch", "serve")
    out.append("- times (each phase's own, kept apart): " + ", ".join(
        f"{k} {number(timings.get(k), ' s')}" if k in timings else f"{k} not run" for k in names))
    for what in ("canary", "batch"):
        summary = _dict(_dict(receipt.get(what)).get("summary"))
        if summary:
            errors = ", ".join(f"{shaped('code', k)} {number(v)}" for k, v in _dict(summary.get("errors")).items())
            out.append(f"- {what} (UNSCORED): expected {number(summary.get('expected'))}, received "
                       f"{number(summary.get('received'))}, HTTP 2xx {number(summary.get('answered_2xx'))}, missing "
                       f"{number(summary.get('missing'))}, errors {errors or 'none'}, length-limited "
                       f"{number(summary.get('length_limited'))}, empty {number(summary.get('empty_generations'))}; "
                       f"output tokens/s measured through the engine socket "
                       f"{number(summary.get('output_tokens_per_s'))} over {number(summary.get('measured_requests'))} "
                       "requests")
    batch = _dict(receipt.get("batch"))
    if batch:
        out.append(f"- batch request file SHA-256 `{shaped('sha256', _dict(batch.get('request_file')).get('sha256'))}`"
                   f", protocol SHA-256 `{shaped('sha256', _dict(batch.get('protocol')).get('sha256'))}`")
    t = _dict(_dict(receipt.get("serve")).get("transport"))
    if receipt.get("serve"):
        lat = _dict(t.get("latency_forwarded_s"))
        out.append(f"- serve window (UNSCORED transport record): {number(t.get('calls'))} calls, "
                   f"{number(t.get('forwarded'))} forwarded, {number(t.get('rejected_429'))} refused with 429, "
                   f"{number(t.get('cut'))} cut; forwarded latency p50 {number(lat.get('p50'), ' s', 3)}, p95 "
                   f"{number(lat.get('p95'), ' s', 3)}")
    return out


def failure_lines(receipt: ReceiptData) -> list[str]:
    """Blocked codes with their meaning and numeric numbers; failed tests by function name."""
    blocked: dict[str, dict] = {}
    failed: list[str] = []
    for nodeid, t in _dict(receipt.get("tests")).items():
        if not isinstance(t, dict):
            continue
        if t.get("outcome") == "blocked" and t.get("code") in CODES:
            entry = blocked.setdefault(t["code"], {"n": 0, "numbers": {}})
            entry["n"] += 1
            entry["numbers"].update({k: v for k, v in _dict(t.get("numbers")).items()
                                     if SHAPES["word"].match(str(k)) and _n(v) is not None})
        elif t.get("outcome") in ("failed", "error"):
            failed.append(shaped("test", str(nodeid).rsplit("::", 1)[-1].split("[", 1)[0]))
    out = []
    quoted = quoted_codes(receipt)
    for code, entry in blocked.items():
        nums = ", ".join(f"{k} {number(v)}" for k, v in entry["numbers"].items())
        out.append(f"- BLOCKED {code} ({entry['n']} test(s)): {meaning(code, quoted)}"
                   + (f"; numbers: {nums}" if nums else ""))
    out += [f"- FAILED: {name}" for name in failed]
    return out or ["- none"]


def limitation_lines(receipt: ReceiptData) -> list[str]:
    """Standing limitations, the kit's own recorded ones word for word, and counts of the rest."""
    recorded = [x for x in receipt.get("limitations") or [] if isinstance(x, str)]
    known = [x for x in recorded if x in KNOWN_LIMITATIONS]
    other = len(recorded) - len(known)
    warnings = len(receipt.get("warnings") or [])
    counted = SET_COUNTED if multi_gpu_protocol(receipt) else ONE_CARD_COUNTED
    return ([f"- {x}" for x in (*STANDING, counted, *known)]
            + ([f"- {other} further limitation(s) recorded in the private report"] if other else [])
            + ([f"- {warnings} warning(s) recorded in the private report"] if warnings else []))


def share_text(receipt: ReceiptData, settings: dict | None) -> str:
    """summary-share.md's text."""
    settings = settings if isinstance(settings, dict) else {}
    kit = _dict(receipt.get("kit"))
    kind = receipt.get("kind") if receipt.get("kind") in ("scan", "approve", "batch", "serve") else WITHHELD
    parts = [
        "# onegpu run summary (safe to share)", "",
        "Made from an allow-list of receipt fields: it holds no local paths, GPU UUIDs, host names, keys, prompts "
        "or responses. The full private evidence is report.html in the run folder: review it before sharing it.", "",
        *[f"{b}\n" for b in _banners(receipt)],
        *verdict_lines(receipt), "",
        f"Session: {kind}, kit {shaped('version', kit.get('version'))}"
        + (f" (commit {shaped('revision', kit.get('git_commit'))})" if kit.get("git_commit") else ""), "",
        "## Model and image", *model_lines(receipt, settings), "",
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
