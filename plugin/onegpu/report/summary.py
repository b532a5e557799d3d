"""Pure: a receipt (with samples, settings values and the run folder's file list) -> the kit's report sections.

Each section is an HTML string for pytest-html's summary prefix. Every value from the receipt is escaped
(paths, log lines and model IDs may hold any character); a section whose phase did not run says so.
The run-phase sections (custody to serve) are in onegpu.report.sections.
"""
from __future__ import annotations

import shlex
from typing import Mapping, Sequence

from onegpu.core.outcomes import CODES
from onegpu.core.units import gib
from onegpu.evidence.receipt_schema import ReceiptData
from onegpu.report.ceiling_view import ceiling_section
from onegpu.report.insight import calibration, consistency, proposal, under_floor
from onegpu.report.parts import absent, e, kv, multi_gpu_protocol, num, page_style, section, table, text
from onegpu.report.sections import run_sections

TITLE = "onegpu report: PRIVATE, review before sharing (summary-share.md is the one safe to post publicly)"
REVIEW_LINE = ("Review before sharing: this report holds local paths, GPU UUIDs, host names, image tags and engine "
               "logs. summary-share.md in the same run folder is the one safe to post publicly.")


def sections(receipt: ReceiptData, samples: Sequence[dict] = (), settings: dict | None = None,
             files: Sequence[tuple[str, int | None]] = ()) -> list[str]:
    """The kit's sections, top down: review line and banners, verdict, facts, settings and plan, checkpoint and its
    consistency, capacity, the link ceiling (and the measured rates against it), the reserve's calibration, the
    proposal, then the run phases, limitations, fact lines and the run itself."""
    return [top(receipt), verdict(receipt), facts(receipt), settings_section(receipt, settings), plan(receipt),
            checkpoint(receipt), consistency(receipt), capacity(receipt), ceiling_section(receipt), calibration(receipt),
            proposal(receipt),
            *run_sections(receipt, list(samples)), fact_lines(receipt), run(receipt, files)]


def top(receipt: ReceiptData) -> str:
    """The page style, the review line and the banners (REPLAYED, SYNTHETIC, ...), first of all; a landing under
    the free-memory floor is one of them."""
    alarm = under_floor(receipt)
    banners = "".join(f'<p class="og-banner">{e(b)}</p>' for b in [*(receipt.get("banners") or []),
                                                                    *([alarm] if alarm else [])])
    return f'{page_style()}<div class="og" id="og-top"><p class="og-review">{e(REVIEW_LINE)}</p>{banners}</div>'


def _verdict_class(line: str) -> str:
    return ("og-bad" if line.startswith(("FAILED", "INTERRUPTED")) else "og-blocked" if line.startswith("BLOCKED")
            else "og-ok" if line.startswith("NO DEFINITE") else "og-plain")


