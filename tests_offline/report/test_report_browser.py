"""report.html in a real browser: Debian's headless Chromium opens it offline, with no failed request, no
console error, no script run from the report's data, and takes a screenshot kept with the test output.

How the browser is watched: the DevTools protocol over a pipe (--remote-debugging-pipe: JSON messages ending
in NUL on file descriptors 3 and 4). No port is opened, and every event comes back on the pipe: console calls
and exceptions (Runtime), browser log entries (Log), each request and failure (Network), JavaScript dialogs
(Page). The small client is hand-written below because no well-kept Python library drives the system Chromium
over a pipe (Playwright downloads its own browser).

Offline: every host name resolves to nothing (--host-resolver-rules) and every proxied request goes to a
loopback port where nothing listens; besides that, any request other than the report file itself fails the
test, whether or not it could have succeeded.
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests_offline.docker_required import skip_unless_ci
from tests_offline.report_sessions import HOSTILE

PAGE_TIMEOUT_S = 60
WIDTH = 1280


def chromium_binary() -> str:
    """Debian's chromium; skipped when missing, but a failure under CI=true (CI installs it)."""
    found = shutil.which("chromium")
    if found is None:
        skip_unless_ci("no chromium on PATH (apt-get install chromium)")
    return found


class Browser:
    """One headless Chromium driven over the DevTools pipe; `events` keeps every event it sent."""

    events: list[dict]

    def __init__(self, binary: str, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        args = [binary, "--headless", "--remote-debugging-pipe", f"--user-data-dir={profile}", "--disable-gpu",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-sync",
                "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
                "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "about:blank"]
        if os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium refuses to start as root with its sandbox (CI runs as root)
        # bash hands our pipe ends to Chromium as the descriptors 3 and 4 it reads and writes (bash, not sh:
        # dash takes single-digit descriptors only, and ours may be 10 or more).
        self.proc = subprocess.Popen(["/bin/bash", "-c", f'exec "$@" 3<&{to_browser_r} 4>&{from_browser_w}', "sh",
                                      *args], pass_fds=(to_browser_r, from_browser_w), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._next_id, self.events, self.session = b"", 0, [], None

    def _read(self, done, deadline: float) -> dict:
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" not in message:
                    self.events.append(message)
                    if message.get("method") == "Page.javascriptDialogOpening":  # a dialog would hang the page
                        self.send("Page.handleJavaScriptDialog", {"accept": False}, wait=False)
                if done(message):
                    return message
            ready, _, _ = select.select([self._from_browser], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise EOFError("Chromium closed the DevTools pipe")
            self._buffer += chunk

    def send(self, method: str, params: dict | None = None, wait: bool = True, browser_level: bool = False):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if self.session and not browser_level:
            message["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        if not wait:
            return None
        answer = self._read(lambda m, i=self._next_id: m.get("id") == i, time.monotonic() + PAGE_TIMEOUT_S)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", {"width": WIDTH, "height": 900, "deviceScaleFactor": 1,
                                                         "mobile": False})
        self.send("Page.navigate", {"url": url})
        self._read(lambda m: m.get("method") == "Page.loadEventFired", time.monotonic() + PAGE_TIMEOUT_S)
        self.send("Runtime.evaluate", {"expression": "new Promise(r => setTimeout(r, 300))", "awaitPromise": True})

    def text(self) -> str:
        return self.send("Runtime.evaluate", {"expression": "document.body.innerText"})["result"]["value"]

    def screenshot(self, path: Path, full_page: bool) -> Path:
        height = self.send("Page.getLayoutMetrics")["cssContentSize"]["height"] if full_page else 900
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full_page,
                                                    "clip": {"x": 0, "y": 0, "width": WIDTH, "height": height,
                                                             "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def close(self) -> None:
        try:
            self.send("Browser.close", browser_level=True, wait=False)
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)

    def problems(self, page_url: str) -> list[str]:
        """Console errors, exceptions, failed or outside requests, and dialogs: each one line."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params") or {}
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(f"console {params['type']}: {params.get('args')}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(f"log error: {params['entry'].get('text')} {params['entry'].get('url')}")
            elif method == "Network.loadingFailed":
                found.append(f"request failed: {params.get('errorText')} {params.get('requestId')}")
            elif method == "Network.requestWillBeSent" and params["request"]["url"] != page_url:
                found.append(f"request beyond the report: {params['request']['url'][:200]}")
            elif method == "Page.javascriptDialogOpening":
                found.append(f"a script from the page opened a dialog: {params.get('message')}")
        return found


@pytest.fixture
def browser(tmp_path):
    instance = Browser(chromium_binary(), tmp_path / "profile")
    yield instance
    instance.close()


def load_report(browser: Browser, report: Path, shots: Path, record_property) -> tuple[str, list[str]]:
    """Open the report, keep a top-of-page and a full-page screenshot, return the page text and the problems."""
    url = report.resolve().as_uri()
    browser.open(url)
    shots.mkdir(exist_ok=True)
    top = browser.screenshot(shots / "report-top.png", full_page=False)
    full = browser.screenshot(shots / "report-full.png", full_page=True)
    for name, path in (("screenshot_top", top), ("screenshot_full", full)):
        record_property(name, str(path))
        print(f"{name}: {path}")
    assert top.stat().st_size > 10_000 and full.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    requested = [e for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    assert [e["params"]["request"]["url"] for e in requested] == [url]  # the report file, and nothing else
    return browser.text(), browser.problems(url)


def test_an_approval_report_loads_offline_with_no_error(real_runs, browser, tmp_path, record_property):
    text, problems = load_report(browser, real_runs.folder("approve-a") / "report.html", tmp_path / "shots",
                                 record_property)
    assert problems == []
    assert text.lstrip().startswith("onegpu report: PRIVATE, review before sharing")
    for heading in ("Verdict", "Facts: GPU, host, Docker", "The launch plan", "Capacity", "Custody",
                    "Boot (from the engine log)", "Timings, kept apart", "GPU memory and host RAM over time",
                    "Batch statistics (UNSCORED)", "Warnings and limitations"):
        assert heading in text, heading
    assert text.index("Verdict") < text.index("Custody") < text.index("Timings, kept apart")
    # pytest-html's own script ran: it filled its results table from the embedded data
    assert "test_engine_is_ready_within_the_boot_deadline" in text


def test_a_blocked_scan_report_loads_offline_with_no_error(real_runs, browser, tmp_path, record_property):
    text, problems = load_report(browser, real_runs.folder("blocked-scan") / "report.html", tmp_path / "shots",
                                 record_property)
    assert problems == [] and "BLOCKED NO_SETTINGS" in text and "not run (phase custody" in text


@pytest.mark.parametrize("name, headings", [
    ("insight", ("Checkpoint consistency (warnings never block)", "GPU reserve calibration",
                 "CALIBRATED FROM stub-ready-8k", "Proposed settings (a proposal: nothing runs from it)",
                 "Operator-supplied score (not computed by the kit)", "OPERATOR-SUPPLIED")),
    ("under-floor", ("Landing at READY: measured against the plan", "LANDED UNDER THE FREE-MEMORY FLOOR")),
])
def test_reports_of_the_advice_and_measurements_load_offline_with_no_error(insight_runs, browser, tmp_path,
                                                                           record_property, name, headings):
    text, problems = load_report(browser, insight_runs.folder(name) / "report.html", tmp_path / "shots",
                                 record_property)
    assert problems == []
    assert [h for h in headings if h not in text] == []
    if name == "under-floor":  # the alarm is among the banners on top, before the verdict
        assert text.index("LANDED UNDER THE FREE-MEMORY FLOOR") < text.index("Verdict")


HOSTILE_TEST = f'''
import pytest
from onegpu.session.glue import blocked_as_xfail
from onegpu.core.outcomes import Blocked
pytestmark = [pytest.mark.scan, pytest.mark.phase("machine")]

def test_hostile(kit):
    kit.show("machine", {HOSTILE!r})
    kit.receipt.warn({HOSTILE!r})
    with blocked_as_xfail():
        raise Blocked("NO_GPU", {HOSTILE!r})
'''


def test_markup_in_the_evidence_is_shown_as_text_and_never_runs(kit_project, browser, tmp_path, record_property):
    kit_project.makepyfile(**{"tests_hw/test_1_hostile": HOSTILE_TEST})
    kit_project.runpytest("-m", "scan", "--out", str(tmp_path / "run"))
    text, problems = load_report(browser, tmp_path / "run" / "report.html", tmp_path / "shots", record_property)
    assert problems == []  # no dialog opened: the alert() in the evidence never ran
    assert text.count('<script>alert("x")</script>') >= 2  # verdict, blocked reason, warning, fact line
