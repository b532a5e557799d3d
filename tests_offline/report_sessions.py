"""The run folders of real kit sessions shared by the report, share and compare tests (RealRuns behind the
`real_runs` fixture, InsightRuns behind `insight_runs`), the values planted in them, and report-reading helpers."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import requests

from devkit.e2e.harness import LLAMA, llama_tensors
from devkit.synth import SYNTHETIC_METADATA, write_checkpoint
from tests_offline.capacity_facts import LLAMA_CONFIG, layers_table
from tests_offline.nvml_double import ENGINE_CONFTEST
from tests_offline.paths import PROFILES, REPO_ROOT

REPO = Path(__file__).resolve().parents[1]
GPU_ELEMENT_TEST = "tests_hw/test_2_plan_launch.py::test_launch_plan_has_every_element_of_the_engine_container"
MODEL = "stub-org/e2e-model"
# Distinctive values planted in the real sessions, so the share tests can look for them.
PROJECT_NAME = "p-LEAKPATH-7q2x"
PROMPT = "PLANTED-PROMPT-violet-kangaroo-4471"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)> & "quotes" \'single\''
GIB = 2**30
RUNS = Path(__file__).resolve().parent / "data" / "runs"
H200_PROFILE = PROFILES / "h200-141gb-host.json"
RESEARCH_PROFILE = PROFILES / "research-target-rtx-pro-6000-96gb.json"
SCORE = {"schema": "onegpu/operator-score@1", "benchmark": "gsm8k / test", "metric": "exact_match, strict",
         "value": 0.8731, "scorer": {"name": "lm-evaluation-harness", "revision": "v0.4.8"}, "sample_count": 1319,
         "model_id": "stub-org/e2e-model", "model_revision": "e" * 40, "notes": "8-shot"}


# -- real sessions, each run once per pytest session and shared by the report, share and compare tests --------

def _request_lines(tag: str, n: int) -> bytes:
    lines = [{"custom_id": f"{tag}{i}", "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": MODEL, "messages": [{"role": "user", "content": f"{PROMPT} {tag} {i}"}],
                       "max_tokens": 16}} for i in range(n)]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def _protocol(data: bytes, benchmark: str) -> dict:
    return {"schema": "axm/frozen-benchmark-requests@1", "benchmark_id": benchmark, "harness_revision": "h 1",
            "dataset_revision": "d 1", "scorer_revision": "s 1", "interaction": "independent_requests",
            "timing_policy": "offline-no-per-request-deadline", "context": 8192,
            "requests_sha256": hashlib.sha256(data).hexdigest()}


class RealRuns:
    """Run folders of real kit sessions in one throwaway kit project; each is made on first use only.

    The cache lives in pytest's base temp folder, so every test module that uses them shares the sessions.
    """

    SESSIONS = {
        "blocked-scan": (["-m", "scan"], {}),
        "scan-a": (["-m", "scan", "--settings=s.json"], {}),
        "scan-b": (["-m", "scan", "--settings=s2.json"], {}),
        "approve-a": (["-m", "approve_load", "--settings=s.json", "--requests=r.jsonl", "--protocol=p.json"],
                      {"STUB_BOOT_DELAY_S": "4.5"}),
        "approve-b": (["-m", "approve_load", "--settings=s.json", "--requests=r2.jsonl", "--protocol=p2.json"],
                      {"STUB_BOOT_DELAY_S": "0.5"}),
        "oom": (["-m", "approve_load", "--settings=s.json"], {"STUB_FAIL": "load_oom"}),
        "serve": (["-m", "approve_load and (serve or canary or batch)", "--settings=s.json", "--requests=r.jsonl",
                   "--protocol=p.json"], {}),
    }

    def __init__(self, base: Path):
        from devkit.e2e.harness import make_project
        from devkit.stub_engine.build import stub_tag

        self.project = base / PROJECT_NAME
        if not (self.project / "s.json").exists():
            make_project(self.project, stub_tag())
            settings = json.loads((self.project / "s.json").read_text())
            (self.project / "s2.json").write_text(json.dumps({**settings, "context_tokens": 4096}))
            for suffix, tag, n in (("", "q", 4), ("2", "z", 3)):
                data = _request_lines(tag, n)
                (self.project / f"r{suffix}.jsonl").write_bytes(data)
                (self.project / f"p{suffix}.json").write_text(json.dumps(_protocol(data, f"bench {tag}")))

    def _launch(self, name: str) -> subprocess.Popen:
        args, stub_env = self.SESSIONS[name]
        env = {**os.environ, "PYTHONPATH": str(REPO), "ONEGPU_E2E_STUB_ENV": json.dumps(stub_env),
               "ONEGPU_E2E_NVML_RECORD": str(self.project / "nvml-record.json")}
        env.pop("PYTEST_ADDOPTS", None)
        argv = [sys.executable, "-m", "pytest", *args, f"--out=runs/{name}", "--deselect", GPU_ELEMENT_TEST,
                "-p", "no:randomly"]
        return subprocess.Popen(argv, cwd=self.project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    def folder(self, name: str) -> Path:
        """The run folder of session `name` (made now if this pytest session has not made it yet)."""
        out = self.project / "runs" / name
        if not (out / "terminal.txt").exists():
            proc = self._launch(name)
            if name == "serve":
                self._use_the_window(out, proc)
            text, _ = proc.communicate(timeout=300)
            assert (out / "receipt.json").is_file(), text
            (out / "terminal.txt").write_text(text)  # the session's output, kept beside its evidence
        return out

    def stdout(self, name: str) -> str:
        return (self.folder(name) / "terminal.txt").read_text()

    @staticmethod
    def _use_the_window(out: Path, proc: subprocess.Popen) -> None:
        """Once READY: one chat call through the adapter with the planted prompt, then STOP."""
        conn = out / "connection-private.json"
        end = time.monotonic() + 120
        assert proc.stdout is not None  # started with stdout=PIPE
        while not (conn.exists() and json.loads(conn.read_text())["state"] == "READY"):
            assert proc.poll() is None and time.monotonic() < end, proc.stdout.read() if proc.poll() else "timeout"
            time.sleep(0.1)
        doc = json.loads(conn.read_text())
        reply = requests.post(f"{doc['openai_base_url']}/chat/completions", timeout=30,
                              headers={"Authorization": f"Bearer {doc['api_key']}"},
                              json={"model": MODEL, "messages": [{"role": "user", "content": f"{PROMPT} serve"}],
                                    "max_tokens": 8})
        assert reply.status_code == 200, reply.text
        (out / "STOP").touch()


# -- real sessions of --propose, --calibrate-from, --operator-score and a landing under the floor ----------------

class InsightRuns:
    """Run folders of real kit sessions in two throwaway kit projects, all started at once, on first use."""

    def __init__(self, base: Path, image: tuple[str, str]):
        self.scan_project, self.landing_project = base / "insight", base / "landing"
        self.image_ref, self.image_id = image
        self._make_scan_project()
        self._make_landing_project()
        plan = ["-m", "scan", "--hardware", "h200.json"]
        self.sessions = {
            "insight": (self.scan_project, [*plan, "--settings", "s.json", "--propose", "req.json",
                                            "--calibrate-from", "earlier/stub-ready-8k", "--operator-score",
                                            "score.json"]),
            "offload": (self.scan_project, ["-m", "scan", "--propose", "req-big.json", "--hardware",
                                            "research.json", "--host-ram-gib", "512"]),
            "no-ram": (self.scan_project, ["-m", "scan", "--propose", "req-big.json", "--hardware",
                                           "research.json", "--host-ram-gib", "32"]),
            "under-floor": (self.landing_project, ["-m", "approve_load", "--settings", "s.json", "--hardware",
                                                   "research.json", "--host-ram-gib", "512", "-k", "landing"]),
        }
        self._run_all()

    def _project(self, root: Path, tests: list[str]) -> None:
        (root / "tests_hw").mkdir(parents=True)
        shutil.copy(REPO_ROOT / "pytest.ini", root / "pytest.ini")
        for name in tests:
            shutil.copy(REPO_ROOT / "tests_hw" / name, root / "tests_hw" / name)
        shutil.copy(RESEARCH_PROFILE, root / "research.json")

    def _make_scan_project(self) -> None:
        root = self.scan_project
        self._project(root, ["test_1_machine.py", "test_2_plan.py", "test_2_plan_insight.py"])
        shutil.copy(H200_PROFILE, root / "h200.json")
        ckpt = write_checkpoint(root / "ckpt", LLAMA, llama_tensors(), shards=2, metadata=SYNTHETIC_METADATA)
        earlier = root / "earlier" / "stub-ready-8k"
        shutil.copytree(RUNS / "stub-ready-8k", earlier)
        receipt = json.loads((earlier / "receipt.json").read_text())
        receipt["launch"]["image_id"] = self.image_id  # the recording ran the stub image of its day
        (earlier / "receipt.json").write_text(json.dumps(receipt))
        settings = {**json.loads((earlier / "settings.json").read_text()), "model_path": str(ckpt),
                    "image": self.image_ref}
        (root / "s.json").write_text(json.dumps(settings))
        request = {"schema": "onegpu/proposal-request@1", **{k: settings[k] for k in (
            "model_id", "model_revision", "model_path", "image", "gpu", "context_tokens", "prefill_chunk_tokens")}}
        (root / "req.json").write_text(json.dumps(request))
        (root / "score.json").write_text(json.dumps(SCORE))
        # 40 decoder layers of 3 GiB on a 96 GiB card: the proposal offloads, so the pinned risk has a figure
        big = write_checkpoint(root / "ckpt-big", {**LLAMA_CONFIG, "architectures": ["LlamaForCausalLM"],
                                                   "num_hidden_layers": 40}, layers_table(40, 3), shards=2,
                               metadata=SYNTHETIC_METADATA)
        (root / "req-big.json").write_text(json.dumps({**request, "model_path": str(big), "context_tokens": 8192}))

    def _make_landing_project(self) -> None:
        root = self.landing_project
        self._project(root, ["test_5_load_landing.py"])
        total = json.loads(RESEARCH_PROFILE.read_text())["gpu"]["devices"][0]["total_bytes"]
        (root / "tests_hw" / "conftest.py").write_text(ENGINE_CONFTEST.format(total=total, free=GIB))
        ckpt = write_checkpoint(root / "ckpt", {**LLAMA_CONFIG, "num_hidden_layers": 10}, layers_table(10, 4),
                                metadata=SYNTHETIC_METADATA)
        (root / "s.json").write_text(json.dumps({
            "schema": "onegpu/settings@1", "model_id": "org/m", "model_revision": "a" * 40, "model_path": str(ckpt),
            "image": "img:1", "gpu": 0, "context_tokens": 8192, "prefill_chunk_tokens": 2048, "cpu_offload_gib": 0,
            "container_ram_gib": 16, "host_headroom_gib": 8, "deadline_s": 600}))

    def _run_all(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        env.pop("PYTEST_ADDOPTS", None)
        started = {name: subprocess.Popen([sys.executable, "-m", "pytest", *args, f"--out=runs/{name}", "-p",
                                           "no:randomly"], cwd=project, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True)
                   for name, (project, args) in self.sessions.items()}
        for name, proc in started.items():
            out, _ = proc.communicate(timeout=300)
            folder = self.folder(name)
            assert (folder / "report.html").is_file(), out[-4000:]
            (folder / "terminal.txt").write_text(out)

    def folder(self, name: str) -> Path:
        return self.sessions[name][0] / "runs" / name

    def receipt(self, name: str) -> dict:
        return json.loads((self.folder(name) / "receipt.json").read_text())

    def report(self, name: str) -> str:
        return (self.folder(name) / "report.html").read_text(encoding="utf-8")

    def share(self, name: str) -> str:
        return (self.folder(name) / "summary-share.md").read_text(encoding="utf-8")


# -- helpers ------------------------------------------------------------------------------------------------------

def kit_sections(page: str) -> dict[str, str]:
    """The kit's sections of a report page (or of joined section strings), by their id."""
    parts = re.split(r'<div class="og" id="og-([a-z]+)">', page)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def partial_receipt() -> dict:
    """A scan that read the machine and then stopped: nothing after the machine phase ran."""
    tests = {"tests_hw/test_1_machine.py::test_a": {"phase": "machine", "outcome": "passed"},
             "tests_hw/test_4_custody.py::test_b": {"phase": "custody", "outcome": "deselected",
                                                     "message": "needs approval: -m approve_load"}}
    phases: dict[str, dict] = {p: {"verdict": "NOT RUN", "code": None, "message": None, "counts": {}} for p in
              ("plan", "probe", "custody", "load", "canary", "batch", "serve")}
    return {"schema": "onegpu/receipt@1", "kind": "scan", "tests": tests, "verdict": "NO DEFINITE FAILURE FOUND",
            "phases": {"machine": {"verdict": "PASSED", "counts": {"passed": 1}}, **phases},
            "hardware": {"source": "live", "gpu": {"nvml_loaded": False, "error": "NVMLError_LibraryNotFound"},
                         "host": {"ram_total_bytes": 2**34}, "docker": {"reachable": False, "error": "no socket"}}}
