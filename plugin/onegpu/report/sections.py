"""Pure: the report sections of the acting phases (probe, custody, boot, landing, timings, memory plot, requests,
operator-supplied score, serve) and the warnings and limitations. Request and transport figures are labelled
UNSCORED wherever they appear."""
from __future__ import annotations

from typing import Sequence

from onegpu.core.outcomes import ADVICE, CODES
from onegpu.core.units import gib
from onegpu.evidence.receipt_schema import ReceiptData
from onegpu.report.insight import landing, operator_score
from onegpu.report.parts import ONE_WORKER, RANK0_GPU, absent, e, kv, multi_gpu_protocol, num, section, table, text
from onegpu.report.svg import memory_plot
from onegpu.requests.batch_summary import summary_lines

UNSCORED = '<span class="og-unscored">UNSCORED</span> '
# Each phase's own duration: none of them includes another (hashing is not part of load, and so on).
TIMINGS = (("hashing", "custody", "SHA-256 manifest of every checkpoint file"),
           ("probe", "probe", "runtime probe container"), ("load", "load", "engine boot until ready"),
           ("canary", "canary", "canary requests"), ("batch", "batch", "frozen batch"),
           ("serve", "serve", "serve window, READY to CLOSED"))


def run_sections(receipt: ReceiptData, samples: Sequence[dict]) -> list[str]:
    """The sections from the runtime probe to the limitations, in phase order; the landing right after the boot
    facts, the operator-supplied score beside the UNSCORED batch figures."""
    return [probe(receipt), custody(receipt), boot(receipt), landing(receipt), timings(receipt),
            memory(receipt, samples), canary(receipt), batch(receipt), operator_score(receipt), serve(receipt),
            warnings_and_limitations(receipt)]


def _join(*values, sep: str = " ") -> str:
    """The recorded values side by side (None left out); 'not recorded' when none is."""
    return sep.join(str(v) for v in values if v is not None) or "not recorded"


def _seconds(value) -> str:
    if value is None:
        return "not recorded"
    return f"{value:,.3f} s" if value < 100 else f"{value:,.1f} s"


def probe(receipt: ReceiptData) -> str:
    """What the runtime probe found in the image."""
    p = receipt.get("probe")
    if not p:
        return section("probe", "Runtime probe", absent(receipt, "probe"))
    if not p.get("passed"):
        return section("probe", "Runtime probe", f'<p class="og-blocked">BLOCKED {e(p.get("code"))}: '
                                                 f'{e(p.get("message"))}</p>')
    return section("probe", "Runtime probe", kv([
        ("vLLM / torch", f"{text(p.get('vllm_version'))} / {text(p.get('torch_version'))}"),
        ("CUDA devices seen in the container", p.get("cuda_device_count")),
        ("launch flags checked", f"{len(p.get('flags_checked') or [])}: {' '.join(p.get('flags_checked') or [])}"),
        ("flags missing", ", ".join(p.get("missing_flags") or []) or "none"),
        ("time", _seconds(p.get("elapsed_s")))]))


def custody(receipt: ReceiptData) -> str:
    """Files, bytes, hashing time and what ties the files to the revision."""
    c = receipt.get("custody")
    if not c:
        return section("custody", "Custody", absent(receipt, "custody"))
    totals, hashing, source = c.get("totals") or {}, c.get("hashing") or {}, c.get("source") or {}
    auth = c.get("authentication") or {}
    rate = hashing.get("bytes_per_s")
    how = (f"{_seconds(hashing.get('seconds'))} ({(rate or 0) / 1e6:,.0f} MB/s, {text(hashing.get('workers'))} "
           "threads)" if source.get("kind") == "hashed"
           else f"not re-hashed: {text(source.get('kind'))} {source.get('manifest') or ''}")
    recheck = c.get("recheck") or {}
    body = [kv([("files", num(totals.get("files"))), ("bytes", f"{num(totals.get('bytes'))} "
                                                               f"({gib(totals.get('bytes'))})"),
                ("hashing time", how), ("checkpoint folder", c.get("root")),
                ("HF cache repo / revision", f"{c.get('hf_cache_repo') or 'none'} / {c.get('revision') or 'none'}"),
                ("manifest", c.get("manifest")),
                ("re-check right before launch",
                 ("unchanged" if recheck.get("unchanged") else f"CHANGED: {text(recheck.get('message'))}")
                 + f" at {text(recheck.get('at'))}" if recheck else "not done in this session")])]
    body.append("<h4>Authentication</h4><ul>" + "".join(f"<li>{e(s)}</li>" for s in auth.get("statements") or [])
                + "".join(f'<li class="og-bad">{e(f)}</li>' for f in auth.get("failures") or []) + "</ul>")
    return section("custody", "Custody", "".join(body))


