"""The engine lifecycle on the real Docker engine with the stub image: boot and teardown, isolation (no
network, read-only checkpoint, RAM cap, non-root user), every boot failure classified, the boot deadline,
the stop timeout, and no pull ever. What is simulated: no GPU exists here, so specs carry no GPU device
request (see tests_offline/engine_helpers.py)."""
from __future__ import annotations

import json
import os
import stat
import time

import psutil
import pytest
from docker.errors import NotFound
from msgspec import structs

from onegpu.core.outcomes import Blocked
from onegpu.core.uds_http import uds_request
from onegpu.engine.container import Engine
from onegpu.engine.image import resolve_image
from tests_offline.engine_helpers import ENGINE_UID, make_spec, run_folder_of

MiB = 2**20


def engine_for(client, spec, deadline_s=60, **kw) -> Engine:
    return Engine(client, spec, run_folder_of(spec), deadline_s, sample_interval_s=0.2, **kw)


def assert_gone(client, container_id):
    with pytest.raises(NotFound):
        client.containers.get(container_id)


def launch_failure(client, spec, deadline_s=60) -> tuple[Blocked, Engine]:
    eng = engine_for(client, spec, deadline_s)
    try:
        with pytest.raises(Blocked) as exc:
            eng.launch()
    finally:
        eng.close()
    return exc.value, eng


def short_run(client, spec, script: str) -> tuple[int, str]:
    """Run python3 -c script in a container made with the engine's own settings (mounts, user, network)."""
    kwargs = spec.create_kwargs()
    kwargs.update(name=spec.name + "-check", entrypoint=["python3"], command=["-c", script])
    container = client.containers.create(**kwargs)
    try:
        container.start()
        code = container.wait(timeout=60)["StatusCode"]
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


