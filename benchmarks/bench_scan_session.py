"""A whole `pytest -m scan --settings=...` session against the header scan alone, in the same run, alternating.

For each checkpoint (the 1,000-shard, ~1 TB sparse one of bench_header_scan.py, and a header-only MiMo-V2.6-Flash
written by examples/make_mimo_checkpoint.py) every round times, in a rotating order, these child processes:
  * the session: `python -m pytest -m scan --settings=S --out=<new folder>` from the repository root, with this
    machine's live facts (no GPU here: the machine phase is blocked, as on any GPU-less machine);
  * the header scan alone: read_checkpoint over the same checkpoint, its CPU taken inside the process around the
    call (the imports before it are not the scan's);
  * `python -c "import pytest"`: the interpreter and pytest, which any pytest session pays;
  * pytest's floor, not judged: a session of empty tests shaped like the scan session just timed (as many test
    modules as tests_hw, the same counts of passed, xfailed and deselected tests, each xfail raised with a BLOCKED
    reason) with the kit's plugin left out and every other plugin it loads (pytest-html writing a
    self-contained report, pytest-metadata, pytest-timeout) and its pytest.ini options in. What it costs beyond
    `import pytest` is what any pytest session of that shape pays, whatever the kit does;
  * pytest's floor with a single test, not judged: the same plugins, options and report, one module holding one
    passing test. What it costs beyond `import pytest` is what a session pays before its phases, however few tests
    they were folded into.
Children run as Python runs by default, writing and reusing compiled bytecode (the warm-up writes it; an
installed package has it from the installer); the environment's PYTHONDONTWRITEBYTECODE is removed for them. The
session is also timed with PYTHONDONTWRITEBYTECODE=1 (every kit module compiled, and the test modules' asserts
rewritten, anew), shown apart and not judged.
Each child's CPU (user + system) and peak RSS come from wait4(2). The figure judged is, round by round,
session CPU / (scan CPU + `import pytest` CPU); its median is quoted. The session also loads a small probe plugin
(below) that adds up the CPU spent writing evidence: receipt journal lines and whole writes, pytest-html's
per-test handling and report, the public summary.

Startup is measured apart: `python -c "import onegpu.plugin, onegpu.phases.* ..."` (the kit's imports, what every
session pays before its first test) against `python -c "import pytest"`, alternating.

With --instructions, each child also runs once under valgrind's callgrind, which counts the user-space
instructions it executes: a figure that does not move with a guest's load or clock (it leaves out the kernel's
work and says nothing about how fast each instruction runs). The scan's count is a process that imports and
scans less the same process stopped before the scan. Set beside the CPU ratio, it tells work that the session
adds from work that only runs slower (cold caches, page faults). The floor is also counted with parts of it left
out in turn (pytest-html; the three plugins; those and pytest's assertion rewriting), and the session with plain
asserts: what each part costs a session of this shape. Explanatory, not judged; needs valgrind.

    python benchmarks/bench_scan_session.py [--rounds 7] [--instructions] [--results FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(tempfile.gettempdir())
KIT_MODULES = ("onegpu.plugin", "onegpu.options", "onegpu.session.blocked_report",
               *(f"onegpu.phases.{name}" for name in ("machine", "plan", "plan_ceiling", "plan_launch", "plan_insight",
                                                       "probe", "custody", "load", "load_landing", "canary", "batch",
                                                       "serve")))

# Loaded into the timed session with -p: it wraps the evidence writers and adds up the process CPU spent in them
# (time.process_time: every thread, user and system). Nested calls are counted once.
PROBE = '''
import json, os, time, functools
_spent = {"receipt": 0.0, "report": 0.0, "summary": 0.0}
_depth = [0]

def _timed(kind, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _depth[0]:
            return fn(*args, **kwargs)
        _depth[0] += 1
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[kind] += time.process_time() - start
            _depth[0] -= 1
    return wrapper

def pytest_configure(config):
    import onegpu.plugin as plugin, onegpu.evidence.receipt as receipt, onegpu.report.page as report_html
    from pytest_html import basereport
    receipt.Receipt._log = _timed("receipt", receipt.Receipt._log)
    receipt.Receipt.save = _timed("receipt", receipt.Receipt.save)
    for name in ("pytest_runtest_logreport", "pytest_sessionfinish", "pytest_collectreport",
                 "pytest_sessionstart", "pytest_terminal_summary"):
        if hasattr(basereport.BaseReport, name):
            setattr(basereport.BaseReport, name, _timed("report", getattr(basereport.BaseReport, name)))
    plugin.write_share_summary = _timed("summary", report_html.write_share_summary)
    plugin.refresh_environment = _timed("report", report_html.refresh_environment)

def pytest_unconfigure(config):
    with open(os.environ["ONEGPU_BENCH_PROBE_OUT"], "w") as fh:
        json.dump({**_spent, "process_cpu_s": time.process_time()}, fh)
'''

SCAN_ALONE = '''
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from onegpu.checkpoint.scan import read_checkpoint
if sys.argv[3:] == ["--imports-only"]:
    raise SystemExit(0)
start = time.process_time()
facts = read_checkpoint(Path(sys.argv[1]))
print(time.process_time() - start)
'''


# Python's default: compiled bytecode written beside the sources and reused.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_child(argv: list[str], env: dict | None = None, cwd: Path = REPO) -> dict:
    """Wall, CPU (user + system) and peak RSS of one child process; its stdout."""
    env = CHILD_ENV if env is None else env
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert proc.stdout is not None  # stdout=PIPE
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024,
            "rc": proc.returncode, "out": out.decode(errors="replace")}


def scan_alone_argv(root: Path, imports_only: bool = False) -> list[str]:
    """The header scan alone as a child: it prints the CPU of the read_checkpoint call; with imports_only it stops
    before the call."""
    return [sys.executable, "-c", SCAN_ALONE, str(root), str(REPO), *(["--imports-only"] if imports_only else [])]


IMPORT_PYTEST = [sys.executable, "-c", "import pytest"]
IMPORT_KIT = [sys.executable, "-c", "import " + ", ".join(KIT_MODULES)]
FLOOR = [sys.executable, "-m", "pytest", "-p", "no:onegpu", "-m", "scan", "-q"]
# pytest-html registers two plugins (its report and its fixtures); both go for it to be left out.
_HTML_OUT = ["-p", "no:html", "-p", "no:html_fixtures"]
_THREE_PLUGINS_OUT = [*_HTML_OUT, "-p", "no:metadata", "-p", "no:timeout"]
_PLAIN_ASSERTS_OUT = [*_THREE_PLUGINS_OUT, "--assert=plain"]
# The floor's parts left out in turn (counted with --instructions); the html report goes with pytest-html.
FLOOR_LEFT_OUT = {"pytest-html": _HTML_OUT,
                  "pytest-html, pytest-metadata, pytest-timeout": _THREE_PLUGINS_OUT,
                  "those three and assertion rewriting": _PLAIN_ASSERTS_OUT}


def instructions(argv: list[str], cwd: Path = REPO) -> int:
    """User-space instructions one child executes, counted by callgrind (no profile file is kept)."""
    with tempfile.NamedTemporaryFile(prefix="onegpu-bench-callgrind-", suffix=".log") as log:
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                               f"--log-file={log.name}", *argv], cwd=cwd, env=CHILD_ENV, capture_output=True)
        text = Path(log.name).read_text()
    counts = re.findall(r"Collected : ([\d,]+)", text)
    if proc.returncode not in (0, 1) or not counts:
        raise SystemExit(f"callgrind failed (exit {proc.returncode}) on {argv}:\n{text[-2000:]}")
    return int(counts[-1].replace(",", ""))


def thousand_shards() -> Path:
    """bench_header_scan.py's cached 1,000-shard checkpoint, built in a child process: this process stays small,
    because a child's peak RSS as wait4(2) reports it is never below its parent's RSS at the fork."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; import bench_header_scan as b; "
            "print(b.build(Path(sys.argv[2]), 61, 384, 1000))")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "benchmarks"),
                          str(CACHE / "onegpu-bench-header-61x384-1000-pt")], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def mimo_flash() -> Path:
    folder = CACHE / "onegpu-bench-session-mimo-flash"
    if not (folder / "model.safetensors.index.json").exists():
        subprocess.run([sys.executable, str(REPO / "examples/make_mimo_checkpoint.py"), "--out", str(folder)],
                       check=True, capture_output=True)
    return folder


