"""Build the stub engine image locally, without any pull: a root filesystem made from this machine's Python
and the stub's payload, written as a tar stream and handed to `docker import`; cached by content hash.

The tag is `onegpu-stub-engine:<12 hex>`, the SHA-256 over the stub's sources (payload + this file) and the
interpreter's path and version, so a changed stub or interpreter gets a new image and an unchanged one is
reused. `python -m devkit.stub_engine.build` builds (or finds) it and prints tag, ID, size, time.
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

REPOSITORY = "onegpu-stub-engine"
HERE = Path(__file__).resolve().parent
PAYLOAD = HERE / "payload"
PYVER = f"{sys.version_info.major}.{sys.version_info.minor}"
IMAGE_STDLIB = f"usr/local/lib/python{PYVER}"
IMAGE_LIBDIR = "usr/lib/x86_64-linux-gnu"  # a directory the dynamic loader searches by default
# Parts of the standard library a small HTTP stub never needs (tests, GUIs, installers, build files),
# and extension modules that would drag in large or many shared libraries.
SKIP_DIRS = {"test", "tests", "idle_test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
             "distutils", "pydoc_data", "site-packages", f"config-{PYVER}-x86_64-linux-gnu", "__phello__"}
SKIP_EXTENSIONS = re.compile(r"^(_test|_ctypes_test|_xxtestfuzz|_xxsubinterpreters|xxlimited|_tkinter|_curses|"
                             r"readline|nis|_ssl|_hashlib|_sqlite3|_dbm|_gdbm|ossaudiodev|audioop)")
IMAGE_CHANGES = [
    'ENTRYPOINT ["vllm"]',
    "ENV PATH=/usr/local/bin:/usr/bin:/bin",
    "ENV PYTHONDONTWRITEBYTECODE=1",
    "ENV PYTHONUNBUFFERED=1",
    "ENV LANG=C.UTF-8",
    "LABEL onegpu.stub-engine=1",
]
PASSWD = ("root:x:0:0:root:/root:/sbin/nologin\n"
          "stub:x:1000:1000:stub:/tmp:/sbin/nologin\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")
GROUP = "root:x:0:\nstub:x:1000:\nnogroup:x:65534:\n"


def interpreter() -> Path:
    """The real interpreter binary behind this (possibly virtual) environment."""
    return Path(sys.base_prefix) / "bin" / f"python{PYVER}"


def stub_sources() -> list[tuple[str, bytes]]:
    """(relative path, bytes) of every file that defines the image, sorted."""
    files = [p for p in PAYLOAD.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    out = [(str(p.relative_to(HERE)), p.read_bytes()) for p in files]
    out.append(("build.py", Path(__file__).read_bytes()))
    return sorted(out)


def stub_tag() -> str:
    """`onegpu-stub-engine:<12 hex>` for the current sources and interpreter."""
    digest = hashlib.sha256()
    for rel, data in stub_sources():
        digest.update(rel.encode() + b"\0" + hashlib.sha256(data).digest())
    digest.update(f"{interpreter()}\0{sys.version}".encode())
    return f"{REPOSITORY}:{digest.hexdigest()[:12]}"


def shared_libraries(elf_files: list[Path]) -> tuple[dict[str, Path], Path]:
    """Libraries the ELF files need, by the name they are asked for -> real file; and the dynamic loader.

    Raises RuntimeError when `ldd` cannot resolve a library (the image would not start).
    """
    libs: dict[str, Path] = {}
    loader = None
    for elf in elf_files:
        out = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            line = line.strip()
            if "=>" in line:
                name, _, rest = line.partition("=>")
                target = rest.split("(")[0].strip()
                if target == "not found":
                    raise RuntimeError(f"ldd {elf}: {name.strip()} not found; cannot build the stub image")
                if target:
                    libs[name.strip()] = Path(os.path.realpath(target))
            elif line.startswith("/") and "ld-linux" in line:
                loader = Path(line.split()[0])
    if loader is None:
        raise RuntimeError(f"ldd found no dynamic loader for {elf_files[0]}")
    return libs, loader


def stdlib_files(stdlib: Path):
    """(path in stdlib, file) of the standard library parts the image keeps (sources + plain .pyc)."""
    tag = sys.implementation.cache_tag
    for root, dirs, files in os.walk(stdlib):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel_root = Path(root).relative_to(stdlib)
        for name in sorted(files):
            if Path(root).name == "__pycache__" and not name.endswith(f".{tag}.pyc"):
                continue  # optimised (.opt-1/.opt-2) byte code is never used
            if rel_root.name == "lib-dynload" and SKIP_EXTENSIONS.match(name):
                continue
            yield rel_root / name, Path(root) / name


class _RootfsWriter:
    """Adds entries (all owned by root) to a tar stream."""

    def __init__(self, tar: tarfile.TarFile):
        self.tar = tar

    def dir(self, path: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(path)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, 0
        self.tar.addfile(info)

    def data(self, path: str, data: bytes, mode: int = 0o644, mtime: float = 0) -> None:
        info = tarfile.TarInfo(path)
        info.size, info.mode, info.mtime = len(data), mode, int(mtime)
        self.tar.addfile(info, io.BytesIO(data))

    def file(self, path: str, src: Path, mode: int | None = None) -> None:
        st = src.stat()
        info = tarfile.TarInfo(path)
        info.size, info.mtime = st.st_size, int(st.st_mtime)  # kept: .pyc files check their source's mtime
        info.mode = mode if mode is not None else (0o755 if st.st_mode & 0o111 else 0o644)
        with open(src, "rb") as fh:
            self.tar.addfile(info, fh)

    def symlink(self, path: str, target: str) -> None:
        info = tarfile.TarInfo(path)
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
        self.tar.addfile(info)


def write_rootfs(fileobj) -> None:
    """Write the image's root filesystem as an uncompressed tar stream to `fileobj`."""
    python = interpreter()
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "installed_base": sys.base_prefix})["stdlib"])
    kept = list(stdlib_files(stdlib))
    extensions = [src for rel, src in kept if rel.parent.name == "lib-dynload"]
    libs, loader = shared_libraries([python] + extensions)
    with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        w = _RootfsWriter(tar)
        for d in ("etc", "usr", "usr/lib", IMAGE_LIBDIR, "usr/local", "usr/local/bin", "usr/local/lib",
                  "lib64", "proc", "sys", "dev", "home", "run", "run/onegpu", "var"):
            w.dir(d)
        w.dir("tmp", 0o1777)
        w.dir("root", 0o700)
        w.data("etc/passwd", PASSWD.encode())
        w.data("etc/group", GROUP.encode())
        for name in ("hostname", "hosts", "resolv.conf"):
            w.data(f"etc/{name}", b"")
        w.file(f"lib64/{loader.name}", Path(os.path.realpath(loader)), 0o755)
        for name, real in sorted(libs.items()):
            if "/" not in name:
                w.file(f"{IMAGE_LIBDIR}/{name}", real, 0o755)
        w.file(f"usr/local/bin/python{PYVER}", python, 0o755)
        w.symlink("usr/local/bin/python3", f"python{PYVER}")
        w.symlink("usr/local/bin/python", f"python{PYVER}")
        written_dirs = set()
        for rel, src in kept:
            for parent in reversed(rel.parents):
                if str(parent) != "." and parent not in written_dirs:
                    w.dir(f"{IMAGE_STDLIB}/{parent}")
                    written_dirs.add(parent)
            w.file(f"{IMAGE_STDLIB}/{rel}", src)
        w.dir(f"{IMAGE_STDLIB}/site-packages")
        for src in sorted(PAYLOAD.rglob("*")):
            rel = src.relative_to(PAYLOAD)
            if "__pycache__" in rel.parts or rel.parts[0] == "bin":
                continue
            dest = f"{IMAGE_STDLIB}/site-packages/{rel}"
            w.dir(dest) if src.is_dir() else w.file(dest, src, 0o644)
        w.file("usr/local/bin/vllm", PAYLOAD / "bin" / "vllm", 0o755)


