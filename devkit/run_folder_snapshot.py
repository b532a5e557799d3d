"""Run folder snapshots: what a user sees from a demo scan and from an approve_load session on the stub engine,
normalized so that two runs of the same code compare equal and a change to what the user sees does not.

    python -m devkit.run_folder_snapshot --write                    # both sessions; the approval needs Docker
    python -m devkit.run_folder_snapshot --write --session scan-demo-flash

writes tests_offline/data/run_folder_snapshot/<session>.json; tests_offline/sessions/test_run_folder_snapshot.py runs
the sessions again and compares. Without --write the snapshots are printed.

The sessions are run as the kit's own tests run them:
* "scan-demo-flash": examples/make_mimo_checkpoint.py --model flash, then `pytest -m scan` with the demo settings
  pointing at it, the research target's hardware profile replayed, --host-ram-gib=256 (test_demo.py's `scan`);
* "approve-load-stub": devkit/e2e/harness.py's throwaway project on the stub engine image and its approve_load
  session with a 1.5 s boot delay (test_approve_e2e.py::test_approve_load_end_to_end).
Both import the onegpu that this process imported: its source folder goes on the sessions' PYTHONPATH ahead of
whatever an installed copy adds.

A snapshot holds the session's command line, exit code and terminal lines (stdout and stderr), and for every entry
of the run folder its name, its mode and its normalized content, read by the file's kind (the "file" rules):
* JSON: parsed; a value found at a key path that a "key" rule names is replaced by the rule's placeholder (a null
  stays null, so "not measured" still differs from a figure); every key and every other value is kept, and every
  string (keys included) passes the "text" rules. Beside the content: the file's layout (the json.dumps arguments
  that give back its exact bytes) and the order of the keys of each object, as the snapshot is written sorted.
* JSONL: the same, line by line.
* samples.jsonl: its line count follows the clock (one sample a second or so), so only its distinct line shapes
  (the keys of a line and which of their values are null).
* engine.log: the engine double writes it, not the kit, and its health-check lines come as often as the kit polls:
  the sorted distinct lines, each through the text rules.
* report.html: pytest-html renders its results table and Environment in the browser from a JSON blob and embeds
  its own CSS and script. The snapshot holds the outline (each heading and each element id, in order), the visible
  text outside <script> and <style> (one line per block element or SVG label, table cells joined by " | ",
  through the text rules), the blob normalized as JSON (test ids, results and logs; durations by key rule), and
  the SHA-256 of each <style> and <script> block. The memory chart's geometry and axis ticks follow the clock and
  are left out; its titles and labels stay.
* any other file: its lines through the text rules.
A text rule whose action is DROP removes the line it matches (from a list of lines or strings; in an object the
value becomes null).

Rules of scope "live" apply only to a run whose hardware.json says its facts were read on this machine (the
approval); a replayed profile's facts are the same everywhere, so the scan keeps them. Rules of scope "report" apply
to report.html's visible text only. Kit containers of other sessions on the same Docker daemon (a test run beside
this one) are the daemon's state and are left out. What stays on purpose: outcomes, statuses and verdicts (a machine
on which the approval's host RAM check fails changes them, and should fail the comparison); how the Docker daemon is
reached (its endpoint, local and rootful, swap limits enforced); whether the kit's commit is known (a git checkout
records it, anything else says "not recorded"); and the set of pytest plugins the environment installs.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import html
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable, NamedTuple

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "tests_offline" / "data" / "run_folder_snapshot"
EXAMPLES = REPO / "examples"
PROFILE = REPO / "profiles" / "research-target-rtx-pro-6000-96gb.json"
SESSIONS = ("scan-demo-flash", "approve-load-stub")
REGENERATE = "python -m devkit.run_folder_snapshot --write"
DROP = None  # a text rule's action: the whole line (or list item) goes


class Rule(NamedTuple):
    kind: str  # "root", "file", "key" or "text"
    target: str  # root: its placeholder; file: a file name glob; key: a "file:key.path" glob; text: a regex
    # file: how it is read; key: the placeholder; text: the replacement (re.sub's), or DROP: the line goes
    action: str | Callable[[re.Match[str]], str] | None
    # "all"; "live": only where hardware.json's facts were read on this machine; "report": only in report.html's
    # visible text (its table rows would match rows of the Markdown summary); "live report": both
    scope: str = "all"


# Every normalization; why each rule exists is the comment above it. The folders are replaced first, the longest
# path first; then the first file rule and the first key rule that match apply; the text rules apply in order.
RULES: tuple[Rule, ...] = (
    # --- the folders a run lives in (longest first: the virtual environment may lie inside the repository) ----
    # The throwaway folder of this run (a pytest tmp_path, a mkdtemp): a new one every time.
    Rule("root", "<TMP>", None),
    # The virtual environment: pytest's own path in the receipt's command line.
    Rule("root", "<VENV>", None),
    # The checkout: the scan runs from it; its location differs between clones.
    Rule("root", "<REPO>", None),

    # --- how each file of the run folder is read -------------------------------------------------------------
    # Its line count follows the sampling clock: distinct shapes only.
    Rule("file", "samples.jsonl", "shapes"),
    # Written by the engine double; health-check lines repeat as often as the kit polls.
    Rule("file", "engine.log", "distinct-lines"),
    # JSON is compared as values, so that a placeholder can stand for one value and keep the rest.
    Rule("file", "*.jsonl", "jsonl"),
    Rule("file", "*.json", "json"),
    # pytest-html's page: its results come as a JSON blob and most of its bytes are its own CSS and script.
    Rule("file", "*.html", "html"),
    # Markdown, logs, anything new: line by line.
    Rule("file", "*", "lines"),

    # --- JSON values by key path: a glob over "file:path" in which "*" spans anything, dots included, and
    # nothing else is special. Keys join with "."; a list item is "[]", or "[<label>]" for an object that names
    # itself by its "check", "quantity" or "name" (capacity[host_ram], landing.errors[host available RAM]).
    # Wall-clock instants.
    Rule("key", "*_at", "<time>"),
    Rule("key", "*.at", "<time>"),
    Rule("key", "receipt.json:gpu_lock.since", "<time>"),
    Rule("key", "receipt.json:timeline.*", "<time>"),
    Rule("key", "samples.jsonl:t", "<time>"),
    Rule("key", "*landing.at_ready.t", "<time>"),
    Rule("key", "canary-responses.jsonl:response.body.created", "<time>"),
    # Durations and the rates computed from them.
    Rule("key", "*elapsed_s", "<seconds>"),
    Rule("key", "*timings_s.*", "<seconds>"),
    Rule("key", "*.duration_s", "<seconds>"),
    Rule("key", "*.stop_s", "<seconds>"),
    Rule("key", "*ttfb_s", "<seconds>"),
    Rule("key", "*hashing.seconds", "<seconds>"),
    Rule("key", "*hashing.bytes_per_s", "<rate>"),
    Rule("key", "*_tokens_per_s", "<rate>"),
    Rule("key", "report.html#blob:tests.*[].duration", "<duration>"),
    # Process ids and start times of this session and its reaper; the engine container's random id.
    Rule("key", "*gpu_lock.pid", "<pid>"),
    Rule("key", "*reaper_pid", "<pid>"),
    Rule("key", "*labels.onegpu.owner_pid", "<pid>"),
    Rule("key", "*labels.onegpu.owner_start", "<process start>"),
    Rule("key", "*container_id", "<container id>"),
    # Which host and PID namespace owns the container: this machine's ids.
    Rule("key", "*labels.onegpu.owner_host", "<host id>"),
    Rule("key", "*labels.onegpu.owner_pidns", "<pid namespace>"),
    # The commit of the kit's checkout: changes with every commit, the same code or not.
    Rule("key", "*kit.git_commit", "<kit commit>"),
    # Digests of files that hold the throwaway folder's paths (the settings, the plan).
    Rule("key", "*settings.sha256", "<digest>"),
    Rule("key", "*settings.values.sha256", "<digest>"),
    Rule("key", "*identity.settings_sha256", "<digest>"),
    Rule("key", "receipt.json:plan.sha256", "<digest>"),
    # The engine's answer carries its creation time and a random batch id: so does its digest.
    Rule("key", "*response_sha256", "<digest>"),
    Rule("key", "canary-responses.jsonl:id", "<id>"),
    # The checkpoint files' times and inodes in the manifest: set when the throwaway project was written.
    Rule("key", "*files[].mtime_ns", "<time>"),
    Rule("key", "*files[].ctime_ns", "<time>"),
    Rule("key", "*files[].inode", "<inode>"),
    # pytest-html's Environment: this interpreter and kernel.
    Rule("key", "report.html#blob:environment.Python", "<python>"),
    Rule("key", "report.html#blob:environment.Platform", "<platform>"),
    # Free disk under the run folder, read even when the rest is replayed.
    Rule("key", "*disk_free_bytes", "<bytes>"),
    # This machine's host facts, and what the plan computes from them.
    Rule("key", "*host.hostname", "<machine>", "live"),
    Rule("key", "*host.kernel", "<machine>", "live"),
    Rule("key", "*host.ram_total_bytes", "<bytes>", "live"),
    Rule("key", "*host.ram_available_bytes", "<bytes>", "live"),
    Rule("key", "*host.swap_*", "<bytes>", "live"),
    Rule("key", "*host.cgroup.*", "<machine>", "live"),
    Rule("key", "*host.memlock_limit_bytes", "<bytes>", "live"),
    Rule("key", "*host.transparent_hugepages", "<machine>", "live"),
    Rule("key", "*host.cpus_*", "<count>", "live"),
    Rule("key", "*host.numa_nodes", "<count>", "live"),
    Rule("key", "*host.disks", "<machine>", "live"),
    Rule("key", "*host.iommu", "<machine>", "live"),
    Rule("key", "*docker.server_version", "<machine>", "live"),
    Rule("key", "*docker.api_version", "<machine>", "live"),
    Rule("key", "*docker.cgroup_version", "<machine>", "live"),
    Rule("key", "*docker.runtimes", "<machine>", "live"),
    Rule("key", "*docker.daemon_mem_total_bytes", "<bytes>", "live"),
    Rule("key", "*docker.daemon_name", "<machine>", "live"),
    Rule("key", "*docker.nvidia_runtime", "<machine>", "live"),
    Rule("key", "*docker.nvidia_hook", "<machine>", "live"),
    Rule("key", "*numbers.host_available_bytes", "<bytes>", "live"),
    Rule("key", "*numbers.free_bytes", "<bytes>", "live"),
    Rule("key", "*hashing.workers", "<count>", "live"),
    # Memory measured while the engine ran: host RAM moves with everything else on the machine.
    Rule("key", "*host_available_bytes", "<bytes>", "live"),
    Rule("key", "*host_available_bytes_min", "<bytes>", "live"),
    Rule("key", "*host_available_at_scan_bytes", "<bytes>", "live"),
    Rule("key", "*host_available_min_bytes", "<bytes>", "live"),
    Rule("key", "*container_memory_bytes", "<bytes>", "live"),
    Rule("key", "*container_memory_bytes_max", "<bytes>", "live"),
    Rule("key", "*measured_container_bytes", "<bytes>", "live"),
    Rule("key", "*samples.count", "<count>", "live"),
    Rule("key", "*engine.end.log_chars", "<count>", "live"),
    Rule("key", "*landing.errors[host available RAM].measured", "<bytes>", "live"),
    Rule("key", "*landing.errors[host available RAM].projected", "<bytes>", "live"),
    Rule("key", "*landing.errors[host available RAM].error", "<bytes>", "live"),
    Rule("key", "*landing.errors[host available RAM].error_percent", "<percent>", "live"),
    # Kit containers of other sessions on the same Docker daemon: its state, not this run's.
    Rule("key", "receipt.json:leftovers.*", "<the daemon's kit containers>", "live"),
    # The memory sampler reads the cgroup the daemon's version offers, else docker stats.
    Rule("key", "*container_memory_source", "<machine>", "live"),
    # The kit's own cgroup, which the plan checks the RAM cap against.
    Rule("key", "*numbers.cgroup_*", "<machine>", "live"),
    # pytest-html's Environment rows the kit adds from this machine's facts.
    Rule("key", "report.html#blob:environment.Host RAM", "<machine>", "live"),
    Rule("key", "report.html#blob:environment.Docker", "<machine>", "live"),
    # The stub image's root is made from this machine's interpreter and libraries.
    Rule("key", "*image.size_bytes", "<bytes>", "live"),

    # --- strings: every JSON string and key, and every line of text --------------------------------------
    # Instants: ISO 8601, vLLM's log prefix, pytest-html's "generated on".
    Rule("text", r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2}| UTC)?", "<time>"),
    Rule("text", r"\b\d{2}-\d{2} \d{2}:\d{2}:\d{2}\b", "<MM-DD hh:mm:ss>"),
    Rule("text", r"generated on \d{2}-\w{3}-\d{4} at \d{2}:\d{2}:\d{2}", "generated on <time>"),
    # pytest's closing line: its duration, and the "=" padding that widens with fewer digits.
    Rule("text", r" in \d+\.\d+s(?: \(\d+:\d{2}:\d{2}\))? ", " in <s> "),
    Rule("text", r"^=+ (.+?) =+$", r"== \1 =="),
    # This interpreter's version (the venv's lib folder, pytest's platform line).
    Rule("text", r"<VENV>/lib/python3\.\d+/", "<VENV>/lib/python<version>/"),
    Rule("text", r"Python 3\.\d+\.\d+", "Python <version>"),
    # pytest lists the installed plugins in the order their entry points are found on disk.
    Rule("text", r"^plugins: (.*)$", lambda m: "plugins: " + ", ".join(sorted(m[1].split(", ")))),
    # The kit's commit.
    Rule("text", r"\(commit [0-9a-f]{40}\)", "(commit <kit commit>)"),
    # The stub image: its tag hashes the stub's sources and this interpreter, its ID the built root.
    Rule("text", r"onegpu-stub-engine:[0-9a-f]{12}", "onegpu-stub-engine:<tag>"),
    Rule("text", r"sha256:[0-9a-f]{12,64}", "sha256:<image id>"),
    # Digests of the settings and the plan, which hold the throwaway folder's paths.
    Rule("text", r"(onegpu/settings@1, sha256 )[0-9a-f]{12}", r"\1<digest>"),
    Rule("text", r"(plan\.json \(sha256 )[0-9a-f]{64}", r"\1<digest>"),
    Rule("text", r"^(\| (?:plan )?SHA-256 \| )[0-9a-f]{64}$", r"\1<digest>", "report"),
    # GPU UUIDs made fresh for each throwaway project (the profiles' GPU-00000000-... stay).
    Rule("text", r"GPU-(?!00000000-)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "GPU-<uuid>"),
    # The session's pid and process start time, and the host's ids, in container names and labels.
    Rule("text", r"\b(onegpu-[a-z0-9][\w.]*)-\d+(?![\w.])", r"\1-<pid>"),
    Rule("text", r"(onegpu\.owner_pid=)\d+", r"\1<pid>"),
    Rule("text", r"(onegpu\.owner_start=)\d+", r"\1<process start>"),
    Rule("text", r"(onegpu\.owner_host=)[\w-]+", r"\1<host id>"),
    Rule("text", r"(onegpu\.owner_pidns=)pid:\[\d+\]", r"\1pid:[<pid namespace>]"),
    Rule("text", r"\(pid \d+\)", "(pid <pid>)"),
    Rule("text", r"\bpid=\d+", "pid=<pid>"),
    Rule("text", r"server process \[\d+\]", "server process [<pid>]"),
    # Where in the kit's source an xfail or a failure was raised (pytest-html's log): the line moves with any edit
    # of the module, and the module with any move; the message after it is kept.
    Rule("text", r"<REPO>/plugin/onegpu/[\w/]+\.py:\d+", "<kit source>:<line>"),
    # The engine's answer id is random.
    Rule("text", r"batch_req_[0-9a-f]{32}", "batch_req_<id>"),
    # Progress lines before the last: without a terminal one is printed at most every 10 s, so how many there are
    # follows the clock (the final line, at 100 % or READY, is always printed and stays).
    Rule("text", r"^onegpu engine booting \d", DROP),
    Rule("text", r"^onegpu hashing .*\((?!100\.0%)[\d. ]+%\)", DROP),
    # Durations measured in this run.
    Rule("text", r"(engine ready )\d+(/\d+ s)", r"\1<s>\2"),
    Rule("text", r"\bafter \d+(?:\.\d+)? s\b", "after <s> s"),
    Rule("text", r"\bhashed in \d+(?:\.\d+)? s\b", "hashed in <s> s"),
    Rule("text", r"\bhashing took \d+(?:\.\d+)? s\b", "hashing took <s> s"),
    Rule("text", r"\b(hashing|probe|load|canary|batch|serve) \d+(?:\.\d+)? s\b", r"\1 <s> s"),
    Rule("text", r"(median [a-z ]+?) \d+(?:\.\d+)? s\b", r"\1 <s> s"),
    Rule("text", r"\b(\d+ tokens) in \d+(?:\.\d+)? s\b", r"\1 in <s> s"),
    Rule("text", r"\[\d+:\d{2}<\d+:\d{2}, *\d+(?:\.\d+)?it/s\]", "[<elapsed>, <it/s>]"),
    Rule("text", r"^(\| (?:time|hashing time|ready after|stopped in) \| )\d+(?:\.\d+)? s\b", r"\1<s> s", "report"),
    Rule("text", r"^(\| (?:hashing|probe|load|canary|batch|serve) \| [^|]+ \| )\d+(?:\.\d+)? s$", r"\1<s> s", "report"),
    Rule("text", r"^(\d+ tests? took ).*$", r"\1<duration>.", "report"),
    Rule("text", r'(<td class="col-duration">)[^<]*(</td>)', r"\1<duration>\2"),
    # The report's memory chart: its axes are scaled to the run's duration and the host's RAM (one tick a line).
    Rule("text", r"^\d+(?:\.\d+)? (?:GiB|s)$", DROP, "report"),
    # File sizes in the report's list of the run folder: they follow the paths and times inside the files.
    Rule("text", r"^(\| [\w.-]+\.(?:json|jsonl|log|md|html) \| )\d[\d,]*$", r"\1<bytes>", "report"),
    # Rates measured in this run.
    Rule("text", r"\d[\d,]*(?:\.\d+)? MB/s", "<MB/s> MB/s"),
    Rule("text", r"(over \d+ requests: )\d[\d,]*(?:\.\d+)?", r"\1<tokens/s>"),
    Rule("text", r"(tokens/s measured through the engine socket )\d[\d,]*(?:\.\d+)?", r"\1<tokens/s>"),
    Rule("text", r"\d+ threads\)", "<n> threads)"),
    Rule("text", r"ETA \d+:\d{2}:\d{2}", "ETA <h:mm:ss>"),
    # This machine's host, cgroup, CPUs, disk and Docker daemon, as the machine phase states them.
    Rule("text", r"(host RAM total )\d[\d.,]* GiB, available \d[\d.,]* GiB( \(read from /proc/meminfo\)); swap .*",
         r"\1<GiB>, available <GiB>\2; swap <machine>", "live"),
    Rule("text", r"\bcgroup v\d /\S*: memory limit .*", "cgroup <machine>", "live"),
    Rule("text", r"\bcgroup v\d /\S*", "cgroup <machine>", "live"),
    Rule("text", r"(locked-memory limit )\S+ \S+( \(pinned host buffers count against it\); transparent hugepages )"
         r"\S+", r"\1<machine>\2<machine>", "live"),
    Rule("text", r"CPUs online \d+, usable by this process \d+", "CPUs online <n>, usable by this process <n>",
         "live"),
    Rule("text", r"NUMA nodes \d+; kernel \S+", "NUMA nodes <n>; kernel <machine>", "live"),
    Rule("text", r"(free disk at the run folder \([^)]*\)): \d[\d.,]* GiB of \d[\d.,]* GiB", r"\1: <GiB> of <GiB>",
         "live"),
    Rule("text", r"\d[\d.,]* GiB free at the run folder", "<GiB> free at the run folder", "live"),
    Rule("text", r"Docker daemon \S+ \(API [\d.]+\) at (\S+), cgroup v?\w+, runtimes .*",
         r"Docker daemon <machine> (API <machine>) at \1, cgroup <machine>, runtimes <machine>", "live"),
    Rule("text", r"it reports \d[\d.,]* GiB RAM", "it reports <GiB> RAM", "live"),
    Rule("text", r"\bDocker \S+, swap limits", "Docker <machine>, swap limits", "live"),
    Rule("text", r"host RAM \d[\d.,]* GiB total, CPUs usable \d+", "host RAM <GiB> total, CPUs usable <n>", "live"),
    Rule("text", r"host RAM available now \d[\d.,]* GiB", "host RAM available now <GiB>", "live"),
    Rule("text", r"(\d+ file\(s\) found in the page cache|\d[\d.,]* GiB cold).*", "<page cache and MemAvailable>",
         "live"),
    # Host RAM and container memory measured while the engine ran.
    Rule("text", r"(host available RAM[^:]*: measured) .*", r"\1 <measured>", "live"),
    Rule("text", r"(\| host RAM available )\d[\d.,]* GiB \| container \d[\d.,]* GiB \| log: .*",
         r"\1<GiB> | container <GiB> | log: <last engine log line>", "live"),
    Rule("text", r"memory samples: \d+", "memory samples: <n>", "live"),
    Rule("text", r"^\| samples \| \d+$", "| samples | <n>", "live report"),
    Rule("text", r"\(\d+ samples;", "(<n> samples;", "live"),
    Rule("text", r"^(\| (?:host available RAM, lowest|container memory, peak|container memory at READY) \| )"
         r"\d[\d.,]* GiB$", r"\1<GiB>", "live report"),
    Rule("text", r"^(\| host available RAM \(bytes\) \| ).*", r"\1<measured>", "live report"),
    # The report's host and Docker tables: this machine's facts.
    Rule("text", r"^\| (host name|kernel|RAM total / available|swap total / free|cgroup|locked-memory limit|"
         r"transparent hugepages|CPUs online / usable|NUMA nodes|WSL2|free disk: run folder|daemon|runtimes|"
         r"daemon memory) \| .*", r"| \1 | <machine>", "live report"),
    # The stub image is made from this machine's interpreter and libraries: its size follows them.
    Rule("text", r"linux/amd64, \d[\d,]* bytes", "linux/amd64, <bytes> bytes", "live"),
    Rule("text", r"^\| size \| \d[\d.,]* GiB$", "| size | <GiB>", "live report"),
    Rule("text", r"host available lowest \d[\d.,]* GiB, container peak \d[\d.,]* GiB",
         "host available lowest <GiB>, container peak <GiB>", "live"),
    # Kit containers of other sessions on the same Docker daemon: its state, not this run's.
    Rule("text", r"\d+ kit container\(s\) of dead sessions removed(?: \([^)]*\))?; \d+ of live sessions left alone",
         "<n> kit container(s) of dead sessions removed; <n> of live sessions left alone", "live"),
    Rule("text", r"^(\s*\[plan\] )?(no kit-labelled containers on this Docker daemon|kit container \S+ \(.*)$", DROP,
         "live"),
)


# --- running the sessions -----------------------------------------------------------------------------------

@dataclass
class Session:
    """What one session left: its run folder, terminal output and exit code, and the folders to write as roots."""
    name: str
    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str
    folder: Path
    roots: dict[str, Path] = field(default_factory=dict)


def kit_source() -> Path:
    """The folder that holds the onegpu this process imported (plugin/ of a checkout, or site-packages)."""
    import onegpu

    return Path(onegpu.__file__).resolve().parents[1]


def with_kit_on_path(env: dict[str, str]) -> dict[str, str]:
    """`env` with this process's onegpu source folder first on PYTHONPATH, so that a session imports the same kit
    even where another checkout's editable install adds its own plugin/ folder through a .pth file; and without the
    variables of a CI provider, which pytest-metadata copies into report.html's Environment (CI=true on a CI
    machine, nothing on a workstation: the same session shows the same report on both)."""
    from pytest_metadata.plugin import CONTINUOUS_INTEGRATION

    ci_variables = {name for provider in CONTINUOUS_INTEGRATION for name in provider}
    env = {k: v for k, v in env.items() if k not in ci_variables}
    source = kit_source()
    if source.name == "site-packages":
        return env
    paths = [str(source)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def session_kit(env: dict[str, str], cwd: Path) -> Path:
    """The onegpu source folder a session started with `env` in `cwd` imports."""
    done = subprocess.run([sys.executable, "-c", "import onegpu, pathlib; print(pathlib.Path(onegpu.__file__)"
                           ".resolve().parents[1])"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    return Path(done.stdout.strip())


def _check_kit(env: dict[str, str], cwd: Path) -> None:
    seen = session_kit(env, cwd)
    if seen != kit_source():
        raise RuntimeError(f"the session would import onegpu from {seen}, this process from {kit_source()}")


def run_scan(work: Path) -> Session:
    """The flash demo checkpoint, then `pytest -m scan` on it against the research target's replayed profile."""
    root = work / "MiMo-V2.6-Flash"
    made = subprocess.run([sys.executable, str(EXAMPLES / "make_mimo_checkpoint.py"), "--model", "flash",
                           "--out", str(root)], capture_output=True, text=True, timeout=120)
    if made.returncode != 0:
        raise RuntimeError(f"the demo checkpoint could not be written:\n{made.stdout}{made.stderr}")
    settings = json.loads((EXAMPLES / "demo-settings.json").read_text())
    settings["model_path"] = str(root)
    (work / "settings.json").write_text(json.dumps(settings))
    out = work / "run"
    env = with_kit_on_path({k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"})
    _check_kit(env, REPO)
    argv = [sys.executable, "-m", "pytest", "-m", "scan", f"--settings={work / 'settings.json'}",
            f"--hardware={PROFILE}", "--host-ram-gib=256", f"--out={out}"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    return Session("scan-demo-flash", argv, done.returncode, done.stdout, done.stderr, out,
                   {"<TMP>": work, "<REPO>": REPO, "<VENV>": Path(sys.prefix)})


def run_approve(work: Path, image: str) -> Session:
    """devkit/e2e/harness.py's throwaway project on the stub engine image, and its approve_load session."""
    from devkit.e2e.harness import make_project, session_argv, session_env

    project = make_project(work / "p", image)
    # harness.session() with one change: its PYTHONPATH names the repository only, and the kit it must import
    # is this process's (see with_kit_on_path).
    env = with_kit_on_path(session_env(project, {"STUB_BOOT_DELAY_S": "1.5"}))
    _check_kit(env, project)
    argv = session_argv("runs/e2e")
    proc = subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return Session("approve-load-stub", argv, proc.returncode, out, "", project / "runs" / "e2e",
                   {"<TMP>": work, "<REPO>": REPO, "<VENV>": Path(sys.prefix)})


def stub_image() -> str:
    """The stub engine image's tag, built (or found) as the `stub_tag` fixture does."""
    import docker

    from devkit.stub_engine.build import ensure_stub_image, stub_tag

    client = docker.from_env()
    try:
        ensure_stub_image(client)
    finally:
        client.close()
    return stub_tag()


def run_session(name: str, work: Path, image: str | None = None) -> Session:
    if name == "scan-demo-flash":
        return run_scan(work)
    if name == "approve-load-stub":
        return run_approve(work, image or stub_image())
    raise ValueError(f"unknown session {name!r}: one of {', '.join(SESSIONS)}")


# --- normalizing ------------------------------------------------------------------------------------------

def glob(pattern: str) -> re.Pattern[str]:
    """A rule's glob: "*" matches any run of characters, dots and brackets included; the rest is literal."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def label(item: Any) -> str:
    """How a list item shows in a key path: the check, quantity or name an object states, else nothing."""
    if isinstance(item, dict):
        for key in ("check", "quantity", "name"):
            if isinstance(item.get(key), str):
                return item[key]
    return ""


class Normalizer:
    """The rules of RULES bound to one run: its roots and whether its facts were read on this machine."""

    def __init__(self, roots: dict[str, Path], live: bool):
        have = {"all", "report"} | ({"live"} if live else set())
        rules = [r for r in RULES if set(r.scope.split()) <= have]
        pairs: list[tuple[str, str]] = []
        for rule in (r for r in rules if r.kind == "root"):
            if rule.target in roots:
                path = roots[rule.target]
                pairs += [(str(path), rule.target), (str(path.resolve()), rule.target)]
        self.roots = sorted(set(pairs), key=lambda p: -len(p[0]))
        self.files = [(glob(r.target), str(r.action)) for r in rules if r.kind == "file"]
        self.keys = [(glob(r.target), str(r.action)) for r in rules if r.kind == "key"]
        self.texts = [(re.compile(r.target), r.action, "report" in r.scope) for r in rules if r.kind == "text"]

    def text(self, s: str, report: bool = False) -> str | None:
        """`s` through the roots and the text rules (with `report`, those for report.html's visible text too);
        None where a rule drops it."""
        for path, name in self.roots:
            s = s.replace(path, name)
        for pattern, action, report_only in self.texts:
            if report_only and not report:
                continue
            if action is DROP:
                if pattern.search(s):
                    return None
            else:
                s = pattern.sub(action, s)
        return s

    def lines(self, text: str) -> list[str]:
        return [n for line in text.splitlines() if (n := self.text(line)) is not None]

    def kind(self, name: str) -> str:
        return next(action for pattern, action in self.files if pattern.fullmatch(name))

    def placeholder(self, where: str) -> str | None:
        return next((p for pattern, p in self.keys if pattern.fullmatch(where)), None)

    def value(self, v: Any, doc: str, path: str = "") -> Any:
        """A JSON value with the key rules applied at `doc:path` and below, and every string through text()."""
        if v is not None and path and (p := self.placeholder(f"{doc}:{path}")) is not None:
            return p
        if isinstance(v, dict):
            return {self.text(k) or "": self.value(x, doc, f"{path}.{k}" if path else k) for k, x in v.items()}
        if isinstance(v, list):
            items = [self.value(x, doc, f"{path}[{label(x)}]") for x in v]
            return [x for x, raw in zip(items, v) if not (isinstance(raw, str) and x is None)]
        if isinstance(v, str):
            return self.text(v)
        return v

    def key_order(self, v: Any, doc: str, path: str = "", shown: str = "", seen: list[str] | None = None) -> list[str]:
        """"path: key, key, ..." for each object, in document order, each distinct line once (list items as "[]").
        Below a key path that a key rule replaces, nothing: what is there depends on the run."""
        seen = [] if seen is None else seen
        if v is not None and path and self.placeholder(f"{doc}:{path}") is not None:
            return seen
        if isinstance(v, dict):
            line = f"{self.text(shown) or ''}: {', '.join(self.text(k) or '' for k in v)}"
            if line not in seen:
                seen.append(line)
            for k, x in v.items():
                self.key_order(x, doc, f"{path}.{k}" if path else k, f"{shown}.{k}" if shown else k, seen)
        elif isinstance(v, list):
            for x in v:
                self.key_order(x, doc, f"{path}[{label(x)}]", f"{shown}[]", seen)
        return seen


def json_layout(text: str, value: Any) -> str:
    """The json.dumps arguments that give back `text` exactly, or "other"."""
    for indent in (None, 2, 1, 4):
        for separators in ((", ", ": "), (",", ":"), (",", ": ")):
            for ensure_ascii in (True, False):
                dumped = json.dumps(value, indent=indent, separators=separators, ensure_ascii=ensure_ascii)
                for end in ("", "\n"):
                    if dumped + end == text:
                        return (f"indent={indent} separators={separators!r} ensure_ascii={ensure_ascii} "
                                f"newline_at_end={bool(end)}")
    return "other"


def _json_file(norm: Normalizer, name: str, text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        return {"unparsed": f"{type(exc).__name__}: {exc}", "lines": norm.lines(text)}
    return {"layout": json_layout(text, value), "key_order": norm.key_order(value, name),
            "content": norm.value(value, name)}


def _jsonl_file(norm: Normalizer, name: str, text: str) -> dict:
    lines, layouts = [], []
    for raw in text.splitlines():
        try:
            value = json.loads(raw)
        except ValueError:
            lines.append({"unparsed": norm.text(raw)})
            continue
        layout = json_layout(raw, value)
        if layout not in layouts:
            layouts.append(layout)
        lines.append(norm.value(value, name))
    return {"layouts": layouts, "lines": lines, "newline_at_end": text.endswith("\n")} if text else {"lines": []}


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {'null' if v is None else type(v).__name__}" for k, v in value.items()) + "}"
    return type(value).__name__


def _shapes_file(norm: Normalizer, name: str, text: str) -> dict:
    shapes: list[str] = []
    for raw in text.splitlines():
        try:
            shape = _shape(json.loads(raw))
        except ValueError:
            shape = "unparsed"
        if shape not in shapes:
            shapes.append(shape)
    return {"lines": "none" if not text else "some", "shapes": sorted(shapes)}


class _Page(HTMLParser):
    """The outline, visible text, JSON blob and <style>/<script> digests of an HTML page."""

    BLOCK = {"p", "div", "section", "article", "header", "footer", "table", "thead", "tbody", "tr", "li", "ul",
             "ol", "h1", "h2", "h3", "h4", "h5", "h6", "br", "pre", "details", "summary", "template", "title",
             "dl", "dt", "dd", "blockquote", "hr", "text"}  # text: an SVG label, one a line
    CELL = {"td", "th"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.outline: list[str] = []
        self.chunks: list[str] = []
        self.assets: list[str] = []
        self.blob: str | None = None
        self._raw: str | None = None  # inside <script> or <style>: their text is not shown
        self._raw_text: list[str] = []
        self._heading: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("script", "style"):
            self._raw, self._raw_text = tag, []
            return
        if a.get("id"):
            self.outline.append(f"{tag}#{a['id']}")
        if a.get("data-jsonblob") is not None:
            self.blob = a["data-jsonblob"]
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._heading = []
        if tag in self.BLOCK:
            self.chunks.append("\n")
        elif tag in self.CELL:
            self.chunks.append(" | ")

    def handle_endtag(self, tag: str) -> None:
        if tag == self._raw:
            self.assets.append(f"<{tag}> sha256 {hashlib.sha256(''.join(self._raw_text).encode()).hexdigest()}")
            self._raw = None
            return
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self._heading is not None:
            self.outline.append(f"{tag}: {' '.join(''.join(self._heading).split())}")
            self._heading = None
        if tag in self.BLOCK:
            self.chunks.append("\n")

    def handle_data(self, data: str) -> None:
        if self._raw:
            self._raw_text.append(data)
            return
        if self._heading is not None:
            self._heading.append(data)
        self.chunks.append(data)


def _html_file(norm: Normalizer, name: str, text: str) -> dict:
    page = _Page()
    page.feed(text)
    page.close()
    shown = [" ".join(line.split()) for line in "".join(page.chunks).split("\n")]
    out: dict[str, Any] = {"outline": [x for o in page.outline if (x := norm.text(o)) is not None],
                           "text": [x for line in shown if line and (x := norm.text(line, True)) is not None],
                           "assets": page.assets}
    if page.blob is not None:
        try:
            out["blob"] = norm.value(json.loads(html.unescape(page.blob)), f"{name}#blob")
        except ValueError as exc:
            out["blob"] = f"unparsed: {type(exc).__name__}"
    return out


def _lines_file(norm: Normalizer, name: str, text: str) -> dict:
    return {"lines": norm.lines(text), "newline_at_end": text.endswith("\n")} if text else {"lines": []}


def _distinct_lines_file(norm: Normalizer, name: str, text: str) -> dict:
    return {"distinct_lines": sorted(set(norm.lines(text)))}


READERS: dict[str, Callable[[Normalizer, str, str], dict]] = {
    "json": _json_file, "jsonl": _jsonl_file, "shapes": _shapes_file, "html": _html_file, "lines": _lines_file,
    "distinct-lines": _distinct_lines_file}


def _live(folder: Path) -> bool:
    try:
        return json.loads((folder / "hardware.json").read_text()).get("source") == "live"
    except (OSError, ValueError):
        return False


def snapshot(session: Session) -> dict:
    """The normalized snapshot of a finished session: terminal, exit code and every entry of its run folder."""
    norm = Normalizer(session.roots, _live(session.folder))
    files: dict[str, dict] = {}
    for path in sorted(session.folder.rglob("*")):
        rel = path.relative_to(session.folder).as_posix()
        mode = f"{stat.S_IMODE(path.lstat().st_mode):04o}"
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            files[rel] = {"mode": mode, "kind": "special"}
        elif path.is_dir():
            files[rel + "/"] = {"mode": mode, "kind": "folder"}
        else:
            kind = norm.kind(path.name)
            files[rel] = {"mode": mode, "kind": kind,
                          **READERS[kind](norm, path.name, path.read_text(encoding="utf-8", errors="replace"))}
    return {"session": session.name,
            "argv": [x for a in session.argv[1:] if (x := norm.text(a)) is not None],
            "exit_code": session.exit_code,
            "terminal": {"stdout": norm.lines(session.stdout), "stderr": norm.lines(session.stderr)},
            "files": files}


# --- reading, writing, comparing --------------------------------------------------------------------------

def dumps(snap: dict) -> str:
    return json.dumps(snap, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def snapshot_path(name: str) -> Path:
    return SNAPSHOTS / f"{name}.json"


def read(name: str) -> dict:
    return json.loads(snapshot_path(name).read_text(encoding="utf-8"))


def write(snap: dict) -> Path:
    path = snapshot_path(snap["session"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(snap), encoding="utf-8")
    return path


def _parts(snap: dict) -> dict[str, Any]:
    """The snapshot cut where a reader looks: the command, the exit code, each terminal stream, each file."""
    parts: dict[str, Any] = {k: v for k, v in snap.items() if k not in ("terminal", "files")}
    parts.update({f"terminal {k}": v for k, v in snap.get("terminal", {}).items()})
    parts.update({f"file {k}": v for k, v in snap.get("files", {}).items()})
    return parts


def diff(expected: dict, actual: dict, limit: int = 200) -> str:
    """A unified diff of the pretty-printed snapshots, part by part (each headed by the part it is in: the exit
    code, a terminal stream, a file of the run folder), its first `limit` lines."""
    old, new = _parts(expected), _parts(actual)
    lines: list[str] = []
    for part in sorted(set(old) | set(new)):
        if old.get(part) != new.get(part):
            before = dumps(old[part]).splitlines() if part in old else []
            after = dumps(new[part]).splitlines() if part in new else []
            lines += difflib.unified_diff(before, after, f"committed: {part}", f"this run: {part}", lineterm="", n=2)
    more = [f"... {len(lines) - limit} more diff lines"] if len(lines) > limit else []
    return "\n".join(lines[:limit] + more)


def take(name: str, image: str | None = None) -> dict:
    """Run one session in a throwaway folder and return its snapshot."""
    with tempfile.TemporaryDirectory(prefix="onegpu-snapshot-") as tmp:
        return snapshot(run_session(name, Path(tmp), image))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.run_folder_snapshot", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write the snapshots under {SNAPSHOTS.relative_to(REPO)}")
    parser.add_argument("--session", choices=SESSIONS, action="append", help="one session (default: both)")
    args = parser.parse_args(argv)
    print(f"onegpu imported from {kit_source()}", file=sys.stderr)
    for name in args.session or SESSIONS:
        snap = take(name)
        if args.write:
            print(f"{name}: exit code {snap['exit_code']}, {len(snap['files'])} run folder entries -> {write(snap)}",
                  file=sys.stderr)
        else:
            sys.stdout.write(dumps(snap))
    return 0


if __name__ == "__main__":
    sys.exit(main())