def settings_for(root: Path, work: Path) -> Path:
    """The demo settings (MiMo-V2.6-Flash template) pointed at `root`."""
    settings = json.loads((REPO / "examples/demo-settings.json").read_text())
    settings["model_path"] = str(root)
    path = work / f"{root.parent.name}-{root.name}.settings.json"
    path.write_text(json.dumps(settings, indent=2))
    return path


def tensor_count(root: Path) -> int:
    """Counted in a child process (a 13 MB index read here would raise every later child's peak RSS)."""
    code = "import json, sys; print(len(json.load(open(sys.argv[1]))['weight_map']))"
    return int(subprocess.run([sys.executable, "-c", code, str(root / "model.safetensors.index.json")],
                              check=True, capture_output=True, text=True).stdout)


def session_counts(output: str) -> dict[str, int]:
    """pytest's closing line, e.g. '23 passed, 29 deselected, 15 xfailed in 0.58s', as counts."""
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|xfailed|deselected|skipped)", output)}
    if not counts.get("passed", 0) + counts.get("xfailed", 0):
        raise SystemExit(f"no counts in the scan session's output:\n{output[-2000:]}")
    return counts


def write_floor_suite(folder: Path, counts: dict[str, int], modules: int | None = None) -> None:
    """Empty tests in the scan session's shape: as many modules as tests_hw (or `modules`), the same counts."""
    folder.mkdir()
    ini = (REPO / "pytest.ini").read_text()
    addopts = next(line for line in ini.splitlines() if line.startswith("addopts"))
    (folder / "pytest.ini").write_text(f"[pytest]\n{addopts}\nmarkers =\n    scan: read-only\n"
                                       "    approve_load: acting\n")
    kinds = (["xfail"] * counts.get("xfailed", 0) + ["pass"] * (counts.get("passed", 0) + counts.get("failed", 0))
             + ["deselected"] * counts.get("deselected", 0))
    modules = len(list((REPO / "tests_hw").glob("test_*.py"))) if modules is None else modules
    for m in range(modules):
        lines = ["import pytest", ""]
        for k, kind in enumerate(kinds[m::modules]):
            mark = "approve_load" if kind == "deselected" else "scan"
            body = f"pytest.xfail('BLOCKED NO_GPU: test {k} of module {m}')" if kind == "xfail" else "assert True"
            lines += [f"@pytest.mark.{mark}", f"def test_{k}():", f"    {body}", "", ""]
        (folder / f"test_{m}.py").write_text("\n".join(lines))