def boot(receipt: ReceiptData) -> str:
    """The boot log's facts (KV pool, load GiB and seconds), or the boot failure with the log tail."""
    b = receipt.get("boot")
    if not b:
        return section("boot", "Boot (from the engine log)", absent(receipt, "load"))
    body = []
    if b.get("ready"):
        f = b.get("facts") or {}
        body.append(kv([
            ("ready after", _seconds(b.get("elapsed_s"))),
            ("KV cache pool", f"{text(f.get('kv_cache_gib'))} GiB = {num(f.get('kv_cache_tokens'))} tokens"),
            ("maximum concurrency", f"{text(f.get('max_concurrency'))}x at {num(f.get('concurrency_tokens'))} tokens"),
            ("model loading", f"{text(f.get('load_gib'))} GiB in {text(f.get('load_s'))} s"),
            ("CPU-offloaded parameters", f"{text(f.get('cpu_offload_gib'))} GiB" if f.get("cpu_offload_gib") is not None
             else "not reported in the log"),
            ("server started", f.get("server_started")), ("vLLM version (log)", f.get("vllm_version"))]
            + ([("these figures are", f"{ONE_WORKER} of the {multi_gpu_protocol(receipt)}, not the set's total")]
               if multi_gpu_protocol(receipt) else [])))
    else:
        failure = b.get("failure") or {}
        body.append(f'<p class="og-blocked">BLOCKED {e(b.get("code"))}: {e(b.get("message"))}</p>')
        body.append(kv([("the engine's own words", failure.get("quote") or "none: its log states no reason"),
                        ("what it means", CODES.get(str(b.get("code")), "")),
                        ("what to do", ADVICE.get(str(b.get("code")), "read engine.log in the run folder")),
                        ("exit code", failure.get("exit_code")), ("OOMKilled", failure.get("oom_killed")),
                        ("timed out", failure.get("timed_out")), ("boot deadline", _seconds(failure.get(
                            "boot_deadline_s")))]))
        if failure.get("log_tail"):
            body.append(f'<h4>Last lines of engine.log</h4><pre class="og-pre">'
                        f'{e(chr(10).join(str(x) for x in failure["log_tail"]))}</pre>')
    end = ((receipt.get("engine") or {}).get("end")) or {}
    if end:
        body.append("<h4>Engine container at the end</h4>" + kv([
            ("status / exit code", f"{text(end.get('status'))} / {text(end.get('exit_code'))}"),
            ("OOMKilled / OOM kill count rose", f"{text(end.get('oom_killed'))} / "
                                                f"{text(end.get('oom_kill_count_rose'))}"),
            ("stopped in", _seconds(end.get("stop_s"))), ("removed", end.get("removed")),
            ("log", (receipt.get("engine") or {}).get("log"))]))
    return section("boot", "Boot (from the engine log)", "".join(body))


def timings(receipt: ReceiptData) -> str:
    """One row per timed phase; a phase that did not run says so."""
    recorded = dict(receipt.get("timings_s") or {})
    rows = []
    for key, phase, what in TIMINGS:
        value = recorded.pop(key, None)
        verdict = ((receipt.get("phases") or {}).get(phase) or {}).get("verdict") or "NOT RUN"
        rows.append([key, what, _seconds(value) if value is not None else f"not run (phase {phase}: {verdict})"])
    rows += [[k, "", _seconds(v)] for k, v in recorded.items()]
    return section("timings", "Timings, kept apart", '<p class="og-note">Each row is one phase\'s own duration; '
                   "none includes another.</p>" + table(["timing", "what", "seconds"], rows))


