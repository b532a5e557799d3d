"""Pure: a receipt (with samples, settings values and the run folder's file list) -> the kit's report sections.

Each section is an HTML string for pytest-html's summary prefix. Every value from the receipt is escaped
(paths, log lines and model IDs may hold any character); a section whose phase did not run says so.
The run-phase sections (custody to serve) are in onegpu.report.sections.
"""
from __future__ import annotations

import shlex
from typing import Any, Mapping, Sequence

from onegpu.core.outcomes import CODES
from onegpu.core.units import gib
from onegpu.record.receipt import Kit, ReceiptRecord
from onegpu.record.sections_machine import CgroupFacts, DockerFacts, GpuFacts, HostFacts
from onegpu.record.sections_plan import CapacityAccounting, CheckpointQuant
from onegpu.report.ceiling_view import ceiling_section
from onegpu.report.insight import calibration, consistency, proposal, under_floor
from onegpu.report.parts import absent, e, kv, multi_gpu_protocol, num, page_style, recorded, section, table, text
from onegpu.report.sections import run_sections

TITLE = "onegpu report: PRIVATE, review before sharing (summary-share.md is the one safe to post publicly)"
REVIEW_LINE = ("Review before sharing: this report holds local paths, GPU UUIDs, host names, image tags and engine "
               "logs. summary-share.md in the same run folder is the one safe to post publicly.")

def sections(receipt: ReceiptRecord, samples: Sequence[dict] = (), settings: dict | None = None,
             files: Sequence[tuple[str, int | None]] = ()) -> list[str]:
    """The kit's sections, top down: review line and banners, verdict, facts, settings and plan, checkpoint and its
    consistency, capacity, the link ceiling (and the measured rates against it), the reserve's calibration, the
    proposal, then the run phases, limitations, fact lines and the run itself."""
    return [top(receipt), verdict(receipt), facts(receipt), settings_section(receipt, settings), plan(receipt),
            checkpoint(receipt), consistency(receipt), capacity(receipt), ceiling_section(receipt), calibration(receipt),
            proposal(receipt),
            *run_sections(receipt, list(samples)), fact_lines(receipt), run(receipt, files)]


def top(receipt: ReceiptRecord) -> str:
    """The page style, the review line and the banners (REPLAYED, SYNTHETIC, ...), first of all; a landing under
    the free-memory floor is one of them."""
    alarm = under_floor(receipt)
    banners = "".join(f'<p class="og-banner">{e(b)}</p>' for b in [*receipt.banners,
                                                                    *([alarm] if alarm else [])])
    return f'{page_style()}<div class="og" id="og-top"><p class="og-review">{e(REVIEW_LINE)}</p>{banners}</div>'


def _verdict_class(line: str) -> str:
    return ("og-bad" if line.startswith(("FAILED", "INTERRUPTED")) else "og-blocked" if line.startswith("BLOCKED")
            else "og-ok" if line.startswith("NO DEFINITE") else "og-plain")


def _counts(counts: Mapping[str, int] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((counts or {}).items())) or "no test"


def _numbers(numbers: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k} = {v}" for k, v in (numbers or {}).items())


def verdict(receipt: ReceiptRecord) -> str:
    """The run's verdict in one line, one row per phase, then the blocked reasons with their numbers."""
    line = receipt.verdict or "the session has not finished: no verdict yet (the receipt is mid-run)"
    body = [f'<p class="og-verdict {_verdict_class(line)}">{e(line)}</p>']
    rows = [[name, p.verdict, p.code or "", p.message or "", _counts(p.counts)] for name, p in receipt.phases.items()]
    body.append(table(["phase", "verdict", "code", "reason", "tests"], rows, status_col=1))
    blocked: dict[tuple, dict] = {}
    failed, cut = [], []
    for nodeid, t in receipt.tests.items():
        message = t.message if t.message is not None else ""
        if t.outcome == "blocked":
            entry = blocked.setdefault((t.code, t.message), {"n": 0, "phases": [], "numbers": t.numbers or {}})
            entry["n"] += 1
            if t.phase not in entry["phases"]:
                entry["phases"].append(t.phase)
        elif t.outcome == "interrupted":
            cut.append(f"<li><b>INTERRUPTED</b> {e(nodeid)}: {e(message)}</li>")
        elif t.outcome in ("failed", "error"):
            failed.append(f"<li><b>{e(str(t.outcome).upper())}</b> {e(nodeid)} "
                          f"({e(t.when if t.when is not None else 'call')}): {e(message)}</li>")
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


