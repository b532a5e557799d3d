"""Pure: the report sections of the acting phases (probe, custody, boot, landing, timings, memory plot, requests,
operator-supplied score, serve) and the warnings and limitations. Request and transport figures are labelled
UNSCORED wherever they appear."""
from __future__ import annotations

from typing import Sequence

import msgspec

from onegpu.core.outcomes import ADVICE, CODES
from onegpu.core.units import gib
from onegpu.record.receipt import ReceiptRecord
from onegpu.record.sections_load import BootFacts, BootFailure, Samples
from onegpu.record.sections_requests import (
    BatchProtocol,
    BatchRequestFile,
    BatchResumed,
    CanaryRequestFile,
    CustodyAuthentication,
    CustodyHashing,
    CustodySource,
    CustodyTotals,
    EngineEnd,
    LatencyPercentiles,
    RatePercentiles,
    RequestSummary,
    SessionRun,
    TransportStreams,
)
from onegpu.report.boot_facts import NOT_REPORTED, boot_fact_rows
from onegpu.report.insight import landing, operator_score
from onegpu.report.parts import (
    ONE_WORKER,
    RANK0_GPU,
    absent,
    e,
    held,
    kv,
    multi_gpu_protocol,
    num,
    section,
    table,
    text,
)
from onegpu.report.request_lines import IncompleteSummary, summary_lines
from onegpu.report.svg import memory_plot

UNSCORED = '<span class="og-unscored">UNSCORED</span> '
# Each phase's own duration: none of them includes another (hashing is not part of load, and so on).
TIMINGS = (("hashing", "custody", "SHA-256 manifest of every checkpoint file"),
           ("probe", "probe", "runtime probe container"), ("load", "load", "engine boot until ready"),
           ("canary", "canary", "canary requests"), ("batch", "batch", "frozen batch"),
           ("serve", "serve", "serve window, READY to CLOSED"))


def run_sections(receipt: ReceiptRecord, samples: Sequence[dict]) -> list[str]:
    """The sections from the runtime probe to the limitations, in phase order; the landing right after the boot
    facts, the operator-supplied score beside the UNSCORED batch figures."""
    return [probe(receipt), custody(receipt), boot(receipt), landing(receipt), timings(receipt),
            memory(receipt, samples), canary(receipt), batch(receipt), operator_score(receipt), serve(receipt),
            warnings_and_limitations(receipt)]


def _join(*values, sep: str = " ") -> str:
    """The recorded values side by side (None left out); 'not recorded' when none is."""
    return sep.join(str(v) for v in values if v is not None) or "not recorded"


def _seconds(value: int | float | None) -> str:
    if value is None:
        return "not recorded"
    return f"{value:,.3f} s" if value < 100 else f"{value:,.1f} s"


def probe(receipt: ReceiptRecord) -> str:
    """What the runtime probe found in the image."""
    p = held(receipt.probe)
    if p is None:
        return section("probe", "Runtime probe", absent(receipt, "probe"))
    if not p.passed:
        return section("probe", "Runtime probe", f'<p class="og-blocked">BLOCKED {e(p.code)}: '
                                                 f'{e(p.message)}</p>')
    flags = p.flags_checked or []
    return section("probe", "Runtime probe", kv([
        ("vLLM / torch", f"{text(p.vllm_version)} / {text(p.torch_version)}"),
        ("CUDA devices seen in the container", p.cuda_device_count),
        ("launch flags checked", f"{len(flags)}: {' '.join(flags)}"),
        ("flags missing", ", ".join(p.missing_flags or []) or "none"),
        ("time", _seconds(p.elapsed_s))]))


