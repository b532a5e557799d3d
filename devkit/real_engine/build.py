"""Build the real-engine image locally, without any pull: a Debian root (debootstrap) holding the real vLLM
CPU engine in a venv, streamed as a tar into `docker import`; cached by content hash.

The tag is `onegpu-real-engine:<12 hex>`, the SHA-256 over the files that define the image (this file, the
Debian and Python steps, constraints.txt), so a changed recipe or pin gets a new image and an unchanged one
is reused. `python -m devkit.real_engine.build` builds (or finds) it and prints tag, ID, size, time;
`--lock` re-resolves vLLM's dependencies from PyPI, rewrites constraints.txt from what was installed, and
builds that. Building needs root, Docker, and PyPI and Debian's mirror for whatever is not cached yet.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devkit.real_engine import debian_base, python_env
from devkit.real_engine.debian_base import say

REPOSITORY = "onegpu-real-engine"
LABEL = "onegpu.real-engine"
HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "constraints.txt"
# The files whose bytes define the image. Other modules of this folder (test helpers) do not change it.
DEFINING_FILES = ("build.py", "debian_base.py", "python_env.py", "constraints.txt")
RECORD_DIR = "opt/onegpu-real-engine"  # in the image: the pins and Debian package versions it was built from
IMAGE_CHANGES = [
    'ENTRYPOINT ["vllm"]',
    f"ENV PATH={python_env.VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    f"ENV VIRTUAL_ENV={python_env.VENV}",
    "ENV LANG=C.UTF-8",
    "ENV PYTHONUNBUFFERED=1",
    f"LABEL {LABEL}=1",
    f"LABEL {LABEL}.vllm={python_env.VLLM_ALIAS_VERSION}",
]
WORK_PREFIX = "real-engine-work-"
TAR_CHUNK = 1 << 20


def real_engine_tag() -> str:
    """`onegpu-real-engine:<12 hex>` for the current recipe and pins."""
    digest = hashlib.sha256()
    for name in DEFINING_FILES:
        digest.update(name.encode() + b"\0" + hashlib.sha256((HERE / name).read_bytes()).digest())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def build_root(work: Path, lock: bool) -> Path:
    """Lay the image's root filesystem under `work`; with `lock`, resolve afresh and rewrite the pins."""
    root, log = work / "root", work / "debootstrap.log"
    debian_base.require_root()
    cache = python_env.cache_dir()
    requirements, constraints = work / "requirements.txt", None if lock else CONSTRAINTS

    def downloads() -> Path:
        wheel = python_env.fetch_vllm_wheel(cache)
        requirements.write_text("\n".join(python_env.vllm_requirements(wheel)) + "\n")
        python_env.fetch_wheels(requirements, constraints, cache)
        return wheel

    vllm_wheel = debian_base.debootstrap_beside(root, log, downloads)
    python_env.link_wheels(cache, root / python_env.WHEELS_IN_ROOT.lstrip("/"))
    python_env.install(root, vllm_wheel, requirements, constraints)
    if lock:
        python_env.write_constraints(root, CONSTRAINTS)
        say(f"wrote {CONSTRAINTS}")
    python_env.check_against(root, CONSTRAINTS)
    record = root / RECORD_DIR
    record.mkdir(parents=True)
    (record / "constraints.txt").write_bytes(CONSTRAINTS.read_bytes())
    (record / "debian-packages.txt").write_text("\n".join(debian_base.debian_package_versions(root)) + "\n")
    debian_base.trim(root)
    return root


def tar_chunks(process: subprocess.Popen):
    """The tar stream, read in chunks (the request body of the import)."""
    assert process.stdout is not None  # import_root starts tar with stdout=PIPE
    while chunk := process.stdout.read(TAR_CHUNK):
        yield chunk


