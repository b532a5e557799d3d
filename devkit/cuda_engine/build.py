"""Build the CUDA-engine image locally, without any pull: vLLM's CUDA build (`vllm` 0.34.0 from PyPI, with
PyPI's CUDA torch) in a venv inside a Debian bookworm root, made with devkit/real_engine's steps (debootstrap,
offline install from cached wheels, trim, a tar streamed into `docker import`); cached by content hash.

The tag is `onegpu-cuda-engine:<12 hex>`, the SHA-256 over the files that define the image (this file and
constraints.txt here, and real_engine's build.py, debian_base.py and python_env.py, whose steps it runs).
`python -m devkit.cuda_engine.build` builds (or finds) it and prints tag, ID, size, time; `--lock`
re-resolves vLLM's dependencies from PyPI, rewrites constraints.txt from what was installed (vllm itself
included), and builds that. Wheels are cached in ~/.cache/onegpu/cuda-engine-wheels ($ONEGPU_CACHE moves it).

What is in the image, and why:
* /opt/venv: vllm 0.34.0 and exactly the packages of constraints.txt; on PATH, ENTRYPOINT ["vllm"].
  vllm 0.34.0 pins flashinfer-python==0.7.3, which PyPI does not carry; vllm is therefore installed without
  its dependency list, which is handed to pip with only that pin moved to 0.7.4 (PIN_SWAPS).
* /opt/vllm-0.33.0: vllm 0.33.0's wheel (`pip install --no-deps --target`), for its pure Python only
  (`PYTHONPATH=/opt/vllm-0.33.0` with the venv's torch, which 0.33.0 pins too). Its compiled parts (*.so, the
  vllm-rs binary: about 0.7 GB of the wheel's 0.84 GB) are removed, since nothing may run them.
* Debian's side is real_engine's: python3 with headers and g++ (Triton and PyTorch's inductor compile at run
  time on a GPU), util-linux, libnuma.
The image's size is the venv's CUDA libraries (the nvidia-* wheels, torch, flashinfer, Triton...), which are
what a CUDA build is; no wheel, pip cache, apt list or documentation is left in it.
Building needs root, Docker, and PyPI and Debian's mirror for whatever is not cached yet; no GPU.
"""
from __future__ import annotations

import email.parser
import hashlib
import re
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from devkit.real_engine import build as real_build
from devkit.real_engine import debian_base, python_env
from devkit.real_engine.debian_base import run_in_root

REPOSITORY = "onegpu-cuda-engine"
LABEL = "onegpu.cuda-engine"
HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "constraints.txt"
REAL_ENGINE = Path(real_build.__file__).resolve().parent
# The files whose bytes define the image: this recipe and the real-engine steps it runs.
DEFINING_FILES = (("cuda_engine/build.py", HERE / "build.py"), ("cuda_engine/constraints.txt", CONSTRAINTS),
                  *((f"real_engine/{name}", REAL_ENGINE / name)
                    for name in ("build.py", "debian_base.py", "python_env.py")))
VLLM_VERSION = "0.34.0"
OLD_VLLM_VERSION = "0.33.0"
OLD_VLLM_DIR = f"/opt/vllm-{OLD_VLLM_VERSION}"
OLD_VLLM_COMPILED = ("*.so", "vllm-rs")  # removed from OLD_VLLM_DIR: only its Python is used
# Requires-Dist pins of vllm 0.34.0 that PyPI cannot satisfy, and what is installed instead.
PIN_SWAPS = {"flashinfer-python": ("0.7.3", "0.7.4")}
WHEEL_CACHE = "cuda-engine-wheels"
RECORD_DIR = "opt/onegpu-cuda-engine"  # in the image: the pins and Debian package versions it was built from
# Left out of the pins: the installer that came with Debian's venv (vllm itself is pinned here).
NOT_PINNED = ("pip",)
IMAGE_CHANGES = [
    'ENTRYPOINT ["vllm"]',
    f"ENV PATH={python_env.VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    f"ENV VIRTUAL_ENV={python_env.VENV}",
    "ENV LANG=C.UTF-8",
    "ENV PYTHONUNBUFFERED=1",
    # What NVIDIA's container toolkit mounts when a GPU is handed in: the CUDA driver and NVML (nvidia-smi).
    "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    f"LABEL {LABEL}=1",
    f"LABEL {LABEL}.vllm={VLLM_VERSION}",
]
WORK_PREFIX = "cuda-engine-work-"
CONSTRAINTS_HEADER = (
    "# Every Python package of the CUDA-engine image's venv (vllm included, pip aside), as resolved and\n"
    "# installed by `python -m devkit.cuda_engine.build --lock`. Builds install exactly these versions (the\n"
    "# build fails if the installed set differs), and the image tag hashes this file.\n"
)


def say(message: str) -> None:
    """Progress on stderr (the real-engine steps say theirs with their own prefix)."""
    print(f"[cuda-engine] {message}", file=sys.stderr, flush=True)


def cuda_engine_tag() -> str:
    """`onegpu-cuda-engine:<12 hex>` for the current recipe and pins."""
    digest = hashlib.sha256()
    for name, path in DEFINING_FILES:
        if not path.exists():
            raise RuntimeError(f"{path} is missing; `python -m devkit.cuda_engine.build --lock` writes it")
        digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def wheel_cache() -> Path:
    return python_env.cache_dir(WHEEL_CACHE)