def memory(receipt: ReceiptData, samples: Sequence[dict]) -> str:
    """The GPU memory and host RAM plot over the samples, and their peaks."""
    plot = memory_plot(samples, receipt.get("timeline")) if samples else None
    peaks = receipt.get("samples") or {}
    if plot is None:
        return section("memory", "GPU memory and host RAM over time",
                       absent(receipt, "load", "no samples (they are taken while the engine runs)"))
    gpu_scope = f" ({RANK0_GPU})" if multi_gpu_protocol(receipt) else ""
    return section("memory", "GPU memory and host RAM over time", plot + kv([
        ("samples", peaks.get("count", len(samples))),
        ("GPU memory used, peak" + gpu_scope, gib(peaks.get("gpu_used_bytes_max"))),
        ("GPU free, lowest" + gpu_scope, gib(peaks.get("gpu_free_bytes_min"))),
        ("host available RAM, lowest", gib(peaks.get("host_available_bytes_min"))),
        ("container memory, peak", gib(peaks.get("container_memory_bytes_max"))),
        ("samples with a reading error", peaks.get("errors"))]))


def _request_file(rf: dict) -> list[tuple[str, object]]:
    return [("request file", rf.get("path")), ("its SHA-256", rf.get("sha256")),
            ("requests / bytes", f"{num(rf.get('requests'))} / {num(rf.get('bytes'))}")]


def _summary(summary: dict | None) -> str:
    if not summary:
        return '<p class="og-notrun-text">no requests were sent</p>'
    try:
        lines = summary_lines(summary)
    except (KeyError, TypeError):  # a receipt cut mid-write: show the raw figures rather than fail the report
        lines = [f"{k}: {v}" for k, v in summary.items()]
    return "<ul>" + "".join(f"<li>{e(line)}</li>" for line in lines) + "</ul>"


def _engine_end(end: dict | None) -> list[tuple[str, object]]:
    """The rows of an engine that died while requests ran: the code, and why in the engine's own words."""
    if not end:
        return []
    return [("the engine died", f"{text(end.get('code'))} {text(end.get('why'))}"),
            ("the engine's own words", end.get("quote") or "none: its log states no reason"),
            ("what to do", ADVICE.get(str(end.get("code")), "read engine.log in the run folder"))]


def canary(receipt: ReceiptData) -> str:
    """The canary's request file and its UNSCORED counts."""
    c = receipt.get("canary")
    if not c:
        return section("canary", "Canary (UNSCORED)", absent(receipt, "canary"))
    rows = _request_file(c.get("request_file") or {}) + [("written by the kit", (c.get("request_file") or {}).get(
        "written_by_kit")), ("needle check", c.get("needle_check") or "no needle request")]
    rows += _engine_end((c.get("session_run") or {}).get("engine_end"))
    return section("canary", "Canary (UNSCORED)", f"<p>{UNSCORED}{e(c.get('label'))}</p>" + kv(rows)
                   + _summary(c.get("summary")))


def batch(receipt: ReceiptData) -> str:
    """The frozen batch: request file, protocol identities, UNSCORED counts and rates."""
    b = receipt.get("batch")
    if not b:
        return section("batch", "Batch statistics (UNSCORED)", absent(receipt, "batch"))
    p = b.get("protocol") or {}
    rows = _request_file(b.get("request_file") or {}) + [
        ("protocol", f"{text(p.get('path'))} (SHA-256 {text(p.get('sha256'))}, schema {text(p.get('source_schema'))})"),
        ("benchmark / split", _join(p.get("benchmark"), p.get("split"), sep=" / ")),
        ("harness", _join(p.get("harness"), p.get("harness_revision"))),
        ("dataset", _join(p.get("dataset"), p.get("dataset_revision"))),
        ("scorer", _join(p.get("scorer"), p.get("scorer_revision"))),
        ("interaction / timing", f"{text(p.get('interaction'))} / {text(p.get('timing_policy'))}"),
        ("resumed", b.get("resumed") or "no")] + _engine_end((b.get("session_run") or {}).get("engine_end"))
    return section("batch", "Batch statistics (UNSCORED)", f"<p>{UNSCORED}a transport record, not a score: the "
                   "benchmark's own scorer reads responses.jsonl</p>" + kv(rows) + _summary(b.get("summary")))