def custody(receipt: ReceiptRecord) -> str:
    """Files, bytes, hashing time and what ties the files to the revision."""
    c = held(receipt.custody)
    if c is None:
        return section("custody", "Custody", absent(receipt, "custody"))
    totals, hashing, source = c.totals or CustodyTotals(), c.hashing or CustodyHashing(), c.source or CustodySource()
    auth = c.authentication or CustodyAuthentication()
    rate = hashing.bytes_per_s
    how = (f"{_seconds(hashing.seconds)} ({(rate or 0) / 1e6:,.0f} MB/s, {text(hashing.workers)} "
           "threads)" if source.kind == "hashed"
           else f"not re-hashed: {text(source.kind)} {source.manifest or ''}")
    recheck = held(c.recheck)
    body = [kv([("files", num(totals.files)), ("bytes", f"{num(totals.bytes)} "
                                                         f"({gib(totals.bytes)})"),
                ("hashing time", how), ("checkpoint folder", c.root),
                ("HF cache repo / revision", f"{c.hf_cache_repo or 'none'} / {c.revision or 'none'}"),
                ("manifest", c.manifest),
                ("re-check right before launch",
                 ("unchanged" if recheck.unchanged else f"CHANGED: {text(recheck.message)}")
                 + f" at {text(recheck.at)}" if recheck else "not done in this session")])]
    body.append("<h4>Authentication</h4><ul>" + "".join(f"<li>{e(s)}</li>" for s in auth.statements or [])
                + "".join(f'<li class="og-bad">{e(f)}</li>' for f in auth.failures or []) + "</ul>")
    return section("custody", "Custody", "".join(body))


def boot(receipt: ReceiptRecord) -> str:
    """The boot log's facts (KV pool, load GiB and seconds), or the boot failure with the log tail."""
    b = held(receipt.boot)
    if b is None:
        return section("boot", "Boot (from the engine log)", absent(receipt, "load"))
    body = []
    if b.ready:
        f = b.facts or BootFacts()
        facts: list[tuple[str, object]] = [
            ("ready after", _seconds(b.elapsed_s)),
            *((label, said or NOT_REPORTED) for label, said in boot_fact_rows(f)),
            ("server started", f.server_started), ("vLLM version (log)", f.vllm_version)]
        body.append(kv(facts + ([("these figures are", f"{ONE_WORKER} of the {multi_gpu_protocol(receipt)}, not the "
                                                       "set's total")] if multi_gpu_protocol(receipt) else [])))
    else:
        failure = b.failure or BootFailure()
        body.append(f'<p class="og-blocked">BLOCKED {e(b.code)}: {e(b.message)}</p>')
        body.append(kv([("the engine's own words", failure.quote or "none: its log states no reason"),
                        ("what it means", CODES.get(str(b.code), "")),
                        ("what to do", ADVICE.get(str(b.code), "read engine.log in the run folder")),
                        ("exit code", failure.exit_code), ("OOMKilled", failure.oom_killed),
                        ("timed out", failure.timed_out), ("boot deadline", _seconds(failure.boot_deadline_s))]))
        if failure.log_tail:
            body.append(f'<h4>Last lines of engine.log</h4><pre class="og-pre">'
                        f'{e(chr(10).join(str(x) for x in failure.log_tail))}</pre>')
    engine = receipt.engine
    end = held(engine.end if engine is not None else None)
    if end is not None:
        body.append("<h4>Engine container at the end</h4>" + kv([
            ("status / exit code", f"{text(end.status)} / {text(end.exit_code)}"),
            ("OOMKilled / OOM kill count rose", f"{text(end.oom_killed)} / "
                                                f"{text(end.oom_kill_count_rose)}"),
            ("stopped in", _seconds(end.stop_s)), ("removed", end.removed),
            ("log", engine.log if engine is not None else None)]))
    return section("boot", "Boot (from the engine log)", "".join(body))


def timings(receipt: ReceiptRecord) -> str:
    """One row per timed phase; a phase that did not run says so."""
    recorded = dict(receipt.timings_s)
    rows = []
    for key, phase, what in TIMINGS:
        value = recorded.pop(key, None)
        entry = receipt.phases.get(phase)
        verdict = (entry.verdict if entry is not None else None) or "NOT RUN"
        rows.append([key, what, _seconds(value) if value is not None else f"not run (phase {phase}: {verdict})"])
    rows += [[k, "", _seconds(v)] for k, v in recorded.items()]
    return section("timings", "Timings, kept apart", '<p class="og-note">Each row is one phase\'s own duration; '
                   "none includes another.</p>" + table(["timing", "what", "seconds"], rows))