def _counted(receipt: ReceiptRecord) -> dict[int | None, str] | None:
    """Card index -> how it is counted: the one selected card, or each card of a multi-GPU set by its rank; None
    when no card was selected."""
    selection = receipt.selection
    protocol = multi_gpu_protocol(receipt)
    if protocol:
        gpu_set = (selection.gpu_set if selection is not None else None) or []
        return {m.index: f"rank {m.rank} of the {protocol}" for m in gpu_set}
    if selection is None or selection.gpu_index is None:
        return None
    return {selection.gpu_index: "SELECTED (the only card counted)"}


def _gpu_rows(gpu: GpuFacts, counted: dict[int | None, str] | None) -> list[list]:
    rows = []
    for d in gpu.devices or []:
        pcie = (f"gen {d.pcie_link_gen} x{text(d.pcie_link_width)} (max gen "
                f"{text(d.pcie_max_link_gen)} x{text(d.pcie_max_link_width)})"
                if d.pcie_link_gen is not None else "unknown")
        mark = ("no card selected (no valid settings)" if counted is None else
                counted.get(d.index, "not counted"))
        rows.append([d.index, mark, d.name, d.uuid, gib(d.total_bytes),
                     gib(d.free_bytes), gib(d.reserved_bytes), "on" if d.mig_enabled else "off",
                     len(d.compute_processes or []), d.pci_bus_id, pcie, d.numa_node])
    return rows


def facts(receipt: ReceiptRecord) -> str:
    """GPU (every card, the counted ones marked), host and Docker facts."""
    hw = receipt.hardware
    if not recorded(hw):
        return section("facts", "Facts: GPU, host, Docker", absent(receipt, "machine"))
    gpu, host, docker = hw.gpu or GpuFacts(), hw.host or HostFacts(), hw.docker or DockerFacts()
    body = [f'<p>source: <b>{e(hw.source)}</b>'
            + (f" (profile {e(hw.profile)}, recorded {e(hw.recorded_at)})" if hw.profile else "")
            + "</p>"]
    if gpu.nvml_loaded:
        body.append(f"<p>NVIDIA driver {e(gpu.driver_version)}, CUDA driver API "
                    f"{e(gpu.cuda_driver_version)}</p>")
        body.append(table(["index", "counted", "name", "UUID", "total", "driver-reported free", "reserved", "MIG",
                           "compute procs", "PCI bus", "PCIe link", "NUMA"], _gpu_rows(gpu, _counted(receipt))))
    else:
        body.append(f'<p class="og-blocked">no GPU readable: {e(gpu.error)}</p>')
    cg = host.cgroup or CgroupFacts()
    body.append("<h4>Host</h4>" + kv([
        ("host name", host.hostname), ("kernel", host.kernel),
        ("RAM total / available", f"{gib(host.ram_total_bytes)} / {gib(host.ram_available_bytes)}"
         + (" (stated by the operator)" if host.ram_stated_by_operator else "")),
        ("swap total / free", f"{gib(host.swap_total_bytes)} / {gib(host.swap_free_bytes)}"),
        ("cgroup", f"v{text(cg.version)} {text(cg.path)}: memory limit "
                   f"{gib(cg.memory_limit_bytes) if cg.memory_limit_bytes else 'none'}, usage "
                   f"{gib(cg.memory_usage_bytes)}, CPU quota {cg.cpu_quota_cpus or 'none'}"
         if cg.version is not None else None),
        ("locked-memory limit", gib(host.memlock_limit_bytes)),
        ("transparent hugepages", host.transparent_hugepages),
        ("CPUs online / usable", f"{text(host.cpus_online)} / {text(host.cpus_usable)}"),
        ("NUMA nodes", host.numa_nodes), ("WSL2", host.wsl2),
        *[(f"free disk: {text(d.label)}", f"{gib(d.free_bytes)} of {gib(d.total_bytes)} at "
                                           f"{text(d.path)}") for d in host.disks or []]]))
    handoff = ", ".join(x for x in ["nvidia runtime" if docker.nvidia_runtime else "",
                                    "nvidia hook" if docker.nvidia_hook else "",
                                    *(docker.cdi_gpu_devices or [])] if x) or "none"
    body.append("<h4>Docker</h4>" + (kv([
        ("daemon", f"{text(docker.server_version)} (API {text(docker.api_version)}) at "
                   f"{text(docker.endpoint)}"),
        ("remote / rootless", f"{text(docker.remote)} / {text(docker.rootless)}"),
        ("swap limits enforced", docker.swap_limit), ("cgroup", docker.cgroup_version),
        ("runtimes", ", ".join(docker.runtimes or [])), ("GPU hand-off", handoff),
        ("daemon memory", gib(docker.daemon_mem_total_bytes))]) if docker.reachable
        else f'<p class="og-blocked">unreachable: {e(docker.error)}</p>'))
    return section("facts", "Facts: GPU, host, Docker", "".join(body))


