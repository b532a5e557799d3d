"""One GPU, one session: the abstract-socket lock, held and refused in this process and across processes;
released by the kernel when a holder is SIGKILLed. Real sockets, real processes; no GPU needed (the lock
is keyed by the UUID string)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from onegpu.core.outcomes import Blocked
from onegpu.engine.gpu_lock import GpuLock, GpuSetLock, ask_holder
from tests_offline.paths import REPO_ROOT

REPO = str(REPO_ROOT)


def fresh_uuid() -> str:
    return f"GPU-{uuid.uuid4()}"  # a name no other test or session uses


def test_second_holder_is_blocked_naming_the_first(tmp_path):
    gpu = fresh_uuid()
    with GpuLock(gpu, str(tmp_path / "run-a")):
        with pytest.raises(Blocked) as exc:
            GpuLock(gpu, str(tmp_path / "run-b")).acquire()
        assert exc.value.code == "GPU_LOCKED"
        assert f"pid {os.getpid()}" in exc.value.message and str(tmp_path / "run-a") in exc.value.message
        assert exc.value.numbers == {"holder_pid": os.getpid(), "holder_run_folder": str(tmp_path / "run-a")}
        with GpuLock(fresh_uuid(), str(tmp_path / "run-c")):
            pass  # another GPU is not affected
    again = GpuLock(gpu, str(tmp_path / "run-b")).acquire()  # released on exit
    again.release()
    again.release()  # idempotent
    assert ask_holder(gpu) is None


HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from onegpu.engine.gpu_lock import GpuLock
    GpuLock({gpu!r}, {run!r}).acquire()
    print("held", flush=True)
    time.sleep(120)
""")


def test_another_process_holding_the_gpu_blocks_until_it_is_killed(tmp_path):
    gpu = fresh_uuid()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=REPO, gpu=gpu, run=str(tmp_path / "r1"))],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Blocked) as exc:
            GpuLock(gpu, str(tmp_path / "r2")).acquire()
        assert f"pid {holder.pid}" in exc.value.message and str(tmp_path / "r1") in exc.value.message
        holder.send_signal(signal.SIGKILL)  # no cleanup code runs: the kernel drops the socket
        holder.wait(timeout=10)
        deadline = time.monotonic() + 5
        while True:
            try:
                lock = GpuLock(gpu, str(tmp_path / "r2")).acquire()
                break
            except Blocked:
                assert time.monotonic() < deadline, "the lock outlived its SIGKILLed holder"
                time.sleep(0.05)
        lock.release()
        assert not list(tmp_path.glob("**/*lock*"))  # nothing was written to disk
    finally:
        holder.kill()
        holder.wait(timeout=10)


def test_a_gpu_set_is_locked_card_by_card_all_or_none(tmp_path):
    """The multi-GPU protocol holds every GPU of its set; one card held elsewhere refuses the whole set and lets
    go of the cards taken before it."""
    first, second, third = fresh_uuid(), fresh_uuid(), fresh_uuid()
    with GpuLock(third, str(tmp_path / "other")):
        with pytest.raises(Blocked) as exc:
            GpuSetLock([first, second, third], str(tmp_path / "run-set")).acquire()
        assert exc.value.code == "GPU_LOCKED" and third in exc.value.message
        assert ask_holder(first) is None and ask_holder(second) is None  # released, not left held
    held = GpuSetLock([first, second, third], str(tmp_path / "run-set")).acquire()
    try:
        assert [ask_holder(g)["gpu_uuid"] for g in (first, second, third)] == [first, second, third]
        assert all(ask_holder(g)["run_folder"] == str(tmp_path / "run-set") for g in (first, second, third))
        assert held.describe().startswith(f"GPUs {first}, {second}, {third} locked for this session")
        with pytest.raises(Blocked):
            GpuLock(second, str(tmp_path / "late")).acquire()
    finally:
        held.release()
    assert all(ask_holder(g) is None for g in (first, second, third))