def import_root(client, root: Path, tag: str, changes: list[str] | None = None) -> str:
    """Stream `root` as a tar into `docker import` as `tag` with the Dockerfile `changes` (by default this
    image's IMAGE_CHANGES); returns the image ID."""
    import docker.errors

    say(f"importing the root into Docker as {tag}")
    repository, _, version = tag.partition(":")
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-cf", "-", "."], stdout=subprocess.PIPE,
                           stdin=subprocess.DEVNULL)
    assert tar.stdout is not None  # stdout=PIPE
    try:
        # POST /images/create?fromSrc=- is an import of the bytes sent; nothing is pulled.
        answer = client.api.import_image_from_data(tar_chunks(tar), repository=repository, tag=version,
                                                   changes=IMAGE_CHANGES if changes is None else changes)
    finally:
        tar.stdout.close()
        tar_status = tar.wait()
    if tar_status != 0:
        try:
            client.images.remove(tag, force=True)  # an image of a cut-short stream would be incomplete
        except docker.errors.ImageNotFound:
            pass
        raise RuntimeError(f"tar of {root} exited with {tar_status}; the import was discarded")
    try:
        return client.images.get(tag).id
    except docker.errors.ImageNotFound:
        raise RuntimeError(f"docker import made no {tag}; the daemon answered: {str(answer)[-2000:]}") from None


def remove_stale_images(client, keep_id: str, repository: str = REPOSITORY) -> None:
    """Remove `repository`'s images of older recipes (each holds gigabytes); ones in use stay."""
    import docker.errors

    for image in client.images.list(name=repository):
        if image.id == keep_id:
            continue
        for tag in image.tags:
            try:
                client.images.remove(tag)
                say(f"removed the stale image {tag}")
            except docker.errors.APIError as exc:
                say(f"kept the stale image {tag}: {exc}")


def clear_leftover_work(parent: Path, prefix: str = WORK_PREFIX) -> None:
    """Work folders of builds that died (the caller holds the build lock, so none is in use)."""
    for folder in parent.glob(f"{prefix}*"):
        say(f"removing the leftover work folder {folder}")
        shutil.rmtree(folder, ignore_errors=True)


def build_real_engine_image(client, lock: bool = False) -> str:
    """Build the image from nothing (cached wheels aside); returns its ID. With `lock`, re-pin first."""
    started = time.monotonic()
    parent = python_env.cache_dir().parent  # the wheel cache's disk, so wheels are hard-linked, not copied
    clear_leftover_work(parent)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=parent))
    try:
        root = build_root(work, lock)
        tag = real_engine_tag()  # after build_root: --lock has rewritten the pins by now
        image_id = import_root(client, root, tag)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"built {tag} in {time.monotonic() - started:.0f} s")
    remove_stale_images(client, image_id)
    return image_id


def with_build_lock(action):
    """Run `action` holding this machine's build lock: parallel test processes wait for the first build."""
    lock_path = Path(tempfile.gettempdir()) / "onegpu-real-engine-build.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return action()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_image(client, tag: str, build) -> str:
    """The image `tag`'s ID, built by `build(client)` under the build lock only when the tag is not there yet
    (never pulls); a build another process finished while this one waited for the lock is found, not repeated."""
    import docker.errors

    try:
        return client.images.get(tag).id
    except docker.errors.ImageNotFound:
        pass

    def find_or_build():
        try:
            return client.images.get(tag).id
        except docker.errors.ImageNotFound:
            return build(client)

    return with_build_lock(find_or_build)


def ensure_real_engine_image(client) -> str:
    """The real-engine image's ID, built only when its content-hash tag is not there yet (never pulls)."""
    return ensure_image(client, real_engine_tag(), build_real_engine_image)


def image_main(argv: list[str] | None, module: str, doc: str | None, tag, ensure, build, timeout_s: int) -> int:
    """`python -m <module> [--lock]`: build (or find) an engine image and print its tag, ID, size and time."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lock", action="store_true",
                        help="re-resolve the packages from PyPI, rewrite constraints.txt, build that")
    args = parser.parse_args(argv)
    import docker

    client = docker.from_env(timeout=timeout_s)
    started = time.monotonic()
    image_id = with_build_lock(lambda: build(client, lock=True)) if args.lock else ensure(client)
    size = client.images.get(image_id).attrs.get("Size", 0)
    print(f"{tag()} {image_id} {size / 1e9:.2f} GB ({time.monotonic() - started:.1f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Build (or find) the real-engine image and say what it is."""
    return image_main(argv, "devkit.real_engine.build", __doc__, real_engine_tag, ensure_real_engine_image,
                      build_real_engine_image, timeout_s=120)


if __name__ == "__main__":
    sys.exit(main())