def settings_section(receipt: ReceiptRecord, values: dict | None) -> str:
    """The settings file, its values and what was ASSUMED."""
    s = receipt.settings
    if not recorded(s):
        errors = receipt.settings_errors
        extra = ("<ul>" + "".join(f"<li>{e(x)}</li>" for x in errors) + "</ul>") if errors else ""
        return section("settings", "Settings", absent(receipt, "plan") + extra)
    body = [kv([("file", s.path), ("schema", s.schema), ("SHA-256", s.sha256)])]
    if values:
        body.append(table(["setting", "value"], [[k, "none" if v is None else v] for k, v in values.items()]))
    if s.assumed:
        body.append("<h4>ASSUMED (named kit defaults for settings the file leaves out)</h4><ul>"
                    + "".join(f"<li><b>{e(k)}</b> = {e(v)}</li>" for k, v in s.assumed.items()) + "</ul>")
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


def plan(receipt: ReceiptRecord) -> str:
    """plan.json, the image, the docker run line, mounts, caps and notes."""
    launch, image, record = receipt.launch, receipt.image, receipt.plan
    if not (recorded(launch) or recorded(image) or recorded(record)):
        return section("plan", "The launch plan", absent(receipt, "plan"))
    body = []
    if recorded(record):
        approved = record.approved
        body.append(kv([("plan.json", record.path), ("plan SHA-256", record.sha256),
                        ("approved plan", f"{text(approved.path)} (SHA-256 {text(approved.sha256)})"
                         if recorded(approved) else "none given (this plan was computed afresh)")]))
    if recorded(image):
        body.append("<h4>Image</h4>" + kv([
            ("reference", image.reference), ("image ID", image.id),
            ("tags", ", ".join(image.repo_tags or []) or "none"),
            ("RepoDigests", ", ".join(image.repo_digests or []) or "none (built or loaded locally)"),
            ("created", image.created), ("size", gib(image.size_bytes))]))
    else:
        body.append(f"<h4>Image</h4>{absent(receipt, 'plan', 'the image was not resolved')}")
    if recorded(launch):
        body.append("<h4>docker run line (equivalent; the kit creates the container through the Docker API)</h4>"
                    f'<pre class="og-pre">{e(run_line_lines(launch.docker_run_line or ""))}</pre>')
        mounts = [[m.source, m.target, "read-only" if m.read_only else "read-write"] for m in launch.mounts or []]
        body.append("<h4>Mounts</h4>" + table(["host path", "container path", "mode"], mounts))
        mem, swap = launch.mem_limit_bytes, launch.memswap_limit_bytes
        cpus = launch.nano_cpus
        body.append("<h4>Caps and isolation</h4>" + kv([
            ("image ID (created from)", launch.image_id), ("GPU (device request)", launch.gpu_uuid
                                                           or "none in this plan (see notes)"),
            ("RAM cap", f"{gib(mem)} ({num(mem)} bytes)"),
            ("memory + swap", f"{gib(swap)}" + (" (equal to the RAM cap: no swap)" if mem == swap else "")),
            ("pids limit", launch.pids_limit), ("shm", gib(launch.shm_size_bytes)),
            ("CPUs", f"{cpus / 1e9:g}" if cpus else "no quota"), ("user", launch.user),
            ("network", launch.network_mode), ("security options", ", ".join(launch.security_opt or [])),
            ("capabilities dropped", ", ".join(launch.cap_drop or [])),
            ("tmpfs", "; ".join(f"{k} ({v})" for k, v in (launch.tmpfs or {}).items())),
            ("socket", launch.socket_path)]))
        if launch.notes:
            body.append("<h4>Notes</h4><ul>" + "".join(f"<li>{e(n)}</li>" for n in launch.notes) + "</ul>")
    else:
        body.append(f"<h4>Launch</h4>{absent(receipt, 'plan', 'no launch plan was built')}")
    return section("plan", "The launch plan", "".join(body))


def checkpoint(receipt: ReceiptRecord) -> str:
    """What the headers and config say about the checkpoint."""
    c = receipt.checkpoint
    if not recorded(c):
        return section("checkpoint", "Checkpoint (headers and config)", absent(receipt, "plan"))
    quant = c.quant or CheckpointQuant()
    body = kv([("folder", c.root), ("HF cache repo / revision", f"{c.hf_cache_repo or 'none'} / "
                                                                f"{c.hf_revision or 'none'}"),
               ("architectures", ", ".join(c.architectures or [])), ("model type", c.model_type),
               ("quantization", quant.description or quant.method),
               ("shards", f"{len(c.shards or [])} via {text(c.index_file)}"),
               ("tensors", num(c.tensor_count)),
               ("header bytes (not the loaded footprint)", f"{gib(c.weight_bytes)} "
                                                           f"({num(c.weight_bytes)} bytes)"),
               ("by dtype", ", ".join(f"{k} {gib(v)}" for k, v in (c.bytes_by_dtype or {}).items())),
               ("by role", ", ".join(f"{k} {gib(v)}" for k, v in (c.bytes_by_role or {}).items())),
               ("SYNTHETIC (header-only, no weights)", c.synthetic)])
    return section("checkpoint", "Checkpoint (headers and config)", body)