def build_stub_image(client, tag: str) -> str:
    """Import a fresh root filesystem as `tag`; returns the image ID ("sha256:<64 hex>")."""
    with tempfile.TemporaryFile(prefix="onegpu-stub-rootfs-") as tmp:
        write_rootfs(tmp)
        tmp.seek(0)
        repository, _, version = tag.partition(":")
        # POST /images/create?fromSrc=- is an import of the bytes sent; nothing is pulled.
        client.api.import_image_from_data(tmp, repository=repository, tag=version, changes=IMAGE_CHANGES)
    return client.images.get(tag).id


def ensure_stub_image(client) -> str:
    """The stub image's ID, built only when its content-hash tag is not there yet (never pulls)."""
    import docker.errors

    tag = stub_tag()
    try:
        return client.images.get(tag).id
    except docker.errors.ImageNotFound:
        pass
    # One build at a time on this machine: parallel test processes wait for the first and reuse it.
    lock_path = Path(tempfile.gettempdir()) / "onegpu-stub-engine-build.lock"
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return client.images.get(tag).id
        except docker.errors.ImageNotFound:
            return build_stub_image(client, tag)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main() -> int:
    """Build (or find) the stub image and say what it is."""
    import docker

    client = docker.from_env()
    started = time.monotonic()
    tag = stub_tag()
    image_id = ensure_stub_image(client)
    size = client.images.get(image_id).attrs.get("Size", 0)
    print(f"{tag} {image_id} {size / 1e6:.1f} MB ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