def vllm_requirements(wheel: Path) -> list[str]:
    """vllm's own Requires-Dist lines, without extras, with PIN_SWAPS applied (each must apply once)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(f"vllm-{VLLM_VERSION}.dist-info/METADATA").decode()
    requirements, swapped = [], set()
    for line in email.parser.HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []:
        if re.search(r"\bextra\s*==", line):
            continue  # optional features (benchmarks, audio, other quantisations) stay out of the image
        name = python_env.normalise(re.split(r"[\s\[<>=!~;]", line, maxsplit=1)[0])
        if name in PIN_SWAPS:
            pinned, instead = PIN_SWAPS[name]
            if not re.fullmatch(rf"{re.escape(name)}\s*==\s*{re.escape(pinned)}", line.strip(), re.IGNORECASE):
                raise RuntimeError(f"{wheel.name} requires {line!r}, not {name}=={pinned}; look at PIN_SWAPS")
            line = f"{name}=={instead}"
            swapped.add(name)
        requirements.append(line)
    if missing := set(PIN_SWAPS) - swapped:
        raise RuntimeError(f"{wheel.name} has no pin of {sorted(missing)}; PIN_SWAPS no longer applies")
    return requirements


def install(root: Path, requirements: Path, constraints: Path | None) -> None:
    """The venv with vllm's dependencies, vllm itself, and the old vllm's Python beside it; offline."""
    pip = f"{python_env.VENV}/bin/pip"
    pip_install = [pip, "install", *python_env.PIP_QUIET, "--no-index", "--find-links",
                   python_env.WHEELS_IN_ROOT, "--no-cache-dir"]
    run_in_root(root, ["/usr/bin/python3", "-m", "venv", python_env.VENV])
    for path in [requirements] + ([constraints] if constraints else []):
        (root / "tmp" / path.name).write_bytes(path.read_bytes())
    say("installing vLLM's dependencies inside the root")
    run_in_root(root, [*pip_install, "-r", f"/tmp/{requirements.name}"]
                + (["-c", f"/tmp/{constraints.name}"] if constraints else []))
    # Without dependencies (its flashinfer pin cannot be met); by name, so pip records it as vllm==0.34.0.
    say(f"installing vllm=={VLLM_VERSION}")
    run_in_root(root, [*pip_install, "--no-deps", f"vllm=={VLLM_VERSION}"])
    say(f"unpacking vllm=={OLD_VLLM_VERSION} into {OLD_VLLM_DIR}")
    run_in_root(root, [*pip_install, "--no-deps", "--target", OLD_VLLM_DIR, f"vllm=={OLD_VLLM_VERSION}"])
    old = root / OLD_VLLM_DIR.lstrip("/")
    for pattern in OLD_VLLM_COMPILED:
        for path in old.rglob(pattern):
            path.unlink()


def build_root(work: Path, lock: bool) -> Path:
    """Lay the image's root filesystem under `work`; with `lock`, resolve afresh and rewrite the pins."""
    root, log = work / "root", work / "debootstrap.log"
    debian_base.require_root()
    if not lock and not CONSTRAINTS.exists():
        raise RuntimeError(f"{CONSTRAINTS} is missing; `python -m devkit.cuda_engine.build --lock` writes it")
    cache = wheel_cache()
    requirements, constraints = work / "requirements.txt", None if lock else CONSTRAINTS

    def downloads() -> None:
        wheel = python_env.fetch_wheel(cache, "vllm", VLLM_VERSION)
        python_env.fetch_wheel(cache, "vllm", OLD_VLLM_VERSION)
        requirements.write_text("\n".join(vllm_requirements(wheel)) + "\n")
        python_env.fetch_wheels(requirements, constraints, cache)

    debian_base.debootstrap_beside(root, log, downloads)
    python_env.link_wheels(cache, root / python_env.WHEELS_IN_ROOT.lstrip("/"))
    install(root, requirements, constraints)
    if lock:
        CONSTRAINTS.write_text(CONSTRAINTS_HEADER + "\n".join(python_env.freeze(root, NOT_PINNED)) + "\n")
        say(f"wrote {CONSTRAINTS}")
    python_env.check_against(root, CONSTRAINTS, NOT_PINNED)
    record = root / RECORD_DIR
    record.mkdir(parents=True)
    (record / "constraints.txt").write_bytes(CONSTRAINTS.read_bytes())
    (record / "debian-packages.txt").write_text("\n".join(debian_base.debian_package_versions(root)) + "\n")
    debian_base.trim(root)  # also empties /tmp, with the linked wheels
    return root


def build_cuda_engine_image(client, lock: bool = False) -> str:
    """Build the image from nothing (cached wheels aside); returns its ID. With `lock`, re-pin first."""
    started = time.monotonic()
    parent = wheel_cache().parent  # the wheel cache's disk, so wheels are hard-linked, not copied
    real_build.clear_leftover_work(parent, prefix=WORK_PREFIX)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=parent))
    try:
        root = build_root(work, lock)
        tag = cuda_engine_tag()  # after build_root: --lock has rewritten the pins by now
        image_id = real_build.import_root(client, root, tag, changes=IMAGE_CHANGES)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"built {tag} in {time.monotonic() - started:.0f} s")
    real_build.remove_stale_images(client, image_id, repository=REPOSITORY)
    return image_id


def ensure_cuda_engine_image(client) -> str:
    """The CUDA-engine image's ID, built only when its content-hash tag is not there yet (never pulls).

    Builds hold the same machine-wide lock as the real-engine image's, so the two never build at once.
    """
    return real_build.ensure_image(client, cuda_engine_tag(), build_cuda_engine_image)


def main(argv: list[str] | None = None) -> int:
    """Build (or find) the CUDA-engine image and say what it is."""
    return real_build.image_main(argv, "devkit.cuda_engine.build", __doc__, cuda_engine_tag,
                                 ensure_cuda_engine_image, build_cuda_engine_image, timeout_s=600)


if __name__ == "__main__":
    sys.exit(main())
