"""The page cache rule of a hashing pass: which files are dropped from the page cache behind the reader, decided
per file before hashing from the kernel's own residency (cachestat, or mincore).

The rule (PAGE_CACHE_RULE):
* a file already in the page cache is hashed without dropping it: the engine reads the same files right after,
  and dropping them would turn that load into a disk read;
* a cold file is dropped behind the reader only when the checkpoint's cold bytes exceed what the page cache can
  hold (half of MemAvailable): then the pages kept would be evicted before the engine reaches them anyway
  (a sequential pass over more than the cache leaves it holding only the tail), and keeping them would push
  out everyone else's pages. Dropping also made the cold pass itself faster on the measured machine (1.3-2.3 x,
  benchmarks/RESULTS.md; the likely cause: the reader reuses the pages it just freed instead of growing the
  cache);
* a cold checkpoint that fits is left in the cache, read by every thread as the others are: on a quiet machine
  that hashed 1.44 x as fast as a serial loop (its cold floor: 1.08 x), and the engine's load that follows reads
  it from memory (hashing plus one read of the files: 1.60 x longer dropped than kept, benchmarks/RESULTS.md).
"""
from __future__ import annotations

import ctypes
import functools
import mmap
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from msgspec import Struct

from onegpu.core.units import GIB, gib
from onegpu.machine.host import parse_meminfo

if TYPE_CHECKING:
    from onegpu.custody.manifest import FileStat

RESIDENT_SHARE = 0.9  # a file with at least this share of its pages in the page cache counts as cached
CACHE_ROOM_SHARE = 0.5  # the share of MemAvailable a cold checkpoint may fill before it is dropped behind
MINCORE_WINDOW_BYTES = GIB  # residency is read through mappings of at most this size (bounded vector)
PAGE_CACHE_RULE = ("files already in the page cache are left there; cold files are dropped behind the reader "
                   "(POSIX_FADV_DONTNEED) only when the checkpoint's cold bytes exceed half of MemAvailable, "
                   "else kept")


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    libc.syscall.restype = ctypes.c_long
    return libc


_LOW_BIT = bytes(b & 1 for b in range(256))  # mincore sets bit 0 of a page's byte when the page is resident
# cachestat(2), Linux 6.5+: the page cache's own count for a file range in one call, without mapping the file.
# For eight cached files of 512 MiB it took 1.1-1.6 ms against mincore's 70-110 ms (benchmarks/RESULTS.md), time
# a hashing pass spent before reading a byte. Its number is the same on every architecture of the unified syscall
# table; elsewhere, and where the kernel or a seccomp filter refuses it, residency is read with mincore.
_CACHESTAT_NR = {"x86_64": 451, "aarch64": 451}.get(os.uname().machine)


class _CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]  # len 0: to the end of the file


class _Cachestat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in
                ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]


_cachestat_works = _CACHESTAT_NR is not None  # cleared the first time the kernel refuses the call


def cachestat_bytes(fd: int) -> int | None:
    """Bytes of the open file in the page cache by cachestat(2), or None where the call is not available."""
    global _cachestat_works
    if not _cachestat_works:
        return None
    span, stat = _CachestatRange(0, 0), _Cachestat()
    if _libc().syscall(_CACHESTAT_NR, fd, ctypes.byref(span), ctypes.byref(stat), 0) != 0:
        _cachestat_works = False
        return None
    return stat.nr_cache * mmap.PAGESIZE


def mincore_bytes(fd: int, size: int) -> int | None:
    """Bytes of the open file in the page cache as mincore(2) reports it for shared read-only mappings of
    at most MINCORE_WINDOW_BYTES (a bounded vector); None when the file cannot be mapped."""
    libc = _libc()
    resident = 0
    vec = ctypes.create_string_buffer(MINCORE_WINDOW_BYTES // mmap.PAGESIZE)
    for offset in range(0, size, MINCORE_WINDOW_BYTES):
        length = min(MINCORE_WINDOW_BYTES, size - offset)
        addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
        if addr in (None, ctypes.c_void_p(-1).value):
            return None
        try:
            if libc.mincore(addr, length, vec) != 0:
                return None
        finally:
            libc.munmap(addr, length)
        pages = (length + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        resident += vec.raw[:pages].translate(_LOW_BIT).count(1) * mmap.PAGESIZE
    return resident


def resident_bytes(path: str, size: int) -> int | None:
    """Bytes of the file in the page cache (whole pages), by cachestat(2) or else mincore(2); None when
    neither can tell (a file that cannot be opened or mapped: some file systems, a special file).

    Neither call touches the file's pages, so the answer does not change what it measures (a timed read would
    pull the pages in).
    """
    if size <= 0:
        return 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        resident = cachestat_bytes(fd)
        if resident is None:
            resident = mincore_bytes(fd, size)
        return None if resident is None else min(resident, size)
    finally:
        os.close(fd)


def mem_available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo: what the kernel reckons can be given out without swapping, page cache
    that can be reclaimed included."""
    try:
        with open("/proc/meminfo") as fh:
            return parse_meminfo(fh.read()).get("MemAvailable")
    except OSError:
        return None


class CachePlan(Struct, frozen=True):
    """What the page cache rule decided for one hashing pass."""

    cached: frozenset[str]  # paths found in the page cache: hashed without dropping
    drop_cold: bool  # whether the cold files are dropped behind the reader
    cold_bytes: int
    room_bytes: int | None  # CACHE_ROOM_SHARE of MemAvailable, when known

    def drops(self, path: str) -> bool:
        return self.drop_cold and path not in self.cached

    def describe(self) -> str:
        room = f"{gib(self.room_bytes)} of room" if self.room_bytes is not None else "room unknown"
        return (f"{len(self.cached)} file(s) found in the page cache, left there; {gib(self.cold_bytes)} cold "
                f"({room}): " + ("dropped behind the reader" if self.drop_cold else "left in the cache"))


def plan_page_cache(root: Path, files: Sequence[FileStat], *, drop_cache: bool = True,
                    available: int | None = None) -> CachePlan:
    """Apply the page cache rule (module docstring) to `files`; drop_cache=False never drops anything.

    `available` stands in for MemAvailable (bytes) when given. A file that cannot be mapped counts as cold.
    """
    cached, cold = set(), 0
    for f in files:
        resident = resident_bytes(str(root / f.path), f.size)
        if f.size == 0 or (resident is not None and resident >= RESIDENT_SHARE * f.size):
            cached.add(f.path)
        else:
            cold += f.size
    available = mem_available_bytes() if available is None else available
    room = int(available * CACHE_ROOM_SHARE) if available is not None else None
    # Unknown room: drop, as before the rule, so a checkpoint larger than RAM never floods the cache.
    drop_cold = drop_cache and cold > 0 and (room is None or cold > room)
    return CachePlan(frozenset(cached), drop_cold, cold, room)