def memory(receipt: ReceiptRecord, samples: Sequence[dict]) -> str:
    """The GPU memory and host RAM plot over the samples, and their peaks."""
    plot = memory_plot(samples, receipt.timeline) if samples else None
    peaks = receipt.samples or Samples()
    if plot is None:
        return section("memory", "GPU memory and host RAM over time",
                       absent(receipt, "load", "no samples (they are taken while the engine runs)"))
    gpu_scope = f" ({RANK0_GPU})" if multi_gpu_protocol(receipt) else ""
    return section("memory", "GPU memory and host RAM over time", plot + kv([
        ("samples", peaks.count if peaks.count is not None else len(samples)),
        ("GPU memory used, peak" + gpu_scope, gib(peaks.gpu_used_bytes_max)),
        ("GPU free, lowest" + gpu_scope, gib(peaks.gpu_free_bytes_min)),
        ("host available RAM, lowest", gib(peaks.host_available_bytes_min)),
        ("container memory, peak", gib(peaks.container_memory_bytes_max)),
        ("samples with a reading error", peaks.errors)]))


def _request_file(rf: CanaryRequestFile | BatchRequestFile | None) -> list[tuple[str, object]]:
    path, sha256, requests, size = (rf.path, rf.sha256, rf.requests, rf.bytes) if rf is not None \
        else (None, None, None, None)
    return [("request file", path), ("its SHA-256", sha256), ("requests / bytes", f"{num(requests)} / {num(size)}")]


def _summary(summary: RequestSummary | None) -> str:
    figures = held(summary)
    if figures is None:
        return '<p class="og-notrun-text">no requests were sent</p>'
    try:
        lines = summary_lines(figures)
    except IncompleteSummary:  # a receipt cut mid-write: show the raw figures rather than fail the report
        lines = [f"{k}: {v}" for k, v in msgspec.structs.asdict(figures).items()]
    return "<ul>" + "".join(f"<li>{e(line)}</li>" for line in lines) + "</ul>"


def _engine_end(end: EngineEnd | None) -> list[tuple[str, object]]:
    """The rows of an engine that died while requests ran: the code, and why in the engine's own words."""
    end = held(end)
    if end is None:
        return []
    return [("the engine died", f"{text(end.code)} {text(end.why)}"),
            ("the engine's own words", end.quote or "none: its log states no reason"),
            ("what to do", ADVICE.get(str(end.code), "read engine.log in the run folder"))]


def _run_end(run: SessionRun | None) -> list[tuple[str, object]]:
    return _engine_end(run.engine_end if run is not None else None)


def canary(receipt: ReceiptRecord) -> str:
    """The canary's request file and its UNSCORED counts."""
    c = held(receipt.canary)
    if c is None:
        return section("canary", "Canary (UNSCORED)", absent(receipt, "canary"))
    rows = _request_file(c.request_file) + [
        ("written by the kit", c.request_file.written_by_kit if c.request_file is not None else None),
        ("needle check", c.needle_check or "no needle request")]
    rows += _run_end(c.session_run)
    return section("canary", "Canary (UNSCORED)", f"<p>{UNSCORED}{e(c.label)}</p>" + kv(rows)
                   + _summary(c.summary))


def _resumed(resumed: BatchResumed | None) -> dict:
    """What earlier sessions of a resumed batch left, shown as the mapping the receipt holds ({} where none)."""
    if resumed is None:
        return {}
    return {k: v for k, v in msgspec.structs.asdict(resumed).items() if v is not None}


