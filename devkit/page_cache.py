"""The kernel's page cache seen from tests: which pages of a file are resident, as mincore(2) reports it for a
shared mapping, and a folder's file-system type, by which the `disk_folder` fixture of conftest.py finds a folder
on a disk-backed file system where pages can be dropped.

Used by the tests of page-cache hygiene and by the header scan benchmark's cold figures; reading residency
maps the file but touches none of its pages.
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os
import subprocess
from pathlib import Path

_LOW_BIT = bytes(b & 1 for b in range(256))  # mincore sets bit 0 of a page's byte when the page is resident


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return libc


def resident_bytes(path: Path) -> int:
    """Bytes of the file in the page cache (whole pages; the last one counts as a full page)."""
    size = Path(path).stat().st_size
    if size == 0:
        return 0
    libc = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path}: {os.strerror(ctypes.get_errno())}")
        vec = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
        try:
            if libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path}: {os.strerror(ctypes.get_errno())}")
        finally:
            libc.munmap(addr, size)
        return vec.raw.translate(_LOW_BIT).count(1) * mmap.PAGESIZE
    finally:
        os.close(fd)


def _fs_type(folder) -> str:
    return subprocess.run(["stat", "-f", "-c", "%T", str(folder)], capture_output=True, text=True).stdout.strip()