def _counts(counts: Mapping[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((counts or {}).items())) or "no test"


def _numbers(numbers: dict) -> str:
    return ", ".join(f"{k} = {v}" for k, v in (numbers or {}).items())


def verdict(receipt: ReceiptData) -> str:
    """The run's verdict in one line, one row per phase, then the blocked reasons with their numbers."""
    line = receipt.get("verdict") or "the session has not finished: no verdict yet (the receipt is mid-run)"
    body = [f'<p class="og-verdict {_verdict_class(line)}">{e(line)}</p>']
    phases = receipt.get("phases") or {}
    rows = [[name, p.get("verdict"), p.get("code") or "", p.get("message") or "", _counts(p.get("counts"))]
            for name, p in phases.items()]
    body.append(table(["phase", "verdict", "code", "reason", "tests"], rows, status_col=1))
    blocked: dict[tuple, dict] = {}
    failed, cut = [], []
    for nodeid, t in (receipt.get("tests") or {}).items():
        if t.get("outcome") == "blocked":
            entry = blocked.setdefault((t.get("code"), t.get("message")), {"n": 0, "phases": [],
                                                                         "numbers": t.get("numbers") or {}})
            entry["n"] += 1
            if t.get("phase") not in entry["phases"]:
                entry["phases"].append(t.get("phase"))
        elif t.get("outcome") == "interrupted":
            cut.append(f"<li><b>INTERRUPTED</b> {e(nodeid)}: {e(t.get('message', ''))}</li>")
        elif t.get("outcome") in ("failed", "error"):
            failed.append(f"<li><b>{e(t['outcome'].upper())}</b> {e(nodeid)} ({e(t.get('when', 'call'))}): "
                          f"{e(t.get('message', ''))}</li>")
    if blocked:
        items = []
        for (code, message), entry in blocked.items():
            numbers = _numbers(entry["numbers"])
            where = ", ".join(str(x) for x in entry["phases"])
            items.append(f"<li><b>BLOCKED {e(code)}</b> in phase{'s' if len(entry['phases']) > 1 else ''} "
                         f"{e(where)} ({entry['n']} test"
                         f"{'s' if entry['n'] > 1 else ''}): {e(message)}"
                         + (f'<br><span class="og-num">numbers: {e(numbers)}</span>' if numbers else "")
                         + f'<br><span class="og-note">{e(code)} means: '
                           f'{e(CODES.get(code) or "(no description)")}'
                           "</span></li>")
        body.append("<h4>Blocked reasons, with their numbers</h4><ul>" + "".join(items) + "</ul>")
    if cut:
        body.append("<h4>Interrupted: cut while running, or never reached (nothing of these is a result)</h4><ul>"
                    + "".join(cut) + "</ul>")
    if failed:
        body.append("<h4>Failures (unexpected errors, not blocked outcomes)</h4><ul>" + "".join(failed) + "</ul>")
    return section("verdict", "Verdict", "".join(body))


def _counted(receipt: ReceiptData) -> dict | None:
    """Card index -> how it is counted: the one selected card, or each card of a multi-GPU set by its rank; None
    when no card was selected."""
    selection = receipt.get("selection") or {}
    protocol = multi_gpu_protocol(receipt)
    if protocol:
        return {m.get("index"): f"rank {m.get('rank')} of the {protocol}" for m in selection.get("gpu_set") or []
                if isinstance(m, dict)}
    if selection.get("gpu_index") is None:
        return None
    return {selection.get("gpu_index"): "SELECTED (the only card counted)"}


def _gpu_rows(gpu: dict, counted: dict | None) -> list[list]:
    rows = []
    for d in gpu.get("devices") or []:
        pcie = (f"gen {d.get('pcie_link_gen')} x{text(d.get('pcie_link_width'))} (max gen "
                f"{text(d.get('pcie_max_link_gen'))} x{text(d.get('pcie_max_link_width'))})"
                if d.get("pcie_link_gen") is not None else "unknown")
        mark = ("no card selected (no valid settings)" if counted is None else
                counted.get(d.get("index"), "not counted"))
        rows.append([d.get("index"), mark, d.get("name"), d.get("uuid"), gib(d.get("total_bytes")),
                     gib(d.get("free_bytes")), gib(d.get("reserved_bytes")), "on" if d.get("mig_enabled") else "off",
                     len(d.get("compute_processes") or []), d.get("pci_bus_id"), pcie, d.get("numa_node")])
    return rows


def facts(receipt: ReceiptData) -> str:
    """GPU (every card, the counted ones marked), host and Docker facts."""
    hw = receipt.get("hardware")
    if not hw:
        return section("facts", "Facts: GPU, host, Docker", absent(receipt, "machine"))
    gpu, host, docker = hw.get("gpu") or {}, hw.get("host") or {}, hw.get("docker") or {}
    body = [f'<p>source: <b>{e(hw.get("source"))}</b>'
            + (f" (profile {e(hw.get('profile'))}, recorded {e(hw.get('recorded_at'))})" if hw.get("profile") else "")
            + "</p>"]
    if gpu.get("nvml_loaded"):
        body.append(f"<p>NVIDIA driver {e(gpu.get('driver_version'))}, CUDA driver API "
                    f"{e(gpu.get('cuda_driver_version'))}</p>")
        body.append(table(["index", "counted", "name", "UUID", "total", "driver-reported free", "reserved", "MIG",
                           "compute procs", "PCI bus", "PCIe link", "NUMA"], _gpu_rows(gpu, _counted(receipt))))
    else:
        body.append(f'<p class="og-blocked">no GPU readable: {e(gpu.get("error"))}</p>')
    cg = host.get("cgroup") or {}
    body.append("<h4>Host</h4>" + kv([
        ("host name", host.get("hostname")), ("kernel", host.get("kernel")),
        ("RAM total / available", f"{gib(host.get('ram_total_bytes'))} / {gib(host.get('ram_available_bytes'))}"
         + (" (stated by the operator)" if host.get("ram_stated_by_operator") else "")),
        ("swap total / free", f"{gib(host.get('swap_total_bytes'))} / {gib(host.get('swap_free_bytes'))}"),
        ("cgroup", f"v{text(cg.get('version'))} {text(cg.get('path'))}: memory limit "
                   f"{gib(cg.get('memory_limit_bytes')) if cg.get('memory_limit_bytes') else 'none'}, usage "
                   f"{gib(cg.get('memory_usage_bytes'))}, CPU quota {cg.get('cpu_quota_cpus') or 'none'}"
         if cg.get("version") is not None else None),
        ("locked-memory limit", gib(host.get("memlock_limit_bytes"))),
        ("transparent hugepages", host.get("transparent_hugepages")),
        ("CPUs online / usable", f"{text(host.get('cpus_online'))} / {text(host.get('cpus_usable'))}"),
        ("NUMA nodes", host.get("numa_nodes")), ("WSL2", host.get("wsl2")),
        *[(f"free disk: {text(d.get('label'))}", f"{gib(d.get('free_bytes'))} of {gib(d.get('total_bytes'))} at "
                                            f"{text(d.get('path'))}") for d in host.get("disks") or []]]))
    handoff = ", ".join(x for x in ["nvidia runtime" if docker.get("nvidia_runtime") else "",
                                    "nvidia hook" if docker.get("nvidia_hook") else "",
                                    *(docker.get("cdi_gpu_devices") or [])] if x) or "none"
    body.append("<h4>Docker</h4>" + (kv([
        ("daemon", f"{text(docker.get('server_version'))} (API {text(docker.get('api_version'))}) at "
                   f"{text(docker.get('endpoint'))}"),
        ("remote / rootless", f"{text(docker.get('remote'))} / {text(docker.get('rootless'))}"),
        ("swap limits enforced", docker.get("swap_limit")), ("cgroup", docker.get("cgroup_version")),
        ("runtimes", ", ".join(docker.get("runtimes") or [])), ("GPU hand-off", handoff),
        ("daemon memory", gib(docker.get("daemon_mem_total_bytes")))]) if docker.get("reachable")
        else f'<p class="og-blocked">unreachable: {e(docker.get("error"))}</p>'))
    return section("facts", "Facts: GPU, host, Docker", "".join(body))


def settings_section(receipt: ReceiptData, values: dict | None) -> str:
    """The settings file, its values and what was ASSUMED."""
    s = receipt.get("settings")
    if not s:
        errors = receipt.get("settings_errors")
        extra = ("<ul>" + "".join(f"<li>{e(x)}</li>" for x in errors) + "</ul>") if errors else ""
        return section("settings", "Settings", absent(receipt, "plan") + extra)
    body = [kv([("file", s.get("path")), ("schema", s.get("schema")), ("SHA-256", s.get("sha256"))])]
    if values:
        body.append(table(["setting", "value"], [[k, "none" if v is None else v] for k, v in values.items()]))
    if s.get("assumed"):
        body.append("<h4>ASSUMED (named kit defaults for settings the file leaves out)</h4><ul>"
                    + "".join(f"<li><b>{e(k)}</b> = {e(v)}</li>" for k, v in s["assumed"].items()) + "</ul>")
    return section("settings", "Settings", "".join(body))


def run_line_lines(line: str) -> str:
    """A docker run line broken before each option (continuation backslashes keep it pasteable)."""
    try:
        tokens = shlex.split(line)
    except ValueError:
        return line
    out: list[str] = []
    current: list[str] = []
    for token in tokens:
        if token.startswith("--") and current:
            out.append(" ".join(shlex.quote(t) for t in current))
            current = []
        current.append(token)
    out.append(" ".join(shlex.quote(t) for t in current))
    return " \\\n    ".join(out)


def plan(receipt: ReceiptData) -> str:
    """plan.json, the image, the docker run line, mounts, caps and notes."""
    launch, image, record = receipt.get("launch"), receipt.get("image"), receipt.get("plan")
    if not (launch or image or record):
        return section("plan", "The launch plan", absent(receipt, "plan"))
    body = []
    if record:
        approved = record.get("approved") or {}
        body.append(kv([("plan.json", record.get("path")), ("plan SHA-256", record.get("sha256")),
                        ("approved plan", f"{text(approved.get('path'))} (SHA-256 {text(approved.get('sha256'))})"
                         if approved else "none given (this plan was computed afresh)")]))
    if image:
        body.append("<h4>Image</h4>" + kv([
            ("reference", image.get("reference")), ("image ID", image.get("id")),
            ("tags", ", ".join(image.get("repo_tags") or []) or "none"),
            ("RepoDigests", ", ".join(image.get("repo_digests") or []) or "none (built or loaded locally)"),
            ("created", image.get("created")), ("size", gib(image.get("size_bytes")))]))
    else:
        body.append(f"<h4>Image</h4>{absent(receipt, 'plan', 'the image was not resolved')}")
    if launch:
        body.append("<h4>docker run line (equivalent; the kit creates the container through the Docker API)</h4>"
                    f'<pre class="og-pre">{e(run_line_lines(launch.get("docker_run_line") or ""))}</pre>')
        mounts = [[m.get("source"), m.get("target"), "read-only" if m.get("read_only") else "read-write"]
                  for m in launch.get("mounts") or []]
        body.append("<h4>Mounts</h4>" + table(["host path", "container path", "mode"], mounts))
        mem, swap = launch.get("mem_limit_bytes"), launch.get("memswap_limit_bytes")
        cpus = launch.get("nano_cpus")
        body.append("<h4>Caps and isolation</h4>" + kv([
            ("image ID (created from)", launch.get("image_id")), ("GPU (device request)", launch.get("gpu_uuid")
                                                                  or "none in this plan (see notes)"),
            ("RAM cap", f"{gib(mem)} ({num(mem)} bytes)"),
            ("memory + swap", f"{gib(swap)}" + (" (equal to the RAM cap: no swap)" if mem == swap else "")),
            ("pids limit", launch.get("pids_limit")), ("shm", gib(launch.get("shm_size_bytes"))),
            ("CPUs", f"{cpus / 1e9:g}" if cpus else "no quota"), ("user", launch.get("user")),
            ("network", launch.get("network_mode")), ("security options", ", ".join(launch.get("security_opt") or [])),
            ("capabilities dropped", ", ".join(launch.get("cap_drop") or [])),
            ("tmpfs", "; ".join(f"{k} ({v})" for k, v in (launch.get("tmpfs") or {}).items())),
            ("socket", launch.get("socket_path"))]))
        if launch.get("notes"):
            body.append("<h4>Notes</h4><ul>" + "".join(f"<li>{e(n)}</li>" for n in launch["notes"]) + "</ul>")
    else:
        body.append(f"<h4>Launch</h4>{absent(receipt, 'plan', 'no launch plan was built')}")
    return section("plan", "The launch plan", "".join(body))


def checkpoint(receipt: ReceiptData) -> str:
    """What the headers and config say about the checkpoint."""
    c = receipt.get("checkpoint")
    if not c:
        return section("checkpoint", "Checkpoint (headers and config)", absent(receipt, "plan"))
    quant = c.get("quant") or {}
    body = kv([("folder", c.get("root")), ("HF cache repo / revision", f"{c.get('hf_cache_repo') or 'none'} / "
                                                                       f"{c.get('hf_revision') or 'none'}"),
               ("architectures", ", ".join(c.get("architectures") or [])), ("model type", c.get("model_type")),
               ("quantization", quant.get("description") or quant.get("method")),
               ("shards", f"{len(c.get('shards') or [])} via {text(c.get('index_file'))}"),
               ("tensors", num(c.get("tensor_count"))),
               ("header bytes (not the loaded footprint)", f"{gib(c.get('weight_bytes'))} "
                                                           f"({num(c.get('weight_bytes'))} bytes)"),
               ("by dtype", ", ".join(f"{k} {gib(v)}" for k, v in (c.get("bytes_by_dtype") or {}).items())),
               ("by role", ", ".join(f"{k} {gib(v)}" for k, v in (c.get("bytes_by_role") or {}).items())),
               ("SYNTHETIC (header-only, no weights)", c.get("synthetic"))])
    return section("checkpoint", "Checkpoint (headers and config)", body)


def capacity(receipt: ReceiptData) -> str:
    """The capacity verdicts and the KV-cache estimate."""
    rows = receipt.get("capacity")
    if not rows:
        return section("capacity", "Capacity", absent(receipt, "plan"))
    stated = receipt.get("capacity_accounting")
    accounting: dict = stated if isinstance(stated, dict) else {}
    version = accounting.get("version") if isinstance(accounting.get("version"), dict) else {}
    known = (f" Every row is judged by {e(accounting.get('accounting'))}: vLLM {e(version.get('version') or '?')}, "
             f"{e(str(version.get('basis') or '').lower())} ({e(version.get('evidence'))})."
             if version else (f" Offload and pinned host bytes: {e(accounting.get('accounting'))}." if accounting
                              else ""))
    body = ['<p class="og-note">Header bytes are not the loaded footprint: OK means no definite failure was found, '
            "never that the model fits. UNKNOWN is shown, never hidden." + known + "</p>",
            table(["check", "status", "code", "accounting", "numbers"],
                  [[v.get("check"), v.get("status"), v.get("code") or "",
                    (v.get("numbers") or {}).get("accounting") or "", v.get("message")] for v in rows],
                  status_col=1)]
    rules = [r for r in accounting.get("rules") or [] if isinstance(r, dict)]
    if rules:
        body.append(f"<h4>{e(accounting.get('accounting'))}: the rules and where vLLM states them</h4>"
                    + table(["rule", "what the engine does", "source (vLLM file:function)"],
                            [[r.get("rule"), r.get("text"), "; ".join(str(x) for x in r.get("sources") or [])]
                             for r in rules]))
    kvc = receipt.get("kv_cache") or {}
    if kvc:
        total = (f"{gib(kvc['bytes'])} ({num(kvc['bytes'])} bytes)" if kvc.get("bytes") is not None
                 else f"UNKNOWN: {text(kvc.get('unknown_reason'))}")
        layers = [[r.get("kind"), r.get("layers"), r.get("formula"),
                   f"{r.get('groups')} + {r.get('padded_layers')} padding slots" if r.get("groups") else "summed",
                   num(r.get("block_tokens")), num(r.get("reserved_tokens")), num(r.get("bytes"))]
                  for r in kvc.get("layers") or []]
        pool = kvc.get("pool") if isinstance(kvc.get("pool"), dict) else None
        pool_line = (f"{num(pool.get('bytes_per_block'))} B per block ({pool.get('layers_per_group')} layer slots per "
                     f"group) x {num(pool.get('blocks_per_request'))} blocks per request + 1 null block; in flight "
                     f"{num(pool.get('in_flight_tokens'))} tokens (max-num-batched-tokens "
                     f"{num(pool.get('max_num_batched_tokens'))}, async scheduling "
                     f"{'on' if pool.get('async_scheduling') else 'off'}); {num(pool.get('block_size'))}-token "
                     "blocks") if pool else "no pool arithmetic (recurrent layers are summed kind by kind)"
        body.append(f"<h4>KV cache for one sequence, {e(kvc.get('accounting') or '')}: {e(total)}</h4>"
                    + f'<p class="og-note">{e(pool_line)}</p>'
                    + table(["layers", "count", "per token", "groups", "block tokens", "reserved tokens", "bytes"],
                            layers)
                    + "".join(f'<p class="og-note">{e(n)}</p>' for n in kvc.get("notes") or []))
    return section("capacity", "Capacity", "".join(body))


def fact_lines(receipt: ReceiptData) -> str:
    """The fact lines the terminal printed, per phase, folded."""
    shown = receipt.get("shown") or {}
    blocks = [f"<details><summary>{e(phase)} ({len(lines)} lines)</summary><pre class=\"og-pre\">"
              f"{e(chr(10).join(lines))}</pre></details>" for phase, lines in shown.items() if lines]
    return section("lines", "Fact lines as printed in the terminal", "".join(blocks) or "<p>none recorded</p>")


def run(receipt: ReceiptData, files: Sequence[tuple[str, int | None]]) -> str:
    """The kit version, command line, times and the run folder's files."""
    kit = receipt.get("kit") or {}
    body = kv([("kit", f"{text(kit.get('name'))} {text(kit.get('version'))} (commit {text(kit.get('git_commit'))})"),
               ("command", shlex.join(str(a) for a in receipt.get("command_line") or [])),
               ("kind", receipt.get("kind")), ("run folder", receipt.get("run_folder")),
               ("started / finished", f"{text(receipt.get('started_at'))} / {text(receipt.get('finished_at'))}"),
               ("exit status", receipt.get("exit_status")), ("hardware facts", receipt.get("hardware_source")),
               ("earlier sessions in this folder", len(receipt.get("earlier_sessions") or []))])
    if files:
        body += "<h4>Files in the run folder (all private, 0600)</h4>" + table(
            ["file", "bytes"], [[name, "this report" if size is None else num(size)] for name, size in files])
    return section("run", "The run", body)

