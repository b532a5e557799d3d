"""The scan-session benchmark's instruction counts: callgrind's figure for a child is stable from run to run (the
reason it is shown beside the noisy CPU figures), and the scan's share, a scanning process less the same process
stopped before its scan, is the scan's work alone.
"""
from __future__ import annotations

import shutil
import subprocess
import sys

from benchmarks.bench_scan_session import CHILD_ENV, instructions, scan_alone_argv
from devkit.synth import moe_tensors, write_checkpoint
from tests_offline.docker_required import skip_unless_ci


def _valgrind() -> None:
    if shutil.which("valgrind") is None:
        skip_unless_ci("valgrind is not installed (Debian: apt-get install valgrind)", "valgrind")


def test_a_childs_count_repeats_within_a_percent_and_grows_with_its_work():
    _valgrind()
    bare = [instructions([sys.executable, "-c", "pass"]) for _ in range(2)]
    more = instructions([sys.executable, "-c", "import json, decimal; json.dumps(list(range(100000)))"])
    assert abs(bare[0] - bare[1]) <= 0.01 * bare[0], bare
    assert more > 1.5 * max(bare), (more, bare)


def test_the_scan_count_is_the_scanning_process_less_its_imports_and_grows_with_the_checkpoint(tmp_path):
    _valgrind()

    def counts(layers: int) -> tuple[int, int]:
        root = write_checkpoint(tmp_path / f"ckpt-{layers}", {"num_hidden_layers": layers},
                                moe_tensors(layers=layers, experts=64), shards=8)
        argv = scan_alone_argv(root)
        # A first run writes the compiled bytecode (a fresh clone has none), as the benchmark's warm-up does:
        # compiling is counted once, in that run, and would otherwise land on one side of the difference only.
        subprocess.run(argv, env=CHILD_ENV, check=True, capture_output=True)
        return instructions(argv), instructions(scan_alone_argv(root, imports_only=True))

    (small, small_imports), (large, large_imports) = counts(2), counts(8)
    # The imports are the same work whatever the checkpoint (within the run-to-run 1 %); the scan is not.
    assert abs(small_imports - large_imports) <= 0.01 * small_imports
    assert small - small_imports > 0.02 * small_imports  # far above the run-to-run spread
    assert large - large_imports > 2 * (small - small_imports)  # four times the layers
