"""The real-engine image's operating system: a minimal Debian root made by debootstrap, then trimmed.

What vLLM's CPU build needs beyond Python, and why:
* util-linux's `lscpu`, which vLLM runs through `/bin/sh` to lay out its CPU threads;
* g++ and Python's headers, because the engine compiles C++ kernels at run time (PyTorch's inductor, used
  for example by a completions call with logprobs): without g++ it dies with "No working C++ compiler found",
  and without python3-dev the kernels fail on `#include <Python.h>`;
* libnuma, which vLLM's CPU extension opens to learn the NUMA layout.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SUITE = "bookworm"  # Debian 12: its Python is 3.11 and its glibc 2.36, which the wheel tags below follow
MIRROR = "http://deb.debian.org/debian"
PYTHON_VERSION = "3.11"
GLIBC_MINOR = 36
PACKAGES = (
    "python3", "python3-venv", "python3-dev",  # the interpreter, venv's pip, Python.h for compiled kernels
    "util-linux",                               # lscpu
    "g++",                                      # run-time kernel compilation
    "libnuma1",                                 # NUMA layout for the CPU extension
)
# Left out of the image: package caches and lists, documentation (nothing in the image reads them).
TRIMMED = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info",
           "usr/share/locale", "tmp", "dev")


def say(message: str) -> None:
    """Progress goes to stderr, so stdout keeps only the build's one-line result."""
    print(f"[real-engine] {message}", file=sys.stderr, flush=True)


def require_root() -> None:
    """debootstrap and chroot need root; say so plainly instead of failing halfway."""
    if os.geteuid() != 0:
        raise RuntimeError("building the real-engine image needs root (debootstrap and chroot); "
                           f"this process runs as uid {os.geteuid()}")


def ensure_debootstrap() -> str:
    """The debootstrap command, installed from Debian's packages when missing."""
    found = shutil.which("debootstrap")
    if found:
        return found
    say("debootstrap is missing; installing it with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    found = shutil.which("debootstrap")
    if not found:
        raise RuntimeError("apt-get installed debootstrap but no `debootstrap` command is on PATH")
    return found


def start_debootstrap(root: Path, log_path: Path) -> subprocess.Popen:
    """Start laying a minimal Debian root at `root` (runs alongside the wheel downloads); output to the log."""
    command = [ensure_debootstrap(), "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root),
               MIRROR]
    say(f"debootstrap {SUITE} with {', '.join(PACKAGES)} (log: {log_path})")
    log = open(log_path, "wb")
    try:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        log.close()  # the child holds its own copy of the descriptor


def finish_debootstrap(process: subprocess.Popen, log_path: Path) -> None:
    """Wait for debootstrap; on failure raise with the end of its log."""
    if process.wait() != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"debootstrap exited with {process.returncode}; end of its log:\n{tail}")


def debootstrap_beside(root: Path, log_path: Path, downloads):
    """Lay the Debian root at `root` while `downloads()` runs, and return what it returned once both are done; a
    failed download stops debootstrap (its half-made root is the caller's to remove)."""
    process = start_debootstrap(root, log_path)
    try:
        fetched = downloads()
    except BaseException:
        process.kill()
        process.wait()
        raise
    finish_debootstrap(process, log_path)
    say("Debian root ready")
    return fetched


def chroot_env() -> dict[str, str]:
    """A clean environment for commands run inside the root: none of the host's PIP_*/PYTHON* settings."""
    return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
            "LANG": "C.UTF-8"}


def run_in_root(root: Path, argv: list[str], capture: bool = False) -> str:
    """Run `argv` chrooted into `root`; returns stdout when `capture`. Raises with the output on failure."""
    result = subprocess.run(["chroot", str(root), *argv], env=chroot_env(), stdin=subprocess.DEVNULL,
                            capture_output=capture, text=True)
    if result.returncode != 0:
        detail = f"\n{result.stdout[-2000:]}{result.stderr[-3000:]}" if capture else ""
        raise RuntimeError(f"inside the image root, {' '.join(argv)} exited with {result.returncode}{detail}")
    return result.stdout if capture else ""


def debian_package_versions(root: Path) -> list[str]:
    """`name version` of every Debian package in the root (kept in the image as a record)."""
    out = run_in_root(root, ["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"], capture=True)
    return sorted(line for line in out.splitlines() if line.strip())


def trim(root: Path) -> None:
    """Empty the folders the image does not need, and blank the host's resolver settings debootstrap copied."""
    for rel in TRIMMED:
        folder = root / rel
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    (root / "tmp").chmod(0o1777)
    # Docker supplies these at run time; the host's copies say nothing true about a container.
    for name in ("resolv.conf", "hostname"):
        path = root / "etc" / name
        if path.exists() or path.is_symlink():
            path.unlink()
        path.write_text("")