def batch(receipt: ReceiptRecord) -> str:
    """The frozen batch: request file, protocol identities, UNSCORED counts and rates."""
    b = held(receipt.batch)
    if b is None:
        return section("batch", "Batch statistics (UNSCORED)", absent(receipt, "batch"))
    p = b.protocol or BatchProtocol()
    rows = _request_file(b.request_file) + [
        ("protocol", f"{text(p.path)} (SHA-256 {text(p.sha256)}, schema {text(p.source_schema)})"),
        ("benchmark / split", _join(p.benchmark, p.split, sep=" / ")),
        ("harness", _join(p.harness, p.harness_revision)),
        ("dataset", _join(p.dataset, p.dataset_revision)),
        ("scorer", _join(p.scorer, p.scorer_revision)),
        ("interaction / timing", f"{text(p.interaction)} / {text(p.timing_policy)}"),
        ("resumed", _resumed(b.resumed) or "no")] + _run_end(b.session_run)
    return section("batch", "Batch statistics (UNSCORED)", f"<p>{UNSCORED}a transport record, not a score: the "
                   "benchmark's own scorer reads responses.jsonl</p>" + kv(rows) + _summary(b.summary))


def serve(receipt: ReceiptRecord) -> str:
    """The serve window and its UNSCORED transport statistics."""
    s = held(receipt.serve)
    if s is None:
        return section("serve", "Serve window and transport statistics (UNSCORED)", absent(receipt, "serve"))
    t = held(s.transport)
    streams = (t.streams if t is not None else None) or TransportStreams()
    latency = (t.latency_forwarded_s if t is not None else None) or LatencyPercentiles()
    ttft, rate = streams.ttft_s or LatencyPercentiles(), streams.output_tokens_per_s or RatePercentiles()
    rows = [("state", s.state), ("connection file (holds the key: never attach it)", s.connection_file),
            ("URL / model", f"{text(s.url)} / {text(s.model)}"), ("window", _seconds(s.window_s)),
            ("READY at / deadline", f"{text(s.ready_at)} / {text(s.deadline)}"),
            ("closed at", s.closed_at), ("why closed", s.closed_reason),
            ("calls cut at close", s.cut_in_flight)] + _engine_end(s.engine_end)
    if t is not None:
        rows += [("calls / forwarded", f"{text(t.calls)} / {text(t.forwarded)}"),
                 ("statuses", ", ".join(f"{k}: {v}" for k, v in (t.statuses or {}).items())),
                 ("rejected 429 / cut", f"{text(t.rejected_429)} / {text(t.cut)}"),
                 ("request / response bytes", f"{num(t.request_bytes)} / {num(t.response_bytes)}"),
                 ("latency of forwarded calls p50 / p95", f"{text(latency.p50)} / "
                                                          f"{text(latency.p95)} s"),
                 ("streams / time to first token p50 / p95", f"{text(streams.count)} / "
                                                             f"{text(ttft.p50)} / {text(ttft.p95)} s"),
                 ("stream output tokens per second p50 / min", f"{text(rate.p50)} / {text(rate.min)}")]
    return section("serve", "Serve window and transport statistics (UNSCORED)",
                   f"<p>{UNSCORED}{e(s.note or 'a record of calls through the adapter, not a grade')}; "
                   f"{e(streams.label or '')}</p>" + kv(rows))


def counted_cards(receipt: ReceiptRecord) -> str:
    """Which cards a run's figures count: the selected GPU, or the multi-GPU protocol's set."""
    protocol = multi_gpu_protocol(receipt)
    return (f"only the GPUs of the {protocol} are counted, each as its rank; any other card in the machine is "
            "ignored" if protocol else "only the selected GPU is counted; any other card in the machine is ignored")


def warnings_and_limitations(receipt: ReceiptRecord) -> str:
    """The run's warnings and limitations, and the standing ones."""
    def items(values, empty):
        return "<ul>" + ("".join(f"<li>{e(v)}</li>" for v in values) or f"<li>{e(empty)}</li>") + "</ul>"

    return section("limitations", "Warnings and limitations",
                   "<h4>Warnings</h4>" + items(receipt.warnings, "none")
                   + "<h4>Limitations</h4>" + items(receipt.limitations, "none recorded")
                   + '<p class="og-note">Header bytes are not the loaded footprint; request figures are UNSCORED '
                     f"transport records; {e(counted_cards(receipt))}.</p>")