def serve(receipt: ReceiptData) -> str:
    """The serve window and its UNSCORED transport statistics."""
    s = receipt.get("serve")
    if not s:
        return section("serve", "Serve window and transport statistics (UNSCORED)", absent(receipt, "serve"))
    t = s.get("transport") or {}
    streams = t.get("streams") or {}
    latency, ttft, rate = t.get("latency_forwarded_s") or {}, streams.get("ttft_s") or {}, \
        streams.get("output_tokens_per_s") or {}
    rows = [("state", s.get("state")), ("connection file (holds the key: never attach it)", s.get("connection_file")),
            ("URL / model", f"{text(s.get('url'))} / {text(s.get('model'))}"), ("window", _seconds(s.get("window_s"))),
            ("READY at / deadline", f"{text(s.get('ready_at'))} / {text(s.get('deadline'))}"),
            ("closed at", s.get("closed_at")), ("why closed", s.get("closed_reason")),
            ("calls cut at close", s.get("cut_in_flight"))] + _engine_end(s.get("engine_end"))
    if t:
        rows += [("calls / forwarded", f"{text(t.get('calls'))} / {text(t.get('forwarded'))}"),
                 ("statuses", ", ".join(f"{k}: {v}" for k, v in (t.get("statuses") or {}).items())),
                 ("rejected 429 / cut", f"{text(t.get('rejected_429'))} / {text(t.get('cut'))}"),
                 ("request / response bytes", f"{num(t.get('request_bytes'))} / {num(t.get('response_bytes'))}"),
                 ("latency of forwarded calls p50 / p95", f"{text(latency.get('p50'))} / "
                                                          f"{text(latency.get('p95'))} s"),
                 ("streams / time to first token p50 / p95", f"{text(streams.get('count'))} / "
                                                             f"{text(ttft.get('p50'))} / {text(ttft.get('p95'))} s"),
                 ("stream output tokens per second p50 / min", f"{text(rate.get('p50'))} / {text(rate.get('min'))}")]
    return section("serve", "Serve window and transport statistics (UNSCORED)",
                   f"<p>{UNSCORED}{e(s.get('note') or 'a record of calls through the adapter, not a grade')}; "
                   f"{e(streams.get('label') or '')}</p>" + kv(rows))


def counted_cards(receipt: ReceiptData) -> str:
    """Which cards a run's figures count: the selected GPU, or the multi-GPU protocol's set."""
    protocol = multi_gpu_protocol(receipt)
    return (f"only the GPUs of the {protocol} are counted, each as its rank; any other card in the machine is "
            "ignored" if protocol else "only the selected GPU is counted; any other card in the machine is ignored")


def warnings_and_limitations(receipt: ReceiptData) -> str:
    """The run's warnings and limitations, and the standing ones."""
    def items(values, empty):
        return "<ul>" + ("".join(f"<li>{e(v)}</li>" for v in values) or f"<li>{e(empty)}</li>") + "</ul>"

    return section("limitations", "Warnings and limitations",
                   "<h4>Warnings</h4>" + items(receipt.get("warnings") or [], "none")
                   + "<h4>Limitations</h4>" + items(receipt.get("limitations") or [], "none recorded")
                   + '<p class="og-note">Header bytes are not the loaded footprint; request figures are UNSCORED '
                     f"transport records; {e(counted_cards(receipt))}.</p>")