def measure(root: Path, rounds: int, work: Path, count_instructions: bool = False) -> dict:
    settings = settings_for(root, work)
    probe_dir = work / "probe"
    probe_dir.mkdir(exist_ok=True)
    (probe_dir / "onegpu_bench_probe.py").write_text(PROBE)
    env = {**CHILD_ENV, "PYTHONPATH": f"{probe_dir}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    rows: dict[str, list[dict]] = {"session": [], "scan": [], "import_pytest": [], "session_uncached": [],
                                   "floor": [], "floor_one": []}
    floor_dir = work / f"floor-{root.name}"
    floor_one_dir = work / f"floor-one-{root.name}"
    shares = []

    def session_argv(out: Path) -> list[str]:
        return [sys.executable, "-m", "pytest", "-m", "scan", f"--settings={settings}", f"--out={out}", "-q"]

    def floor_argv(report: Path) -> list[str]:
        return [*FLOOR, f"--html={report}", "--self-contained-html"]

    def session(n: int, uncached: bool = False) -> dict:
        out = work / f"run-{root.name}-{n}"
        probe_out = work / f"probe-{n}.json"
        child_env = {**env, "ONEGPU_BENCH_PROBE_OUT": str(probe_out)}
        if uncached:
            child_env["PYTHONDONTWRITEBYTECODE"] = "1"
        result = run_child([*session_argv(out), "-p", "onegpu_bench_probe"], child_env)
        if result["rc"] not in (0, 1) or not (out / "receipt.json").is_file():
            raise SystemExit(f"the scan session failed (exit {result['rc']}):\n{result['out'][-3000:]}")
        result["probe"] = json.loads(probe_out.read_text())
        shutil.rmtree(out)
        return result

    def scan(_n: int) -> dict:
        result = run_child(scan_alone_argv(root))
        result["cpu_in_process_s"] = float(result["out"].strip().splitlines()[-1])
        return result

    def import_pytest(_n: int) -> dict:
        return run_child(IMPORT_PYTEST)

    def floor(n: int, folder: Path = floor_dir) -> dict:
        report = work / f"floor-report-{n}.html"
        result = run_child(floor_argv(report), cwd=folder)
        if result["rc"] != 0 or not report.is_file():
            raise SystemExit(f"the floor session failed (exit {result['rc']}):\n{result['out'][-3000:]}")
        report.unlink()
        return result

    figures: dict[str, Callable[[int], dict]] = {"session": session, "scan": scan, "import_pytest": import_pytest,
               "session_uncached": lambda n: session(n, uncached=True), "floor": floor,
               "floor_one": lambda n: floor(n, floor_one_dir)}
    names = list(figures)
    warm_session = figures["session"](-1)  # warm-up: page cache, compiled files
    write_floor_suite(floor_dir, session_counts(warm_session["out"]))  # shaped like that session
    write_floor_suite(floor_one_dir, {"passed": 1}, modules=1)
    for name in names[1:]:
        figures[name](-1)
    for n in range(rounds):
        order = names[n % len(names):] + names[:n % len(names)]
        for name in order:
            rows[name].append(figures[name](n))
        shares.append(rows["session"][-1]["probe"])
    ratios = [s["cpu_s"] / (c["cpu_in_process_s"] + i["cpu_s"])
              for s, c, i in zip(rows["session"], rows["scan"], rows["import_pytest"])]
    evidence = [(p["receipt"] + p["report"] + p["summary"]) / p["process_cpu_s"] for p in shares]
    # Round by round: the session's CPU beyond the scan and `import pytest` that issue 19.2's ratio allows, and
    # how much of it pytest's floor already takes, and the kit's own work beyond the floor and the scan.
    spend = [{"allowed": 0.5 * (c["cpu_in_process_s"] + i["cpu_s"]), "floor": f["cpu_s"] - i["cpu_s"],
              "floor_one": f1["cpu_s"] - i["cpu_s"], "kit": s["cpu_s"] - f["cpu_s"] - c["cpu_in_process_s"]}
             for s, c, i, f, f1 in zip(rows["session"], rows["scan"], rows["import_pytest"], rows["floor"],
                                       rows["floor_one"])]
    got = {"rows": rows, "ratios": ratios, "evidence_share": evidence, "probes": shares, "spend": spend,
           "counts": session_counts(rows["session"][-1]["out"])}
    if count_instructions:
        # Plain asserts import the test modules and the kit's fixture modules through bytecode that no run before
        # wrote (rewritten modules are cached apart): a first run, not counted, writes it, as the rounds' warm-up
        # does for the other children, so that compiling lands in no count.
        warm = work / f"run-{root.name}-plain-warm"
        run_child([*session_argv(warm), "--assert=plain"])
        run_child([*FLOOR, *_PLAIN_ASSERTS_OUT], cwd=floor_dir)
        shutil.rmtree(warm)
        out = work / f"run-{root.name}-callgrind"
        got["instructions"] = {
            "session": instructions(session_argv(out)),
            "scan": instructions(scan_alone_argv(root)) - instructions(scan_alone_argv(root, imports_only=True)),
            "import_pytest": instructions(IMPORT_PYTEST),
            "floor": instructions(floor_argv(work / "floor-callgrind.html"), floor_dir),
            "floor_one": instructions(floor_argv(work / "floor-one-callgrind.html"), floor_one_dir),
            "session_plain_asserts": instructions([*session_argv(work / f"run-{root.name}-plain"), "--assert=plain"])}
        got["floor_left_out"] = {name: instructions([*FLOOR, *flags], floor_dir)
                                 for name, flags in FLOOR_LEFT_OUT.items()}
        shutil.rmtree(out)
        shutil.rmtree(work / f"run-{root.name}-plain")
    return got