def test_engine_boots_on_its_socket_as_a_non_root_user_and_always_comes_down(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    records: dict = {}
    shown: list = []
    eng = engine_for(docker_client, spec, record=lambda **kv: records.update(kv),
                     progress=lambda line, final: shown.append(line))
    try:
        handle = eng.launch()
        assert handle.alive() and handle.state()["status"] == "running"
        assert uds_request(handle.socket_path, "GET", "/health", timeout=5).status == 200
        models = json.loads(uds_request(handle.socket_path, "GET", "/v1/models", timeout=5).body)
        assert models["data"][0]["id"] == spec.command[spec.command.index("--served-model-name") + 1]
        assert handle.boot.server_started and handle.boot.kv_cache_tokens and handle.boot.load_gib is not None
        assert handle.boot.cpu_offload_gib == pytest.approx(12, rel=0.05)
        sock = os.stat(handle.socket_path)
        assert stat.S_ISSOCK(sock.st_mode) and sock.st_uid == ENGINE_UID  # the engine made it, not root
        init = psutil.Process(docker_client.containers.get(handle.container_id).attrs["State"]["Pid"])
        processes = [init, *init.children(recursive=True)]  # docker-init, then the engine
        assert len(processes) >= 2 and {p.uids().real for p in processes} == {ENGINE_UID}
        time.sleep(0.5)  # a few samples
    finally:
        final = eng.close()
    assert_gone(docker_client, handle.container_id)
    assert final["removed"] and final["state_at_end"]["status"] == "running" and final["exit_code"] == 0
    log = eng.log_path
    assert stat.S_IMODE(log.stat().st_mode) == 0o600 and "Starting vLLM server on" in log.read_text()
    samples = [json.loads(line) for line in eng.samples_path.read_text().splitlines()]
    assert len(samples) >= 2 and stat.S_IMODE(eng.samples_path.stat().st_mode) == 0o600
    assert any(s.get("container_memory_bytes") for s in samples) and all(s["host_available_bytes"] for s in samples)
    assert final["samples"]["count"] == len(samples) and final["samples"]["container_memory_bytes_max"] > 0
    assert records["container_id"] == handle.container_id and "ready_at" in records and records["end"]["removed"]
    assert shown and "ready" in shown[-1]
    assert handle.state()["status"] == "removed"


def test_container_has_no_network_at_all(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    code, out = short_run(docker_client, spec, "import json;print(json.dumps({'dev': open('/proc/net/dev').read(),"
                                               "'route': open('/proc/net/route').read()}))")
    seen = json.loads(out.strip().splitlines()[-1])
    interfaces = [line.split(":")[0].strip() for line in seen["dev"].splitlines()[2:] if ":" in line]
    routes = [line for line in seen["route"].splitlines()[1:] if line.strip()]
    assert code == 0 and interfaces == ["lo"] and routes == []


def test_runtime_network_need_is_classified(docker_client, tmp_path, stub_image):
    blocked, eng = launch_failure(docker_client, make_spec(tmp_path, stub_image, {"STUB_FAIL": "needs_network"}))
    assert blocked.code == "RUNTIME_NEEDS_NETWORK"
    assert "Network is unreachable" in eng.log_path.read_text()  # the stub found no interface to try


def test_checkpoint_mount_is_read_only_and_socket_folder_writable(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image)
    code, out = short_run(docker_client, spec, (
        "import errno, os\n"
        "try:\n    open('/model/written-by-engine', 'w')\nexcept OSError as e:\n    print('model', errno.errorcode[e.errno])\n"
        "open('/run/onegpu/probe-file', 'w').write('x'); print('sock ok')\n"
        "open(os.environ['HOME'] + '/cache-file', 'w').write('x'); print('home ok', os.getuid())\n"))
    assert code == 0, out
    assert "model EROFS" in out and "sock ok" in out and f"home ok {ENGINE_UID}" in out
    assert not (tmp_path / "ckpt" / "written-by-engine").exists()


def test_the_engine_can_load_code_it_compiles_into_its_scratch_folders(docker_client, tmp_path, stub_image):
    """Triton (under HOME) and torch inductor (under /tmp) load the kernels they compile from there; Docker mounts a
    tmpfs noexec unless told otherwise, which fails them ("failed to map segment from shared object")."""
    spec = make_spec(tmp_path, stub_image)
    code, out = short_run(docker_client, spec, (
        "import mmap, os\n"
        "for folder in (os.environ['HOME'], '/tmp'):\n"
        "    mount = next(l.split() for l in open('/proc/mounts') if l.split()[1] == folder)\n"
        "    path = folder + '/kernel.bin'\n"
        "    open(path, 'wb').write(b'\\0' * 4096)\n"
        "    with open(path, 'rb') as f:\n"
        "        try:\n"
        "            mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ | mmap.PROT_EXEC, flags=mmap.MAP_PRIVATE)\n"
        "            print(folder, 'exec ok', mount[3])\n"
        "        except OSError as e:\n"
        "            print(folder, 'exec refused', e, mount[3])\n"))
    assert code == 0, out
    assert "/home/engine exec ok" in out and "/tmp exec ok" in out, out
    assert "noexec" not in out and "nosuid" in out


def test_a_uid_without_a_passwd_entry_still_has_a_user_name(docker_client, tmp_path, stub_image):
    """The engine runs as the invoking uid, which the image's /etc/passwd need not list: getpass (torch inductor's
    cache folder) then answers from USER/LOGNAME, and fails without them."""
    spec = structs.replace(make_spec(tmp_path, stub_image), user="4321:4321")  # not in the stub's passwd
    code, out = short_run(docker_client, spec, (
        "import getpass, os, pwd\n"
        "try:\n    pwd.getpwuid(os.getuid())\nexcept KeyError:\n    print('no passwd entry for', os.getuid())\n"
        "print('named', getpass.getuser(), os.environ['LOGNAME'])\n"
        "for key in ('USER', 'LOGNAME'):\n    del os.environ[key]\n"
        "try:\n    getpass.getuser()\nexcept Exception as e:\n    print('unnamed', type(e).__name__)\n"))
    assert code == 0, out
    assert "no passwd entry for 4321" in out and "named engine engine" in out and "unnamed " in out


def test_ram_cap_holds_and_its_kill_is_classified(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image, {"STUB_FAIL": "alloc_past_cap", "STUB_ALLOC_LIMIT_MIB": "1024"})
    spec = structs.replace(spec, mem_limit_bytes=256 * MiB, memswap_limit_bytes=256 * MiB)
    blocked, eng = launch_failure(docker_client, spec)
    assert blocked.code == "HOST_OOM_KILLED", blocked
    assert eng.final["oom_killed"] is True and eng.final["exit_code"] == 137
    log = eng.log_path.read_text()
    assert "MiB of host memory held" in log and "nothing stopped it" not in log
    assert eng.failure["code"] == "HOST_OOM_KILLED" and eng.failure["log_tail"]


@pytest.mark.parametrize("knob, code", [
    ("load_oom", "LOAD_OOM"), ("no_kv_memory", "NO_KV_MEMORY"), ("unsupported_quant", "UNSUPPORTED_QUANT"),
    ("unsupported_arch", "UNSUPPORTED_ARCH"), ("trust_remote_code", "TRUST_REMOTE_CODE_REQUIRED"),
    ("die_at_boot", "CUDA_ERROR"),
])
def test_each_boot_failure_is_classified_and_its_evidence_kept(docker_client, tmp_path, stub_image, knob, code):
    blocked, eng = launch_failure(docker_client, make_spec(tmp_path, stub_image, {"STUB_FAIL": knob}))
    assert blocked.code == code, blocked.message
    assert eng.final["removed"] and eng.final["exit_code"] not in (None, 0)
    assert_gone(docker_client, eng.container.id)
    assert eng.log_path.stat().st_size > 0 and str(eng.log_path) in blocked.message
    assert eng.failure["log_tail"] and eng.failure["exit_code"] == eng.final["exit_code"]


def test_boot_deadline_gives_load_timeout_and_the_container_is_gone(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image, {"STUB_FAIL": "hang_at_boot"})
    started = time.monotonic()
    blocked, eng = launch_failure(docker_client, spec, deadline_s=3)
    assert blocked.code == "LOAD_TIMEOUT" and blocked.numbers["boot_deadline_s"] == 3
    assert 3 <= time.monotonic() - started < 30
    assert_gone(docker_client, eng.container.id)


def test_stop_timeout_ends_an_engine_that_ignores_sigterm(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image, {"STUB_IGNORE_SIGTERM": "1"})
    eng = Engine(docker_client, spec, run_folder_of(spec), 60, stop_timeout_s=2)
    try:
        eng.launch()
    finally:
        started = time.monotonic()
        final = eng.close()
    assert final["exit_code"] == 137 and 2 <= time.monotonic() - started < 20
    assert_gone(docker_client, eng.container.id)


def test_close_after_an_interrupt_mid_boot_still_removes(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path, stub_image, {"STUB_BOOT_DELAY_S": "30"})

    def interrupt(line, final):  # what Ctrl-C or a SIGTERM turned into KeyboardInterrupt does mid-boot
        raise KeyboardInterrupt

    eng = Engine(docker_client, spec, run_folder_of(spec), 60, progress=interrupt)
    with pytest.raises(KeyboardInterrupt):
        eng.launch()
    assert eng.final["removed"]
    assert_gone(docker_client, eng.container.id)


def test_no_pull_ever_happens(docker_client, tmp_path, stub_image):
    before = {i.id for i in docker_client.images.list(all=True)}
    since = int(time.time()) - 1
    with pytest.raises(Blocked) as exc:
        resolve_image(docker_client, "onegpu-never-built/engine:absent")
    assert exc.value.code == "IMAGE_MISSING"
    spec = structs.replace(make_spec(tmp_path, stub_image), image_id="sha256:" + "0" * 64)
    eng = engine_for(docker_client, spec)
    with pytest.raises(Blocked) as missing:  # create never pulls: a missing ID is an outcome, not a download
        eng.launch()
    assert missing.value.code == "IMAGE_MISSING"
    assert eng.container is None
    after = docker_client.images.list(all=True)
    # Other test processes may build the stub image meanwhile; nothing else may appear.
    assert [i.tags for i in after if i.id not in before
            and not all(t.startswith("onegpu-stub-engine:") for t in i.tags)] == []
    assert docker_client.images.list(name="onegpu-never-built/engine") == []
    events = docker_client.events(since=since, until=f"{time.time():.6f}", decode=True, filters={"type": "image"})
    assert [e for e in events if e.get("Action") == "pull"] == []


def test_a_deep_run_folder_beyond_the_socket_path_limit_still_works(docker_client, tmp_path, stub_image):
    spec = make_spec(tmp_path / ("deep-" * 12) / ("folder-" * 10), stub_image)
    assert len(spec.socket_path.encode()) > 107  # the kernel's sun_path limit; the container sees a short path
    eng = engine_for(docker_client, spec)
    try:
        handle = eng.launch()
        assert uds_request(handle.socket_path, "GET", "/health", timeout=5).status == 200
    finally:
        eng.close()
    assert_gone(docker_client, eng.container.id)
