"""`python -m onegpu.report.compare RUN_A RUN_B`: read two run folders and print how they compare.

A plain command rather than a pytest option: it runs no test, opens no run folder and writes nothing, and it
takes two paths that pytest would otherwise read as test paths. Exit 0 after printing the comparison; exit 2
with one line naming the folder and the rule when a folder is not a run folder.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from onegpu.report.compare import RunEvidence, compare_runs
from onegpu.report.run_reader import NotARunFolder, read_run


def load_run(folder: Path) -> RunEvidence:
    """The evidence of one run folder; raises NotARunFolder naming the folder and the rule."""
    run = read_run(folder)
    return RunEvidence(str(folder), run.receipt, run.manifest, run.shown_settings or {})


def main(argv: list[str] | None = None, prog: str = "python -m onegpu.report.compare") -> int:
    parser = argparse.ArgumentParser(prog=prog,
                                     description="Compare two onegpu run folders: same checkpoint manifest, image "
                                                 "ID, protocol and request hash? Then the differences in verdicts, "
                                                 "boot facts and timings.")
    parser.add_argument("run_a", type=Path, help="the first run folder (runs/<time>-<kind>)")
    parser.add_argument("run_b", type=Path, help="the second run folder")
    args = parser.parse_args(argv)
    try:
        a, b = load_run(args.run_a), load_run(args.run_b)
    except NotARunFolder as exc:
        print(f"onegpu compare: {exc}", file=sys.stderr)
        return 2
    print("\n".join(compare_runs(a, b)))
    return 0


def console() -> int:
    """The `onegpu-compare` console script (not `compare`: ImageMagick installs a command of that name)."""
    return main(prog="onegpu-compare")


if __name__ == "__main__":
    sys.exit(main())
