"""A scan session imports what its phases need: the serve adapter's stack (asyncio, uvloop, httptools) only loads
when an approved session opens a serve window."""
import os
import subprocess
import sys

from tests_offline.paths import REPO_ROOT

PROBE = '''
import sys
def pytest_unconfigure(config):
    print("MODULES", " ".join(sorted(sys.modules)))
'''
ADAPTER_STACK = {"asyncio", "uvloop", "httptools", "onegpu.serve.adapter", "onegpu.serve.thread"}


def test_a_scan_session_does_not_import_the_serve_adapter(tmp_path):
    (tmp_path / "modules_probe.py").write_text(PROBE)
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "scan", f"--out={tmp_path / 'run'}", "-q",
                          "-p", "modules_probe"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert (tmp_path / "run" / "receipt.json").is_file(), out.stdout + out.stderr
    loaded = next(line for line in out.stdout.splitlines() if line.startswith("MODULES ")).split()[1:]
    assert "onegpu.serve.window" in loaded  # the serve phase's tests were collected
    assert ADAPTER_STACK.isdisjoint(loaded), sorted(ADAPTER_STACK.intersection(loaded))