def capacity(receipt: ReceiptRecord) -> str:
    """The capacity verdicts and the KV-cache estimate."""
    rows = receipt.capacity
    if not rows:
        return section("capacity", "Capacity", absent(receipt, "plan"))
    stated = receipt.capacity_accounting
    accounting = stated if recorded(stated) else CapacityAccounting()
    version = accounting.version
    known = (f" Every row is judged by {e(accounting.accounting)}: vLLM {e(version.version or '?')}, "
             f"{e(str(version.basis or '').lower())} ({e(version.evidence)})."
             if recorded(version) else (f" Offload and pinned host bytes: {e(accounting.accounting)}."
                                         if recorded(stated) else ""))
    body = ['<p class="og-note">Header bytes are not the loaded footprint: OK means no definite failure was found, '
            "never that the model fits. UNKNOWN is shown, never hidden." + known + "</p>",
            table(["check", "status", "code", "accounting", "numbers"],
                  [[v.check, v.status, v.code or "", (v.numbers or {}).get("accounting") or "", v.message]
                   for v in rows],
                  status_col=1)]
    rules = accounting.rules or []
    if rules:
        body.append(f"<h4>{e(accounting.accounting)}: the rules and where vLLM states them</h4>"
                    + table(["rule", "what the engine does", "source (vLLM file:function)"],
                            [[r.rule, r.text, "; ".join(str(x) for x in r.sources or [])] for r in rules]))
    kvc = receipt.kv_cache
    if recorded(kvc):
        total = (f"{gib(kvc.bytes)} ({num(kvc.bytes)} bytes)" if kvc.bytes is not None
                 else f"UNKNOWN: {text(kvc.unknown_reason)}")
        layers = [[r.kind, r.layers, r.formula,
                   f"{r.groups} + {r.padded_layers} padding slots" if r.groups else "summed",
                   num(r.block_tokens), num(r.reserved_tokens), num(r.bytes)]
                  for r in kvc.layers or []]
        pool = kvc.pool
        pool_line = (f"{num(pool.bytes_per_block)} B per block ({pool.layers_per_group} layer slots per "
                     f"group) x {num(pool.blocks_per_request)} blocks per request + 1 null block; in flight "
                     f"{num(pool.in_flight_tokens)} tokens (max-num-batched-tokens "
                     f"{num(pool.max_num_batched_tokens)}, async scheduling "
                     f"{'on' if pool.async_scheduling else 'off'}); {num(pool.block_size)}-token "
                     "blocks") if recorded(pool) else "no pool arithmetic (recurrent layers are summed kind by kind)"
        body.append(f"<h4>KV cache for one sequence, {e(kvc.accounting or '')}: {e(total)}</h4>"
                    + f'<p class="og-note">{e(pool_line)}</p>'
                    + table(["layers", "count", "per token", "groups", "block tokens", "reserved tokens", "bytes"],
                            layers)
                    + "".join(f'<p class="og-note">{e(n)}</p>' for n in kvc.notes or []))
    return section("capacity", "Capacity", "".join(body))


def fact_lines(receipt: ReceiptRecord) -> str:
    """The fact lines the terminal printed, per phase, folded."""
    blocks = [f"<details><summary>{e(phase)} ({len(lines)} lines)</summary><pre class=\"og-pre\">"
              f"{e(chr(10).join(lines))}</pre></details>" for phase, lines in receipt.shown.items() if lines]
    return section("lines", "Fact lines as printed in the terminal", "".join(blocks) or "<p>none recorded</p>")


def run(receipt: ReceiptRecord, files: Sequence[tuple[str, int | None]]) -> str:
    """The kit version, command line, times and the run folder's files."""
    kit = receipt.kit or Kit()
    body = kv([("kit", f"{text(kit.name)} {text(kit.version)} (commit {text(kit.git_commit)})"),
               ("command", shlex.join(str(a) for a in receipt.command_line or [])),
               ("kind", receipt.kind), ("run folder", receipt.run_folder),
               ("started / finished", f"{text(receipt.started_at)} / {text(receipt.finished_at)}"),
               ("exit status", receipt.exit_status), ("hardware facts", receipt.hardware_source),
               ("earlier sessions in this folder", len(receipt.earlier_sessions))])
    if files:
        body += "<h4>Files in the run folder (all private, 0600)</h4>" + table(
            ["file", "bytes"], [[name, "this report" if size is None else num(size)] for name, size in files])
    return section("run", "The run", body)
