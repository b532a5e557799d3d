"""pytest rewrites the asserts of the kit's fixture modules only: the rest of the package imports as plain modules
(rewriting them anew in every session, where bytecode is not written, cost ~0.4 s of CPU)."""
import os
import subprocess
import sys

import onegpu.plugin
from tests_offline.paths import REPO_ROOT

PROBE = '''
import sys
def pytest_collection_finish(session):
    from _pytest.assertion.rewrite import AssertionRewritingHook
    kit = sorted(name for name, module in sys.modules.items()
                 if name.split(".")[0] == "onegpu" and isinstance(getattr(module, "__loader__", None),
                                                                  AssertionRewritingHook))
    plain = sorted(name for name in sys.modules if name.startswith("onegpu.") and name not in kit)
    print("REWRITTEN", " ".join(kit))
    print("PLAIN", " ".join(plain))
'''


def test_only_the_fixture_modules_are_rewritten(tmp_path):
    (tmp_path / "rewrite_probe.py").write_text(PROBE)
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "rewrite_probe",
                          "-p", "no:randomly"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if line.startswith(("REWRITTEN ", "PLAIN ")))
    assert lines["REWRITTEN"].split() == sorted(["onegpu", "onegpu.plugin", *onegpu.plugin._REWRITTEN]), out.stdout + out.stderr
    assert "onegpu.evidence.receipt" in lines["PLAIN"].split() and "onegpu.session.state" in lines["PLAIN"].split()