def measure_startup(rounds: int) -> dict:
    kit = run_child(IMPORT_KIT)  # warm-up
    bare = run_child(IMPORT_PYTEST)
    kit_rows: list[dict] = []
    bare_rows: list[dict] = []
    for n in range(rounds):
        pair = [("kit", IMPORT_KIT), ("bare", IMPORT_PYTEST)]
        for name, argv in pair if n % 2 == 0 else pair[::-1]:
            (kit_rows if name == "kit" else bare_rows).append(run_child(argv))
    del kit, bare
    return {"kit": kit_rows, "bare": bare_rows,
            "ratios": [k["cpu_s"] / b["cpu_s"] for k, b in zip(kit_rows, bare_rows)]}


def _med(rows: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU")
    return (f"{model}, {os.cpu_count()} CPUs visible, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--instructions", action="store_true",
                        help="also count each child's user-space instructions once with callgrind (valgrind)")
    parser.add_argument("--results", type=Path, help="write the markdown section to this file")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (Debian: apt-get install valgrind)")
    thousand = thousand_shards()
    checkpoints = [("1,000 shards, 61 layers x 384 experts (~1 TB sparse)", thousand),
                   ("MiMo-V2.6-Flash, header-only", mimo_flash())]
    load_before = os.getloadavg()[0]
    lines = [f"### Scan session against the header scan alone ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
             f"* Machine: {machine()}; load average before the run {load_before:.2f}",
             f"* Command: `python benchmarks/bench_scan_session.py --rounds {args.rounds}"
             f"{' --instructions' if args.instructions else ''}`",
             "* Every figure below is a median over the rounds; the ratio is taken round by round (same moment).",
             "", "| checkpoint | tensors | session CPU s | scan alone CPU s | `import pytest` CPU s | "
                 "session / (scan + import) | session peak RSS MiB | scan alone peak RSS MiB | evidence writing, "
                 "share of session CPU | session CPU s, bytecode not cached (not judged) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    spent = ["", "What the ratio allows the session beyond the scan and `import pytest`, and what pytest's floor (a session "
             "of empty tests of the same shape, the kit's plugin left out) already costs beyond `import pytest`, in "
             "the same rounds (medians, CPU s):", "",
             "| checkpoint | session's tests (passed / xfailed / deselected) | pytest floor CPU s | allowed beyond "
             "scan + import | floor beyond `import pytest` | one-test floor beyond `import pytest` | the kit's own: "
             "session - floor - scan |",
             "|---|---|---:|---:|---:|---:|---:|"]
    counted = ["", "User-space instructions, one callgrind run of each child (10^9; the scan's: the scanning process "
               "less the same process stopped before its scan):", "",
               "| checkpoint | session | scan | `import pytest` | session / (scan + import) | pytest floor beyond "
               "`import pytest` | one-test floor beyond `import pytest` | the kit's own: session - floor - scan | "
               "session with plain asserts |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    parts = ["", "pytest's floor beyond `import pytest` in user-space instructions (10^9), whole and with parts of it "
             "left out:", "", "| checkpoint | whole | " + " | ".join(f"without {n}" for n in FLOOR_LEFT_OUT) + " |",
             "|---|---:|" + "---:|" * len(FLOOR_LEFT_OUT)]
    with tempfile.TemporaryDirectory(prefix="onegpu-bench-session-") as tmp:
        for label, root in checkpoints:
            got = measure(root, args.rounds, Path(tmp), args.instructions)
            if args.instructions:
                ir = {k: v / 1e9 for k, v in got["instructions"].items()}
                counted.append(f"| {label} | {ir['session']:.3f} | {ir['scan']:.3f} | {ir['import_pytest']:.3f} | "
                               f"**{ir['session'] / (ir['scan'] + ir['import_pytest']):.2f}** | "
                               f"{ir['floor'] - ir['import_pytest']:.3f} | "
                               f"{ir['floor_one'] - ir['import_pytest']:.3f} | "
                               f"{ir['session'] - ir['floor'] - ir['scan']:.3f} | "
                               f"{ir['session_plain_asserts']:.3f} |")
                parts.append(f"| {label} | {ir['floor'] - ir['import_pytest']:.3f} | " + " | ".join(
                    f"{(n / 1e9 - ir['import_pytest']):.3f}" for n in got["floor_left_out"].values()) + " |")
            counts = got["counts"]
            spent.append(f"| {label} | {counts.get('passed', 0)} / {counts.get('xfailed', 0)} / "
                         f"{counts.get('deselected', 0)} | {_med(got['rows']['floor'], 'cpu_s'):.2f} | "
                         + " | ".join(f"{statistics.median(s[k] for s in got['spend']):.2f}"
                                      for k in ("allowed", "floor", "floor_one", "kit")) + " |")
            rows = got["rows"]
            lines.append(
                f"| {label} | {tensor_count(root):,} | {_med(rows['session'], 'cpu_s'):.2f} | "
                f"{_med(rows['scan'], 'cpu_in_process_s'):.2f} | {_med(rows['import_pytest'], 'cpu_s'):.2f} | "
                f"**{statistics.median(got['ratios']):.2f}** ({min(got['ratios']):.2f}-{max(got['ratios']):.2f}) | "
                f"{_med(rows['session'], 'rss_mib'):.0f} | {_med(rows['scan'], 'rss_mib'):.0f} | "
                f"{statistics.median(got['evidence_share']):.1%} (receipt "
                f"{statistics.median(p['receipt'] for p in got['probes']):.3f} s, report "
                f"{statistics.median(p['report'] for p in got['probes']):.3f} s, summary "
                f"{statistics.median(p['summary'] for p in got['probes']):.3f} s) | "
                f"{_med(rows['session_uncached'], 'cpu_s'):.2f} |")
            print(lines[-1], flush=True)
    lines += spent + (counted + parts if args.instructions else [])
    startup = measure_startup(args.rounds)
    lines += ["", f"* Startup: the kit's imports (`python -c \"import {', '.join(KIT_MODULES)}\"`) "
                  f"{_med(startup['kit'], 'cpu_s'):.3f} s CPU against `import pytest` "
                  f"{_med(startup['bare'], 'cpu_s'):.3f} s, ratio {statistics.median(startup['ratios']):.2f} "
                  f"(median of {args.rounds} alternating pairs); peak RSS {_med(startup['kit'], 'rss_mib'):.0f} "
                  f"against {_med(startup['bare'], 'rss_mib'):.0f} MiB",
              f"* Load average after the run: {os.getloadavg()[0]:.2f}"]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results:
        args.results.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
